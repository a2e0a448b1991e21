//! What a job leaves behind when it is killed (docs/job-files.md, "What a
//! job's process gets").
//!
//! A job's processes share its process group, and kills go to the group. Two
//! kinds of process get past that:
//!
//! * **Orphans.** A background child whose parent exited is re-parented.
//!   With axd a *child subreaper* (`PR_SET_CHILD_SUBREAPER`) it comes to axd
//!   rather than to PID 1, so axd reaps it: no zombies, whatever PID 1 does
//!   (some container inits never reap).
//! * **`setsid` escapees.** A process that made its own session is outside
//!   the group. Every attempt's environment carries a cookie,
//!   `AX_ATTEMPT_COOKIE=<state dir>.<run>.<attempt>`, set after the job's own
//!   variables so a job cannot replace it; a kill signals every process whose
//!   environment has the cookie (Jenkins' ProcessTreeKiller does the same
//!   with `BUILD_ID`). A process that clears its environment still escapes;
//!   under systemd, `KillMode=control-group` catches it when axd stops.
//!
//! Invariant: a job's leader is reaped only by its own supervisor (its exit
//! status is the run's outcome). The orphan reaper peeks with `WNOWAIT` and
//! reaps only pids that are not registered leaders; the spawners hold the
//! gate shared from before `clone` until the new leader is registered, and
//! the reaper holds it exclusively from peek to reap, so it can never see
//! an unregistered leader.

use std::collections::HashSet;
use std::sync::{Mutex, RwLock, RwLockReadGuard};
use std::time::Duration;

static GATE: RwLock<()> = RwLock::new(());
static LEADERS: Mutex<Option<HashSet<i32>>> = Mutex::new(None);

/// Makes axd the reaper of its jobs' orphans. Returns false (and axd goes on
/// without, leaving orphans to PID 1) where the kernel refuses.
pub fn become_subreaper() -> bool {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes integer arguments only and
    // touches no memory of ours.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0 }
}

/// Held by a spawner from before `clone` until `register_leader`.
pub fn spawn_gate() -> RwLockReadGuard<'static, ()> {
    GATE.read().unwrap_or_else(|e| e.into_inner())
}

pub fn register_leader(pid: i32) {
    let mut leaders = LEADERS.lock().unwrap_or_else(|e| e.into_inner());
    leaders.get_or_insert_with(HashSet::new).insert(pid);
}

/// Called by the supervisor once it has reaped its leader.
pub fn forget_leader(pid: i32) {
    let mut leaders = LEADERS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(l) = leaders.as_mut() {
        l.remove(&pid);
    }
}

/// Reaps every exited child that is not a leader. Returns true when it had
/// to stop at an exited leader not yet reaped by its supervisor (the peek
/// shows one child at a time), so the caller tries again shortly.
pub fn reap_orphans() -> bool {
    let _gate = GATE.write().unwrap_or_else(|e| e.into_inner());
    loop {
        // SAFETY: siginfo_t is a plain C struct; all zeros is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid writes only into `info`, a live local; WNOWAIT
        // leaves the child waitable, so no leader's status is taken here.
        let r = unsafe {
            libc::waitid(
                libc::P_ALL,
                0,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            )
        };
        // SAFETY: `info` is a SIGCHLD siginfo filled by waitid (or still all
        // zeros when no child had exited), for which si_pid is the field
        // the kernel sets.
        let pid = unsafe { info.si_pid() };
        if r != 0 || pid == 0 {
            return false;
        }
        let is_leader = LEADERS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|l| l.contains(&pid));
        if is_leader {
            return true;
        }
        let mut status = 0;
        // SAFETY: waitpid writes only into a local int; `pid` is an exited
        // child that is not a registered leader, so no supervisor waits for
        // it (the gate keeps leaders registered before they can exit).
        unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
    }
}

