//! The scheduler thread: the one owner of the engine and the store.
//!
//! It sleeps until the engine's next deadline or the next message
//! (`recv_timeout`), then takes every message that is waiting, applies them
//! all to the engine, commits everything they decided in one transaction
//! (group commit), and only then answers the clients, announces the changes
//! and hands spawn/kill orders to the executor.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use ax_shared::api::{DagView, LogChunk, PoolView, RunView, StatusView, SubmitResult};
use ax_shared::jobfile::{FileError, ValidateOptions, parse_dag};
use ax_shared::protocol::{RpcError, codes};
use ax_shared::{DagSpec, Exec, JobSpec, RunState, Timeout};
use serde_json::{Value, json};
use tokio::sync::{broadcast, oneshot};

use crate::config::Config;
use crate::dags::{DagEntry, rescan};
use crate::engine::{
    DagRun, DagRunId, Effect, Engine, EngineError, Input, KillReason, Millis, Reply, RunId, Submit,
    Unique,
};
use crate::executor::{ExecEvent, Executor};
use crate::store::{Commit, RunQuery, Store};
use crate::time::{now_ms, rfc3339};

/// Who is asking (SPEC §5.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The daemon's own uid or root.
    Owner,
    /// Member of `admin_group`: may act.
    Admin,
    /// Member of `socket_group`: may only read.
    Viewer,
}

#[derive(Clone, Debug)]
pub struct Peer {
    pub role: Role,
    pub actor: Arc<str>,
}

pub enum Msg {
    Request {
        peer: Peer,
        method: String,
        params: Value,
        reply: oneshot::Sender<Result<Value, RpcError>>,
    },
    Exec(ExecEvent),
    Shutdown,
    Reload,
    /// The jobs folder changed.
    Rescan,
}

use crate::writer::ReplyTo;

/// What the socket server needs to talk to the scheduler.
#[derive(Clone)]
pub struct Handle {
    pub tx: Sender<Msg>,
    pub notify: broadcast::Sender<Arc<str>>,
    pub log_dir: PathBuf,
}

impl Handle {
    pub async fn call(&self, peer: &Peer, method: &str, params: Value) -> Result<Value, RpcError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Msg::Request {
                peer: peer.clone(),
                method: method.into(),
                params,
                reply,
            })
            .map_err(|_| RpcError::new(codes::SHUTTING_DOWN, "axd is shutting down"))?;
        rx.await
            .map_err(|_| RpcError::new(codes::SHUTTING_DOWN, "axd is shutting down"))?
    }
}

pub struct Scheduler {
    cfg: Config,
    engine: Engine,
    store: Box<dyn Store>,
    dags: BTreeMap<String, DagEntry>,
    exec: Executor,
    notify: broadcast::Sender<Arc<str>>,
    started: std::time::Instant,
    /// Counts of finished runs that live only in the store (not loaded).
    stored_terminal: BTreeMap<RunState, u64>,
    shutdown_at: Option<Millis>,
    config_path: Option<PathBuf>,
    pending_dag_defs: Vec<Arc<DagSpec>>,
    pending_removed: Vec<String>,
    pending_paused: Vec<(String, bool)>,
    start_marks: HashMap<String, i64>,
    /// At start-up every DAG is given to the engine, changed or not.
    define_all: bool,
    last_evict: Millis,
    last_prune: Millis,
    /// Makes steps durable off this thread (`writer`).
    writer: Option<std::sync::mpsc::SyncSender<crate::writer::Step>>,
    writer_thread: Option<std::thread::JoinHandle<()>>,
    /// Set by the writer while the store refuses writes (disk full).
    fault: crate::writer::Fault,
}

/// Methods that change state: refused to viewers, and answered only once
/// their step is written.
const WRITES: &[&str] = &[
    "submit",
    "trigger",
    "cancel",
    "cancel_dag_run",
    "retry",
    "pause",
    "resume",
    "reload",
    "heartbeat",
];

/// What a step's effects change in the store: the DAG runs and runs they
/// touched (as the engine now has them), their events and cron marks.
pub fn commit_of<'a>(engine: &'a Engine, effects: &'a [Effect]) -> Commit<'a> {
    let mut runs: BTreeSet<RunId> = BTreeSet::new();
    let mut dag_runs: BTreeSet<DagRunId> = BTreeSet::new();
    let mut events = Vec::new();
    let mut cron_marks = Vec::new();
    for e in effects {
        match e {
            Effect::CronMark { dag, slot } => cron_marks.push((dag.clone(), *slot)),
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
        ..Commit::default()
    }
}

/// How long a finished DAG run stays in the engine's memory (the store
/// keeps it; a retry loads it back).
const EVICT_AFTER: Millis = 10 * 60_000;

fn bad(msg: impl Into<String>) -> RpcError {
    RpcError::new(codes::INVALID_PARAMS, msg)
}

fn engine_err(e: EngineError) -> RpcError {
    RpcError::new(e.code(), e.to_string())
}

fn id_param(params: &Value, key: &str) -> Result<u64, RpcError> {
    params
        .get(key)
        .and_then(|v| {
            v.as_u64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        })
        .ok_or_else(|| bad(format!("`{key}` must be a run id (a positive integer)")))
}

fn str_param<'a>(params: &'a Value, key: &str) -> Result<&'a str, RpcError> {
    params
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| bad(format!("`{key}` must be a string")))
}

