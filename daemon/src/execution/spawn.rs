//! Starting a job process without copying the daemon's address space.
//!
//! `std`/`tokio` fall back to `fork` as soon as a `pre_exec` hook is set,
//! and the hook is needed for `setsid` and `PR_SET_PDEATHSIG`. Forking a
//! busy multi-threaded daemon copies its page tables and makes every other
//! thread's TLB flush, for every job: measured, that capped axd at about a
//! fifth of the machine's spawn rate. So this module does what glibc's
//! `posix_spawn` does — `clone(CLONE_VM | CLONE_VFORK)` on a small private
//! stack — with our own child code (`child`): wire stdio, close every other
//! descriptor, setsid, the job's user and umask, PDEATHSIG, check the
//! parent, reset signals, chdir, execve. Everything the child touches is
//! prepared by the parent first; the child only makes system calls (it
//! shares the parent's memory and must not allocate: another thread may
//! hold the allocator's lock).
//!
//! As in `posix_spawn`, every signal is blocked in the calling thread
//! around the `clone`: a handler of the daemon running in the child, on
//! the daemon's memory, before the child has reset its dispositions, would
//! act for the daemon (tokio's handlers write to the daemon's signal pipe).
//!
//! The process is then waited for through a pidfd (readable when it exits)
//! and reaped with `waitpid`.
//!
//! A process that started is always supervised (docs/operations.md,
//! "Descriptor exhaustion"): the pidfd comes from the `clone` itself
//! (`CLONE_PIDFD`), so when descriptors run out it is the `clone` that
//! fails, before any process exists, and the child reads its own start
//! time (to recognise its pid after a restart) before execve, with the
//! descriptors it freed by closing the daemon's. Nothing that can run out
//! is needed between execve and supervision; if registering the pidfd with
//! the runtime fails all the same, the child's group is killed and reaped
//! before the failure is reported ([`SpawnError::Killed`]).

/// Why `spawn` returned no process.
#[derive(Debug)]
pub(crate) enum SpawnError {
    /// No process of the job ever ran.
    NotStarted(std::io::Error),
    /// The process started but could not be supervised: its group was
    /// killed (SIGKILL) and its leader reaped.
    Killed { pid: u32, error: std::io::Error },
}

impl SpawnError {
    /// Nothing ran, for lack of a resource of the daemon's own (open
    /// descriptors, processes, memory) rather than anything about the job:
    /// the same spawn can work once running jobs give some back.
    pub(crate) fn is_shortage(&self) -> bool {
        matches!(
            self,
            SpawnError::NotStarted(e) if matches!(
                e.raw_os_error(),
                Some(libc::EMFILE | libc::ENFILE | libc::EAGAIN | libc::ENOMEM)
            )
        )
    }
}

impl std::fmt::Display for SpawnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpawnError::NotStarted(e) => write!(f, "{e}"),
            SpawnError::Killed { pid, error } => write!(
                f,
                "process {pid} could not be supervised ({error}); its group was killed"
            ),
        }
    }
}

impl From<std::io::Error> for SpawnError {
    fn from(e: std::io::Error) -> SpawnError {
        SpawnError::NotStarted(e)
    }
}

use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::io::unix::AsyncFd;

pub(crate) use crate::execution::child::CloseFds;
use crate::execution::child::{ChildArgs, FailedAt, STAT_BYTES, child_main};

/// Everything needed to start one process.
pub(crate) struct Plan {
    pub program: PathBuf,
    pub args: Vec<std::ffi::OsString>,
    /// Variables the process gets unless `base_env` or `env` sets them.
    pub defaults: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    /// The environment every job starts from.
    pub base_env: Arc<BaseEnv>,
    /// This process's variables on top of `base_env`: a later value of a
    /// name replaces an earlier one, and any replaces the base's.
    pub env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    pub cwd: Option<PathBuf>,
    /// Who the process runs as; `None`: as axd (nothing is changed).
    pub credentials: Option<Credentials>,
    pub umask: libc::mode_t,
    /// stdout and stderr.
    pub output: OwnedFd,
    /// How the child closes the daemon's other descriptors.
    pub close_fds: CloseFds,
}

