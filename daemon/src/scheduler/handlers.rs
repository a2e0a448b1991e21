//! One function per request. Each checks every part of its request before
//! it changes anything, so a refused request has applied nothing.

use std::collections::BTreeSet;
use std::sync::Arc;

use ax_protocol::api::{
    DagView, Done, LogInfoView, PauseAnswer, ReloadAnswer, RunView, ShutdownAnswer, SubmitResult,
    SubscribeAnswer, TriggerOutcome,
};
use ax_protocol::request::Shutdown as ShutdownRequest;
use ax_protocol::request::{
    Cancel, CancelDagRun, DagTarget, Events, GetDag, Heartbeat, ListDags, ListRuns, LogInfo, Retry,
    Trigger,
};
use ax_protocol::{Request, RpcError, codes};
use ax_shared::RunState;

use super::Scheduler;
use super::access::{for_role, owns};
use crate::bus::Peer;
use crate::bus::answer::Answer;
use crate::bus::encoded::Encoded;
use crate::store::{EventQuery, RunQuery, StoreError};
use ax_engine::{DagRunId, Effect, EngineError, Event, Fired, Input, Millis, Reply, RunId, Submit};
use ax_protocol::api::Role;

pub(super) fn bad(msg: impl Into<String>) -> RpcError {
    RpcError::new(codes::INVALID_PARAMS, msg)
}

pub(super) fn engine_err(e: EngineError) -> RpcError {
    RpcError::new(e.code(), e.to_string())
}

pub(crate) fn store_err(e: StoreError) -> RpcError {
    RpcError::new(codes::STORE_ERROR, e.to_string())
}

fn not_found(what: String) -> RpcError {
    RpcError::new(codes::NOT_FOUND, format!("{what} not found"))
}

/// An event about axd or a DAG rather than a run (DAG run 0): a request
/// that changed no run, recorded with who asked.
pub(super) fn dag_event(now: Millis, reason: String, actor: &Arc<str>) -> Effect {
    Effect::Event(Event {
        at: now,
        run: None,
        dag_run: DagRunId(0),
        from: None,
        to: None,
        reason,
        actor: actor.clone(),
    })
}

/// Rows `list_runs` reads from the store at a time.
const LIST_PAGE: usize = 500;

/// A typed answer.
fn wire<T: Into<Answer>>(answer: Result<T, RpcError>) -> Result<Answer, RpcError> {
    answer.map(Into::into)
}

impl Scheduler {
    /// Checks who may do what, then answers the request. Its effects join
    /// the step's.
    pub(super) fn request(
        &mut self,
        now: Millis,
        peer: &Peer,
        request: Request,
        effects: &mut Vec<Effect>,
    ) -> Result<Answer, RpcError> {
        let method = request.method();
        self.authorize(peer, &request)?;
        // The user role sees only their own (docs/users.md).
        let own = (peer.role == Role::User).then(|| peer.user.to_string());
        if self.shutdown_at.is_some()
            && matches!(
                request,
                Request::Submit(_) | Request::Trigger(_) | Request::Retry(_)
            )
        {
            return Err(RpcError::new(codes::SHUTTING_DOWN, "axd is shutting down"));
        }
        // A heartbeat only keeps a running job alive, which must go on
        // while the disk is full; every other write would be lost.
        if request.is_write()
            && !matches!(request, Request::Heartbeat(_) | Request::Shutdown(_))
            && let Some(error) = self.store_fault()
        {
            return Err(RpcError::new(
                codes::STORE_ERROR,
                format!(
                    "{method} not accepted: the store cannot write ({error}); try again when it recovers"
                ),
            ));
        }
        match request {
            Request::Status(_) => Ok(for_role(self.status_with_config(now), peer.role).into()),
            Request::Metrics(_) => Ok(self.metrics_text(now).into()),
            Request::ListRuns(p) => self.list_runs(now, *p, own).map(Answer::List),
            Request::GetRun(p) => wire(self.get_run(now, p.id)),
            Request::ListDags(p) => self.list_dags(now, *p, own).map(Answer::List),
            Request::GetDag(p) => wire(self.get_dag(now, *p)),
            Request::GetDagRun(p) => wire(self.dag_run_view(now, p.id)),
            Request::Submit(p) => wire(self.submit(now, peer, *p, effects)),
            Request::Trigger(p) => wire(self.trigger(now, peer, *p, effects)),
            Request::Cancel(p) => wire(self.cancel(now, peer, *p, effects)),
            Request::CancelDagRun(p) => wire(self.cancel_dag_run(now, peer, *p, effects)),
            Request::Retry(p) => wire(self.retry(now, peer, *p, effects)),
            Request::Pause(p) => wire(self.pause(now, p.0, true, Some(&peer.actor), effects)),
            Request::Resume(p) => wire(self.pause(now, p.0, false, Some(&peer.actor), effects)),
            Request::Reload(_) => wire(self.reload_request(now, peer, effects)),
            Request::Heartbeat(p) => wire(self.heartbeat(now, *p, effects)),
            Request::LogInfo(p) => wire(self.log_info(*p)),
            Request::Events(p) => self.events(*p, own).map(Answer::List),
            Request::ApplyDags(p) => wire(self.apply_dags(now, peer, *p, effects)),
            Request::ExportDag(p) => wire(self.export_dag(peer, *p)),
            Request::RemoveDag(p) => wire(self.remove_dag(now, peer, *p, effects)),
            Request::Shutdown(p) => Ok(self.shutdown_request(peer, *p).into()),
            Request::Subscribe(_) => Ok(SubscribeAnswer {
                status: for_role(self.status(now), peer.role),
            }
            .into()),
            // Answered by the connection itself (`server`).
            Request::Hello(_) | Request::Logs(_) => Err(RpcError::new(
                codes::INTERNAL,
                format!("{method} is answered by the connection"),
            )),
        }
    }

