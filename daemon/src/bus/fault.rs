//! The store fault: what is wrong with the store now, one value shared by
//! every thread that writes to it or reports on it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What is wrong with the store now, shared by the writer, the
/// heartbeat thread and the scheduler (`ax status`, the metrics, the
/// systemd status line, the refusal of new writes).
#[derive(Clone, Default)]
pub struct Fault(Arc<Mutex<FaultState>>);

#[derive(Default)]
struct FaultState {
    /// The last write error while the writer holds steps it could not
    /// write.
    error: Option<String>,
    /// When the commit under way was sent.
    writing_since: Option<Instant>,
    /// In a cluster: when the last successful lease renewal was sent
    /// (`None` before the first).
    renewed: Option<Instant>,
    /// In a cluster: when the beat under way was sent.
    beating_since: Option<Instant>,
}

impl Fault {
    fn lock(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn set_error(&self, error: String) -> bool {
        self.lock().error.replace(error).is_none()
    }

    /// Whether a write error is held (for tests of the writer).
    #[cfg(test)]
    pub(crate) fn has_error(&self) -> bool {
        self.lock().error.is_some()
    }

    pub(crate) fn take_error(&self) -> Option<String> {
        self.lock().error.take()
    }

    pub(crate) fn writing(&self, since: Option<Instant>) {
        self.lock().writing_since = since;
    }

    /// A beat sent at `sent` is under way.
    pub fn beating(&self, sent: Instant) {
        self.lock().beating_since = Some(sent);
    }

    /// The beat under way ended; `renewed`: it renewed the lease.
    pub fn beat_done(&self, renewed: bool) {
        let mut s = self.lock();
        if renewed {
            s.renewed = s.beating_since;
        }
        s.beating_since = None;
    }

    /// The store fault now, if any, with `heartbeat` as the limit: a write
    /// error; a commit waiting longer than a heartbeat; a lease not renewed
    /// for two heartbeats (a beat late by more than one).
    pub fn current(&self, heartbeat: Duration) -> Option<String> {
        let s = self.lock();
        if let Some(e) = &s.error {
            return Some(e.clone());
        }
        if let Some(since) = s.writing_since
            && since.elapsed() > heartbeat
        {
            return Some(format!(
                "a commit has waited {:.1} s for the store (longer than a heartbeat, {:.1} s)",
                since.elapsed().as_secs_f64(),
                heartbeat.as_secs_f64()
            ));
        }
        if let Some(renewed) = s.renewed
            && renewed.elapsed() > heartbeat * 2
        {
            return Some(format!(
                "this node's lease has not been renewed for {:.1} s (heartbeat {:.1} s): the store does not answer",
                renewed.elapsed().as_secs_f64(),
                heartbeat.as_secs_f64()
            ));
        }
        None
    }

    /// How long the oldest store write under way (a commit, a beat) has
    /// waited so far; zero when none.
    pub fn write_wait(&self) -> Duration {
        let s = self.lock();
        [s.writing_since, s.beating_since]
            .into_iter()
            .flatten()
            .map(|t| t.elapsed())
            .max()
            .unwrap_or_default()
    }
}