/// The uid and groups a process is switched to before execve, resolved by
/// the parent (the child cannot read the password database).
#[derive(Clone, Debug)]
pub(crate) struct Credentials {
    /// The account's name, for errors.
    pub user: String,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups (the primary `gid` among them, as
    /// `initgroups` sets them).
    pub groups: Vec<libc::gid_t>,
}

/// An environment converted for execve once, shared by every spawn: a
/// job's process only adds its own variables (converting variables per
/// spawn was a tenth of a spawner's time).
pub(crate) struct BaseEnv {
    /// `NAME=value` entries, one per name.
    entries: Vec<CString>,
    path: Option<std::ffi::OsString>,
}

impl BaseEnv {
    /// Entries with a NUL byte are left out (they cannot be passed on); a
    /// later value of a name replaces an earlier one.
    pub(crate) fn new(vars: Vec<(std::ffi::OsString, std::ffi::OsString)>) -> BaseEnv {
        let mut env = BaseEnv {
            entries: Vec::with_capacity(vars.len()),
            path: None,
        };
        for (i, (k, v)) in vars.iter().enumerate() {
            if vars[i + 1..].iter().any(|(later, _)| later == k) {
                continue;
            }
            if k == "PATH" {
                env.path = Some(v.clone());
            }
            if let Ok(c) = entry(k, v) {
                env.entries.push(c);
            }
        }
        env
    }

    /// From `NAME=value` entries already one per name (as `entries`
    /// gives them); one with a NUL byte is left out.
    pub(crate) fn from_entries(entries: impl Iterator<Item = Vec<u8>>) -> BaseEnv {
        let mut env = BaseEnv {
            entries: Vec::new(),
            path: None,
        };
        for e in entries {
            if let Some(path) = e.strip_prefix(b"PATH=") {
                env.path = Some(OsStr::from_bytes(path).to_owned());
            }
            if let Ok(c) = CString::new(e) {
                env.entries.push(c);
            }
        }
        env
    }

    /// The `NAME=value` entries.
    pub(crate) fn entries(&self) -> impl Iterator<Item = &[u8]> {
        self.entries.iter().map(|c| c.as_bytes())
    }

    /// The name of an entry: up to its first `=` (a name has none).
    fn name(entry: &CString) -> &[u8] {
        let kv = entry.as_bytes();
        &kv[..kv.iter().position(|&b| b == b'=').unwrap_or(kv.len())]
    }

    /// The value of `name`, when it is UTF-8.
    pub(crate) fn get(&self, name: &str) -> Option<String> {
        self.entries.iter().find_map(|e| {
            let value = e.as_bytes().get(name.len() + 1..)?;
            (BaseEnv::name(e) == name.as_bytes())
                .then(|| String::from_utf8(value.to_vec()).ok())
                .flatten()
        })
    }

    fn has(&self, name: &[u8]) -> bool {
        self.entries.iter().any(|e| BaseEnv::name(e) == name)
    }
}

/// `NAME=value` as a C string.
fn entry(k: &OsStr, v: &OsStr) -> std::io::Result<CString> {
    let mut kv = Vec::with_capacity(k.len() + v.len() + 2);
    kv.extend_from_slice(k.as_bytes());
    kv.push(b'=');
    kv.extend_from_slice(v.as_bytes());
    CString::new(kv).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, "NUL byte in environment")
    })
}

/// The child's stack: it only runs the setup calls and execve.
const CHILD_STACK_BYTES: usize = 64 * 1024;

/// `/dev/null`, opened once (the child dups it onto stdin).
fn dev_null() -> std::io::Result<RawFd> {
    static NULL: std::sync::OnceLock<std::fs::File> = std::sync::OnceLock::new();
    if let Some(f) = NULL.get() {
        return Ok(f.as_raw_fd());
    }
    let f = std::fs::File::open("/dev/null")?;
    Ok(NULL.get_or_init(|| f).as_raw_fd())
}

