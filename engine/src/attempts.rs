//! Attempts: their reports from the executor, kills and the retry policy.

use super::*;

impl Engine {
    pub(super) fn running_attempt(
        &mut self,
        run: RunId,
        attempt: u32,
    ) -> Result<&mut Run, EngineError> {
        let r = self
            .runs
            .get_mut(&run)
            .ok_or_else(|| EngineError::NotFound(format!("run {run}")))?;
        if r.state != RunState::Running || r.attempts.len() as u32 != attempt {
            return Err(EngineError::InvalidState(format!(
                "run {run} attempt {attempt} is not running"
            )));
        }
        Ok(r)
    }

    /// The executor spawned the attempt's process (`Input::Started`).
    pub(super) fn started(
        &mut self,
        now: Millis,
        run: RunId,
        attempt: u32,
        pid: u32,
        pid_start: Option<u64>,
    ) -> Result<Reply, EngineError> {
        let wall = self.wall(now);
        let r = self.running_attempt(run, attempt)?;
        let waited = std::mem::take(&mut r.timers.awaiting_spawn);
        if let Some(a) = r.attempts.last_mut() {
            a.pid = Some(pid);
            a.pid_start = pid_start;
            if waited {
                // It started only now: that is its start.
                a.started_at = wall;
            }
        }
        if waited {
            r.started_at = Some(wall);
            r.timers.started_mono = Some(now);
            if r.kill.is_none() {
                self.arm_attempt(now, run);
            }
        }
        self.effects.push(Effect::Persist { run });
        Ok(Reply::Done)
    }

    /// The attempt waits for the daemon's resources to start
    /// (`Input::SpawnWaiting`): no deadline runs until `Started`.
    pub(super) fn spawn_waiting(
        &mut self,
        now: Millis,
        run: RunId,
        attempt: u32,
        error: String,
    ) -> Result<Reply, EngineError> {
        let r = self.running_attempt(run, attempt)?;
        r.timers.awaiting_spawn = true;
        let dag_run = r.dag_run;
        self.set_timer(run, TimerKind::Timeout, None);
        self.set_timer(run, TimerKind::Heartbeat, None);
        let scheduler = self.scheduler.clone();
        self.event(
            now,
            Some(run),
            dag_run,
            Some(RunState::Running),
            Some(RunState::Running),
            format!(
                "attempt {attempt} waits to start: {error}; no retry is used, \
                 its timeout counts from its start"
            ),
            &scheduler,
        );
        Ok(Reply::Done)
    }

    pub(super) fn beat(&mut self, now: Millis, run: RunId) -> Result<(), EngineError> {
        let r = self.known_run(run)?;
        if r.state != RunState::Running {
            return Err(EngineError::InvalidState(format!(
                "run {run} is {}, not running",
                r.state
            )));
        }
        if let Some(hb) = r.job().heartbeat
            && r.kill.is_none()
        {
            self.set_timer(
                run,
                TimerKind::Heartbeat,
                Some(now + hb.as_millis() as Millis),
            );
        }
        Ok(())
    }

    /// A heartbeat that may carry the run's message and progress.
    pub(super) fn beat_with_report(
        &mut self,
        now: Millis,
        run: RunId,
        message: Option<String>,
        progress: Option<f64>,
    ) -> Result<Reply, EngineError> {
        self.beat(now, run)?;
        let r = self.runs.get_mut(&run).expect("checked by beat");
        if message.is_some() {
            r.message = message;
        }
        if let Some(p) = progress {
            r.progress = Some(p.clamp(0.0, 1.0));
        }
        self.effects.push(Effect::Progress { run });
        Ok(Reply::Done)
    }

    pub(super) fn spawn_failed(
        &mut self,
        now: Millis,
        run: RunId,
        attempt: u32,
        error: String,
    ) -> Result<Reply, EngineError> {
        let r = self.running_attempt(run, attempt)?;
        // Stopped (cancel, timeout, shutdown) while it waited for the
        // daemon's resources to start: nothing ran, and the outcome is the
        // stop's.
        let outcome = r.kill.map_or(Outcome::SpawnError, KillReason::outcome);
        self.finish_attempt(now, run, outcome, None, None, Some(error));
        Ok(Reply::Done)
    }

    pub(super) fn exited(
        &mut self,
        now: Millis,
        run: RunId,
        attempt: u32,
        code: Option<i32>,
        signal: Option<i32>,
    ) -> Result<Reply, EngineError> {
        let r = self.running_attempt(run, attempt)?;
        let outcome = match r.kill {
            Some(k) => k.outcome(),
            None if code == Some(0) => Outcome::Success,
            None => Outcome::Failed,
        };
        self.finish_attempt(now, run, outcome, code, signal, None);
        Ok(Reply::Done)
    }

    /// `bytes` of the running attempt's output never reached its log.
    pub(super) fn log_lost(
        &mut self,
        run: RunId,
        attempt: u32,
        bytes: u64,
    ) -> Result<Reply, EngineError> {
        let r = self.running_attempt(run, attempt)?;
        if let Some(a) = r.attempts.last_mut() {
            a.log_lost = bytes;
        }
        self.effects.push(Effect::Persist { run });
        Ok(Reply::Done)
    }

