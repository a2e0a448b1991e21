//! Run transitions: readiness, ending, cancel, retry, revive, pause and resume.

use super::*;

impl Engine {
    pub(super) fn recount_upstream(&mut self, id: RunId) {
        let (mut ok, mut bad) = (0, 0);
        for u in &self.runs[&id].upstream {
            let state = match self.runs.get(u) {
                Some(r) => r.state,
                None => self.external.get(u).copied().unwrap_or(RunState::Cancelled),
            };
            match state {
                RunState::Success => ok += 1,
                s if s.is_terminal() => bad += 1,
                _ => {}
            }
        }
        let r = self.runs.get_mut(&id).expect("exists");
        r.succeeded_up = ok;
        r.failed_up = bad;
    }

    /// Moves a waiting run on if its upstream counts allow: ready, or
    /// cancelled as `upstream_failed` (cascading).
    pub(super) fn evaluate_waiting(&mut self, now: Millis, id: RunId, actor: &Arc<str>) {
        let r = &self.runs[&id];
        if r.state != RunState::Waiting {
            return;
        }
        let total = r.upstream.len() as u32;
        let blocked = match r.job().dep_mode {
            DepMode::All => r.failed_up > 0,
            DepMode::Any => total > 0 && r.failed_up == total,
        };
        let ready = match r.job().dep_mode {
            DepMode::All => r.succeeded_up == total,
            DepMode::Any => total == 0 || r.succeeded_up > 0,
        };
        if ready {
            let reason = if total == 0 {
                "no dependencies"
            } else {
                "dependencies met"
            };
            self.make_ready(now, id, reason.into(), actor);
        } else if blocked {
            let culprit = r
                .upstream
                .iter()
                .filter_map(|u| self.runs.get(u))
                .find(|u| u.state.is_terminal() && u.state != RunState::Success)
                .map(|u| u.job().id.clone())
                .unwrap_or_default();
            self.end_unstarted(
                now,
                id,
                RunState::Cancelled,
                format!("upstream_failed: {culprit}"),
                actor,
            );
        }
    }

    pub(super) fn cancel(
        &mut self,
        now: Millis,
        id: RunId,
        actor: &Arc<str>,
    ) -> Result<Reply, EngineError> {
        let r = self.known_run(id)?;
        match r.state {
            RunState::Running => {
                if r.kill != Some(KillReason::Cancel) {
                    let dag_run = r.dag_run;
                    self.kill(id, KillReason::Cancel);
                    self.event(
                        now,
                        Some(id),
                        dag_run,
                        Some(RunState::Running),
                        Some(RunState::Running),
                        "cancel requested: stopping the process group".into(),
                        actor,
                    );
                }
                Ok(Reply::Done)
            }
            s if s.is_terminal() => Err(EngineError::InvalidState(format!(
                "run {id} already ended ({s})"
            ))),
            _ => {
                self.end_unstarted(now, id, RunState::Cancelled, "cancelled".into(), actor);
                Ok(Reply::Done)
            }
        }
    }

    /// Cancels every unfinished run of a DAG run.
    pub(super) fn cancel_dag_run(
        &mut self,
        now: Millis,
        dag_run: DagRunId,
        actor: &Arc<str>,
    ) -> Result<Reply, EngineError> {
        let runs = self
            .dag_runs
            .get(&dag_run)
            .ok_or_else(|| EngineError::NotFound(format!("DAG run {dag_run}")))?
            .runs
            .clone();
        for id in runs {
            if !self.runs[&id].state.is_terminal() {
                self.cancel(now, id, actor)?;
            }
        }
        Ok(Reply::Done)
    }

    /// Stops every running process; nothing starts from here on.
    pub(super) fn shutdown(&mut self) {
        self.shutting_down = true;
        let running: Vec<RunId> = self
            .runs
            .values()
            .filter(|r| r.state == RunState::Running)
            .map(|r| r.id)
            .collect();
        for id in running {
            self.kill(id, KillReason::Shutdown);
        }
    }