    /// Applies one input for a request: its effects join the step's, its
    /// error becomes the request's answer.
    pub(super) fn apply(
        &mut self,
        now: Millis,
        input: Input,
        effects: &mut Vec<Effect>,
    ) -> Result<Reply, RpcError> {
        let step = self.engine.handle(now, input);
        effects.extend(step.effects);
        step.reply.map_err(engine_err)
    }

    fn list_runs(
        &mut self,
        now: Millis,
        p: ListRuns,
        owner: Option<String>,
    ) -> Result<Encoded, RpcError> {
        let mut q = RunQuery {
            limit: 50,
            owner,
            ..RunQuery::default()
        };
        if let Some(filter) = &p.state {
            for name in filter.names() {
                q.states.push(RunState::parse(name).ok_or_else(|| {
                    bad(format!("unknown state {name:?} (waiting, delayed, ready, running, success, failed, timed_out, cancelled)"))
                })?);
            }
        }
        q.dag = p.dag;
        q.text = p.filter.filter(|t| !t.is_empty());
        q.dag_run = p.dag_run;
        if let Some(limit) = p.limit {
            if !(1..=10_000).contains(&limit) {
                return Err(bad("`limit` must be 1-10000"));
            }
            q.limit = limit as usize;
        }
        q.before = p.before;
        q.without_hooks =
            p.hooks == Some(false) && q.dag.is_none() && q.dag_run.is_none() && q.text.is_none();
        // Read in pages, so that an answer cut at the frame's size has
        // cost about a frame's worth of rows, whatever `limit` asked.
        let mut out = Encoded::default();
        let mut left = q.limit;
        while left > 0 {
            q.limit = left.min(LIST_PAGE);
            let views = self.store.list_runs(&q).map_err(store_err)?;
            let full_page = views.len() == q.limit;
            for v in views {
                let id = v.id;
                if !out.push(&self.live(v, now))? {
                    let next = q.before.map(|b| serde_json::json!({ "before": b }));
                    out.cut(next);
                    return Ok(out);
                }
                q.before = Some(id);
                left -= 1;
            }
            if !full_page {
                break;
            }
        }
        Ok(out)
    }

    fn get_run(&mut self, now: Millis, id: u64) -> Result<RunView, RpcError> {
        let view = self
            .store
            .get_run(id)
            .map_err(store_err)?
            .ok_or_else(|| not_found(format!("run {id}")))?;
        let mut view = self.live(view, now);
        if view.user.is_none() {
            let spec = self.store.dag_run_spec(view.dag_run).map_err(store_err)?;
            let job = spec
                .as_ref()
                .and_then(|s| s.jobs.iter().find(|j| j.id == view.job));
            view.user = job.map(super::views::job_user);
        }
        view.events = Some(self.store.run_events(id, 1000).map_err(store_err)?);
        Ok(view)
    }