/// One past the highest descriptor this process can hold now.
fn fd_limit() -> libc::c_int {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the local struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        // fs.nr_open's default: the most any process gets unless an
        // administrator raised it.
        return 1 << 20;
    }
    lim.rlim_cur.min(libc::c_int::MAX as libc::rlim_t) as libc::c_int
}

/// The soft open-files limit axd started with, before `raise_nofile`.
static ORIGINAL_NOFILE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Raises the daemon's soft open-files limit to the hard limit (each client
/// and each running job holds descriptors; 1024 is too few for a thousand
/// idle clients). Jobs get the original limit back. Returns (old, new).
pub(crate) fn raise_nofile() -> Option<(u64, u64)> {
    let mut lim: libc::rlimit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the local structs
    // they are given.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 || lim.rlim_cur >= lim.rlim_max {
            return None;
        }
        let old = lim.rlim_cur;
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) != 0 {
            return None;
        }
        ORIGINAL_NOFILE.store(old, std::sync::atomic::Ordering::Relaxed);
        Some((old, lim.rlim_max))
    }
}

/// The soft open-files limit axd started with, when it raised its own
/// (`raise_nofile`); 0 when it did not.
pub(crate) fn original_nofile() -> u64 {
    ORIGINAL_NOFILE.load(std::sync::atomic::Ordering::Relaxed)
}

fn cstr(s: &OsStr) -> std::io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "NUL byte in argument or environment",
        )
    })
}

/// Resolves a program name through PATH (as execvp would, but with the
/// job's PATH rather than the daemon's).
fn resolve(plan: &Plan) -> std::io::Result<PathBuf> {
    let program = plan.program.as_path();
    if program.as_os_str().as_bytes().contains(&b'/') {
        return Ok(program.to_path_buf());
    }
    let path = plan
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
        .or_else(|| plan.base_env.path.clone())
        .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    for dir in std::env::split_paths(&path) {
        let candidate = dir.join(program);
        if let Ok(c) = cstr(candidate.as_os_str())
            // SAFETY: `c` is a NUL-terminated string alive for the call.
            && unsafe { libc::access(c.as_ptr(), libc::X_OK) } == 0
        {
            return Ok(candidate);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        format!("{}: command not found in PATH", program.display()),
    ))
}

/// A started process, waited for through its pidfd.
pub(crate) struct Process {
    pub pid: u32,
    /// Its start time in clock ticks since boot (`process_start_time`).
    pub start_time: Option<u64>,
    pidfd: AsyncFd<OwnedFd>,
}

impl Process {
    /// Waits for the process to exit and reaps it: (exit code, signal).
    pub(crate) async fn wait(&self) -> std::io::Result<(Option<i32>, Option<i32>)> {
        loop {
            let mut guard = self.pidfd.readable().await?;
            let mut status: libc::c_int = 0;
            // SAFETY: waitpid on our own child, writing into a local int.
            let r = unsafe { libc::waitpid(self.pid as libc::pid_t, &mut status, libc::WNOHANG) };
            if r == self.pid as libc::pid_t {
                crate::execution::reaper::forget_leader(r);
                return Ok(if libc::WIFEXITED(status) {
                    (Some(libc::WEXITSTATUS(status)), None)
                } else if libc::WIFSIGNALED(status) {
                    (None, Some(libc::WTERMSIG(status)))
                } else {
                    (None, None)
                });
            }
            if r < 0 {
                return Err(std::io::Error::last_os_error());
            }
            guard.clear_ready();
        }
    }
}

/// Every signal blocked in the calling thread while held; the thread's
/// mask is restored on drop.
struct SignalsBlocked {
    previous: libc::sigset_t,
    /// Not Send: the mask belongs to the thread that took the guard.
    _thread: std::marker::PhantomData<*const ()>,
}