    pub(super) fn retry(
        &mut self,
        now: Millis,
        id: RunId,
        actor: &Arc<str>,
    ) -> Result<Reply, EngineError> {
        let r = self.known_run(id)?;
        match r.state {
            RunState::Delayed => {
                // Skip the remaining backoff: the operator asked for it now.
                self.leave_delayed(id);
                self.make_ready(now, id, "retried now by operator".into(), actor);
                Ok(Reply::Done)
            }
            s if s.is_terminal() => {
                let blocker = r
                    .upstream
                    .iter()
                    .filter_map(|u| self.runs.get(u))
                    .filter(|u| u.state.is_terminal() && u.state != RunState::Success)
                    .map(|u| u.job().id.clone())
                    .collect::<Vec<_>>();
                let all_failed = !r.upstream.is_empty() && blocker.len() == r.upstream.len();
                if !blocker.is_empty() && (r.job().dep_mode == DepMode::All || all_failed) {
                    return Err(EngineError::InvalidState(format!(
                        "upstream {} did not succeed; retry it instead",
                        blocker.join(", ")
                    )));
                }
                // A run of a DAG run loaded back from the store may name a
                // pool removed from the config since: it could never start.
                if !self.pools.contains_key(r.pool()) {
                    return Err(EngineError::InvalidState(format!(
                        "run {id}: pool {:?} no longer exists",
                        r.pool()
                    )));
                }
                self.revive(now, id, "manual retry".into(), actor);
                // Revive downstream runs that were cancelled because of it
                // (those in a pool that no longer exists stay cancelled).
                let mut stack = vec![id];
                while let Some(x) = stack.pop() {
                    let down = self.runs[&x].downstream.clone();
                    for d in down {
                        let dr = &self.runs[&d];
                        if dr.state == RunState::Cancelled
                            && dr.reason.starts_with("upstream_failed")
                            && self.pools.contains_key(dr.pool())
                        {
                            self.revive(
                                now,
                                d,
                                format!("upstream {} retried", self.runs[&id].job().id),
                                actor,
                            );
                            stack.push(d);
                        }
                    }
                }
                Ok(Reply::Done)
            }
            s => Err(EngineError::InvalidState(format!(
                "run {id} is {s}; only ended or delayed runs can be retried"
            ))),
        }
    }

    /// Terminal → waiting with a fresh retry budget; attempts are kept.
    pub(super) fn revive(&mut self, now: Millis, id: RunId, reason: String, actor: &Arc<str>) {
        let (dag_run, dag) = {
            let r = self.runs.get_mut(&id).expect("exists");
            r.counted_failures = 0;
            r.finished_at = None;
            r.next_at = None;
            r.delay = None;
            (r.dag_run, r.dag.clone())
        };
        self.transition(now, id, RunState::Waiting, reason, actor);
        self.active_by_dag
            .entry(dag.clone())
            .or_default()
            .insert(id);
        let dr = self.dag_runs.get_mut(&dag_run).expect("dag run exists");
        dr.unfinished += 1;
        if dr.state != DagRunState::Active {
            dr.state = DagRunState::Active;
            dr.finished_at = None;
            self.active_dag_runs
                .entry(dr.dag.to_string())
                .or_default()
                .insert(dag_run);
            self.dag_event(now, dag_run, "DAG run reopened by retry".into(), actor);
        }
        self.recount_upstream(id);
        // Downstream `any` runs still waiting no longer count this one as failed.
        let down = self.runs[&id].downstream.clone();
        for d in down {
            if self.runs[&d].state == RunState::Waiting {
                self.recount_upstream(d);
            }
        }
        self.evaluate_waiting(now, id, actor);
    }