    fn list_dags(
        &mut self,
        now: Millis,
        p: ListDags,
        owner: Option<String>,
    ) -> Result<Encoded, RpcError> {
        let last = self.store.last_dag_runs().map_err(store_err)?;
        let active = self.active_since();
        let versions = self.nodes.as_ref().and_then(|n| n.versions());
        let mut out = Encoded::default();
        let mut last_name: Option<&str> = None;
        // The registry iterates in name order.
        for (n, e) in self
            .registry
            .iter()
            .filter(|(n, _)| p.after.as_ref().is_none_or(|a| n.as_str() > a.as_str()))
            .filter(|(n, _)| owner.as_deref().is_none_or(|o| owns(o, n)))
        {
            let view = self.dag_view(now, n, e, &last, &active, versions.as_ref());
            if !out.push(&view)? {
                out.cut(last_name.map(|l| serde_json::json!({ "after": l })));
                break;
            }
            last_name = Some(n);
        }
        Ok(out)
    }

    fn get_dag(&mut self, now: Millis, p: GetDag) -> Result<DagView, RpcError> {
        let last = self.store.last_dag_runs().map_err(store_err)?;
        let entry = self
            .registry
            .get(&p.name)
            .ok_or_else(|| not_found(format!("DAG {:?}", p.name)))?;
        let versions = self.nodes.as_ref().and_then(|n| n.versions());
        Ok(self.dag_view(
            now,
            &p.name,
            entry,
            &last,
            &self.active_since(),
            versions.as_ref(),
        ))
    }

    /// Starts a DAG run and names what it created.
    pub(super) fn create(
        &mut self,
        now: Millis,
        submit: Submit,
        effects: &mut Vec<Effect>,
    ) -> Result<SubmitResult, RpcError> {
        submitted(self.apply(now, Input::Submit(submit), effects)?)
    }

    fn trigger(
        &mut self,
        now: Millis,
        peer: &Peer,
        p: Trigger,
        effects: &mut Vec<Effect>,
    ) -> Result<SubmitResult, RpcError> {
        let name = p.dag;
        let entry = self
            .registry
            .get(&name)
            .ok_or_else(|| not_found(format!("DAG {name:?}")))?;
        entry.spec.as_ref().ok_or_else(|| {
            RpcError::new(
                codes::INVALID_STATE,
                format!(
                    "DAG {name:?} has no valid version: {}",
                    entry
                        .error
                        .as_ref()
                        .map(|e| e.to_string())
                        .unwrap_or_default()
                ),
            )
        })?;
        // The engine holds the same definition as the registry; the checks
        // above give the precise error for a DAG it does not hold.
        let input = Input::Trigger {
            dag: name,
            actor: peer.actor.clone(),
            force: p.force.unwrap_or(false),
        };
        let fired = match self.apply(now, input, effects)? {
            Reply::Triggered(fired) => *fired,
            other => {
                return Err(RpcError::new(
                    codes::INTERNAL,
                    format!("trigger answered {other:?}"),
                ));
            }
        };
        let (reply, outcome) = match fired {
            Fired::Started { reply, replaced } if replaced.is_empty() => {
                (reply, TriggerOutcome::Started)
            }
            Fired::Started { reply, replaced } => (
                reply,
                TriggerOutcome::Replaced {
                    dag_runs: replaced.iter().map(|d| d.0).collect(),
                },
            ),
            Fired::Queued { behind } => {
                return Ok(SubmitResult {
                    trigger: Some(TriggerOutcome::Queued { behind: behind.0 }),
                    ..SubmitResult::default()
                });
            }
            Fired::Skipped { active } => {
                return Ok(SubmitResult {
                    trigger: Some(TriggerOutcome::Skipped { active: active.0 }),
                    ..SubmitResult::default()
                });
            }
            Fired::Failed(e) => return Err(engine_err(e)),
        };
        let mut answer = submitted(reply)?;
        answer.trigger = Some(outcome);
        Ok(answer)
    }