impl SignalsBlocked {
    fn all() -> SignalsBlocked {
        // SAFETY: sigfillset and pthread_sigmask read and write the local
        // sets they are given; the mask is the calling thread's own.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            let mut previous: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut previous);
            SignalsBlocked {
                previous,
                _thread: std::marker::PhantomData,
            }
        }
    }
}

impl Drop for SignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: restores the calling thread's mask (the guard is not
        // Send: it is the thread that took it) from a set pthread_sigmask
        // filled.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.previous, std::ptr::null_mut());
        }
    }
}

/// A process's environment as C strings and the `envp` array pointing
/// into them: the plan's defaults that neither its own variables nor the
/// base set, then the base's entries its own do not replace, then its own
/// (the last value of each name). The pointers stay valid while this
/// lives: they point into the heap buffers of the strings it owns.
struct Environ {
    _owned: Vec<CString>,
    envp: Vec<*const libc::c_char>,
}

impl Environ {
    fn of(plan: &Plan) -> Result<Environ, SpawnError> {
        // Sets of names, so a job with thousands of variables costs
        // linear time, not quadratic.
        let mut seen: std::collections::HashSet<&[u8]> =
            std::collections::HashSet::with_capacity(plan.env.len());
        let mut own: Vec<CString> = Vec::with_capacity(plan.env.len());
        for (k, v) in plan.env.iter().rev() {
            if seen.insert(k.as_bytes()) {
                own.push(entry(k, v)?);
            }
        }
        own.reverse();
        let base = &plan.base_env;
        let mut defaults: Vec<CString> = Vec::with_capacity(plan.defaults.len());
        for (k, v) in &plan.defaults {
            if !seen.contains(k.as_bytes()) && !base.has(k.as_bytes()) {
                defaults.push(entry(k, v)?);
            }
        }
        let mut envp: Vec<*const libc::c_char> =
            Vec::with_capacity(defaults.len() + base.entries.len() + own.len() + 1);
        envp.extend(defaults.iter().map(|c| c.as_ptr()));
        for e in &base.entries {
            if !seen.contains(BaseEnv::name(e)) {
                envp.push(e.as_ptr());
            }
        }
        envp.extend(own.iter().map(|c| c.as_ptr()));
        envp.push(std::ptr::null());
        defaults.extend(own);
        Ok(Environ {
            _owned: defaults,
            envp,
        })
    }
}

/// The descriptor limit jobs get: the one axd started with (it raises its
/// own), else 0, which the child leaves as it is.
fn nofile_for_jobs() -> libc::rlimit {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let original = ORIGINAL_NOFILE.load(std::sync::atomic::Ordering::Relaxed);
    // SAFETY: getrlimit writes into the local struct it is given.
    if original != 0 && unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        lim.rlim_cur = original;
    } else {
        lim.rlim_cur = 0;
    }
    lim
}

/// The error of a child that failed before its program ran: `errno`, said
/// of what `failed_at` names.
fn not_started(plan: &Plan, failed_at: FailedAt, errno: i32) -> SpawnError {
    let error = std::io::Error::from_raw_os_error(errno);
    SpawnError::NotStarted(match (failed_at, plan.credentials.as_ref()) {
        // Not the bare errno: an EAGAIN or EPERM here is about the
        // account, not a shortage of axd's.
        (FailedAt::Credentials, Some(c)) => std::io::Error::other(format!(
            "cannot run as user {} (uid {}, gid {}): {error}",
            c.user, c.uid, c.gid
        )),
        (FailedAt::Cwd, _) => std::io::Error::new(
            error.kind(),
            format!(
                "cannot enter the working folder {}: {error}",
                plan.cwd
                    .as_deref()
                    .unwrap_or(std::path::Path::new("?"))
                    .display()
            ),
        ),
        _ => error,
    })
}

