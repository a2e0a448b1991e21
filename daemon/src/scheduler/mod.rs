//! The scheduler thread: the one owner of the engine and the store's read
//! connection.
//!
//! It sleeps until the engine's next deadline or the next message
//! (`recv_timeout`), then takes every message that is waiting and applies
//! them all to the engine as one step. It hands the step's spawn and kill
//! orders to the executor at once, and the step's changes, with the answers
//! and notifications that depend on them, to the writer thread (`writer`),
//! which sends those only once the step is durable.
//!
//! Requests are answered by `handlers` (one function per request), views
//! built by `views`, DAGs kept by `registry`.

mod handlers;
mod registry;
mod submit;
mod views;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, SyncSender};
use std::time::Duration;

use ax_shared::RunState;
use ax_shared::api::Role;
use ax_shared::protocol::{Method, Request, RpcError, codes};
use serde_json::Value;
use tokio::sync::{broadcast, oneshot};

use crate::config::Config;
use crate::engine::{DagRun, DagRunId, Effect, Engine, Input, KillReason, Millis, RunId};
use crate::executor::{ExecEvent, Executor};
use crate::shutdown::{Phase, Shutdown};
use crate::store::{Commit, Store};
use crate::time::now_ms;
use crate::writer::{Fault, ReplyTo, Step};
use registry::{DagRegistry, Define};

/// Who is asking.
#[derive(Clone, Debug)]
pub struct Peer {
    pub role: Role,
    pub actor: Arc<str>,
}

pub enum Msg {
    Request {
        peer: Peer,
        request: Request,
        reply: ReplyTo,
    },
    Exec(ExecEvent),
    /// Look at the shutdown value (it has changed).
    Wake,
    Reload,
    /// The jobs folder changed.
    Rescan,
    /// The writer committed the step that created these triggered DAG
    /// runs: they may start.
    TriggersDurable(Vec<DagRunId>),
    /// The claimer claimed these DAG runs for this node (a cluster);
    /// `done` is dropped once they are adopted and the new load published.
    Adopt {
        claimed: crate::store::postgres::Claimed,
        done: Sender<()>,
    },
    /// The pool slots this node may use from now on (a cluster); `done`
    /// is dropped once applied and the new state published.
    Leases {
        pool: String,
        slots: Vec<u32>,
        done: Sender<()>,
    },
    /// The stored set of paused DAGs changed (another node paused or
    /// resumed some): what it was at the last beat, and now.
    Paused {
        before: Vec<String>,
        now: Vec<String>,
    },
    /// This node became the cron leader, with the stored cron marks and
    /// active DAG runs, or stopped being it.
    Lead {
        leader: bool,
        leading: crate::store::postgres::Leading,
    },
    /// The highest run and DAG run ids any node has stored (a cluster).
    IdsSeen {
        run: u64,
        dag_run: u64,
    },
    /// Events other nodes committed (a cluster), for this node's
    /// subscribers.
    RemoteEvents(Vec<ax_shared::api::EventView>),
    /// Watched DAG runs of other nodes ended (a cluster); `done` is
    /// dropped once applied and what is still watched published.
    EndedElsewhere {
        dag_runs: Vec<DagRunId>,
        done: Sender<()>,
    },
}

/// What the socket server needs to talk to the scheduler.
#[derive(Clone)]
pub struct Handle {
    pub tx: Sender<Msg>,
    pub notify: broadcast::Sender<Arc<str>>,
    pub log_dir: PathBuf,
    /// The connection counts the socket server keeps.
    pub metrics: crate::metrics::Shared,
    /// In a cluster: where the logs of attempts that ran on other nodes
    /// are read.
    pub remote_logs: Option<RemoteLogs>,
}

/// The store's shipped logs, and this node's id (its own attempts' logs
/// are its files).
#[derive(Clone)]
pub struct RemoteLogs {
    pub logs: crate::store::postgres::PgLogs,
    pub node: Arc<str>,
}

fn shutting_down() -> RpcError {
    RpcError::new(codes::SHUTTING_DOWN, "axd is shutting down")
}

impl Handle {
    /// One request, answered as it goes on the wire.
    pub async fn call(&self, peer: &Peer, request: Request) -> Result<Value, RpcError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Msg::Request {
                peer: peer.clone(),
                request,
                reply,
            })
            .map_err(|_| shutting_down())?;
        rx.await.map_err(|_| shutting_down())?
    }

    /// One typed request, for the daemon's own use (`logs`, the watchdog).
    pub async fn ask<M: Method>(&self, peer: &Peer, params: M) -> Result<M::Answer, RpcError> {
        let v = self.call(peer, params.into()).await?;
        serde_json::from_value(v).map_err(|e| RpcError::new(codes::INTERNAL, e.to_string()))
    }
}

