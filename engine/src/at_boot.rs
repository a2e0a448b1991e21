//! `@reboot` DAGs (docs/job-files.md, "Schedules"): each fires once per
//! boot of the machine, known by the kernel's boot id, however often axd
//! starts within that boot.
//!
//! A DAG remembers the boots it saw (`DagDef::boots_seen`, each committed
//! as `Effect::BootMark` in the step that fires it), on any node: a
//! cluster whose cron leadership moves between machines fires once per
//! machine's boot, not at each move. A DAG seen for the
//! first time (a new file, or a schedule changed to `@reboot`) only takes
//! the current boot as seen and fires at the next one, as cron runs
//! `@reboot` entries only when it starts with the machine.

use std::sync::Arc;

use super::*;

impl Engine {
    /// The machine's boot id, given once at start-up; `None` when it cannot
    /// be read, in which case no `@reboot` DAG fires.
    pub fn set_boot(&mut self, boot: Option<Arc<str>>) {
        self.boot = boot;
    }

    /// Fires the `@reboot` DAG `dag` if it has not seen this boot (its
    /// other conditions, enabled, not paused, the cron leader, are the
    /// caller's).
    pub(super) fn fire_at_boot(&mut self, now: Millis, dag: &str) {
        let Some(boot) = self.boot.clone() else {
            return;
        };
        let Some(def) = self.dags.get_mut(dag) else {
            return;
        };
        if def.boots_seen.contains(&boot) {
            return;
        }
        let fire = !def.boots_seen.is_empty();
        def.boots_seen.push(boot.clone());
        if fire {
            // Overlap applies as to any trigger; the outcome is an event.
            let _ = self.fire(
                now,
                dag,
                Trigger::Boot {
                    boot: boot.to_string(),
                },
            );
        }
        self.effects.push(Effect::BootMark {
            dag: dag.to_string(),
            boot,
            fired: fire,
        });
    }
}