/// Blocks SIGCHLD in the calling thread and in every thread it starts
/// afterwards: axd calls it first thing in `main`. SIGCHLD is then read
/// from a signalfd by `run` alone. Delivered the usual way, it would (a)
/// interrupt the spawners' `clone`, which the kernel then redoes from the
/// start (measured: one clone in six), and (b) through tokio's signal
/// handling wake *every* tokio runtime in the process (each registers the
/// same signal pipe), four spawner threads and the main one, per job exit.
/// Jobs start with an empty signal mask (`spawn`).
pub fn block_sigchld() {
    let set = sigchld_set();
    // SAFETY: pthread_sigmask reads a live local set and changes only the
    // calling thread's mask.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// The signal set {SIGCHLD}.
fn sigchld_set() -> libc::sigset_t {
    // SAFETY: sigset_t is a plain C struct (all zeros is valid), and the
    // sigset functions only write the local set they are given.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        set
    }
}

/// A non-blocking signalfd for SIGCHLD (which must be blocked).
fn sigchld_fd() -> std::io::Result<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    use std::os::fd::FromRawFd;
    let set = sigchld_set();
    // SAFETY: signalfd reads a live local set; -1 asks for a new
    // descriptor, which nothing else owns.
    let fd = unsafe { libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by signalfd; the OwnedFd moves into the
    // AsyncFd and stays open with it.
    unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(
            std::os::fd::OwnedFd::from_raw_fd(fd),
            tokio::io::Interest::READABLE,
        )
    }
    .map_err(|e| e.into_parts().1)
}

/// Reaps orphans whenever a child exits, for the life of the daemon.
pub async fn run() {
    block_sigchld();
    let sigchld = match sigchld_fd() {
        Ok(fd) => fd,
        Err(e) => {
            tracing::warn!("cannot watch SIGCHLD ({e}); orphans of jobs are not reaped");
            return;
        }
    };
    loop {
        let Ok(mut ready) = sigchld.readable().await else {
            return;
        };
        // Take every pending SIGCHLD (they merge; one read is enough, the
        // loop only empties the descriptor).
        let mut info = [0u8; std::mem::size_of::<libc::signalfd_siginfo>()];
        while nix::unistd::read(sigchld.get_ref(), &mut info).is_ok() {}
        ready.clear_ready();
        while tokio::task::spawn_blocking(reap_orphans)
            .await
            .unwrap_or(false)
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// This process's pid, read once (`getpid` is a system call each time, and
/// every spawn needs it twice).
pub fn own_pid() -> u32 {
    static PID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *PID.get_or_init(std::process::id)
}

/// What the cookies of this axd's attempts start with (`set_cookie_prefix`).
static COOKIE_PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Makes the cookies of this axd's attempts start with `prefix`, which
/// must name the state dir, not this process: an attempt outlives the axd
/// that started it, and the next one finds it by the same cookie. Without
/// it, the prefix is this process's pid.
pub fn set_cookie_prefix(prefix: String) {
    let _ = COOKIE_PREFIX.set(prefix);
}

/// The cookie of an attempt, as set in its environment.
pub fn cookie(run: u64, attempt: u32) -> String {
    match COOKIE_PREFIX.get() {
        Some(prefix) => format!("{prefix}.{run}.{attempt}"),
        None => format!("{}.{run}.{attempt}", own_pid()),
    }
}

pub const COOKIE_VAR: &str = "AX_ATTEMPT_COOKIE";

/// Sends `signal` to every process that carries the attempt's cookie.
/// Returns how many were signalled.
pub fn signal_marked(run: u64, attempt: u32, signal: libc::c_int) -> usize {
    let needle = format!("{COOKIE_VAR}={}\0", cookie(run, attempt));
    let me = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    let mut hit = 0;
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(env) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if contains(&env, needle.as_bytes()) {
            // SAFETY: kill takes integers only and touches no memory of ours.
            if unsafe { libc::kill(pid, signal) } == 0 {
                hit += 1;
            }
        }
    }
    hit
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    // environ is NUL-separated; match at the start or after a NUL.
    hay.windows(needle.len())
        .enumerate()
        .any(|(i, w)| w == needle && (i == 0 || hay[i - 1] == 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookie_matches_whole_variables_only() {
        let env = b"A=1\0AX_ATTEMPT_COOKIE=9.12.1\0B=2\0";
        assert!(contains(env, b"AX_ATTEMPT_COOKIE=9.12.1\0"));
        assert!(!contains(env, b"AX_ATTEMPT_COOKIE=9.2.1\0"));
        let env = b"XAX_ATTEMPT_COOKIE=9.12.1\0";
        assert!(!contains(env, b"AX_ATTEMPT_COOKIE=9.12.1\0"));
    }
}