/// Starts the process described by `plan` (call from a long-lived thread:
/// PDEATHSIG is tied to the calling thread). Needs a tokio runtime context
/// for the pidfd.
pub(crate) fn spawn(plan: Plan) -> Result<Process, SpawnError> {
    let path = cstr(resolve(&plan)?.as_os_str())?;
    let mut argv_c: Vec<CString> = vec![cstr(plan.program.as_os_str())?];
    for a in &plan.args {
        argv_c.push(cstr(a)?);
    }
    let argv: Vec<*const libc::c_char> = argv_c
        .iter()
        .map(|c| c.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    let environ = Environ::of(&plan)?;
    let cwd = plan
        .cwd
        .as_deref()
        .map(|c| cstr(c.as_os_str()))
        .transpose()?;
    let null = dev_null()?;
    let creds = plan.credentials.as_ref();
    let mut args = ChildArgs {
        set_credentials: creds.is_some(),
        uid: creds.map_or(0, |c| c.uid),
        gid: creds.map_or(0, |c| c.gid),
        groups: creds.map_or(std::ptr::null(), |c| c.groups.as_ptr()),
        group_count: creds.map_or(0, |c| c.groups.len()),
        umask: plan.umask,
        failed_at: FailedAt::Nothing,
        path: path.as_ptr(),
        argv: argv.as_ptr(),
        envp: environ.envp.as_ptr(),
        cwd: cwd.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
        output: plan.output.as_raw_fd(),
        null,
        errno: 0,
        parent: crate::execution::reaper::own_pid() as libc::pid_t,
        nofile: nofile_for_jobs(),
        close_fds: plan.close_fds,
        fd_limit: fd_limit(),
        stat: [0; STAT_BYTES],
        stat_len: -1,
    };
    // Not zeroed: the child writes its frames from the top down, and only
    // touches the few pages it uses.
    let mut stack: Vec<u8> = Vec::with_capacity(CHILD_STACK_BYTES);
    // Until the child is registered as a leader, the orphan reaper must not
    // look (it would take its exit status).
    let gate = crate::execution::reaper::spawn_gate();
    let pidfd_by_clone = PIDFD_BY_CLONE.load(std::sync::atomic::Ordering::Relaxed);
    let mut flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
    if pidfd_by_clone {
        flags |= libc::CLONE_PIDFD;
    }
    // Written by the kernel with CLONE_PIDFD (the `parent_tid` argument).
    let mut pidfd: libc::c_int = -1;
    let blocked = SignalsBlocked::all();
    // SAFETY: the stack (capacity CHILD_STACK_BYTES, so `add` stays in the
    // allocation's bounds) and `args` with every buffer it points into
    // outlive the child's use of them: with CLONE_VFORK this thread resumes
    // only after the child's execve or _exit. The top is 16-byte aligned as
    // the ABI requires. Signals are blocked, so no handler runs in the
    // child before it has reset them (`child_main`).
    let pid = unsafe {
        let top = stack.as_mut_ptr().add(CHILD_STACK_BYTES);
        let top = (top as usize & !15) as *mut libc::c_void;
        libc::clone(
            child_main,
            top,
            flags,
            &mut args as *mut ChildArgs as *mut libc::c_void,
            &mut pidfd as *mut libc::c_int,
        )
    };
    let clone_error = std::io::Error::last_os_error();
    drop(blocked);
    if pid < 0 {
        if pidfd_by_clone && clone_error.raw_os_error() == Some(libc::EINVAL) {
            // A kernel before 5.2: pidfd_open after the clone instead.
            PIDFD_BY_CLONE.store(false, std::sync::atomic::Ordering::Relaxed);
            drop(gate);
            return spawn(plan);
        }
        return Err(SpawnError::NotStarted(clone_error));
    }
    crate::execution::reaper::register_leader(pid);
    drop(gate);
    // We resume once the child has exec'ed or exited; it wrote its errno
    // into `args` if setup or execve failed.
    // SAFETY: `args` is ours again: the child has exec'ed or exited, so it
    // no longer runs in our memory.
    let errno = unsafe { std::ptr::read_volatile(&args.errno) };
    // SAFETY: a descriptor the kernel just created for us (CLONE_PIDFD),
    // owned by nothing else; dropped (closed) on every path below.
    let pidfd = (pidfd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) });
    if errno != 0 {
        let mut status = 0;
        // SAFETY: waitpid on our own child (it has exited), writing into a
        // local int.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        crate::execution::reaper::forget_leader(pid);
        // SAFETY: as for `errno` above: the child no longer runs.
        let failed_at = unsafe { std::ptr::read_volatile(&args.failed_at) };
        return Err(not_started(&plan, failed_at, errno));
    }
    let start_time = usize::try_from(args.stat_len)
        .ok()
        .and_then(|n| start_time_of_stat(&args.stat[..n.min(STAT_BYTES)]));
    supervised(pid, pidfd, start_time)
}

