//! Engine timers: wake-ups, timeouts, heartbeats, the retry budget and
//! cron; the wall clock's offset, and settling after a pause.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Timer {
    Wake(RunId),
    Timeout(RunId),
    Heartbeat(RunId),
    RetryBudget,
    /// A DAG's next cron slot (by interned DAG key).
    Cron(u32),
}

#[derive(Clone, Copy)]
pub(super) enum TimerKind {
    Wake,
    Timeout,
    Heartbeat,
}

impl Engine {
    pub(super) fn set_timer(&mut self, id: RunId, kind: TimerKind, at: Option<Millis>) {
        let r = self.runs.get_mut(&id).expect("exists");
        let (slot, timer) = match kind {
            TimerKind::Wake => (&mut r.timers.wake, Timer::Wake(id)),
            TimerKind::Timeout => (&mut r.timers.timeout, Timer::Timeout(id)),
            TimerKind::Heartbeat => (&mut r.timers.heartbeat, Timer::Heartbeat(id)),
        };
        if let Some(old) = slot.take() {
            self.timers.remove(&(old, timer));
        }
        if let Some(at) = at {
            *slot = Some(at);
            self.timers.insert((at, timer));
        }
    }

    pub(super) fn fire_timers(&mut self, now: Millis) {
        // Settling (`Input::Settle`): what arrived while the daemon could
        // not run is applied before any deadline that fell due meanwhile.
        if now < self.settle_until {
            return;
        }
        let scheduler = self.scheduler.clone();
        while let Some(&(at, timer)) = self.timers.first() {
            if at > now {
                break;
            }
            self.timers.pop_first();
            match timer {
                Timer::Wake(id) => {
                    let r = self.runs.get_mut(&id).expect("exists");
                    r.timers.wake = None;
                    if r.delay == Some(Delay::Jitter) {
                        // A planned start, not a retry: no retry token.
                        self.make_ready(
                            now,
                            id,
                            "planned start reached (jitter)".into(),
                            &scheduler,
                        );
                    } else if self.budget.take(now) {
                        self.make_ready(now, id, "backoff over".into(), &scheduler);
                    } else {
                        let next = self.budget.next_token_at(now);
                        let shown = self.wall(next);
                        let r = self.runs.get_mut(&id).expect("exists");
                        r.delay = Some(Delay::RetryBudget);
                        r.next_at = Some(shown);
                        r.reason = "retry budget empty".into();
                        self.budget_waiters.push_back(id);
                        if self.budget_waiters.len() == 1 {
                            self.timers.insert((next, Timer::RetryBudget));
                        }
                    }
                }
                Timer::RetryBudget => {
                    while let Some(&id) = self.budget_waiters.front() {
                        if !self.budget.take(now) {
                            break;
                        }
                        self.budget_waiters.pop_front();
                        self.make_ready(now, id, "retry token available".into(), &scheduler);
                    }
                    if !self.budget_waiters.is_empty() {
                        let next = self.budget.next_token_at(now);
                        let shown = self.wall(next);
                        for w in &self.budget_waiters {
                            self.runs.get_mut(w).expect("exists").next_at = Some(shown);
                        }
                        self.timers.insert((next, Timer::RetryBudget));
                    }
                }
                Timer::Timeout(id) => {
                    self.runs.get_mut(&id).expect("exists").timers.timeout = None;
                    if self.runs[&id].kill.is_none() {
                        self.kill(id, KillReason::Timeout);
                    }
                }
                Timer::Cron(key) => {
                    self.dag_timers.remove(&key);
                    if let Some(name) = self.dag_name_of_key(key) {
                        self.catch_up(now, &name);
                    }
                }
                Timer::Heartbeat(id) => {
                    self.runs.get_mut(&id).expect("exists").timers.heartbeat = None;
                    if self.runs[&id].kill.is_none() {
                        self.kill(id, KillReason::Stalled);
                    }
                }
            }
        }
        // A budget waiter removed by cancel may leave a RetryBudget timer
        // behind with nobody waiting; drop it so next_wakeup stays exact.
        if self.budget_waiters.is_empty() {
            self.timers.retain(|(_, t)| *t != Timer::RetryBudget);
        }
    }
}

impl Engine {
    /// The wall clock reads `wall` at engine time `now`. When that moves
    /// the offset (a step, a suspend, slewing), cron timers are placed
    /// anew: slots a forward step jumped over are due and follow `catchup`
    /// (`catch_up`); after a step back, catch-up still starts after the
    /// watermark, so no slot fires twice, and the next one fires when the
    /// wall clock reaches it. Every other deadline is on the engine's
    /// clock and does not move.
    pub(super) fn set_wall(&mut self, now: Millis, wall: Millis) {
        let offset = wall.saturating_sub(now);
        if offset == self.wall_offset {
            return;
        }
        self.wall_offset = offset;
        let armed: Vec<String> = self
            .dags
            .iter()
            .filter(|(_, d)| self.dag_timers.contains_key(&d.key))
            .map(|(name, _)| name.clone())
            .collect();
        for name in armed {
            self.catch_up(now, &name);
        }
    }

    /// No timer fires before `until` (inputs delayed by a stall are applied
    /// first); a later `until` never shortens it.
    pub(super) fn settle(&mut self, until: Millis) {
        self.settle_until = self.settle_until.max(until);
    }
}
