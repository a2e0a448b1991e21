//! Why a run has not started (docs/operations.md, "Reading `why`").

use super::*;

impl Engine {
    /// Why an unfinished run that is not running has not started: one of
    /// the reasons of docs/operations.md, "Reading `why`".
    pub fn why(&self, id: RunId, now: Millis) -> Option<String> {
        let run = self.runs.get(&id)?;
        match run.state {
            RunState::Waiting => {
                let pending: Vec<String> = run
                    .upstream
                    .iter()
                    .filter_map(|u| self.runs.get(u))
                    .filter(|u| u.state != RunState::Success)
                    .map(|u| {
                        let name = if u.dag_run == run.dag_run {
                            u.job().id.clone()
                        } else {
                            format!("run {} ({}/{})", u.id, u.dag, u.job().id)
                        };
                        format!("{name} ({})", u.state)
                    })
                    .collect();
                Some(match (run.job().dep_mode, pending.len()) {
                    (_, 0) => "waiting for dependencies".into(),
                    (DepMode::Any, n) if n > 1 => {
                        format!("waiting for any of {}", pending.join(", "))
                    }
                    (_, 1) => format!("waiting for {}", pending[0]),
                    (_, n) => format!("waiting for {} and {} more", pending[0], n - 1),
                })
            }
            RunState::Delayed => {
                let at = run.next_at.unwrap_or(self.wall(now));
                Some(match run.delay {
                    Some(Delay::RetryBudget) => format!("retry budget empty until {}", clock(at)),
                    Some(Delay::Jitter) => format!("planned start {} (jitter)", clock(at)),
                    _ => format!("backoff until {}", clock(at)),
                })
            }
            RunState::Ready => {
                if run.awaits_commit {
                    return Some("its trigger is being written to the store".into());
                }
                if self.paused.contains(&*run.dag) {
                    return Some("DAG paused".into());
                }
                if self.shutting_down {
                    return Some("daemon shutting down".into());
                }
                let pool = &self.pools[run.pool()];
                if pool.running >= pool.slots {
                    return Some(format!(
                        "pool {} full ({}/{})",
                        run.pool(),
                        pool.running,
                        pool.slots
                    ));
                }
                if !pool.usable() {
                    return Some(format!(
                        "pool {} has no free slot leased to this node ({} running here, {} in the cluster)",
                        run.pool(),
                        pool.running,
                        pool.slots
                    ));
                }
                let max = self.cfg.max_concurrency;
                if self.running_total >= max {
                    if run.priority() >= self.cfg.burst_priority {
                        return Some(format!(
                            "global slots full ({}/{max}) and burst full ({}/{})",
                            self.running_total.min(max),
                            self.burst_in_use(),
                            self.cfg.burst_extra
                        ));
                    }
                    return Some(format!(
                        "global slots full ({}/{max})",
                        self.running_total.min(max)
                    ));
                }
                Some("next in line".into())
            }
            _ => None,
        }
    }
}