    pub(super) fn kill(&mut self, id: RunId, reason: KillReason) {
        let r = self.runs.get_mut(&id).expect("exists");
        let previous = r.kill.replace(reason);
        let attempt = r.attempts.len() as u32;
        let grace_ms = r.job().kill_grace.as_millis() as Millis;
        let pool = self.pools.get_mut(r.pool()).expect("a run's pool exists");
        pool.victims.remove(&Pool::victim(r));
        if reason == KillReason::Preempt {
            pool.preempting += 1;
        }
        if previous == Some(KillReason::Preempt) {
            pool.preempting -= 1;
        }
        self.set_timer(id, TimerKind::Timeout, None);
        self.set_timer(id, TimerKind::Heartbeat, None);
        // A second kill with a new reason only changes the outcome; the
        // executor is already stopping the group.
        if previous.is_none() {
            self.effects.push(Effect::Kill {
                run: id,
                attempt,
                reason,
                grace_ms,
            });
        }
    }

    /// Records the end of the running attempt, releases its slot and applies
    /// the retry policy.
    pub(super) fn finish_attempt(
        &mut self,
        now: Millis,
        id: RunId,
        outcome: Outcome,
        code: Option<i32>,
        signal: Option<i32>,
        error: Option<String>,
    ) {
        let scheduler = self.scheduler.clone();
        let wall = self.wall(now);
        let r = self.runs.get_mut(&id).expect("exists");
        let kill = r.kill.take();
        let slot = r.slot.take();
        let started_mono = r.timers.started_mono.take();
        if let Some(a) = r.attempts.last_mut() {
            self.effects.push(Effect::AttemptEnded {
                dag: r.dag.clone(),
                spec: r.spec.clone(),
                job_index: r.job_index,
                outcome,
                ran_ms: started_mono.map_or(wall - a.started_at, |s| now - s),
            });
            a.finished_at = Some(wall);
            a.outcome = Some(outcome);
            a.exit_code = code;
            a.signal = signal;
            a.error = error.clone();
        }
        let n = r.attempts.len();
        let pool = self.pools.get_mut(r.pool()).expect("a run's pool exists");
        pool.running -= 1;
        if let Some(s) = slot {
            pool.release(s);
        }
        pool.victims.remove(&Pool::victim(r));
        if kill == Some(KillReason::Preempt) {
            pool.preempting -= 1;
        }
        self.running_total -= 1;
        self.set_timer(id, TimerKind::Timeout, None);
        self.set_timer(id, TimerKind::Heartbeat, None);

        let detail = match (code, signal, &error) {
            (_, _, Some(e)) => format!("attempt {n} {outcome}: {e}"),
            (Some(c), _, _) => format!("attempt {n} {outcome} (exit {c})"),
            (_, Some(s), _) => format!("attempt {n} {outcome} (signal {s})"),
            _ => format!("attempt {n} {outcome}"),
        };
        match outcome {
            Outcome::Success => self.end(now, id, RunState::Success, detail, &scheduler),
            Outcome::Cancelled => self.end(now, id, RunState::Cancelled, detail, &scheduler),
            // A preempted run queues anew: with its old place, aging could
            // let it preempt its preemptor back.
            Outcome::Preempted => self.make_ready(now, id, detail, &scheduler),
            Outcome::Interrupted => self.requeue_in_place(now, id, detail, &scheduler),
            Outcome::Failed | Outcome::TimedOut | Outcome::Stalled | Outcome::SpawnError => {
                let r = self.runs.get_mut(&id).expect("exists");
                r.counted_failures += 1;
                // `retry_on` filters exit codes; failures without one
                // (signals, timeouts, stalls, spawn errors) follow `retries`.
                let code_allowed = match (&r.job().retry_on, code) {
                    (Some(list), Some(c)) if outcome == Outcome::Failed => list.contains(&c),
                    _ => true,
                };
                let retries_left = r.counted_failures <= r.job().retries;
                if retries_left && code_allowed {
                    let nth = r.counted_failures;
                    let backoff = r.job().backoff;
                    let jitter = backoff.jitter.as_millis() as u64;
                    let extra = if jitter > 0 {
                        self.rng.random_range(0..=jitter)
                    } else {
                        0
                    };
                    let delay = backoff.base_delay(nth).as_millis() as Millis + extra as Millis;
                    let at = now + delay;
                    self.transition(
                        now,
                        id,
                        RunState::Delayed,
                        format!(
                            "{detail}; retry {nth} of {} at {}",
                            self.runs[&id].job().retries,
                            clock(self.wall(at))
                        ),
                        &scheduler,
                    );
                    let wall_at = self.wall(at);
                    let r = self.runs.get_mut(&id).expect("exists");
                    r.next_at = Some(wall_at);
                    r.delay = Some(Delay::Backoff);
                    self.set_timer(id, TimerKind::Wake, Some(at));
                } else {
                    let to = if matches!(outcome, Outcome::TimedOut | Outcome::Stalled) {
                        RunState::TimedOut
                    } else {
                        RunState::Failed
                    };
                    let why = if code_allowed {
                        "no retries left"
                    } else {
                        "exit code not in retry_on"
                    };
                    self.end(now, id, to, format!("{detail}; {why}"), &scheduler);
                }
            }
        }
    }
}
