//! Start-up from the store, and what the engine forgets once finished.

use super::*;

/// A reattached attempt that ended while no daemon ran: run, attempt,
/// when (engine's clock), exit code, signal.
type EndedMeanwhile = (RunId, u32, Millis, Option<i32>, Option<i32>);

impl Engine {
    /// Forgets DAG runs that finished before `before`: they live on in the
    /// store, and the engine's memory follows the work in flight rather
    /// than the whole history. A run that other runs were linked to as
    /// upstream is remembered by its final state only (`--after` on it and
    /// restored downstream runs resolve against it). Returns how many DAG
    /// runs went.
    ///
    /// Keeps the invariant that every id in a held run's `downstream` names
    /// a held run: an evicted run is unlinked from the upstream runs that
    /// stay (an upstream in another, longer DAG run), so their end, retry
    /// or revival never looks up a run that left.
    pub fn evict_finished(&mut self, before: Millis) -> usize {
        let mut evicted = 0;
        while let Some(&(at, id)) = self.finished_order.front() {
            if at >= before {
                break;
            }
            self.finished_order.pop_front();
            let Some(dr) = self.dag_runs.get(&id) else {
                continue;
            };
            // Reopened by a retry since: it is queued again when it ends.
            if dr.state == DagRunState::Active || dr.finished_at != Some(at) {
                continue;
            }
            self.remove_finished(id);
            evicted += 1;
        }
        evicted
    }

    /// Forgets one finished DAG run now (a cluster: another node may have
    /// retried it since, so the store's copy is the one to read). `false`
    /// if it is not held or not finished.
    pub fn release_finished(&mut self, id: DagRunId) -> bool {
        if self
            .dag_runs
            .get(&id)
            .is_none_or(|dr| dr.state == DagRunState::Active)
        {
            return false;
        }
        self.remove_finished(id);
        true
    }

    /// Removes a finished DAG run and its runs from memory (see
    /// `evict_finished` for what stays).
    fn remove_finished(&mut self, id: DagRunId) {
        {
            let dr = self.dag_runs.remove(&id).expect("checked by the caller");
            for r in &dr.runs {
                let Some(run) = self.runs.remove(r) else {
                    continue;
                };
                for u in &run.upstream {
                    if let Some(up) = self.runs.get_mut(u)
                        && up.dag_run != id
                    {
                        up.downstream.retain(|d| d != r);
                    }
                }
                if run.depended_on {
                    self.external.insert(run.id, run.state);
                }
                self.counts[state_index(run.state)] -= 1;
                self.evicted_counts[state_index(run.state)] += 1;
            }
            if let Some(k) = &dr.unique_key
                && self.unique.get(k) == Some(&id)
            {
                self.unique.remove(k);
            }
        }
    }

    /// Finished runs evicted from memory during this life, by state (the
    /// daemon adds them to what the store held at start-up).
    pub fn evicted_count(&self, state: RunState) -> u64 {
        self.evicted_counts[state_index(state)]
    }

    /// Records the final state of a run that lives only in the store, so
    /// `--after` on it and restored downstream runs can be resolved.
    pub fn note_external(&mut self, run: RunId, state: RunState) {
        if !self.runs.contains_key(&run) {
            self.external.insert(run, state);
        }
    }

    /// Attempts of the earlier life whose processes are still held for the
    /// daemon: the next `restore` keeps their runs running (and reports
    /// each with `Effect::Reattach`) instead of interrupting them.
    pub fn set_reattach(&mut self, attempts: HashMap<(RunId, u32), Reattach>) {
        self.reattach = attempts;
    }

    /// Loads unfinished DAG runs from the store at start-up
    /// (docs/operations.md, "Upgrade"). Runs found `running` from an earlier
    /// life keep running when their attempt is to be reattached
    /// (`set_reattach`); the others get an `interrupted` attempt and go
    /// back to `ready` without consuming a retry. Returns the resulting
    /// effects (events to record, reattach orders).
    pub fn restore(
        &mut self,
        now: Millis,
        dag_runs: Vec<RestoredDagRun>,
        next_run: u64,
        next_dag_run: u64,
    ) -> Vec<Effect> {
        let ended = self.take_in(now, dag_runs);
        self.next_run = self.next_run.max(self.ids.counter_from(next_run));
        self.next_dag_run = self.next_dag_run.max(self.ids.counter_from(next_dag_run));
        // Ends that came while no daemon ran go in before any deadline
        // fires: an attempt that exited before its timeout is not timed out.
        for (run, attempt, at, code, signal) in ended {
            let _ = self.exited(at.min(now), run, attempt, code, signal);
        }
        self.fire_timers(now);
        self.dispatch(now);
        std::mem::take(&mut self.effects)
    }

