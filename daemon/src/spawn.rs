//! Starting a job process without copying the daemon's address space.
//!
//! `std`/`tokio` fall back to `fork` as soon as a `pre_exec` hook is set,
//! and the hook is needed for `setsid` and `PR_SET_PDEATHSIG`. Forking a
//! busy multi-threaded daemon copies its page tables and makes every other
//! thread's TLB flush, for every job: measured, that capped axd at about a
//! fifth of the machine's spawn rate. So this module does what glibc's
//! `posix_spawn` does — `clone(CLONE_VM | CLONE_VFORK)` on a small private
//! stack — with our own child code: setsid, PDEATHSIG, check the parent,
//! reset signals, wire stdio, chdir, execve. Everything the child touches
//! is prepared by the parent first; the child only makes system calls.
//!
//! The process is then waited for through a pidfd (readable when it exits)
//! and reaped with `waitpid`.

use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use tokio::io::unix::AsyncFd;

/// Everything needed to start one process.
pub struct Plan {
    pub program: PathBuf,
    pub args: Vec<std::ffi::OsString>,
    /// The environment every job starts from.
    pub base_env: &'static BaseEnv,
    /// This process's variables on top of `base_env`: a later value of a
    /// name replaces an earlier one, and any replaces the base's.
    pub env: Vec<(std::ffi::OsString, std::ffi::OsString)>,
    pub cwd: Option<PathBuf>,
    /// stdout and stderr.
    pub output: OwnedFd,
}

/// An environment converted for execve once, shared by every spawn: a
/// job's process only adds its own variables (converting the daemon's
/// thirty-odd variables per spawn was a tenth of a spawner's time).
pub struct BaseEnv {
    /// `NAME=value` entries, one per name.
    entries: Vec<CString>,
    path: Option<std::ffi::OsString>,
}

impl BaseEnv {
    /// Entries with a NUL byte are left out (they cannot be passed on).
    pub fn new(vars: Vec<(std::ffi::OsString, std::ffi::OsString)>) -> BaseEnv {
        let mut env = BaseEnv {
            entries: Vec::with_capacity(vars.len()),
            path: None,
        };
        for (k, v) in vars {
            if k == "PATH" {
                env.path = Some(v.clone());
            }
            if let Ok(c) = entry(&k, &v) {
                env.entries.push(c);
            }
        }
        env
    }

