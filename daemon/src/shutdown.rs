//! The daemon's one shutdown value, obeyed by every thread and task.
//!
//! `drain` (SIGTERM, SIGINT) moves it from `Serving` to `Draining`: the
//! scheduler stops dispatching, stops the running jobs and ends when they
//! are gone; the socket goes on answering meanwhile. `stop` (once the
//! scheduler and the writer have ended) moves it to `Stopped`: the socket
//! stops accepting.

use std::sync::Arc;

use tokio::sync::watch;

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
}

impl Shutdown {
    pub fn new(wake: impl Fn() + Send + Sync + 'static) -> Shutdown {
        Shutdown {
            phase: Arc::new(watch::Sender::new(Phase::Serving)),
            wake: Arc::new(wake),
        }
    }

    pub fn phase(&self) -> Phase {
        *self.phase.borrow()
    }

    /// Asks for shutdown; asking again changes nothing.
    pub fn drain(&self) {
        self.advance(Phase::Draining);
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