    /// Takes stored DAG runs into the engine (at start-up, or claimed in a
    /// cluster) and places each unfinished run where its state says.
    /// Returns the reattached attempts that ended while no daemon ran
    /// (run, attempt, when, code, signal), for the caller to apply.
    pub(super) fn take_in(
        &mut self,
        now: Millis,
        mut dag_runs: Vec<RestoredDagRun>,
    ) -> Vec<EndedMeanwhile> {
        let mut reattach = std::mem::take(&mut self.reattach);
        let mut ended = Vec::new();
        dag_runs.sort_by_key(|d| d.id);
        let wall = self.wall(now);
        let mut all = Vec::new();
        for d in dag_runs {
            let dag = d.dag;
            let mut ids = Vec::with_capacity(d.runs.len());
            let mut unfinished = 0;
            let mut runs = d.runs;
            runs.sort_by_key(|r| r.id);
            for r in runs {
                if !r.state.is_terminal() {
                    unfinished += 1;
                    self.active_by_dag
                        .entry(dag.clone())
                        .or_default()
                        .insert(r.id);
                }
                self.counts[state_index(r.state)] += 1;
                ids.push(r.id);
                all.push(r.id);
                self.runs.insert(r.id, r);
            }
            if let Some(k) = &d.unique_key {
                self.unique.insert(k.clone(), d.id);
            }
            if unfinished > 0 {
                self.active_dag_runs
                    .entry(dag.to_string())
                    .or_default()
                    .insert(d.id);
            }
            self.dag_runs.insert(
                d.id,
                DagRun {
                    id: d.id,
                    dag,
                    spec: d.spec,
                    runs: ids,
                    state: if unfinished > 0 {
                        DagRunState::Active
                    } else {
                        d.state
                    },
                    created_at: d.created_at,
                    finished_at: if unfinished > 0 { None } else { Some(wall) },
                    trigger: d.trigger,
                    unique_key: d.unique_key,
                    hook_of: None,
                    unfinished,
                    offered: false,
                },
            );
        }
        self.link_downstream(&all);
        let scheduler = self.scheduler.clone();
        for &id in &all {
            let r = &self.runs[&id];
            let next = r.attempts.len() as u32 + 1;
            if r.state == RunState::Ready
                && self.pools.contains_key(r.pool())
                && let Some(re) = reattach.get(&(id, next)).copied()
            {
                self.record_unrecorded_start(now, id, re);
            }
            let r = self.runs.get_mut(&id).expect("restored");
            let n = r.attempts.len() as u32;
            if r.state == RunState::Running
                && self.pools.contains_key(r.pool())
                && r.attempts.last().is_some_and(|a| a.outcome.is_none())
                && let Some(re) = reattach.remove(&(id, n))
            {
                self.keep_running(now, id, re);
                if let Some((at, code, signal)) = re.ended {
                    ended.push((id, n, at.max(re.spawned), code, signal));
                }
                self.reattached.push((id, n));
                continue;
            }
            let r = self.runs.get_mut(&id).expect("restored");
            if r.state == RunState::Running {
                // Interrupted whatever follows: the process belonged to an
                // earlier life.
                if let Some(a) = r.attempts.last_mut()
                    && a.outcome.is_none()
                {
                    a.outcome = Some(Outcome::Interrupted);
                    a.finished_at = Some(wall);
                }
            }
            if !r.state.is_terminal() && !self.pools.contains_key(r.pool()) {
                // The pool was removed from the config: the run can never
                // start; end it with a reason. No unfinished run is left
                // naming a pool the engine lacks, so queueing never meets one.
                let reason = format!("pool {:?} no longer exists", r.pool());
                self.end(now, id, RunState::Failed, reason, &scheduler);
                continue;
            }
            match r.state {
                RunState::Running => {
                    let n = r.attempts.len();
                    self.requeue_in_place(
                        now,
                        id,
                        format!("attempt {n} interrupted: the daemon stopped while it ran"),
                        &scheduler,
                    );
                }
                RunState::Ready => {
                    // A ready run keeps its place in the queue across lives.
                    r.ready_at.get_or_insert(now);
                    self.queue_ready(id);
                }
                RunState::Delayed => {
                    // `next_at` is wall time; the timer is on the engine's clock.
                    let at = self.runs[&id]
                        .next_at
                        .map_or(now, |at| self.engine_time(at));
                    // A planned start stays one; a retry waits out its
                    // backoff and asks the budget again.
                    let r = self.runs.get_mut(&id).expect("exists");
                    if r.delay != Some(Delay::Jitter) {
                        r.delay = Some(Delay::Backoff);
                    }
                    self.set_timer(id, TimerKind::Wake, Some(at));
                }
                RunState::Waiting => {
                    self.recount_upstream(id);
                    self.evaluate_waiting(now, id, &scheduler);
                }
                _ => {}
            }
        }
        // Not taken: the daemon kills what is left of them.
        self.reattach = reattach;
        ended
    }