    /// `id`: one run. `ids`: all of them or none — every id must name a
    /// run that has not ended, or nothing is cancelled.
    fn cancel(
        &mut self,
        now: Millis,
        peer: &Peer,
        p: Cancel,
        effects: &mut Vec<Effect>,
    ) -> Result<Done, RpcError> {
        // Cancelling an upstream run cancels its downstream runs: in a list,
        // one named later may have ended by then, which is no error.
        let in_list = p.ids.is_some();
        let ids: Vec<u64> = match (p.ids, p.id) {
            (Some(ids), _) => {
                for (i, id) in ids.iter().enumerate() {
                    match self.engine.run(RunId(*id)) {
                        None => {
                            return Err(bad(format!("cancel: `ids[{i}]`: run {id} not found")));
                        }
                        Some(r) if r.state.is_terminal() => {
                            return Err(bad(format!(
                                "cancel: `ids[{i}]`: run {id} already ended ({})",
                                r.state
                            )));
                        }
                        Some(_) => {}
                    }
                }
                let mut seen = BTreeSet::new();
                ids.into_iter().filter(|id| seen.insert(*id)).collect()
            }
            (None, Some(id)) => {
                // In a cluster the run may wait to be claimed, or have
                // been run by another node.
                if self.claimer.is_some() {
                    self.hold_dag_run_of(now, id, effects)?;
                }
                vec![id]
            }
            (None, None) => return Err(bad("`id` must be a run id (a positive integer)")),
        };
        for id in ids {
            let ended = self
                .engine
                .run(RunId(id))
                .is_some_and(|r| r.state.is_terminal());
            if in_list && ended {
                continue;
            }
            let input = Input::Cancel {
                run: RunId(id),
                actor: peer.actor.clone(),
            };
            self.apply(now, input, effects)?;
        }
        Ok(Done::OK)
    }

    /// Makes sure the engine holds the DAG run of run `id`: one it let go
    /// of (finished, or in a cluster offered or run by another node) is
    /// loaded back from the store, once this node owns it. A DAG run
    /// another live node is running stays there: the error names it.
    fn hold_dag_run_of(
        &mut self,
        now: Millis,
        id: u64,
        effects: &mut Vec<Effect>,
    ) -> Result<(), RpcError> {
        if self.engine.run(RunId(id)).is_some() {
            return Ok(());
        }
        let view = self
            .store
            .get_run(id)
            .map_err(store_err)?
            .ok_or_else(|| not_found(format!("run {id}")))?;
        self.hold_dag_run(now, view.dag_run, effects)
            .map_err(|e| e.about(&format!("run {id} belongs to ")))
    }

    /// Loads DAG run `id` back from the store into the engine, once this
    /// node owns it (see `hold_dag_run_of`).
    fn hold_dag_run(
        &mut self,
        now: Millis,
        id: u64,
        effects: &mut Vec<Effect>,
    ) -> Result<(), HeldElsewhere> {
        if let Err(owner) = self.store.take_dag_run(id).map_err(store_err)? {
            return Err(HeldElsewhere::Node {
                what: format!("DAG run {id}"),
                owner,
            });
        }
        self.pin(id);
        let dr = self
            .store
            .load_dag_run(id)
            .map_err(store_err)?
            .ok_or_else(|| not_found(format!("DAG run {id}")))?;
        effects.extend(self.engine.restore(now, vec![dr], 0, 0));
        self.refresh_counts();
        Ok(())
    }

    fn cancel_dag_run(
        &mut self,
        now: Millis,
        peer: &Peer,
        p: CancelDagRun,
        effects: &mut Vec<Effect>,
    ) -> Result<Done, RpcError> {
        // In a cluster the DAG run may wait to be claimed, or have been
        // run by another node.
        if self.engine.dag_run(DagRunId(p.id)).is_none() {
            if self.claimer.is_some() {
                self.hold_dag_run(now, p.id, effects)
                    .map_err(|e| e.about("cannot cancel here "))?;
            } else {
                // One node alone holds every active DAG run: one only the
                // store has (evicted, or from before a restart) has ended,
                // and cancelling it changes nothing.
                self.store
                    .dag_run_spec(p.id)
                    .map_err(store_err)?
                    .ok_or_else(|| not_found(format!("DAG run {}", p.id)))?;
                return Ok(Done::OK);
            }
        }
        let input = Input::CancelDagRun {
            dag_run: DagRunId(p.id),
            actor: peer.actor.clone(),
        };
        self.apply(now, input, effects)?;
        Ok(Done::OK)
    }