impl Scheduler {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cfg: Config,
        config_path: Option<PathBuf>,
        engine: Engine,
        store: Box<dyn Store>,
        writer_store: Box<dyn Store>,
        exec: Executor,
        notify: broadcast::Sender<Arc<str>>,
        stored_terminal: BTreeMap<RunState, u64>,
    ) -> Scheduler {
        let fault: crate::writer::Fault = Arc::default();
        // Bounded: a store slower than the scheduler slows the scheduler
        // down rather than letting unwritten steps pile up without end.
        let (writer_tx, writer_rx) = std::sync::mpsc::sync_channel(4096);
        let writer_thread = {
            let (notify, fault) = (notify.clone(), fault.clone());
            std::thread::Builder::new()
                .name("ax-writer".into())
                .spawn(move || crate::writer::run(writer_store, writer_rx, notify, fault))
                .expect("start the store writer thread")
        };
        Scheduler {
            cfg,
            engine,
            store,
            dags: BTreeMap::new(),
            exec,
            notify,
            started: crate::time::monotonic(),
            stored_terminal,
            shutdown_at: None,
            config_path,
            pending_dag_defs: Vec::new(),
            pending_removed: Vec::new(),
            pending_paused: Vec::new(),
            start_marks: HashMap::new(),
            define_all: false,
            last_evict: now_ms(),
            writer: Some(writer_tx),
            writer_thread: Some(writer_thread),
            fault,
            last_prune: 0,
        }
    }

    pub fn pool_names(&self) -> Vec<String> {
        self.cfg.pools.keys().cloned().collect()
    }

    /// Scans the jobs folder (start-up, reload, watcher). `marks` are the
    /// cron watermarks from the store, given at start-up only.
    pub fn rescan_jobs_with(
        &mut self,
        now: Millis,
        actor: &Arc<str>,
        marks: &HashMap<String, i64>,
    ) -> Vec<Effect> {
        // The last good version of every DAG from an earlier life: a file
        // that is broken now keeps it (SPEC §5.4), across restarts too.
        match self.store.load_dag_defs() {
            Ok(defs) => {
                for spec in defs {
                    self.dags.insert(
                        spec.name.clone(),
                        DagEntry {
                            file: PathBuf::from(&spec.file),
                            spec: Some(Arc::new(spec)),
                            error: None,
                            hash: String::new(),
                        },
                    );
                }
            }
            Err(e) => tracing::warn!("cannot read the last good DAG versions: {e}"),
        }
        self.start_marks = marks.clone();
        self.define_all = true;
        let e = self.rescan_jobs(now, actor);
        self.define_all = false;
        self.start_marks.clear();
        e
    }

    /// Scans the jobs folder (reload, watcher).
    pub fn rescan_jobs(&mut self, now: Millis, actor: &Arc<str>) -> Vec<Effect> {
        let pools = self.pool_names();
        let before: BTreeMap<String, String> = self
            .dags
            .iter()
            .map(|(k, v)| (k.clone(), v.hash.clone()))
            .collect();
        let removed = rescan(&self.cfg.jobs_dir, &pools, &mut self.dags);
        for (name, entry) in &self.dags {
            if let Some(e) = &entry.error {
                tracing::warn!(dag = %name, "job file error: {e}");
            }
            if before.get(name) != Some(&entry.hash)
                && let Some(spec) = &entry.spec
            {
                tracing::info!(dag = %name, file = %entry.file.display(), "DAG loaded");
                self.pending_dag_defs.push(spec.clone());
            }
        }
        let mut effects = Vec::new();
        let changed: Vec<Arc<DagSpec>> = self
            .dags
            .iter()
            .filter(|(name, entry)| self.define_all || before.get(*name) != Some(&entry.hash))
            .filter_map(|(_, entry)| entry.spec.clone())
            .collect();
        for spec in changed {
            let tz = spec
                .timezone
                .clone()
                .unwrap_or_else(|| self.cfg.timezone.clone());
            let zone = ax_shared::cron::parse_zone(&tz).unwrap_or(chrono_tz::UTC);
            let watermark = self.start_marks.get(&spec.name).copied();
            let name = spec.name.clone();
            effects.extend(
                self.engine
                    .handle(
                        now,
                        Input::DefineDag {
                            spec,
                            zone,
                            watermark,
                        },
                    )
                    .effects,
            );
            let _ = name;
        }
        for name in removed {
            tracing::info!(dag = %name, "DAG removed (file deleted)");
            effects.extend(
                self.engine
                    .handle(
                        now,
                        Input::RemoveDag {
                            dag: name.clone(),
                            actor: actor.clone(),
                        },
                    )
                    .effects,
            );
            self.pending_removed.push(name);
        }
        effects
    }

    /// The thread body: runs until shutdown completes, then waits for the
    /// writer to write everything decided.
    pub fn run(mut self, rx: Receiver<Msg>, initial: Vec<Effect>) {
        self.run_loop(rx, initial);
        self.close_writer();
    }

    fn run_loop(&mut self, rx: Receiver<Msg>, initial: Vec<Effect>) {
        let mut carried = initial;
        loop {
            let now = now_ms();
            let wait = self
                .engine
                .next_wakeup()
                .map(|t| Duration::from_millis((t - now).max(0) as u64));
            let wait = match (wait, self.shutdown_at) {
                (w, Some(deadline)) => Some(
                    w.unwrap_or(Duration::MAX)
                        .min(Duration::from_millis((deadline - now).max(0) as u64)),
                ),
                (w, None) => w,
            };
            let housekeeping =
                Duration::from_millis((self.last_evict + 60_000 - now).max(0) as u64);
            let wait = Some(wait.map_or(housekeeping, |w| w.min(housekeeping)));
            // Start-up effects are processed at once.
            let wait = if carried.is_empty() {
                wait
            } else {
                Some(Duration::ZERO)
            };
            let first = match wait {
                Some(w) => match rx.recv_timeout(w) {
                    Ok(m) => Some(m),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => return,
                },
                None => match rx.recv() {
                    Ok(m) => Some(m),
                    Err(_) => return,
                },
            };
            let mut batch: Vec<Msg> = first.into_iter().collect();
            while batch.len() < 4096 {
                match rx.try_recv() {
                    Ok(m) => batch.push(m),
                    Err(_) => break,
                }
            }
            let now = now_ms();
            let mut effects = std::mem::take(&mut carried);
            // Answers to requests that changed nothing (reads, refusals)
            // never wait for the store; the others are sent once written.
            let mut replies: Vec<(ReplyTo, Result<Value, RpcError>)> = Vec::new();
            let mut read_replies: Vec<(ReplyTo, Result<Value, RpcError>)> = Vec::new();
            effects.extend(self.engine.handle(now, Input::Tick).effects);
            for msg in batch {
                match msg {
                    Msg::Request {
                        peer,
                        method,
                        params,
                        reply,
                    } => {
                        let answer = self.request(now, &peer, &method, &params, &mut effects);
                        // A heartbeat changes only a deadline in memory.
                        if answer.is_ok()
                            && WRITES.contains(&method.as_str())
                            && method != "heartbeat"
                        {
                            replies.push((reply, answer));
                        } else {
                            read_replies.push((reply, answer));
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
                    Msg::Shutdown => {
                        if self.shutdown_at.is_none() {
                            tracing::info!(
                                "shutting down: stopping dispatch, terminating running jobs"
                            );
                            self.shutdown_at =
                                Some(now + self.cfg.shutdown_grace.as_millis() as Millis);
                            effects.extend(self.engine.handle(now, Input::Shutdown).effects);
                        }
                    }
                    Msg::Rescan => {
                        let actor: Arc<str> = Arc::from("watcher");
                        effects.extend(self.rescan_jobs(now, &actor));
                    }
                    Msg::Reload => {
                        let actor: Arc<str> = Arc::from("signal SIGHUP");
                        effects.extend(self.reload(now, &actor));
                    }
                }
            }
            // Spawn and kill orders go out first, so processes start while
            // the step is being made durable by the writer thread (the
            // fsync is off the start path, and off this thread). A crash in
            // that window leaves the store saying `ready`: the run is
            // started again after the restart, as for any interrupted
            // attempt, and the PDEATHSIG of the spawner thread has already
            // killed the process. Clients hear of the step (answers,
            // notifications) only after the commit.
            self.execute(&effects);
            for (reply, answer) in read_replies {
                let _ = reply.send(answer);
            }
            self.write(&effects, replies);
            self.maintain(now_ms());
            if let Some(deadline) = self.shutdown_at {
                let now = now_ms();
                if self.engine.running_total() == 0 {
                    tracing::info!("all jobs stopped; exiting");
                    return;
                }
                if now >= deadline + 5_000 {
                    tracing::warn!(
                        "shutdown grace exceeded; {} jobs still running",
                        self.engine.running_total()
                    );
                    return;
                }
            }
        }
    }

    /// Hands the step's changes, with the answers waiting on them, to the
    /// writer.
    fn write(&mut self, effects: &[Effect], replies: Vec<(ReplyTo, Result<Value, RpcError>)>) {
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
        if c.is_empty()
            && replies.is_empty()
            && progress.is_empty()
            && self.pending_paused.is_empty()
            && self.pending_dag_defs.is_empty()
            && self.pending_removed.is_empty()
        {
            return;
        }
        let announce =
            self.notify.receiver_count() > 0 && (!c.events.is_empty() || !progress.is_empty());
        let step = crate::writer::Step {
            dag_runs: c.dag_runs.into_iter().map(DagRun::row).collect(),
            runs: c.runs.into_iter().cloned().collect(),
            events: c.events.into_iter().cloned().collect(),
            cron_marks: c.cron_marks,
            paused: std::mem::take(&mut self.pending_paused),
            dag_defs: std::mem::take(&mut self.pending_dag_defs),
            removed_defs: std::mem::take(&mut self.pending_removed),
            progress,
            replies,
            status: announce.then(|| self.status()),
        };
        if let Some(w) = &self.writer {
            let _ = w.send(step);
        }
    }

    /// Waits until everything decided is written (at exit).
    fn close_writer(&mut self) {
        self.writer = None;
        if let Some(t) = self.writer_thread.take() {
            let _ = t.join();
        }
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

    fn reload(&mut self, now: Millis, actor: &Arc<str>) -> Vec<Effect> {
        if let Some(path) = &self.config_path {
            match Config::load(path) {
                Ok(c) => {
                    if c.pools != self.cfg.pools || c.max_concurrency != self.cfg.max_concurrency {
                        tracing::warn!(
                            "reload: pool and concurrency changes take effect at the next restart"
                        );
                    }
                    let keep_pools = self.cfg.pools.clone();
                    let keep_max = self.cfg.max_concurrency;
                    self.cfg = c;
                    self.cfg.pools = keep_pools;
                    self.cfg.max_concurrency = keep_max;
                    tracing::info!("config reloaded from {}", path.display());
                }
                Err(e) => tracing::error!("reload refused, keeping the old config: {e}"),
            }
        }
        self.rescan_jobs(now, actor)
    }

    // ----- views -------------------------------------------------------------

    /// Re-derives the count of finished runs held only by the store (after
    /// pruning, or loading a DAG run back into the engine).
    fn refresh_counts(&mut self) {
        if let Ok(counts) = self.store.state_counts() {
            for s in RunState::ALL.into_iter().filter(|s| s.is_terminal()) {
                let total = counts.get(s.as_str()).copied().unwrap_or(0);
                let held = self.engine.count(s) + self.engine.evicted_count(s);
                self.stored_terminal.insert(s, total.saturating_sub(held));
            }
        }
    }

    /// Housekeeping, at most once a minute: finished DAG runs leave the
    /// engine's memory after `EVICT_AFTER`; DAG runs, events and logs older
    /// than `logs.retain` leave the store (hourly).
    fn maintain(&mut self, now: Millis) {
        if now - self.last_evict < 60_000 {
            return;
        }
        self.last_evict = now;
        let evicted = self.engine.evict_finished(now - EVICT_AFTER);
        if evicted > 0 {
            tracing::debug!("{evicted} finished DAG runs left memory");
        }
        if now - self.last_prune < 3_600_000 {
            return;
        }
        self.last_prune = now;
        let before = now - self.cfg.log_retain.as_millis() as Millis;
        // Only DAG runs the engine no longer holds can be pruned.
        let before = before.min(now - EVICT_AFTER);
        match self.store.prune(before) {
            Ok(logs) => {
                let log_dir = self.cfg.state_dir.join("logs");
                for (run, attempt) in &logs {
                    let _ = std::fs::remove_file(crate::executor::log_path(
                        &log_dir,
                        RunId(*run),
                        *attempt,
                    ));
                }
                if !logs.is_empty() {
                    tracing::info!("pruned {} attempts older than logs.retain", logs.len());
                }
                self.refresh_counts();
            }
            Err(e) => tracing::warn!("pruning old runs failed: {e}"),
        }
    }

    fn status(&self) -> StatusView {
        let mut runs: BTreeMap<String, u64> = BTreeMap::new();
        for s in RunState::ALL {
            let n = self.engine.count(s)
                + self.engine.evicted_count(s)
                + self.stored_terminal.get(&s).copied().unwrap_or(0);
            runs.insert(s.as_str().into(), n);
        }
        StatusView {
            version: env!("CARGO_PKG_VERSION").into(),
            uptime_s: self.started.elapsed().as_secs(),
            pools: self
                .engine
                .pool_usage()
                .into_iter()
                .map(|(name, slots, running)| PoolView {
                    name,
                    slots,
                    running,
                })
                .collect(),
            max_concurrency: self.cfg.max_concurrency,
            burst_in_use: self.engine.burst_in_use(),
            burst_extra: self.cfg.burst_extra,
            runs,
            errors: self.dags.values().filter_map(|d| d.error.clone()).collect(),
            store_error: self.fault.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }

    /// A run as the API shows it. Runs the engine holds are shown from the
    /// engine (live `why`, effective priority, and the state this very step
    /// has reached); others from the store.
    fn live(&self, v: RunView, now: Millis) -> RunView {
        let Some(r) = self.engine.run(RunId(v.id)) else {
            return v;
        };
        let t = |ms: Option<Millis>| ms.map(rfc3339);
        RunView {
            id: r.id.0,
            dag: r.dag.to_string(),
            job: r.job().id.clone(),
            dag_run: r.dag_run.0,
            state: r.state.as_str().into(),
            priority: r.priority(),
            effective_priority: self
                .engine
                .effective_priority(r.id, now)
                .unwrap_or(r.priority()),
            pool: r.pool().into(),
            attempts: r
                .attempts
                .iter()
                .map(|a| ax_shared::api::AttemptView {
                    n: a.n,
                    started_at: Some(rfc3339(a.started_at)),
                    finished_at: t(a.finished_at),
                    outcome: a.outcome.map(|o| o.as_str().to_string()),
                    exit_code: a.exit_code,
                    signal: a.signal,
                })
                .collect(),
            retries: r.job().retries,
            created_at: Some(rfc3339(r.created_at)),
            ready_at: t(r.ready_at),
            started_at: t(r.started_at),
            finished_at: t(r.finished_at),
            next_at: t(r.next_at),
            reason: Some(r.reason.clone()),
            why: self.engine.why(r.id, now),
            message: r.message.clone(),
            progress: r.progress,
            events: None,
        }
    }

    fn dag_view(
        &self,
        name: &str,
        entry: &DagEntry,
        last: &HashMap<String, String>,
        now: Millis,
    ) -> DagView {
        let spec = entry.spec.as_deref();
        let tz = spec
            .and_then(|s| s.timezone.clone())
            .unwrap_or_else(|| self.cfg.timezone.clone());
        let _ = now;
        let next_fire = self.engine.next_fire(name).map(rfc3339);
        DagView {
            name: name.into(),
            file: entry.file.display().to_string(),
            jobs: spec
                .map(|s| s.jobs.iter().map(|j| j.id.clone()).collect())
                .unwrap_or_default(),
            schedule: spec.and_then(|s| s.schedule.clone()),
            timezone: spec.map(|_| tz),
            next_fire,
            paused: self.engine.is_paused(name),
            last_run_state: last.get(name).cloned(),
            error: entry.error.clone(),
            deps: spec
                .map(|s| {
                    s.jobs
                        .iter()
                        .map(|j| (j.id.clone(), j.deps.clone()))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    // ----- requests ------------------------------------------------------------

    fn request(
        &mut self,
        now: Millis,
        peer: &Peer,
        method: &str,
        params: &Value,
        effects: &mut Vec<Effect>,
    ) -> Result<Value, RpcError> {
        if WRITES.contains(&method) && peer.role == Role::Viewer {
            return Err(RpcError::new(
                codes::FORBIDDEN,
                format!("{method}: members of socket_group may only read"),
            ));
        }
        if self.shutdown_at.is_some() && ["submit", "trigger", "retry"].contains(&method) {
            return Err(RpcError::new(codes::SHUTTING_DOWN, "axd is shutting down"));
        }
        // A heartbeat only keeps a running job alive, which must go on
        // while the disk is full; every other write would be lost.
        if WRITES.contains(&method) && method != "heartbeat" {
            let fault = self.fault.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some(error) = fault {
                return Err(RpcError::new(
                    codes::STORE_ERROR,
                    format!(
                        "{method} not accepted: the store cannot write ({error}); try again when it recovers"
                    ),
                ));
            }
        }
        let to_value = |v: &dyn erased::Ser| v.json();
        match method {
            "status" => Ok(to_value(&self.status())),
            "list_runs" => self.list_runs(now, params),
            "get_run" => self.get_run(now, params),
            "list_dags" => {
                let last = self.store.last_dag_run_states().map_err(store_err)?;
                let views: Vec<DagView> = self
                    .dags
                    .iter()
                    .map(|(n, e)| self.dag_view(n, e, &last, now))
                    .collect();
                Ok(json!(views))
            }
            "get_dag" => {
                let name = str_param(params, "name")?;
                let last = self.store.last_dag_run_states().map_err(store_err)?;
                let entry = self.dags.get(name).ok_or_else(|| {
                    RpcError::new(codes::NOT_FOUND, format!("DAG {name:?} not found"))
                })?;
                Ok(to_value(&self.dag_view(name, entry, &last, now)))
            }
            "submit" => self.submit(now, peer, params, effects),
            "trigger" => {
                let name = str_param(params, "dag")?;
                let entry = self.dags.get(name).ok_or_else(|| {
                    RpcError::new(codes::NOT_FOUND, format!("DAG {name:?} not found"))
                })?;
                let spec = entry.spec.clone().ok_or_else(|| {
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
                self.create(
                    now,
                    Submit {
                        dag: spec,
                        trigger: format!("manual trigger by {}", peer.actor),
                        actor: peer.actor.clone(),
                        unique: None,
                        after: vec![],
                    },
                    effects,
                )
            }
            "cancel" => {
                let ids: Vec<u64> = match params.get("ids").and_then(Value::as_array) {
                    Some(a) => a.iter().filter_map(Value::as_u64).collect(),
                    None => vec![id_param(params, "id")?],
                };
                for id in ids {
                    self.apply(
                        now,
                        Input::Cancel {
                            run: RunId(id),
                            actor: peer.actor.clone(),
                        },
                        effects,
                    )?;
                }
                Ok(json!({"ok": true}))
            }
            "cancel_dag_run" => {
                let id = id_param(params, "id")?;
                self.apply(
                    now,
                    Input::CancelDagRun {
                        dag_run: DagRunId(id),
                        actor: peer.actor.clone(),
                    },
                    effects,
                )?;
                Ok(json!({"ok": true}))
            }
            "retry" => {
                let id = id_param(params, "id")?;
                if self.engine.run(RunId(id)).is_none() {
                    // A finished run the engine let go of: load its DAG run
                    // back from the store, then retry it like any other.
                    let view = self.store.get_run(id).map_err(store_err)?.ok_or_else(|| {
                        RpcError::new(codes::NOT_FOUND, format!("run {id} not found"))
                    })?;
                    let dr = self
                        .store
                        .load_dag_run(view.dag_run)
                        .map_err(store_err)?
                        .ok_or_else(|| {
                            RpcError::new(
                                codes::NOT_FOUND,
                                format!("DAG run {} not found", view.dag_run),
                            )
                        })?;
                    effects.extend(self.engine.restore(now, vec![dr], 0, 0));
                    self.refresh_counts();
                }
                self.apply(
                    now,
                    Input::Retry {
                        run: RunId(id),
                        actor: peer.actor.clone(),
                    },
                    effects,
                )?;
                Ok(json!({"ok": true}))
            }
            "pause" | "resume" => {
                let paused = method == "pause";
                let names: Vec<String> = if params.get("all").and_then(Value::as_bool) == Some(true)
                {
                    self.dags.keys().cloned().collect()
                } else {
                    let name = str_param(params, "dag")?;
                    if !self.dags.contains_key(name) {
                        return Err(RpcError::new(
                            codes::NOT_FOUND,
                            format!("DAG {name:?} not found"),
                        ));
                    }
                    vec![name.to_string()]
                };
                for n in &names {
                    let input = if paused {
                        Input::Pause { dag: n.clone() }
                    } else {
                        Input::Resume { dag: n.clone() }
                    };
                    effects.extend(self.engine.handle(now, input).effects);
                    self.pending_paused.push((n.clone(), paused));
                }
                Ok(json!({"ok": true, "dags": names}))
            }
            "reload" => {
                let e = self.reload(now, &peer.actor);
                effects.extend(e);
                Ok(
                    json!({"ok": true, "dags": self.dags.len(), "errors": self.dags.values().filter(|d| d.error.is_some()).count()}),
                )
            }
            "heartbeat" => {
                let id = id_param(params, "run")?;
                let message = params
                    .get("message")
                    .and_then(Value::as_str)
                    .map(str::to_string);
                let progress = params.get("progress").and_then(Value::as_f64);
                if let Some(p) = progress
                    && !(0.0..=1.0).contains(&p)
                {
                    return Err(bad(format!("progress {p} must be between 0 and 1")));
                }
                self.apply(
                    now,
                    Input::Beat {
                        run: RunId(id),
                        message,
                        progress,
                    },
                    effects,
                )?;
                Ok(json!({"ok": true}))
            }
            "log_info" => {
                let id = id_param(params, "run")?;
                let (attempts, running) = match self.engine.run(RunId(id)) {
                    Some(r) => (r.attempts.len() as u32, r.state == RunState::Running),
                    None => match self.store.get_run(id).map_err(store_err)? {
                        Some(v) => (v.attempts.len() as u32, v.state == "running"),
                        None => {
                            return Err(RpcError::new(
                                codes::NOT_FOUND,
                                format!("run {id} not found"),
                            ));
                        }
                    },
                };
                Ok(json!({"attempts": attempts, "running": running}))
            }
            "events" => {
                let after = params.get("after").and_then(Value::as_i64).unwrap_or(0);
                let limit = params
                    .get("limit")
                    .and_then(Value::as_u64)
                    .unwrap_or(1000)
                    .min(10_000) as usize;
                let events = self.store.events_after(after, limit).map_err(store_err)?;
                Ok(json!(events))
            }
            "subscribe" => Ok(json!({"status": self.status()})),
            "get_dag_run" => self.get_dag_run(now, params),
            other => Err(RpcError::new(
                codes::METHOD_NOT_FOUND,
                format!("unknown method {other:?}"),
            )),
        }
    }

    /// Applies one input for a request: its effects join the step's, its
    /// error becomes the request's answer.
    fn apply(
        &mut self,
        now: Millis,
        input: Input,
        effects: &mut Vec<Effect>,
    ) -> Result<Reply, RpcError> {
        let step = self.engine.handle(now, input);
        effects.extend(step.effects);
        step.reply.map_err(engine_err)
    }

    fn list_runs(&mut self, now: Millis, params: &Value) -> Result<Value, RpcError> {
        let mut q = RunQuery {
            limit: 50,
            ..RunQuery::default()
        };
        if let Some(s) = params.get("state") {
            let list: Vec<&str> = match s {
                Value::String(s) => s.split(',').collect(),
                Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                _ => return Err(bad("`state` must be a state name or a list of them")),
            };
            for name in list {
                q.states.push(RunState::parse(name.trim()).ok_or_else(|| bad(format!("unknown state {name:?} (waiting, delayed, ready, running, success, failed, timed_out, cancelled)")))?);
            }
        }
        q.dag = params
            .get("dag")
            .and_then(Value::as_str)
            .map(str::to_string);
        q.text = params
            .get("filter")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .map(str::to_string);
        q.dag_run = params.get("dag_run").and_then(Value::as_u64);
        if let Some(l) = params.get("limit") {
            q.limit = l
                .as_u64()
                .filter(|l| (1..=10_000).contains(l))
                .ok_or_else(|| bad("`limit` must be 1-10000"))? as usize;
        }
        q.before = params.get("before").and_then(Value::as_u64);
        let views = self.store.list_runs(&q).map_err(store_err)?;
        let views: Vec<RunView> = views.into_iter().map(|v| self.live(v, now)).collect();
        Ok(json!(views))
    }

    /// A DAG run with its jobs' deps and states (for drawing it).
    fn get_dag_run(&mut self, now: Millis, params: &Value) -> Result<Value, RpcError> {
        let id = id_param(params, "id")?;
        let (spec, state, runs): (Arc<DagSpec>, String, Vec<RunView>) =
            match self.engine.dag_run(DagRunId(id)) {
                Some(dr) => {
                    let views = dr
                        .runs
                        .iter()
                        .map(|r| {
                            self.live(
                                RunView {
                                    id: r.0,
                                    ..RunView::default()
                                },
                                now,
                            )
                        })
                        .collect();
                    (
                        dr.spec.clone(),
                        format!("{:?}", dr.state).to_lowercase(),
                        views,
                    )
                }
                None => {
                    let spec =
                        self.store
                            .dag_run_spec(id)
                            .map_err(store_err)?
                            .ok_or_else(|| {
                                RpcError::new(codes::NOT_FOUND, format!("DAG run {id} not found"))
                            })?;
                    let q = RunQuery {
                        dag_run: Some(id),
                        limit: 10_000,
                        ..RunQuery::default()
                    };
                    let views = self.store.list_runs(&q).map_err(store_err)?;
                    (spec, "finished".into(), views)
                }
            };
        let jobs: Vec<Value> = spec
            .jobs
            .iter()
            .map(|j| {
                let run = runs.iter().find(|r| r.job == j.id);
                json!({"id": j.id, "deps": j.deps, "run": run.map(|r| r.id), "state": run.map(|r| r.state.clone())})
            })
            .collect();
        Ok(json!({"id": id, "dag": spec.name, "state": state, "jobs": jobs}))
    }

    fn get_run(&mut self, now: Millis, params: &Value) -> Result<Value, RpcError> {
        let id = id_param(params, "id")?;
        let view = self
            .store
            .get_run(id)
            .map_err(store_err)?
            .ok_or_else(|| RpcError::new(codes::NOT_FOUND, format!("run {id} not found")))?;
        let mut view = self.live(view, now);
        view.events = Some(self.store.run_events(id, 1000).map_err(store_err)?);
        Ok(json!(view))
    }

    fn create(
        &mut self,
        now: Millis,
        submit: Submit,
        effects: &mut Vec<Effect>,
    ) -> Result<Value, RpcError> {
        let step = self.engine.handle(now, Input::Submit(submit));
        effects.extend(step.effects);
        match step.reply.map_err(engine_err)? {
            Reply::Submitted {
                dag_run,
                runs,
                deduplicated,
            } => Ok(json!(SubmitResult {
                dag_run: dag_run.0,
                runs: runs.iter().map(|r| r.0).collect(),
                deduplicated,
            })),
            Reply::Done => Err(RpcError::new(codes::INTERNAL, "submit gave no ids")),
        }
    }

    fn submit(
        &mut self,
        now: Millis,
        peer: &Peer,
        params: &Value,
        effects: &mut Vec<Effect>,
    ) -> Result<Value, RpcError> {
        let after: Vec<RunId> = match params.get("after") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| {
                    v.as_u64()
                        .map(RunId)
                        .ok_or_else(|| bad("`after` must be a list of run ids"))
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(bad("`after` must be a list of run ids")),
        };
        for a in &after {
            if self.engine.run(*a).is_none() {
                match self.store.run_state(a.0).map_err(store_err)? {
                    Some(s) => self.engine.note_external(*a, s),
                    None => {
                        return Err(RpcError::new(
                            codes::NOT_FOUND,
                            format!("--after: run {a} not found"),
                        ));
                    }
                }
            }
        }
        let unique = match params.get("unique").and_then(Value::as_str) {
            None => None,
            Some(key) => {
                let within = match params.get("unique_for").and_then(Value::as_str) {
                    None => None,
                    Some(d) => Some(
                        ax_shared::duration::parse_duration(d)
                            .map_err(|e| bad(format!("unique_for: {e}")))?
                            .as_millis() as Millis,
                    ),
                };
                // The engine holds every unfinished DAG run with a key; a
                // finished one it let go of is found in the store.
                let stored = match within {
                    Some(_) if !self.engine.holds_unique_key(key) => {
                        self.store.newest_with_unique_key(key).map_err(store_err)?
                    }
                    _ => None,
                };
                Some(Unique {
                    key: key.to_string(),
                    within,
                    stored,
                })
            }
        };
        let spec = if let Some(text) = params.get("toml").and_then(Value::as_str) {
            let name = params
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("adhoc");
            let file = params.get("file").and_then(Value::as_str).unwrap_or(name);
            let opts = ValidateOptions {
                pools: Some(self.pool_names()),
            };
            match parse_dag(name, file, text, &opts) {
                Ok(d) => d.spec,
                Err(errors) => {
                    let list: Vec<String> = errors.iter().map(FileError::to_string).collect();
                    let mut e = RpcError::new(
                        codes::INVALID_PARAMS,
                        format!("invalid job file:\n{}", list.join("\n")),
                    );
                    e.data = Some(json!({"code": codes::INVALID_PARAMS, "errors": errors}));
                    return Err(e);
                }
            }
        } else {
            DagSpec::adhoc(
                params
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("adhoc"),
                vec![self.adhoc_job(params)?],
            )
        };
        self.create(
            now,
            Submit {
                dag: Arc::new(spec),
                trigger: format!("submit by {}", peer.actor),
                actor: peer.actor.clone(),
                unique,
                after,
            },
            effects,
        )
    }

    /// One job from `ax submit` options.
    fn adhoc_job(&self, params: &Value) -> Result<JobSpec, RpcError> {
        let exec = match (params.get("command"), params.get("argv")) {
            (Some(Value::String(s)), None) if !s.trim().is_empty() => Exec::Shell(s.clone()),
            (None, Some(Value::Array(a))) if !a.is_empty() => Exec::Argv(
                a.iter()
                    .map(|v| {
                        v.as_str()
                            .map(str::to_string)
                            .ok_or_else(|| bad("`argv` must be strings"))
                    })
                    .collect::<Result<_, _>>()?,
            ),
            _ => {
                return Err(bad(
                    "give exactly one of `command` (a shell string) or `argv` (a non-empty list)",
                ));
            }
        };
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("adhoc");
        let id = name.rsplit('/').next().unwrap_or(name);
        if !ax_shared::jobfile::valid_id(id) {
            return Err(bad(format!("name {name:?}: use 1-64 of A-Z a-z 0-9 _ . -")));
        }
        let mut job = JobSpec::new(id, exec);
        if let Some(p) = params.get("priority") {
            job.priority = p
                .as_u64()
                .filter(|p| (1..=100).contains(p))
                .ok_or_else(|| bad("priority must be 1-100"))? as u8;
        }
        if let Some(p) = params.get("pool").and_then(Value::as_str) {
            if !self.cfg.pools.contains_key(p) {
                return Err(bad(format!(
                    "unknown pool {p:?} (configured: {})",
                    self.pool_names().join(", ")
                )));
            }
            job.pool = p.into();
        }
        let dur = |key: &str| -> Result<Option<Duration>, RpcError> {
            match params.get(key).and_then(Value::as_str) {
                None => Ok(None),
                Some(s) => ax_shared::duration::parse_duration(s)
                    .map(Some)
                    .map_err(|e| bad(format!("{key}: {e}"))),
            }
        };
        match params.get("timeout").and_then(Value::as_str) {
            Some("none") => job.timeout = Timeout::Never,
            _ => {
                if let Some(t) = dur("timeout")? {
                    job.timeout = Timeout::After(t);
                }
            }
        }
        job.heartbeat = dur("heartbeat")?;
        if let Some(g) = dur("kill_grace")? {
            job.kill_grace = g;
        }
        if let Some(r) = params.get("retries") {
            job.retries = r
                .as_u64()
                .filter(|r| *r <= 10_000)
                .ok_or_else(|| bad("retries must be 0-10000"))? as u32;
        }
        if let Some(c) = params.get("cwd").and_then(Value::as_str) {
            if !std::path::Path::new(c).is_absolute() {
                return Err(bad(format!("cwd {c:?} must be absolute")));
            }
            job.cwd = Some(c.into());
        }
        if let Some(Value::Object(env)) = params.get("env") {
            for (k, v) in env {
                job.env
                    .insert(k.clone(), v.as_str().unwrap_or_default().to_string());
            }
        }
        Ok(job)
    }
}

fn store_err(e: crate::store::StoreError) -> RpcError {
    RpcError::new(codes::STORE_ERROR, e.to_string())
}

/// A tiny helper so views serialize without repeating `serde_json::to_value`.
mod erased {
    pub trait Ser {
        fn json(&self) -> serde_json::Value;
    }
    impl<T: serde::Serialize> Ser for T {
        fn json(&self) -> serde_json::Value {
            serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
        }
    }
}

/// Reads a range of an attempt's log (used by the socket server).
pub fn read_log(
    log_dir: &std::path::Path,
    run: u64,
    attempt: u32,
    offset: u64,
    max: usize,
) -> std::io::Result<(Vec<u8>, u64)> {
    use std::io::{Read, Seek, SeekFrom};
    let path = crate::executor::log_path(log_dir, RunId(run), attempt);
    let mut f = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), offset)),
        Err(e) => return Err(e),
    };
    f.seek(SeekFrom::Start(offset))?;
    let mut buf = Vec::new();
    f.take(max as u64).read_to_end(&mut buf)?;
    let next = offset + buf.len() as u64;
    Ok((buf, next))
}

pub fn log_chunk(run: u64, attempt: u32, offset: u64, data: &[u8], eof: bool) -> LogChunk {
    LogChunk {
        run,
        attempt,
        offset,
        data: String::from_utf8_lossy(data).into_owned(),
        eof,
    }
}
