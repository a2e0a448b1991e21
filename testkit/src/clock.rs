//! Faults of time for a real `axd`: a wall clock the test steps, and
//! pausing the process (SIGSTOP/SIGCONT).
//!
//! [`SteppedClock`] runs axd under libfaketime (`apt-get install
//! faketime`) with `DONT_FAKE_MONOTONIC=1`: only `CLOCK_REALTIME` (what
//! `SystemTime` reads) moves, as an NTP step or an operator's `date -s`
//! would move it, while `CLOCK_MONOTONIC` runs on untouched. The offset is
//! read from a file at every clock read (`FAKETIME_NO_CACHE=1`), so a step
//! takes effect at once in the running process.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::Daemon;

/// Where Debian's `faketime` package puts the preload library.
const LIBFAKETIME: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
];

/// A wall clock offset for one axd, stepped by the test.
pub struct SteppedClock {
    file: PathBuf,
    offset_secs: i64,
}

impl SteppedClock {
    /// The preload library, if installed.
    pub fn library() -> Option<PathBuf> {
        LIBFAKETIME.iter().map(PathBuf::from).find(|p| p.exists())
    }

    /// Puts `daemon` (before its start) on a wall clock at offset 0 that
    /// [`SteppedClock::step`] moves. Errors when libfaketime is missing.
    pub fn install(daemon: &mut Daemon) -> std::io::Result<SteppedClock> {
        let lib = Self::library().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "libfaketime is not installed (apt-get install faketime)",
            )
        })?;
        let clock = SteppedClock {
            file: daemon.path("faketime"),
            offset_secs: 0,
        };
        clock.write()?;
        daemon.set_env("LD_PRELOAD", lib);
        daemon.set_env("FAKETIME_TIMESTAMP_FILE", &clock.file);
        daemon.set_env("FAKETIME_NO_CACHE", "1");
        daemon.set_env("DONT_FAKE_MONOTONIC", "1");
        Ok(clock)
    }

    /// Steps the wall clock by `secs` (negative: back).
    pub fn step(&mut self, secs: i64) -> std::io::Result<()> {
        self.offset_secs += secs;
        self.write()
    }

    /// The wall clock's offset from the real one, in seconds.
    pub fn offset_secs(&self) -> i64 {
        self.offset_secs
    }

    fn write(&self) -> std::io::Result<()> {
        // Written whole, then renamed: a clock read never sees half a line.
        let tmp = self.file.with_extension("tmp");
        std::fs::write(&tmp, format!("{:+}\n", self.offset_secs))?;
        std::fs::rename(&tmp, &self.file)
    }

    pub fn path(&self) -> &Path {
        &self.file
    }
}

/// SIGSTOP to `pid` now, SIGCONT when dropped (or by [`Stopped::resume`]):
/// the process cannot run meanwhile, as in a paused VM.
pub struct Stopped {
    pid: nix::unistd::Pid,
    since: Instant,
    resumed: bool,
}

impl Stopped {
    pub fn stop(pid: u32) -> nix::Result<Stopped> {
        let pid = nix::unistd::Pid::from_raw(pid as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP)?;
        Ok(Stopped {
            pid,
            since: Instant::now(),
            resumed: false,
        })
    }

    /// How long the process has been stopped.
    pub fn elapsed(&self) -> Duration {
        self.since.elapsed()
    }

    pub fn resume(mut self) -> nix::Result<()> {
        self.resumed = true;
        nix::sys::signal::kill(self.pid, nix::sys::signal::Signal::SIGCONT)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if !self.resumed {
            let _ = nix::sys::signal::kill(self.pid, nix::sys::signal::Signal::SIGCONT);
        }
    }
}
