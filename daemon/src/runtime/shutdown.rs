//! The daemon's one shutdown value, obeyed by every thread and task.
//!
//! `drain` (SIGTERM, SIGINT) moves it from `Serving` to `Draining`: the
//! scheduler stops dispatching, stops the running jobs and ends when they
//! are gone; the socket goes on answering meanwhile. `stop` (once the
//! scheduler and the writer have ended) moves it to `Stopped`: the socket
//! stops accepting.
//!
//! Shutdown ends within `bound(shutdown_grace)` of the drain, also when
//! the store cannot be written (docs/operations.md, "Shutdown while the
//! store cannot write"): the jobs get `shutdown_grace` and `JOBS_MARGIN`,
//! the writer `FINAL_WRITE` more to commit what it holds, the other
//! threads `EXIT_MARGIN`; whatever is not done by then is abandoned, said,
//! and the exit code is 1.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::watch;

/// How long past `shutdown_grace` the scheduler waits for jobs to end.
pub(crate) const JOBS_MARGIN: Duration = Duration::from_secs(5);

/// How long the writer goes on trying to commit what it holds once the
/// scheduler has ended.
pub(crate) const FINAL_WRITE: Duration = Duration::from_secs(5);

/// What the other threads get to end, after the writer's time.
pub(crate) const EXIT_MARGIN: Duration = Duration::from_secs(2);

/// The most a shutdown takes from the drain to the exit.
pub(crate) fn bound(shutdown_grace: Duration) -> Duration {
    shutdown_grace + JOBS_MARGIN + FINAL_WRITE + EXIT_MARGIN
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Serving,
    Draining,
    Stopped,
}

#[derive(Clone)]
pub struct Shutdown {
    phase: Arc<watch::Sender<Phase>>,
    /// Wakes the scheduler thread, which blocks on its queue, not on this.
    wake: Arc<dyn Fn() + Send + Sync>,
    /// A fault made axd stop (`fail`): the exit code is 1.
    failed: Arc<AtomicBool>,
    /// Running jobs are stopped (`drain_stopping_jobs`) rather than left
    /// running for the next axd.
    stop_jobs: Arc<AtomicBool>,
}

impl Shutdown {
    pub fn new(wake: impl Fn() + Send + Sync + 'static) -> Shutdown {
        Shutdown {
            phase: Arc::new(watch::Sender::new(Phase::Serving)),
            wake: Arc::new(wake),
            failed: Arc::default(),
            stop_jobs: Arc::default(),
        }
    }

    pub fn phase(&self) -> Phase {
        *self.phase.borrow()
    }

    /// Asks for shutdown; asking again changes nothing.
    pub fn drain(&self) {
        self.advance(Phase::Draining);
    }

    /// Asks for shutdown with running jobs stopped (`ax shutdown
    /// --stop-jobs`, SIGUSR2); asked for after a plain `drain`, it still
    /// counts if the scheduler has not begun shutting down.
    pub fn drain_stopping_jobs(&self) {
        self.stop_jobs.store(true, Ordering::SeqCst);
        self.drain();
    }

    /// Whether running jobs are to be stopped.
    pub fn stops_jobs(&self) -> bool {
        self.stop_jobs.load(Ordering::SeqCst)
    }

    /// Asks for shutdown because axd cannot go on (the caller has said
    /// why): the exit code will be 1.
    pub fn fail(&self) {
        self.failed.store(true, Ordering::SeqCst);
        self.drain();
    }

    /// Whether `fail` was called.
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    /// Resolves once shutdown has been asked for.
    pub async fn draining(&self) {
        let mut rx = self.phase.subscribe();
        let _ = rx.wait_for(|p| *p >= Phase::Draining).await;
    }

    /// Every thread that must finish has finished.
    pub fn stop(&self) {
        self.advance(Phase::Stopped);
    }

    fn advance(&self, to: Phase) {
        let moved = self.phase.send_if_modified(|p| {
            let later = *p < to;
            if later {
                *p = to;
            }
            later
        });
        if moved {
            (self.wake)();
        }
    }

    /// Resolves once the phase is `Stopped`.
    pub async fn stopped(&self) {
        let mut rx = self.phase.subscribe();
        let _ = rx.wait_for(|p| *p == Phase::Stopped).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn phases_only_move_forward_and_each_move_wakes_once() {
        let wakes = Arc::new(AtomicU32::new(0));
        let w = wakes.clone();
        let s = Shutdown::new(move || {
            w.fetch_add(1, Ordering::SeqCst);
        });
        assert_eq!(s.phase(), Phase::Serving);
        s.drain();
        s.drain();
        assert_eq!(s.phase(), Phase::Draining);
        s.stop();
        s.drain();
        assert_eq!(s.phase(), Phase::Stopped);
        assert_eq!(wakes.load(Ordering::SeqCst), 2);
    }
}