/// What a step's effects change in the store: the DAG runs and runs they
/// touched (as the engine now has them), their events and cron marks.
pub fn commit_of<'a>(engine: &'a Engine, effects: &'a [Effect]) -> Commit<'a> {
    let mut runs: BTreeSet<RunId> = BTreeSet::new();
    let mut dag_runs: BTreeSet<DagRunId> = BTreeSet::new();
    let mut events = Vec::new();
    let mut cron_marks = Vec::new();
    let mut trigger_queues = Vec::new();
    for e in effects {
        match e {
            Effect::CronMark { dag, slot, .. } => cron_marks.push((dag.clone(), *slot)),
            Effect::TriggerQueue { dag, queue } => {
                trigger_queues.push((dag.clone(), queue.clone()));
            }
            Effect::Event(ev) => {
                if let Some(r) = ev.run {
                    runs.insert(r);
                }
                dag_runs.insert(ev.dag_run);
                events.push(ev);
            }
            Effect::Progress { run } | Effect::Persist { run } => {
                runs.insert(*run);
            }
            Effect::Spawn(o) => {
                runs.insert(o.run);
            }
            _ => {}
        }
    }
    Commit {
        dag_runs: dag_runs.iter().filter_map(|d| engine.dag_run(*d)).collect(),
        runs: runs.iter().filter_map(|r| engine.run(*r)).collect(),
        events,
        cron_marks,
        trigger_queues,
        ..Commit::default()
    }
}

/// How long a finished DAG run stays in the engine's memory (the store
/// keeps it; a retry loads it back).
const EVICT_AFTER: Millis = 10 * 60_000;

/// How often the pruner is sent an order.
const PRUNE_EVERY: Millis = 3_600_000;

/// Messages taken into one step at most.
const MAX_BATCH: usize = 4096;

/// What the scheduler is given at start.
pub struct Parts {
    pub cfg: Config,
    pub config_path: Option<PathBuf>,
    pub engine: Engine,
    pub store: Box<dyn Store>,
    pub exec: Executor,
    pub notify: broadcast::Sender<Arc<str>>,
    /// Counts of finished runs that live only in the store.
    pub stored_terminal: BTreeMap<RunState, u64>,
    /// The writer thread's queue (`writer::run`).
    pub writer: SyncSender<Step>,
    pub fault: Fault,
    pub shutdown: Shutdown,
    /// The pruner thread's orders, reports, pins and sizes.
    pub retention: crate::retention::Link,
    /// A sender on the queue `run` reads.
    pub own_queue: Sender<Msg>,
    pub metrics: crate::metrics::Metrics,
    /// The node registry's last snapshot (PostgreSQL store only).
    pub nodes: Option<crate::cluster::Registry>,
    /// What the claimer thread is told of this node's load (a cluster).
    pub claimer: Option<crate::claimer::Link>,
}

pub struct Scheduler {
    cfg: Config,
    config_path: Option<PathBuf>,
    engine: Engine,
    store: Box<dyn Store>,
    registry: DagRegistry,
    exec: Executor,
    notify: broadcast::Sender<Arc<str>>,
    started: std::time::Instant,
    stored_terminal: BTreeMap<RunState, u64>,
    shutdown: Shutdown,
    /// Set once shutdown began: the time by which every job must be gone.
    shutdown_at: Option<Millis>,
    last_evict: Millis,
    last_prune: Millis,
    /// This thread's own queue, for the writer to say when triggered DAG
    /// runs are durable.
    own_queue: Sender<Msg>,
    metrics: crate::metrics::Metrics,
    writer: SyncSender<Step>,
    /// Set by the writer while the store refuses writes (disk full).
    fault: Fault,
    retention: crate::retention::Link,
    /// Runs the pruner deleted since counts were last read from the store;
    /// `status` subtracts them.
    pruned: BTreeMap<RunState, u64>,
    nodes: Option<crate::cluster::Registry>,
    claimer: Option<crate::claimer::Link>,
}

type Answers = Vec<(ReplyTo, Result<Value, RpcError>)>;

