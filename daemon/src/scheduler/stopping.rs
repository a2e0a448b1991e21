//! Shutdown as the scheduler does it (docs/operations.md, "Stopping"):
//! dispatch stops; running jobs are left to their keeper for the next axd,
//! or, when asked (`ax shutdown --stop-jobs`), stopped first.

use super::Scheduler;
use crate::runtime::shutdown::Phase;
use crate::runtime::time::steady_ms;
use ax_engine::{Effect, Input, Millis};

impl Scheduler {
    /// Begins shutdown once it is asked for: no more dispatch; running jobs
    /// keep running for the next axd (their keepers hold them), or, when
    /// asked (`ax shutdown --stop-jobs`), are told to stop.
    pub(super) fn obey_shutdown(&mut self, now: Millis, effects: &mut Vec<Effect>) {
        if self.shutdown_at.is_some() || self.shutdown.phase() == Phase::Serving {
            return;
        }
        if self.shutdown.stops_jobs() {
            tracing::info!("shutting down: stopping dispatch, terminating running jobs");
            self.shutdown_at = Some(now + self.cfg.shutdown_grace.as_millis() as Millis);
            effects.extend(self.engine.handle(now, Input::Shutdown).effects);
        } else {
            tracing::info!(
                "shutting down: stopping dispatch; {} running jobs keep running for the next axd",
                self.engine.running_total()
            );
            self.shutdown_at = Some(now + self.cfg.shutdown_grace.as_millis() as Millis);
            self.detached = true;
            effects.extend(self.engine.handle(now, Input::Detach).effects);
        }
    }

    /// Shutdown is complete: every job is gone or left to its keeper, or
    /// the grace has passed.
    pub(super) fn finished(&self) -> bool {
        let Some(deadline) = self.shutdown_at else {
            return false;
        };
        // Leaving jobs to the keeper: but a kill in progress (a cancel, a
        // timeout in its grace) is finished first, within the grace, since
        // the next axd would not know of it.
        if self.detached
            && (self.engine.being_killed() == 0
                || steady_ms()
                    >= deadline + crate::runtime::shutdown::JOBS_MARGIN.as_millis() as Millis)
        {
            return true;
        }
        if self.detached {
            return false;
        }
        if self.engine.running_total() == 0 {
            tracing::info!("all jobs stopped; exiting");
            return true;
        }
        if steady_ms() >= deadline + crate::runtime::shutdown::JOBS_MARGIN.as_millis() as Millis {
            tracing::warn!(
                "shutdown grace exceeded; {} jobs still running",
                self.engine.running_total()
            );
            return true;
        }
        false
    }
}