    /// The attempts the restore took over so far (`reattached` takes them).
    pub fn reattached_so_far(&self) -> &[(RunId, u32)] {
        &self.reattached
    }

    /// The attempts offered by `set_reattach` that the restore took over
    /// (their processes ran on; ended ones were recorded).
    pub fn reattached(&mut self) -> Vec<(RunId, u32)> {
        self.reattach.clear();
        std::mem::take(&mut self.reattached)
    }

    /// A run found `ready` whose next attempt's process runs all the same:
    /// the earlier life started it and died before the step that did so
    /// was committed. The start is recorded now, so the process is taken
    /// over rather than started a second time.
    fn record_unrecorded_start(&mut self, now: Millis, id: RunId, re: Reattach) {
        // Not queued yet: the restore queues a ready run after this.
        let scheduler = self.scheduler.clone();
        self.transition(
            now,
            id,
            RunState::Running,
            "started by the earlier daemon, whose record of it was not committed: taken over"
                .into(),
            &scheduler,
        );
        let wall = self.wall(re.spawned);
        let node = self.node.clone();
        let r = self.runs.get_mut(&id).expect("restored");
        let n = r.attempts.len() as u32 + 1;
        r.started_at = Some(wall);
        r.message = None;
        r.progress = None;
        r.attempts.push(Attempt::started(n, wall, re.slot, node));
    }

    /// A run found `running` whose process still runs: it keeps its
    /// attempt and slot; its timeout counts from the spawn, its heartbeat
    /// from now (the job could not reach a daemon meanwhile).
    fn keep_running(&mut self, now: Millis, id: RunId, re: Reattach) {
        let r = self.runs.get_mut(&id).expect("restored");
        r.slot = Some(re.slot);
        r.kill = None;
        r.timers.started_mono = Some(re.spawned);
        r.timers.awaiting_spawn = false;
        let n = r.attempts.len() as u32;
        let order = SpawnOrder {
            run: id,
            dag_run: r.dag_run,
            dag: r.dag.clone(),
            attempt: n,
            slot: re.slot,
            spec: r.spec.clone(),
            job_index: r.job_index,
            waited_ms: 0,
        };
        let preemptible = r.job().preemptible;
        let victim = Pool::victim(r);
        let pool = self.pools.get_mut(r.pool()).expect("checked by the caller");
        // A slot above a shrunk pool's size stays held until the attempt
        // ends, as across a reload.
        pool.free.remove(&re.slot);
        pool.held.insert(re.slot);
        pool.running += 1;
        if preemptible {
            pool.victims.insert(victim);
        }
        self.running_total += 1;
        self.arm_attempt(re.spawned, id);
        let heartbeat = self.runs[&id].job().heartbeat;
        self.set_timer(
            id,
            TimerKind::Heartbeat,
            heartbeat.map(|h| now + h.as_millis() as Millis),
        );
        if re.ended.is_none() {
            self.effects.push(Effect::Reattach(order));
        }
    }
}
