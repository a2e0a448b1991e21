//! The clocks of the engine and of what axd records: every time a
//! scheduler step, a stored record or an engine deadline uses is read here
//! ([`now_ms`], [`steady_ms`]) and handed on by the caller; in a cluster,
//! leases and the waiting time of offered DAG runs are on the database's
//! clock (`store::postgres`). Other modules read `Instant::now` only for
//! timeouts and durations of their own (socket deadlines, rate-limited log
//! lines, latencies, the writer's retries); the heartbeat thread reads
//! `CLOCK_BOOTTIME` (`cluster`), which goes on through a suspend as the
//! database's clock does; and the wall clock makes names unique (a new
//! node id in `cluster`, a stale log's suffix in `executor`).
//!
//! Two clocks (docs/operations.md, "Clock steps and suspend"):
//!
//! * [`steady_ms`], the engine's clock: `CLOCK_MONOTONIC` (what
//!   `std::time::Instant` and tokio's timers read), in milliseconds, offset
//!   so that it reads the wall clock's value when it is first read (at
//!   start-up). Every deadline lives on it: timeouts, heartbeats, backoff,
//!   `kill_grace`, the retry budget. A step of the wall clock does not move
//!   it, and it does not run while the machine is suspended: a suspend
//!   counts as time in which neither the jobs nor axd ran.
//! * [`now_ms`], the wall clock (`CLOCK_REALTIME`): what is recorded and
//!   shown, and cron slots.

use std::os::fd::AsRawFd;
use std::sync::OnceLock;
use std::time::Instant;

use ax_engine::Millis;

/// Wall-clock time in milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or(0)
}

/// The engine's monotonic clock in milliseconds (see the module doc).
pub(crate) fn steady_ms() -> Millis {
    static ANCHOR: OnceLock<(Instant, Millis)> = OnceLock::new();
    let (at, wall) = ANCHOR.get_or_init(|| (Instant::now(), now_ms()));
    wall + at.elapsed().as_millis() as Millis
}

/// A monotonic instant, for measuring durations (uptime, latency).
pub(crate) fn monotonic() -> std::time::Instant {
    std::time::Instant::now()
}

/// Blocks until the wall clock is set discontinuously (a step by NTP or
/// `date -s`, a resume from suspend), through a timerfd armed with
/// `TFD_TIMER_CANCEL_ON_SET`. Returns false when the kernel offers no such
/// timer (the daemon then notices steps at its next wake-up only).
pub(crate) fn wait_for_wall_step() -> bool {
    let Some(fd) = cancelled_on_wall_step() else {
        return false;
    };
    let mut buf = [0u8; 8];
    // SAFETY: reads into a live local buffer of the size given, from the
    // timerfd owned by `fd`.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECANCELED)
}

/// A timerfd on the wall clock that never expires (armed for 2096) and
/// whose read fails with ECANCELED once the clock is set.
fn cancelled_on_wall_step() -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: timerfd_create takes integers and returns a new descriptor
    // that nothing else owns, moved into the OwnedFd.
    let fd = unsafe { libc::timerfd_create(libc::CLOCK_REALTIME, libc::TFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` is the valid descriptor timerfd_create just returned,
    // owned by nothing else.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    let spec = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: libc::timespec {
            tv_sec: 4_000_000_000,
            tv_nsec: 0,
        },
    };
    let flags = libc::TFD_TIMER_ABSTIME | libc::TFD_TIMER_CANCEL_ON_SET;
    // SAFETY: arms the timerfd owned by `fd` from a live local spec.
    let armed =
        unsafe { libc::timerfd_settime(fd.as_raw_fd(), flags, &spec, std::ptr::null_mut()) };
    (armed == 0).then_some(fd)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_wall_step_timer_can_be_armed() {
        assert!(super::cancelled_on_wall_step().is_some());
    }

    #[test]
    fn the_steady_clock_starts_at_the_wall_clock_and_never_goes_back() {
        let (a, wall) = (super::steady_ms(), super::now_ms());
        assert!((wall - a).abs() < 5_000, "steady {a}, wall {wall}");
        assert!(super::steady_ms() >= a);
    }
}