/// The process `pid`, exec'ed and registered as a leader, as a `Process`
/// waited for through `pidfd` (from the clone; opened here where the
/// kernel gave none). Never left running unsupervised: when that fails,
/// its group is killed and its leader reaped first.
fn supervised(
    pid: libc::pid_t,
    pidfd: Option<OwnedFd>,
    start_time: Option<u64>,
) -> Result<Process, SpawnError> {
    let pidfd = match pidfd {
        Some(fd) => Ok(fd),
        // SAFETY: pidfd_open takes integers only; it returns a new
        // descriptor that nothing else owns, moved into the OwnedFd.
        None => match unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } {
            // SAFETY: `fd` is the new descriptor pidfd_open returned,
            // owned by nothing else.
            fd if fd >= 0 => Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) }),
            _ => Err(std::io::Error::last_os_error()),
        },
    };
    let registered = pidfd.and_then(|fd| {
        // SAFETY: `fd` is an open pidfd owned by the OwnedFd that moves
        // into the AsyncFd, which keeps it open while registered.
        unsafe { AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE) }
            .map_err(|e| e.into_parts().1)
    });
    match registered {
        Ok(pidfd) => Ok(Process {
            pid: pid as u32,
            start_time,
            pidfd,
        }),
        Err(error) => {
            // SAFETY: kill and waitpid on our own child's group and pid
            // (not reaped yet, so the pid is still ours), writing into a
            // local int.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
                let mut status = 0;
                libc::waitpid(pid, &mut status, 0);
            }
            crate::execution::reaper::forget_leader(pid);
            Err(SpawnError::Killed {
                pid: pid as u32,
                error,
            })
        }
    }
}