    pub(super) fn pause(&mut self, dag: &str) {
        if !self.paused.insert(dag.to_string()) {
            return;
        }
        // No cron timer while paused; slots missed meanwhile follow
        // `catchup` on resume.
        if let Some(def) = self.dags.get_mut(dag) {
            def.next_fire = None;
            if let Some(old) = self.dag_timers.remove(&def.key) {
                self.timers.remove(&(old, Timer::Cron(def.key)));
            }
        }
        let ids = self.unfinished_runs_of(dag);
        for id in ids {
            if self.runs[&id].state == RunState::Ready {
                // Out of its pool's queue and back where a paused DAG's
                // ready run waits.
                self.leave_ready(id);
                self.queue_ready(id);
            }
        }
    }

    pub(super) fn resume(&mut self, now: Millis, dag: &str) {
        if !self.paused.remove(dag) {
            return;
        }
        self.catch_up(now, dag);
        for id in self.held.remove(dag).unwrap_or_default() {
            self.queue_ready(id);
        }
    }

    pub(super) fn transition(
        &mut self,
        now: Millis,
        id: RunId,
        to: RunState,
        reason: String,
        actor: &Arc<str>,
    ) {
        let r = self.runs.get_mut(&id).expect("run exists");
        let from = r.state;
        r.state = to;
        r.reason = reason.clone();
        let dag_run = r.dag_run;
        self.counts[state_index(from)] -= 1;
        self.counts[state_index(to)] += 1;
        self.event(now, Some(id), dag_run, Some(from), Some(to), reason, actor);
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn event(
        &mut self,
        at: Millis,
        run: Option<RunId>,
        dag_run: DagRunId,
        from: Option<RunState>,
        to: Option<RunState>,
        reason: String,
        actor: &Arc<str>,
    ) {
        self.effects.push(Effect::Event(Event {
            at: self.wall(at),
            run,
            dag_run,
            from,
            to,
            reason,
            actor: actor.clone(),
        }));
    }

    /// An event about a DAG run (or, with DagRunId(0), a DAG) rather than
    /// one run's transition.
    pub(super) fn dag_event(
        &mut self,
        now: Millis,
        dag_run: DagRunId,
        reason: String,
        actor: &Arc<str>,
    ) {
        self.event(now, None, dag_run, None, None, reason, actor);
    }

    pub(super) fn make_ready(&mut self, now: Millis, id: RunId, reason: String, actor: &Arc<str>) {
        self.make_ready_at(now, now, id, reason, actor);
    }

    /// An attempt interrupted by the daemon stopping: the run goes back to the queue at its old place (its earlier
    /// `ready_at`), ahead of runs that queued after it, as Sidekiq requeues
    /// in-progress jobs at the head on shutdown.
    pub(super) fn requeue_in_place(
        &mut self,
        now: Millis,
        id: RunId,
        reason: String,
        actor: &Arc<str>,
    ) {
        let at = self.runs[&id].ready_at.unwrap_or(now).min(now);
        self.make_ready_at(now, at, id, reason, actor);
    }

    pub(super) fn make_ready_at(
        &mut self,
        now: Millis,
        queue_at: Millis,
        id: RunId,
        reason: String,
        actor: &Arc<str>,
    ) {
        self.transition(now, id, RunState::Ready, reason, actor);
        let r = self.runs.get_mut(&id).expect("exists");
        r.ready_at = Some(queue_at);
        r.next_at = None;
        r.delay = None;
        self.queue_ready(id);
    }

    /// Puts a ready run where it waits to start: its pool's queue, or
    /// `held` while its DAG is paused, or nowhere until its trigger is
    /// committed.
    pub(super) fn queue_ready(&mut self, id: RunId) {
        let r = &self.runs[&id];
        if r.awaits_commit {
            // Queued by `Input::TriggerDurable`.
            return;
        }
        if self.paused.contains(&*r.dag) {
            self.held.entry(r.dag.clone()).or_default().insert(id);
        } else {
            self.pools
                .get_mut(r.pool())
                .expect("a run's pool exists")
                .enqueue(r);
        }
    }

    /// Takes a ready run out of its pool's queue or `held`.
    pub(super) fn leave_ready(&mut self, id: RunId) {
        let r = &self.runs[&id];
        if !self
            .pools
            .get_mut(r.pool())
            .expect("a run's pool exists")
            .dequeue(r)
            && let Some(h) = self.held.get_mut(&r.dag)
        {
            h.remove(&id);
        }
    }

    pub(super) fn leave_delayed(&mut self, id: RunId) {
        self.set_timer(id, TimerKind::Wake, None);
        if self.runs[&id].delay == Some(Delay::RetryBudget) {
            self.budget_waiters.retain(|w| *w != id);
        }
    }

    /// Ends a run that holds no slot (waiting, delayed or ready), cascading
    /// to its downstream.
    pub(super) fn end_unstarted(
        &mut self,
        now: Millis,
        id: RunId,
        to: RunState,
        reason: String,
        actor: &Arc<str>,
    ) {
        match self.runs[&id].state {
            RunState::Ready => self.leave_ready(id),
            RunState::Delayed => self.leave_delayed(id),
            _ => {}
        }
        self.end(now, id, to, reason, actor);
    }

    /// Terminal transition plus its consequences: downstream readiness or
    /// cancellation, DAG-run completion.
    pub(super) fn end(
        &mut self,
        now: Millis,
        id: RunId,
        to: RunState,
        reason: String,
        actor: &Arc<str>,
    ) {
        debug_assert!(to.is_terminal());
        self.transition(now, id, to, reason, actor);
        let wall = self.wall(now);
        let (dag_run, dag) = {
            let r = self.runs.get_mut(&id).expect("exists");
            r.finished_at = Some(wall);
            r.next_at = None;
            r.delay = None;
            (r.dag_run, r.dag.clone())
        };
        self.set_timer(id, TimerKind::Timeout, None);
        self.set_timer(id, TimerKind::Heartbeat, None);
        if let Some(s) = self.active_by_dag.get_mut(&dag) {
            s.remove(&id);
            if s.is_empty() {
                self.active_by_dag.remove(&dag);
            }
        }
        // Push readiness to the reverse-dependency index only.
        let down = self.runs[&id].downstream.clone();
        for d in down {
            let r = self.runs.get_mut(&d).expect("downstream exists");
            if r.state != RunState::Waiting {
                continue;
            }
            if to == RunState::Success {
                r.succeeded_up += 1;
            } else {
                r.failed_up += 1;
            }
            let actor = self.scheduler.clone();
            self.evaluate_waiting(now, d, &actor);
        }
        let dr = self.dag_runs.get_mut(&dag_run).expect("dag run exists");
        dr.unfinished -= 1;
        if dr.unfinished == 0 {
            let states: Vec<RunState> = dr.runs.iter().map(|r| self.runs[r].state).collect();
            let state = if states.iter().all(|s| *s == RunState::Success) {
                DagRunState::Success
            } else if states
                .iter()
                .any(|s| matches!(s, RunState::Failed | RunState::TimedOut))
            {
                DagRunState::Failed
            } else {
                DagRunState::Cancelled
            };
            let dr = self.dag_runs.get_mut(&dag_run).expect("exists");
            dr.state = state;
            dr.finished_at = Some(wall);
            let dag = dr.dag.clone();
            self.dag_event(
                now,
                dag_run,
                format!("DAG run finished: {state:?}").to_lowercase(),
                &self.scheduler.clone(),
            );
            self.finished_order.push_back((wall, dag_run));
            if let Some(set) = self.active_dag_runs.get_mut(&*dag) {
                set.remove(&dag_run);
                if set.is_empty() {
                    self.active_dag_runs.remove(&*dag);
                }
            }
            self.effects.push(Effect::DagRunFinished {
                dag_run,
                dag: dag.clone(),
                state,
            });
            self.on_dag_run_finished(now, &dag, dag_run, state);
        }
    }
}