    fn retry(
        &mut self,
        now: Millis,
        peer: &Peer,
        p: Retry,
        effects: &mut Vec<Effect>,
    ) -> Result<Done, RpcError> {
        let id = p.id;
        // In a cluster a finished DAG run held here may have been retried
        // through another node since: the store's copy is the one to use,
        // once this node owns it.
        if self.claimer.is_some()
            && let Some(dr) = self.engine.run(RunId(id)).map(|r| r.dag_run)
            && self.engine.release_finished(dr)
        {
            self.refresh_counts();
        }
        self.hold_dag_run_of(now, id, effects)?;
        let input = Input::Retry {
            run: RunId(id),
            actor: peer.actor.clone(),
        };
        self.apply(now, input, effects)?;
        Ok(Done::OK)
    }

    /// Pauses or resumes the target's DAGs. Each DAG it changes gets a
    /// DAG-level event naming `actor` (the audit trail, docs/operations.md,
    /// "Files and logs"); `None` records none, for a change another node
    /// already recorded.
    fn pause(
        &mut self,
        now: Millis,
        target: DagTarget,
        paused: bool,
        actor: Option<&Arc<str>>,
        effects: &mut Vec<Effect>,
    ) -> Result<PauseAnswer, RpcError> {
        let names: Vec<String> = match (target.all, target.dag) {
            (true, _) => self.registry.names(),
            (false, Some(name)) if self.registry.get(&name).is_some() => vec![name],
            (false, Some(name)) => return Err(not_found(format!("DAG {name:?}"))),
            (false, None) => return Err(bad("`dag` must be a string")),
        };
        for n in &names {
            let changes = self.engine.is_paused(n) != paused;
            let input = if paused {
                Input::Pause { dag: n.clone() }
            } else {
                Input::Resume { dag: n.clone() }
            };
            effects.extend(self.engine.handle(now, input).effects);
            self.registry.note_paused(n, paused);
            if changes && let Some(actor) = actor {
                let done = if paused { "paused" } else { "resumed" };
                effects.push(dag_event(now, format!("DAG {n} {done}"), actor));
            }
        }
        Ok(PauseAnswer {
            ok: true,
            dags: names,
        })
    }

    /// Pauses and resumes here what another node paused or resumed: the
    /// DAGs that entered or left the stored set between two beats.
    pub(super) fn follow_paused(
        &mut self,
        now: Millis,
        before: &[String],
        after: &[String],
        effects: &mut Vec<Effect>,
    ) {
        let entered = after
            .iter()
            .filter(|d| !before.contains(d))
            .map(|d| (d, true));
        let left = before
            .iter()
            .filter(|d| !after.contains(d))
            .map(|d| (d, false));
        for (dag, paused) in entered.chain(left) {
            if self.registry.get(dag).is_none() || self.engine.is_paused(dag) == paused {
                continue;
            }
            let target = DagTarget {
                all: false,
                dag: Some(dag.clone()),
            };
            let _ = self.pause(now, target, paused, None, effects);
        }
    }

    /// `shutdown`: axd stops once this answer is sent; its jobs keep
    /// running unless `stop_jobs`.
    fn shutdown_request(&mut self, peer: &Peer, p: ShutdownRequest) -> ShutdownAnswer {
        tracing::info!(
            "shutdown asked by {}{}",
            peer.actor,
            if p.stop_jobs {
                ", stopping the jobs"
            } else {
                ""
            }
        );
        if p.stop_jobs {
            self.shutdown.drain_stopping_jobs();
        } else {
            self.shutdown.drain();
        }
        ShutdownAnswer {
            stop_jobs: self.shutdown.stops_jobs(),
            running: self.engine.running_total(),
        }
    }