impl Scheduler {
    pub fn new(parts: Parts) -> Scheduler {
        Scheduler {
            cfg: parts.cfg,
            config_path: parts.config_path,
            engine: parts.engine,
            store: parts.store,
            registry: DagRegistry::default(),
            exec: parts.exec,
            notify: parts.notify,
            started: crate::time::monotonic(),
            stored_terminal: parts.stored_terminal,
            shutdown: parts.shutdown,
            shutdown_at: None,
            // The first step evicts and sends the first pruning order.
            last_evict: 0,
            last_prune: 0,
            own_queue: parts.own_queue,
            metrics: parts.metrics,
            writer: parts.writer,
            fault: parts.fault,
            retention: parts.retention,
            pruned: BTreeMap::new(),
            nodes: parts.nodes,
            claimer: parts.claimer,
        }
    }

    pub fn pool_names(&self) -> Vec<String> {
        self.cfg.pools.keys().cloned().collect()
    }

    fn store_fault(&self) -> Option<String> {
        self.fault.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Loads the jobs folder at start-up: every DAG is given to the engine
    /// with the cron watermark the store kept for it.
    pub fn load_jobs(
        &mut self,
        now: Millis,
        actor: &Arc<str>,
        watermarks: &HashMap<String, i64>,
    ) -> Vec<Effect> {
        match self.store.load_dag_defs() {
            // In a cluster `dag_defs` is the last version any node loaded:
            // only one from a file of this node's own folder is its own.
            Ok(mut defs) => {
                defs.retain(|d| std::path::Path::new(&d.file).starts_with(&self.cfg.jobs_dir));
                self.registry.restore_last_good(defs)
            }
            Err(e) => tracing::warn!("cannot read the last good DAG versions: {e}"),
        }
        let define = Define::All { watermarks };
        self.registry
            .rescan(&mut self.engine, &self.cfg, now, actor, define)
    }

    /// Scans the jobs folder again (reload, watcher).
    fn rescan_jobs(&mut self, now: Millis, actor: &Arc<str>) -> Vec<Effect> {
        self.rescan_jobs_defining(now, actor, false)
    }

    /// Scans the jobs folder again; with `all`, every DAG is defined anew
    /// (their cron watermarks kept), not only the changed ones.
    fn rescan_jobs_defining(&mut self, now: Millis, actor: &Arc<str>, all: bool) -> Vec<Effect> {
        let kept = HashMap::new();
        let define = if all {
            Define::All { watermarks: &kept }
        } else {
            Define::Changed
        };
        self.registry
            .rescan(&mut self.engine, &self.cfg, now, actor, define)
    }

    /// The thread body: runs until shutdown completes. Dropping the
    /// scheduler closes the writer's queue; the writer then writes what it
    /// holds and ends.
    pub fn run(mut self, rx: Receiver<Msg>, initial: Vec<Effect>) {
        let mut carried = initial;
        loop {
            // Start-up effects are processed at once.
            let wait = if carried.is_empty() {
                self.wait()
            } else {
                Duration::ZERO
            };
            let first = match rx.recv_timeout(wait) {
                Ok(m) => Some(m),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            };
            let mut batch: Vec<Msg> = first.into_iter().collect();
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(m) => batch.push(m),
                    Err(_) => break,
                }
            }
            let mut effects = std::mem::take(&mut carried);
            self.step(now_ms(), batch, &mut effects);
            if self.finished() {
                return;
            }
        }
    }

    /// How long to sleep: until the engine's next deadline, the shutdown
    /// deadline or the next housekeeping, whichever is first.
    fn wait(&self) -> Duration {
        let now = now_ms();
        let until = |t: Millis| Duration::from_millis((t - now).max(0) as u64);
        [
            self.engine.next_wakeup(),
            self.shutdown_at,
            Some(self.last_evict + 60_000),
        ]
        .into_iter()
        .flatten()
        .map(until)
        .min()
        .unwrap_or(Duration::MAX)
    }

    /// One step: every message of the batch applied, then the orders out,
    /// then the changes to the writer.
    fn step(&mut self, now: Millis, batch: Vec<Msg>, effects: &mut Vec<Effect>) {
        // Answers to requests that changed nothing (reads, refusals, and
        // heartbeats, which change only a deadline in memory) never wait
        // for the store; the others are sent once written.
        let mut durable: Answers = Vec::new();
        let mut immediate: Answers = Vec::new();
        // Claims adopted in this step: told once the new load is known.
        let mut adopted: Vec<Sender<()>> = Vec::new();
        effects.extend(self.engine.handle(now, Input::Tick).effects);
        self.obey_shutdown(now, effects);
        for msg in batch {
            match msg {
                Msg::Request {
                    peer,
                    request,
                    reply,
                } => {
                    let waits = request.is_write() && !matches!(request, Request::Heartbeat(_));
                    let answer = self.request(now, &peer, request, effects);
                    if answer.is_ok() && waits {
                        durable.push((reply, answer));
                    } else {
                        immediate.push((reply, answer));
                    }
                }
                Msg::Exec(input) => {
                    if let Input::Exited { run, attempt, .. }
                    | Input::SpawnFailed { run, attempt, .. } = &input
                    {
                        self.exec.ended(*run, *attempt);
                    }
                    effects.extend(self.engine.handle(now, input).effects);
                }
                Msg::Wake => self.obey_shutdown(now, effects),
                Msg::TriggersDurable(dag_runs) => {
                    let input = Input::TriggerDurable { dag_runs };
                    effects.extend(self.engine.handle(now, input).effects);
                }
                Msg::Rescan => {
                    let actor: Arc<str> = Arc::from("watcher");
                    effects.extend(self.rescan_jobs(now, &actor));
                }
                Msg::Adopt { claimed, done } => {
                    let input = Input::Adopt {
                        dag_runs: claimed.dag_runs,
                        external: claimed.external,
                    };
                    effects.extend(self.engine.handle(now, input).effects);
                    adopted.push(done);
                }
                Msg::Leases { pool, slots, done } => {
                    let input = Input::Leases { pool, slots };
                    effects.extend(self.engine.handle(now, input).effects);
                    adopted.push(done);
                }
                Msg::Paused {
                    before,
                    now: paused,
                } => {
                    self.follow_paused(now, &before, &paused, effects);
                }
                Msg::Lead { leader, leading } => {
                    if leader {
                        tracing::info!("this node is now the cluster's cron leader");
                    } else {
                        tracing::warn!(
                            "this node is no longer the cron leader (its lock's connection broke)"
                        );
                    }
                    let input = Input::Lead {
                        leader,
                        marks: leading.marks,
                        active: leading
                            .active
                            .into_iter()
                            .map(|(dag, id)| (dag, DagRunId(id as u64)))
                            .collect(),
                    };
                    effects.extend(self.engine.handle(now, input).effects);
                }
                Msg::RemoteEvents(events) => self.announce_remote(now, events),
                Msg::IdsSeen { run, dag_run } => self.engine.skip_ids_past(run, dag_run),
                Msg::EndedElsewhere { dag_runs, done } => {
                    let input = Input::EndedElsewhere { dag_runs };
                    effects.extend(self.engine.handle(now, input).effects);
                    adopted.push(done);
                }
                Msg::Reload => {
                    let actor: Arc<str> = Arc::from("signal SIGHUP");
                    if let Err(e) = self.reload(now, &actor, effects) {
                        tracing::error!("reload refused, the running config stays: {}", e.message);
                    }
                }
            }
        }
        // Spawn and kill orders go out before the step is durable, so
        // processes start while the writer thread makes it so (the fsync
        // is off the start path, and off this thread). A crash in that
        // window leaves the store saying `ready`: the run is started again
        // after the restart, as for any interrupted attempt, and the
        // PDEATHSIG of the spawner thread has already killed the process.
        // Clients hear of the step (answers to writes, notifications) only
        // after the commit. DAG runs created by a trigger are the
        // exception: their runs start only after the commit
        // (`on_commit_of_triggers`).
        self.metrics.observe(now, effects);
        self.execute(effects);
        for (reply, answer) in immediate {
            let _ = reply.send(answer);
        }
        self.write(now, effects, durable);
        // The writer has the offered DAG runs: some node claims them.
        self.engine.forget_offered();
        if let Some(claimer) = &self.claimer {
            if self.shutdown_at.is_some() {
                claimer.close();
            } else {
                let queued: u32 = self.engine.pool_queued().iter().map(|(_, n)| n).sum();
                let pools = self.engine.pool_leases();
                claimer.watch(
                    self.engine
                        .watched_elsewhere()
                        .iter()
                        .map(|d| d.0)
                        .collect(),
                );
                claimer.publish(self.engine.running_total() + queued, pools);
            }
        }
        drop(adopted);
        self.maintain(now_ms());
    }

    /// Begins shutdown once it is asked for: no more dispatch, running jobs
    /// are told to stop.
    fn obey_shutdown(&mut self, now: Millis, effects: &mut Vec<Effect>) {
        if self.shutdown_at.is_some() || self.shutdown.phase() == Phase::Serving {
            return;
        }
        tracing::info!("shutting down: stopping dispatch, terminating running jobs");
        self.shutdown_at = Some(now + self.cfg.shutdown_grace.as_millis() as Millis);
        effects.extend(self.engine.handle(now, Input::Shutdown).effects);
    }

    /// Shutdown is complete: every job is gone, or the grace has passed.
    fn finished(&self) -> bool {
        let Some(deadline) = self.shutdown_at else {
            return false;
        };
        if self.engine.running_total() == 0 {
            tracing::info!("all jobs stopped; exiting");
            return true;
        }
        if now_ms() >= deadline + 5_000 {
            tracing::warn!(
                "shutdown grace exceeded; {} jobs still running",
                self.engine.running_total()
            );
            return true;
        }
        false
    }

    /// Hands the step's changes, with the answers waiting on them, to the
    /// writer.
    fn write(&mut self, now: Millis, effects: &[Effect], replies: Answers) {
        let c = commit_of(&self.engine, effects);
        let progress: Vec<u64> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::Progress { run } => Some(run.0),
                _ => None,
            })
            .collect();
        // Nothing to write, answer or announce (a tick, an output
        // heartbeat, a read): no step.
        if c.is_empty() && replies.is_empty() && progress.is_empty() && !self.registry.has_pending()
        {
            // A hold whose submit created nothing guards no commit.
            drop(self.store.take_unique_holds());
            return;
        }
        let announce =
            self.notify.receiver_count() > 0 && (!c.events.is_empty() || !progress.is_empty());
        let defs = self.registry.take_pending();
        let step = Step {
            dag_runs: c.dag_runs.into_iter().map(DagRun::row).collect(),
            runs: c.runs.into_iter().cloned().collect(),
            events: c.events.into_iter().cloned().collect(),
            cron_marks: c.cron_marks,
            trigger_queues: c.trigger_queues,
            paused: defs.paused,
            dag_defs: defs.dag_defs,
            removed_defs: defs.removed,
            defs_complete: defs.complete,
            progress,
            replies,
            status: announce.then(|| self.status(now)),
            on_commit: self.on_commit_of_triggers(effects),
            holds: self.store.take_unique_holds(),
        };
        // The writer ends only after this thread drops its queue.
        let _ = self.writer.send(step);
    }

    /// Spawn orders leave before their step's commit (see `step`), except
    /// for DAG runs created by a trigger (cron slot, `after`, hook): the
    /// engine keeps their runs out of every queue until
    /// `Input::TriggerDurable`, sent once the writer has committed the step
    /// that created them. So the trigger row (the DAG run with its
    /// `<dag>@<slot>` key, the watermark) is durable before any process of
    /// it exists, and a slot fires at most once even if axd dies between
    /// the decision and the commit. Submissions through the socket are not
    /// held: their runs start before the commit, as the README's
    /// "Spawning" decision says.
    fn on_commit_of_triggers(&self, effects: &[Effect]) -> Option<Box<dyn FnOnce() + Send>> {
        let triggered: Vec<DagRunId> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::Triggered { dag_run } => Some(*dag_run),
                _ => None,
            })
            .collect();
        if triggered.is_empty() {
            return None;
        }
        let queue = self.own_queue.clone();
        Some(Box::new(move || {
            let _ = queue.send(Msg::TriggersDurable(triggered));
        }))
    }

    fn execute(&mut self, effects: &[Effect]) {
        for e in effects {
            match e {
                Effect::Spawn(o) => {
                    self.exec.spawn(o.clone());
                }
                Effect::Kill {
                    run,
                    attempt,
                    reason,
                    grace_ms,
                } => {
                    // At shutdown every job gets the whole `shutdown_grace`
                    // to stop by itself (SPEC §5.3), whatever its `kill_grace`.
                    let grace_ms = if *reason == KillReason::Shutdown {
                        self.cfg.shutdown_grace.as_millis() as Millis
                    } else {
                        *grace_ms
                    };
                    self.exec.kill(*run, *attempt, grace_ms);
                }
                Effect::DagRunFinished {
                    dag,
                    state,
                    dag_run,
                } => {
                    tracing::info!(dag = %dag, dag_run = dag_run.0, "DAG run finished: {state:?}");
                }
                _ => {}
            }
        }
    }

    /// Reads `axd.toml` again and puts it in force (SPEC §5.1), then
    /// rescans the jobs folder. A broken file changes nothing and is the
    /// error; so is a pool removed while runs are in it. Returns the
    /// restart-only keys that changed and were not applied.
    fn reload(
        &mut self,
        now: Millis,
        actor: &Arc<str>,
        effects: &mut Vec<Effect>,
    ) -> Result<Vec<&'static str>, RpcError> {
        let mut not_applied = Vec::new();
        let mut define_all = false;
        if let Some(path) = &self.config_path {
            let new = Config::load(path)
                .map_err(|e| RpcError::new(codes::INVALID_CONFIG, e.to_string()))?;
            not_applied = self.cfg.restart_only_changes(&new);
            let new = self.cfg.reloaded(new);
            let step = self
                .engine
                .handle(now, Input::Reconfigure(new.engine_config()));
            effects.extend(step.effects);
            step.reply.map_err(|e| {
                RpcError::new(
                    codes::INVALID_CONFIG,
                    format!("config {}: {e}; the running config stays", path.display()),
                )
            })?;
            self.exec.set_log_max_bytes(new.log_max_bytes);
            // DAGs without a zone of their own follow the daemon's.
            define_all = new.timezone != self.cfg.timezone;
            self.cfg = new;
            if not_applied.is_empty() {
                tracing::info!("config reloaded from {}", path.display());
            } else {
                tracing::warn!(
                    "config reloaded from {}; changes to {} take effect at the next start",
                    path.display(),
                    not_applied.join(", ")
                );
            }
        }
        effects.extend(self.rescan_jobs_defining(now, actor, define_all));
        // The audit trail: who reloaded, and what it found.
        let mut reason = format!(
            "reloaded: {} DAGs, {} with errors",
            self.registry.len(),
            self.registry.errors().len()
        );
        if !not_applied.is_empty() {
            reason += &format!("; not applied until restart: {}", not_applied.join(", "));
        }
        effects.push(handlers::dag_event(now, reason, actor));
        Ok(not_applied)
    }

    /// Re-derives the count of finished runs held only by the store (after
    /// loading a DAG run back into the engine). Reports already sent are
    /// taken first, as the store read includes their deletions.
    fn refresh_counts(&mut self) {
        self.take_prune_reports();
        if let Ok(counts) = self.store.state_counts() {
            for s in RunState::ALL.into_iter().filter(|s| s.is_terminal()) {
                let total = counts.get(s.as_str()).copied().unwrap_or(0);
                let held = self.engine.count(s) + self.engine.evicted_count(s);
                self.stored_terminal.insert(s, total.saturating_sub(held));
            }
            self.pruned.clear();
        }
    }

    /// Counts the runs the pruner reports deleted.
    fn take_prune_reports(&mut self) {
        while let Ok(report) = self.retention.reports.try_recv() {
            for (state, n) in report.runs {
                *self.pruned.entry(state).or_default() += n;
            }
        }
    }

    /// Keeps a DAG run that is about to be read back from the store from
    /// the pruner (see `retention::Pins`).
    fn pin(&self, dag_run: u64) {
        self.retention
            .pins
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(dag_run);
    }

    /// Housekeeping, at most once a minute: finished DAG runs leave the
    /// engine's memory after `EVICT_AFTER`; hourly, the pruner thread is
    /// told what it may delete from the store (`retention`).
    fn maintain(&mut self, now: Millis) {
        self.take_prune_reports();
        if now - self.last_evict < 60_000 {
            return;
        }
        self.last_evict = now;
        let held_before = now - EVICT_AFTER;
        let evicted = self.engine.evict_finished(held_before);
        if evicted > 0 {
            tracing::debug!("{evicted} finished DAG runs left memory");
        }
        if now - self.last_prune < PRUNE_EVERY {
            return;
        }
        self.last_prune = now;
        let keep_runs = self
            .registry
            .iter()
            .filter_map(|(name, e)| Some((name.clone(), e.spec.as_ref()?.keep_runs?)))
            .collect();
        let order = crate::retention::Order {
            age_before: now - self.cfg.log_retain.as_millis() as Millis,
            held_before,
            keep_runs,
        };
        // The pruner ends only after this thread drops its end.
        let _ = self.retention.orders.send(order);
    }
}
