//! `@reboot` DAGs (docs/job-files.md, "Schedules"): each fires once per
//! boot of the machine, known by the kernel's boot id, however often axd
//! starts within that boot.
//!
//! A DAG remembers the boot it last saw (`DagDef::boot_mark`, committed
//! as `Effect::BootMark` in the step that fires it). A DAG seen for the
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
        let fire = match &def.boot_mark {
            Some(seen) if *seen == boot => return,
            Some(_) => true,
            None => false,
        };
        def.boot_mark = Some(boot.clone());
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
