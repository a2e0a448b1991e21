//! Choosing which ready runs start, and preemption (docs/config.md,
//! "`[pools.NAME]`" and "`[burst]`").

use super::*;

impl Engine {
    pub(super) fn dispatch(&mut self, now: Millis) {
        if self.shutting_down {
            return;
        }
        let max = self.cfg.max_concurrency;
        loop {
            let min_priority = if self.running_total < max {
                0
            } else if self.running_total < max + self.cfg.burst_extra {
                self.cfg.burst_priority
            } else {
                break;
            };
            let mut best: Option<(Candidate, &str)> = None;
            for (name, pool) in &self.pools {
                if !pool.usable() || pool.queue.is_empty() {
                    continue;
                }
                if let Some(c) = pool.queue.best(now, self.cfg.aging, min_priority)
                    && best.is_none_or(|(b, _)| c.beats(&b))
                {
                    best = Some((c, name));
                }
            }
            let Some((c, pool)) = best else { break };
            let pool = pool.to_string();
            self.start(now, c, &pool);
        }
        self.preempt(now);
    }

    pub(super) fn start(&mut self, now: Millis, c: Candidate, pool_name: &str) {
        let pool = self.pools.get_mut(pool_name).expect("pool");
        pool.queue.remove(c.priority, c.ready_at, c.run);
        let slot = pool.take().expect("usable ⇒ a free slot");
        pool.running += 1;
        self.running_total += 1;
        let burst = self.running_total > self.cfg.max_concurrency;
        let scheduler = self.scheduler.clone();
        let waited = now - c.ready_at;
        let reason = if burst {
            format!("started on a burst slot (waited {waited} ms)")
        } else {
            format!(
                "started (waited {waited} ms, effective priority {})",
                c.effective
            )
        };
        self.transition(now, c.run, RunState::Running, reason, &scheduler);
        let wall = self.wall(now);
        let r = self.runs.get_mut(&c.run).expect("exists");
        r.started_at = Some(wall);
        r.timers.started_mono = Some(now);
        r.slot = Some(slot);
        r.kill = None;
        r.message = None;
        r.progress = None;
        let n = r.attempts.len() as u32 + 1;
        r.attempts
            .push(Attempt::started(n, wall, slot, self.node.clone()));
        r.timers.awaiting_spawn = false;
        let order = SpawnOrder {
            run: c.run,
            dag_run: r.dag_run,
            dag: r.dag.clone(),
            attempt: n,
            slot,
            spec: r.spec.clone(),
            job_index: r.job_index,
            waited_ms: waited,
        };
        if r.job().preemptible {
            self.pools
                .get_mut(pool_name)
                .expect("pool")
                .victims
                .insert(Pool::victim(r));
        }
        self.arm_attempt(now, c.run);
        self.effects.push(Effect::Spawn(order));
    }

    /// Arms the running attempt's timeout and heartbeat deadlines, counted
    /// from `now` (its start).
    pub(super) fn arm_attempt(&mut self, now: Millis, id: RunId) {
        let r = &self.runs[&id];
        let timeout = match r.job().timeout {
            Timeout::Default => match self.cfg.pool_timeouts.get(r.pool()) {
                Some(pool_timeout) => *pool_timeout,
                None => self.cfg.default_timeout,
            },
            Timeout::Never => None,
            Timeout::After(d) => Some(d.as_millis() as Millis),
        };
        let heartbeat = r.job().heartbeat.map(|h| h.as_millis() as Millis);
        self.set_timer(id, TimerKind::Timeout, timeout.map(|t| now + t));
        self.set_timer(id, TimerKind::Heartbeat, heartbeat.map(|h| now + h));
    }

    /// docs/config.md, "`[burst]`": an urgent run that cannot start even with
    /// burst may stop the lowest-priority preemptible running run (never one
    /// of equal or higher priority). One victim per blocked urgent pool at a
    /// time.
    pub(super) fn preempt(&mut self, now: Millis) {
        let urgent = self.cfg.burst_priority;
        let global_full = self.running_total >= self.cfg.max_concurrency + self.cfg.burst_extra;
        let global_preempting: u32 = self.pools.values().map(|p| p.preempting).sum();
        let mut kills = Vec::new();
        let mut global_claimed = global_preempting > 0;
        for (name, pool) in &self.pools {
            let Some(head) = pool.queue.best(now, self.cfg.aging, urgent) else {
                continue;
            };
            let pool_full = !pool.usable();
            let victim = if pool_full {
                if pool.preempting > 0 {
                    continue;
                }
                pool.victims
                    .first()
                    .filter(|v| v.0 < head.priority)
                    .map(|v| v.2)
            } else if global_full {
                if global_claimed {
                    continue;
                }
                self.pools
                    .values()
                    .filter_map(|p| p.victims.first())
                    .filter(|v| v.0 < head.priority)
                    .min()
                    .map(|v| v.2)
            } else {
                None
            };
            if let Some(v) = victim
                && !kills.contains(&v)
            {
                let _ = name;
                kills.push(v);
                global_claimed = true;
            }
        }
        for v in kills {
            self.kill(v, KillReason::Preempt);
        }
    }
}
