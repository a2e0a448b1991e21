//! Applying a reloaded `axd.toml` to a live engine (docs/config.md, "Reload"):
//! pools, global slots, burst, aging, the retry rate and the default timeout
//! change without a restart.

use super::*;

impl Engine {
    /// Puts `cfg` in force. Running runs are never stopped: a pool or the
    /// global limit that shrinks below what is running lets those runs
    /// finish, and new starts wait until usage is under the new limit.
    /// A pool may leave the config only when no unfinished run is in it;
    /// otherwise nothing is changed and the error names the pool.
    pub(super) fn reconfigure(
        &mut self,
        now: Millis,
        cfg: EngineConfig,
    ) -> Result<Reply, EngineError> {
        for name in self.pools.keys().filter(|n| !cfg.pools.contains_key(*n)) {
            let unfinished = self
                .runs
                .values()
                .filter(|r| !r.state.is_terminal() && r.pool() == name)
                .count();
            if unfinished > 0 {
                return Err(EngineError::InvalidState(format!(
                    "pool {name:?} cannot be removed: {unfinished} unfinished runs are in it"
                )));
            }
        }
        self.pools.retain(|name, _| cfg.pools.contains_key(name));
        for (name, &slots) in &cfg.pools {
            match self.pools.get_mut(name) {
                Some(pool) => {
                    let held: Vec<u32> = self
                        .runs
                        .values()
                        .filter(|r| r.state == RunState::Running && r.pool() == name)
                        .filter_map(Run::slot)
                        .collect();
                    pool.resize(slots, &held);
                }
                None => {
                    let mut pool = Pool::new(slots);
                    if self.leasing {
                        pool.set_leased(BTreeSet::new());
                    }
                    self.pools.insert(name.clone(), pool);
                }
            }
        }
        if cfg.retry_per_minute != self.cfg.retry_per_minute {
            self.budget.set_rate(now, cfg.retry_per_minute);
            // The waiters' timer was set at the old rate: look again now
            // (`handle` fires timers due at `now` after the input).
            if !self.budget_waiters.is_empty() {
                self.timers.retain(|(_, t)| *t != Timer::RetryBudget);
                self.timers.insert((now, Timer::RetryBudget));
            }
        }
        self.cfg = cfg;
        Ok(Reply::Done)
    }
}