    /// `reload`: `axd.toml` and the jobs folder, read again.
    fn reload_request(
        &mut self,
        now: Millis,
        peer: &Peer,
        effects: &mut Vec<Effect>,
    ) -> Result<ReloadAnswer, RpcError> {
        let not_applied = self.reload(now, &peer.actor, effects)?;
        let answer = ReloadAnswer {
            ok: true,
            dags: self.registry.len(),
            errors: self.registry.errors().len(),
            not_applied: not_applied.into_iter().map(String::from).collect(),
        };
        Ok(answer)
    }

    fn heartbeat(
        &mut self,
        now: Millis,
        p: Heartbeat,
        effects: &mut Vec<Effect>,
    ) -> Result<Done, RpcError> {
        if let Some(progress) = p.progress
            && !(0.0..=1.0).contains(&progress)
        {
            return Err(bad(format!("progress {progress} must be between 0 and 1")));
        }
        let input = Input::Beat {
            run: RunId(p.run),
            message: p.message,
            progress: p.progress,
        };
        self.apply(now, input, effects)?;
        Ok(Done::OK)
    }

    fn log_info(&mut self, p: LogInfo) -> Result<LogInfoView, RpcError> {
        let id = p.run;
        // The attempt asked about: its number, or the last one's.
        let wanted = |count: usize| p.attempt.unwrap_or(count as u64);
        let (attempts, running, node) = match self.engine.run(RunId(id)) {
            Some(r) => {
                let n = wanted(r.attempts.len());
                let node = r.attempts.iter().find(|a| u64::from(a.n) == n);
                let node = node.and_then(|a| a.node.clone());
                (r.attempts.len() as u32, r.state == RunState::Running, node)
            }
            None => match self.store.get_run(id).map_err(store_err)? {
                Some(v) => {
                    let n = wanted(v.attempts.len());
                    let node = v.attempts.iter().find(|a| u64::from(a.n) == n);
                    let node = node.and_then(|a| a.node.clone());
                    (v.attempts.len() as u32, v.state == RunState::Running, node)
                }
                None => return Err(not_found(format!("run {id}"))),
            },
        };
        Ok(LogInfoView {
            attempts,
            running,
            node,
        })
    }

    fn events(&mut self, p: Events, owner: Option<String>) -> Result<Encoded, RpcError> {
        let query = EventQuery {
            after: p.after.unwrap_or(0),
            limit: p.limit.unwrap_or(1000).min(10_000) as usize,
            run: p.run,
            dag: p.dag,
            actor: p.actor,
            since: p.since,
            newest: p.newest.unwrap_or(false),
            owner,
        };
        let events = self.store.events(&query).map_err(store_err)?;
        let mut out = Encoded::default();
        let mut last_seq = None;
        for e in &events {
            if !out.push(e)? {
                // Oldest first: what follows comes after the last one
                // sent. The newest `limit` have no such continuation.
                let next = last_seq
                    .filter(|_| !query.newest)
                    .map(|seq: i64| serde_json::json!({ "after": seq }));
                out.cut(next);
                break;
            }
            last_seq = Some(e.seq);
        }
        Ok(out)
    }
}

/// The answer for a reply that created (or deduplicated to) a DAG run.
fn submitted(reply: Reply) -> Result<SubmitResult, RpcError> {
    match reply {
        Reply::Submitted {
            dag_run,
            runs,
            deduplicated,
        } => Ok(SubmitResult {
            dag_run: dag_run.0,
            runs: runs.iter().map(|r| r.0).collect(),
            deduplicated,
            trigger: None,
        }),
        other => Err(RpcError::new(
            codes::INTERNAL,
            format!("submit gave no ids: {other:?}"),
        )),
    }
}

/// Why a DAG run could not be loaded here.
enum HeldElsewhere {
    /// Another live node is running it.
    Node {
        what: String,
        owner: String,
    },
    Rpc(RpcError),
}

impl From<RpcError> for HeldElsewhere {
    fn from(e: RpcError) -> HeldElsewhere {
        HeldElsewhere::Rpc(e)
    }
}

impl HeldElsewhere {
    /// The error for the client, `prefix` naming what was asked for.
    fn about(self, prefix: &str) -> RpcError {
        match self {
            HeldElsewhere::Node { what, owner } => RpcError::new(
                codes::INVALID_STATE,
                format!("{prefix}{what}, which node {owner} is running: ask that node"),
            ),
            HeldElsewhere::Rpc(e) => e,
        }
    }
}