/// Whether `clone` is given CLONE_PIDFD (false once a kernel refused it).
static PIDFD_BY_CLONE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// The start time (field 22) in a /proc/PID/stat line.
pub(crate) fn start_time_of_stat(stat: &[u8]) -> Option<u64> {
    // `comm` may hold any bytes, ')' too; the fields after its last ')'
    // are ASCII.
    let close = stat.iter().rposition(|&b| b == b')')?;
    let after_comm = std::str::from_utf8(stat.get(close + 2..)?).ok()?;
    after_comm.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The job sees the defaults under the base environment under its own
    /// variables: the last value of a name wins, over the base's and over
    /// earlier ones.
    #[tokio::test]
    async fn own_variables_replace_the_base_and_the_last_wins() {
        let base = Arc::new(BaseEnv::new(vec![
            ("KEEP".into(), "base".into()),
            ("SHADOWED".into(), "base".into()),
            ("PATH".into(), "/usr/bin:/bin".into()),
        ]));
        let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
        let plan = Plan {
            program: "env".into(),
            args: vec![],
            defaults: vec![
                ("KEEP".into(), "default".into()),
                ("UNDER".into(), "default".into()),
            ],
            base_env: base,
            env: vec![
                ("SHADOWED".into(), "first".into()),
                ("OWN".into(), "x".into()),
                ("SHADOWED".into(), "last".into()),
            ],
            cwd: None,
            credentials: None,
            umask: 0o022,
            output: write_end,
            close_fds: CloseFds::Range,
        };
        let child = spawn(plan).expect("spawn env (found through the base PATH)");
        assert_eq!(child.wait().await.expect("wait"), (Some(0), None));
        let mut out = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(read_end), &mut out).unwrap();
        let mut lines: Vec<&str> = out.lines().collect();
        lines.sort();
        assert_eq!(
            lines,
            [
                "KEEP=base",
                "OWN=x",
                "PATH=/usr/bin:/bin",
                "SHADOWED=last",
                "UNDER=default"
            ]
        );
    }

    /// What a job sees of its descriptors and signals: the shell's
    /// `SigBlk`/`SigIgn` lines, read with builtins before it forks anything
    /// (a shell blocks every signal around its own forks, so a child
    /// reading the shell's status could see that mask), then `ls` of the
    /// shell's descriptors.
    async fn job_view(close_fds: CloseFds) -> String {
        let base = Arc::new(BaseEnv::new(vec![("PATH".into(), "/usr/bin:/bin".into())]));
        let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
        let plan = Plan {
            program: "/bin/sh".into(),
            args: vec![
                "-c".into(),
                "while IFS= read -r l; do case $l in SigBlk*|SigIgn*) echo \"$l\";; esac; done </proc/$$/status; ls /proc/$$/fd".into(),
            ],
            defaults: vec![],
            base_env: base,
            env: vec![],
            cwd: None,
            credentials: None,
            umask: 0o022,
            output: write_end,
            close_fds,
        };
        let child = spawn(plan).expect("spawn sh");
        assert_eq!(child.wait().await.expect("wait"), (Some(0), None));
        let mut out = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(read_end), &mut out).unwrap();
        out
    }

    /// A descriptor of the daemon's without CLOEXEC (as one inherited from
    /// whoever started axd), an ignored signal and a blocked one in the
    /// spawning thread: none reaches the job, with `close_range` or with
    /// the one-by-one fallback a kernel without it (or a seccomp filter)
    /// gets.
    #[tokio::test]
    async fn a_job_sees_only_its_stdio_and_default_signals_with_either_close() {
        let null = std::fs::File::open("/dev/null").unwrap();
        // SAFETY: F_DUPFD on an open descriptor; the copy (no CLOEXEC) is
        // owned by the OwnedFd below.
        let leaked = unsafe { libc::fcntl(null.as_raw_fd(), libc::F_DUPFD, 300) };
        assert!(leaked >= 300, "dup: {}", std::io::Error::last_os_error());
        // SAFETY: `leaked` was just returned by fcntl and nothing else owns it.
        let _leaked = unsafe { OwnedFd::from_raw_fd(leaked) };
        // SAFETY: signal and pthread_sigmask with valid arguments: SIGUSR2
        // ignored process-wide (nothing in this test binary uses it),
        // SIGUSR1 blocked in this test's thread only.
        unsafe {
            libc::signal(libc::SIGUSR2, libc::SIG_IGN);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGUSR1);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
        for close_fds in [CloseFds::OneByOne, CloseFds::Range] {
            let view = job_view(close_fds).await;
            let fds: Vec<&str> = view.lines().filter(|l| !l.starts_with("Sig")).collect();
            assert_eq!(fds, ["0", "1", "2"], "{close_fds:?}: {view}");
            assert!(
                view.contains("SigBlk:\t0000000000000000"),
                "{close_fds:?}: {view}"
            );
            assert!(
                view.contains("SigIgn:\t0000000000000000"),
                "{close_fds:?}: {view}"
            );
        }
    }

    #[tokio::test]
    async fn a_missing_program_is_an_error_not_a_process() {
        let base = Arc::new(BaseEnv::new(vec![]));
        let (_read_end, write_end) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
        let plan = Plan {
            program: "/nonexistent/ax-test-program".into(),
            args: vec![],
            defaults: vec![],
            base_env: base,
            env: vec![],
            cwd: None,
            credentials: None,
            umask: 0o022,
            output: write_end,
            close_fds: CloseFds::Range,
        };
        let Some(SpawnError::NotStarted(err)) = spawn(plan).err() else {
            panic!("execve must fail, before any process ran");
        };
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    }
}
