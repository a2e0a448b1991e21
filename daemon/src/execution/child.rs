//! The child of `spawn`, between `clone` and `execve`: what it is given
//! (`ChildArgs`) and what it does with it. It shares the daemon's memory
//! (CLONE_VM) and runs on a small stack of its own, so it only makes system
//! calls: no allocation, no lock (another thread may hold the allocator's
//! at the moment of the clone).

use std::os::fd::RawFd;

/// How the child closes every descriptor but 0, 1 and 2 before execve, so
/// the state dir's lock, the database and the socket never reach a job
/// (descriptors axd inherited without CLOEXEC included).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum CloseFds {
    /// `close_range(3, ~0)`, one system call; where it fails (ENOSYS
    /// before Linux 5.9, EPERM under a seccomp filter) the child falls
    /// back to `OneByOne`.
    Range,
    /// `close` on every descriptor number from 3 up to the open-files limit
    /// read before the `clone` (no descriptor can be at or above it).
    /// Only tests ask for it directly, to run the fallback on a kernel
    /// where `close_range` works.
    #[cfg_attr(not(test), allow(dead_code))]
    OneByOne,
}

/// What the child reads; pointers into buffers the parent keeps alive
/// until the child has exec'ed (CLONE_VFORK suspends the parent until then).
#[repr(C)]
pub(super) struct ChildArgs {
    pub(super) path: *const libc::c_char,
    pub(super) argv: *const *const libc::c_char,
    pub(super) envp: *const *const libc::c_char,
    pub(super) cwd: *const libc::c_char,
    pub(super) output: RawFd,
    pub(super) null: RawFd,
    /// Written by the child when setup or execve fails (0: it exec'ed).
    /// The child shares our memory (CLONE_VM), so no pipe is needed: this
    /// is how glibc's posix_spawn reports errors too.
    pub(super) errno: libc::c_int,
    pub(super) parent: libc::pid_t,
    /// The open-files limit the daemon started with, restored for the job
    /// (0: unchanged). Programs that use select() break above 1024.
    pub(super) nofile: libc::rlimit,
    pub(super) close_fds: CloseFds,
    /// One past the highest descriptor the daemon may hold: its soft
    /// open-files limit when the child was cloned.
    pub(super) fd_limit: libc::c_int,
    /// The child's /proc/self/stat, read before execve (`stat_len` bytes;
    /// negative: not read).
    pub(super) stat: [u8; STAT_BYTES],
    pub(super) stat_len: isize,
    /// Whether to switch to `uid`, `gid` and `groups` (false: the job runs
    /// with axd's credentials and none of these calls is made).
    pub(super) set_credentials: bool,
    pub(super) uid: libc::uid_t,
    pub(super) gid: libc::gid_t,
    pub(super) groups: *const libc::gid_t,
    pub(super) group_count: usize,
    pub(super) umask: libc::mode_t,
    /// Which step failed, written with `errno`.
    pub(super) failed_at: FailedAt,
}

/// The steps of the child whose failure the parent words apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum FailedAt {
    Nothing,
    Credentials,
    Cwd,
    Other,
}

/// Room for /proc/PID/stat: its 52 numeric fields and a `comm` of at most
/// 64 bytes fit well inside.
pub(super) const STAT_BYTES: usize = 1024;

/// One past the highest signal number (`_NSIG` in glibc).
const SIGNAL_COUNT: libc::c_int = 65;

/// The kernel's `struct sigaction` (the C library's has another layout).
/// All zeros is SIG_DFL with no flags and an empty mask; the handler comes
/// first on every architecture axd builds for (x86_64, aarch64), and the
/// rest is only ever zero or written by the kernel.
#[repr(C)]
#[derive(Default)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

/// `rt_sigaction(sig, new, old)` without the C library: no allocation, no
/// lock, no filtering of signal numbers (callable in the vfork child).
fn kernel_sigaction(
    sig: libc::c_int,
    new: Option<&KernelSigaction>,
    old: Option<&mut KernelSigaction>,
) -> libc::c_long {
    let new = new.map_or(std::ptr::null(), |n| n as *const KernelSigaction);
    let old = old.map_or(std::ptr::null_mut(), |o| o as *mut KernelSigaction);
    // SAFETY: `new` and `old` are null or point to live structs of the
    // kernel's layout and size; the mask size passed is the kernel's
    // (8 bytes, its `mask` field).
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            sig,
            new,
            old,
            std::mem::size_of::<u64>(),
        )
    }
}