    /// The name of an entry: up to its first `=` (a name has none).
    fn name(entry: &CString) -> &[u8] {
        let kv = entry.as_bytes();
        &kv[..kv.iter().position(|&b| b == b'=').unwrap_or(kv.len())]
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

/// What the child reads; pointers into buffers the parent keeps alive
/// until the child has exec'ed (CLONE_VFORK suspends the parent until then).
#[repr(C)]
struct ChildArgs {
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    output: RawFd,
    null: RawFd,
    /// Written by the child when setup or execve fails (0: it exec'ed).
    /// The child shares our memory (CLONE_VM), so no pipe is needed: this
    /// is how glibc's posix_spawn reports errors too.
    errno: libc::c_int,
    parent: libc::pid_t,
    /// Signals the daemon ignores, to set back to default (caught ones are
    /// reset by execve itself); SIGPIPE at least.
    ignored: libc::sigset_t,
    /// The open-files limit the daemon started with, restored for the job
    /// (0: unchanged). Programs that use select() break above 1024.
    nofile: libc::rlimit,
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

/// The signals the daemon ignores (SIG_IGN survives execve, so the child
/// sets these back to default), and SIGPIPE, which Rust's runtime ignores.
/// Read once, at the first spawn: axd ignores no signal after start-up (it
/// only adds handlers, which execve resets), and this spares every child
/// thirty system calls.
fn ignored_signals() -> libc::sigset_t {
    static IGNORED: std::sync::OnceLock<libc::sigset_t> = std::sync::OnceLock::new();
    *IGNORED.get_or_init(read_ignored_signals)
}

fn read_ignored_signals() -> libc::sigset_t {
    // SAFETY: sigset and sigaction queries on local structs.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        for sig in 1..32 {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction == libc::SIG_IGN
            {
                libc::sigaddset(&mut set, sig);
            }
        }
        set
    }
}

/// The soft open-files limit axd started with, before `raise_nofile`.
static ORIGINAL_NOFILE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Raises the daemon's soft open-files limit to the hard limit (each client
/// and each running job holds descriptors; 1024 is too few for a thousand
/// idle clients). Jobs get the original limit back. Returns (old, new).
pub fn raise_nofile() -> Option<(u64, u64)> {
    let mut lim: libc::rlimit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a local struct.
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

extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: only system calls on data prepared by the parent; the parent
    // is suspended until execve or _exit.
    unsafe {
        let a = &mut *(arg as *mut ChildArgs);
        let fail = |a: &mut ChildArgs| -> ! {
            std::ptr::write_volatile(&mut a.errno, *libc::__errno_location());
            libc::_exit(127);
        };
        // First, the job's stdio, and nothing else of the daemon's: until
        // it execs, this child holds copies of every descriptor (the state
        // dir's lock, the listening socket, the database). If axd is killed
        // in that window, the copies would keep its lock taken from the
        // next axd; and descriptors axd inherited without CLOEXEC would
        // leak into jobs.
        if libc::dup2(a.null, 0) < 0 || libc::dup2(a.output, 1) < 0 || libc::dup2(a.output, 2) < 0 {
            fail(a);
        }
        libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32);
        if libc::setsid() < 0 {
            fail(a);
        }
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) < 0 {
            fail(a);
        }
        // The daemon may have died before PDEATHSIG was set.
        if libc::getppid() != a.parent {
            libc::_exit(1);
        }
        // Default signal handling and an empty mask, as a fresh process
        // expects (the daemon ignores SIGPIPE and may block signals).
        for sig in 1..32 {
            if libc::sigismember(&a.ignored, sig) == 1 {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        if a.nofile.rlim_cur != 0 {
            libc::setrlimit(libc::RLIMIT_NOFILE, &a.nofile);
        }
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        if !a.cwd.is_null() && libc::chdir(a.cwd) < 0 {
            fail(a);
        }
        libc::execve(a.path, a.argv, a.envp);
        fail(a)
    }
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
pub struct Process {
    pub pid: u32,
    pidfd: AsyncFd<OwnedFd>,
}

impl Process {
    /// Waits for the process to exit and reaps it: (exit code, signal).
    pub async fn wait(&self) -> std::io::Result<(Option<i32>, Option<i32>)> {
        loop {
            let mut guard = self.pidfd.readable().await?;
            let mut status: libc::c_int = 0;
            // SAFETY: plain waitpid on our own child.
            let r = unsafe { libc::waitpid(self.pid as libc::pid_t, &mut status, libc::WNOHANG) };
            if r == self.pid as libc::pid_t {
                crate::reaper::forget_leader(r);
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

/// Starts the process described by `plan` (call from a long-lived thread:
/// PDEATHSIG is tied to the calling thread). Needs a tokio runtime context
/// for the pidfd.
pub fn spawn(plan: Plan) -> std::io::Result<Process> {
    let path = cstr(resolve(&plan)?.as_os_str())?;
    let mut argv_c: Vec<CString> = vec![cstr(plan.program.as_os_str())?];
    for a in &plan.args {
        argv_c.push(cstr(a)?);
    }
    // The process's own variables, the last value of each name...
    let mut env_c: Vec<CString> = Vec::with_capacity(plan.env.len());
    let mut own_names: Vec<&[u8]> = Vec::with_capacity(plan.env.len());
    for (i, (k, v)) in plan.env.iter().enumerate() {
        if plan.env[i + 1..].iter().all(|(later, _)| later != k) {
            env_c.push(entry(k, v)?);
            own_names.push(k.as_bytes());
        }
    }
    let argv: Vec<*const libc::c_char> = argv_c
        .iter()
        .map(|c| c.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect();
    // ...then the base's entries they do not replace.
    let base = plan.base_env;
    let mut envp: Vec<*const libc::c_char> =
        Vec::with_capacity(base.entries.len() + env_c.len() + 1);
    for e in &base.entries {
        if !own_names.contains(&BaseEnv::name(e)) {
            envp.push(e.as_ptr());
        }
    }
    envp.extend(env_c.iter().map(|c| c.as_ptr()));
    envp.push(std::ptr::null());
    let cwd = plan
        .cwd
        .as_deref()
        .map(|c| cstr(c.as_os_str()))
        .transpose()?;
    let null = dev_null()?;
    let mut args = ChildArgs {
        path: path.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        cwd: cwd.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
        output: plan.output.as_raw_fd(),
        null,
        errno: 0,
        ignored: ignored_signals(),
        parent: crate::reaper::own_pid() as libc::pid_t,
        nofile: {
            let mut lim = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            let original = ORIGINAL_NOFILE.load(std::sync::atomic::Ordering::Relaxed);
            // SAFETY: getrlimit on a local struct.
            if original != 0 && unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
                lim.rlim_cur = original;
            } else {
                lim.rlim_cur = 0;
            }
            lim
        },
    };
    // Not zeroed: the child writes its frames from the top down, and only
    // touches the few pages it uses.
    let mut stack: Vec<u8> = Vec::with_capacity(CHILD_STACK_BYTES);
    // Until the child is registered as a leader, the orphan reaper must not
    // look (it would take its exit status).
    let gate = crate::reaper::spawn_gate();
    // SAFETY: the stack outlives the child's use of it (CLONE_VFORK: we
    // resume only after execve or _exit); the top is 16-byte aligned.
    let pid = unsafe {
        let top = stack.as_mut_ptr().add(CHILD_STACK_BYTES);
        let top = (top as usize & !15) as *mut libc::c_void;
        libc::clone(
            child_main,
            top,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            &mut args as *mut ChildArgs as *mut libc::c_void,
        )
    };
    if pid < 0 {
        return Err(std::io::Error::last_os_error());
    }
    crate::reaper::register_leader(pid);
    drop(gate);
    // We resume once the child has exec'ed or exited; it wrote its errno
    // into `args` if setup or execve failed.
    // SAFETY: `args` is ours again (the child is gone from our memory).
    let errno = unsafe { std::ptr::read_volatile(&args.errno) };
    if errno != 0 {
        let mut status = 0;
        // SAFETY: reaping our own child, which has exited.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        crate::reaper::forget_leader(pid);
        return Err(std::io::Error::from_raw_os_error(errno));
    }
    // SAFETY: pidfd_open returns a new descriptor we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the OwnedFd is moved into the AsyncFd and stays open with it.
    let pidfd = unsafe {
        AsyncFd::register_with_interest(
            OwnedFd::from_raw_fd(fd as RawFd),
            tokio::io::Interest::READABLE,
        )
    }
    .map_err(|e| e.into_parts().1)?;
    Ok(Process {
        pid: pid as u32,
        pidfd,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The job sees the base environment with its own variables on top:
    /// the last value of a name wins, over the base's and over earlier ones.
    #[tokio::test]
    async fn own_variables_replace_the_base_and_the_last_wins() {
        static BASE: std::sync::OnceLock<BaseEnv> = std::sync::OnceLock::new();
        let base = BASE.get_or_init(|| {
            BaseEnv::new(vec![
                ("KEEP".into(), "base".into()),
                ("SHADOWED".into(), "base".into()),
                ("PATH".into(), "/usr/bin:/bin".into()),
            ])
        });
        let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
        let plan = Plan {
            program: "env".into(),
            args: vec![],
            base_env: base,
            env: vec![
                ("SHADOWED".into(), "first".into()),
                ("OWN".into(), "x".into()),
                ("SHADOWED".into(), "last".into()),
            ],
            cwd: None,
            output: write_end,
        };
        let child = spawn(plan).expect("spawn env (found through the base PATH)");
        assert_eq!(child.wait().await.expect("wait"), (Some(0), None));
        let mut out = String::new();
        std::io::Read::read_to_string(&mut std::fs::File::from(read_end), &mut out).unwrap();
        let mut lines: Vec<&str> = out.lines().collect();
        lines.sort();
        assert_eq!(
            lines,
            ["KEEP=base", "OWN=x", "PATH=/usr/bin:/bin", "SHADOWED=last"]
        );
    }

    #[tokio::test]
    async fn a_missing_program_is_an_error_not_a_process() {
        static BASE: std::sync::OnceLock<BaseEnv> = std::sync::OnceLock::new();
        let base = BASE.get_or_init(|| BaseEnv::new(vec![]));
        let (_read_end, write_end) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
        let plan = Plan {
            program: "/nonexistent/ax-test-program".into(),
            args: vec![],
            base_env: base,
            env: vec![],
            cwd: None,
            output: write_end,
        };
        let err = spawn(plan).err().expect("execve must fail");
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    }
}