/// The child, between `clone` and `execve`. It runs on its own small
/// stack but in the daemon's memory, with every signal blocked (inherited
/// from the parent's mask at `clone`).
pub(super) extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildArgs` the parent keeps alive, unmoved and
    // untouched until this child has exec'ed or exited (CLONE_VFORK
    // suspends the parent until then), and all its pointers point into
    // buffers kept alive the same way. Only system calls follow (no
    // allocation, no lock): another thread of the daemon may hold any lock
    // at the moment of the clone.
    unsafe {
        let a = &mut *(arg as *mut ChildArgs);
        let fail_at = |a: &mut ChildArgs, step: FailedAt| -> ! {
            std::ptr::write_volatile(&mut a.failed_at, step);
            std::ptr::write_volatile(&mut a.errno, *libc::__errno_location());
            libc::_exit(127);
        };
        let fail = |a: &mut ChildArgs| -> ! { fail_at(a, FailedAt::Other) };
        // First, the job's stdio, and nothing else of the daemon's: until
        // it execs, this child holds copies of every descriptor (the state
        // dir's lock, the listening socket, the database). If axd is killed
        // in that window, the copies would keep its lock taken from the
        // next axd; and descriptors axd inherited without CLOEXEC would
        // leak into jobs.
        if libc::dup2(a.null, 0) < 0 || libc::dup2(a.output, 1) < 0 || libc::dup2(a.output, 2) < 0 {
            fail(a);
        }
        let closed_by_range = a.close_fds == CloseFds::Range
            && libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) == 0;
        if !closed_by_range {
            // Errors are EBADF for numbers not open: nothing to do.
            for fd in 3..a.fd_limit {
                libc::close(fd);
            }
        }
        // Its own start time, for `Process::start_time`: read here, where
        // the daemon's descriptors are closed and so a shortage of them
        // cannot fail it (execve keeps the process, and its start time).
        let stat = libc::open(
            c"/proc/self/stat".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if stat >= 0 {
            a.stat_len = libc::read(stat, a.stat.as_mut_ptr().cast(), a.stat.len());
            libc::close(stat);
        }
        if libc::setsid() < 0 {
            fail(a);
        }
        // The job's user: groups, then gid, then uid (after the uid, the
        // others can no longer be changed). Raw system calls, never the C
        // library's setgroups/setresgid/setresuid: in a multi-threaded
        // process glibc's wrappers make every thread change its credentials
        // too (POSIX wants them process-wide), by signalling each thread of
        // the list glibc keeps in memory and waiting for them. This child
        // shares the daemon's memory, so that list is the daemon's threads:
        // they would be signalled, and the child could wait for ever.
        // posix_spawn uses the raw calls for the same reason; they change
        // the calling thread only, here the child. Any failure ends the
        // child before execve: a job never runs with other credentials
        // than asked.
        if a.set_credentials
            && (libc::syscall(libc::SYS_setgroups, a.group_count, a.groups) != 0
                || libc::syscall(libc::SYS_setresgid, a.gid, a.gid, a.gid) != 0
                || libc::syscall(libc::SYS_setresuid, a.uid, a.uid, a.uid) != 0)
        {
            fail_at(a, FailedAt::Credentials);
        }
        libc::umask(a.umask);
        // After the credentials: a change of them clears PDEATHSIG.
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) < 0 {
            fail(a);
        }
        // The daemon may have died before PDEATHSIG was set.
        if libc::getppid() != a.parent {
            libc::_exit(1);
        }
        // Default dispositions, as a fresh process expects: ignored signals
        // stay ignored across execve (Rust ignores SIGPIPE), and a caught
        // one would run the daemon's handler here once unblocked below
        // (execve resets it, but only at execve). Queried one by one, as
        // glibc's posix_spawn does: handlers can be installed at any time,
        // so a set read once would go stale. The raw system call, because
        // the C library's wrapper refuses the numbers it keeps for itself
        // (32 and 33), and an ignored one would reach the job.
        for sig in 1..SIGNAL_COUNT {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let mut current = KernelSigaction::default();
            if kernel_sigaction(sig, None, Some(&mut current)) == 0
                && current.handler != libc::SIG_DFL
            {
                kernel_sigaction(sig, Some(&KernelSigaction::default()), None);
            }
        }
        if a.nofile.rlim_cur != 0 {
            libc::setrlimit(libc::RLIMIT_NOFILE, &a.nofile);
        }
        // The job's signal mask: empty (the daemon blocks SIGCHLD, and
        // every signal around the clone).
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        // As the job's user, so its permissions are the ones that count.
        if !a.cwd.is_null() && libc::chdir(a.cwd) < 0 {
            fail_at(a, FailedAt::Cwd);
        }
        libc::execve(a.path, a.argv, a.envp);
        fail(a)
    }
}
