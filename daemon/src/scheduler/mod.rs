//! The scheduler thread: the one owner of the engine and the store's read
//! connection.
//!
//! It sleeps until the engine's next deadline or the next message
//! (`recv_timeout`), then takes every message that is waiting and applies
//! them all to the engine as one step: each executor report at the time the
//! executor observed it (deadlines due before that fire first), then the
//! deadlines due by now. Time is the engine's monotonic clock
//! (`time::steady_ms`); the wall clock is handed to the engine when it
//! moved against it, and a deadline found overdue by more than
//! `PAUSE_THRESHOLD` (axd could not run) makes the engine settle first
//! (docs/operations.md, "axd paused (SIGSTOP, VM pause)"). It hands the
//! step's spawn and kill orders to the executor at once, and the step's
//! changes, with the answers and notifications that depend on them, to the
//! writer thread (`writer`), which sends those only once the step is
//! durable.
//!
//! Requests are answered by `handlers` (one function per request, `submit`
//! for submissions), views built by `views`, DAGs kept by `jobs_folder::registry`, the
//! jobs folder's scans put in force by `scans`.

pub(crate) mod access;
mod handlers;
mod mail;
mod scans;
mod stopping;
mod submit;
mod user_dags;
mod views;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, SyncSender};
use std::time::Duration;

use ax_protocol::api::ReloadAnswer;
use ax_protocol::{Request, RpcError, codes};
use ax_shared::RunState;
use tokio::sync::broadcast;

use crate::bus::ExecEvent;
use crate::bus::answer::Answer;
use crate::bus::encoded::answers_big;
use crate::bus::fault::Fault;
use crate::bus::{Msg, Peer, ReplyTo, Step};
use crate::config::Config;
use crate::execution::executor::Executor;
use crate::jobs_folder::registry::DagRegistry;
use crate::runtime::shutdown::Shutdown;
use crate::runtime::time::{now_ms, steady_ms};
use crate::store::{Changes, Store};
use ax_engine::{DagRun, DagRunId, Effect, Engine, Input, KillReason, Millis, RunId, SpawnOrder};

/// What a step's effects change in the store: the DAG runs and runs they
/// touched (as the engine now has them), their events and cron marks.
pub fn commit_of(engine: &Engine, effects: &[Effect]) -> Changes {
    let mut runs: BTreeSet<RunId> = BTreeSet::new();
    let mut dag_runs: BTreeSet<DagRunId> = BTreeSet::new();
    let mut events = Vec::new();
    let mut cron_marks = Vec::new();
    let mut boot_marks = Vec::new();
    let mut trigger_queues = Vec::new();
    for e in effects {
        match e {
            Effect::CronMark { dag, slot, .. } => cron_marks.push((dag.clone(), *slot)),
            Effect::BootMark { dag, boot, .. } => boot_marks.push((dag.clone(), boot.clone())),
            Effect::TriggerQueue { dag, queue } => {
                trigger_queues.push((dag.clone(), queue.clone()));
            }
            Effect::Event(ev) => {
                if let Some(r) = ev.run {
                    runs.insert(r);
                }
                dag_runs.insert(ev.dag_run);
                events.push(ev.clone());
            }
            Effect::Progress { run } | Effect::Persist { run } => {
                runs.insert(*run);
            }
            Effect::Spawn(o) | Effect::Reattach(o) => {
                runs.insert(o.run);
            }
            _ => {}
        }
    }
    Changes {
        dag_runs: dag_runs
            .iter()
            .filter_map(|d| engine.dag_run(*d).map(DagRun::row))
            .collect(),
        runs: runs
            .iter()
            .filter_map(|r| engine.run(*r).cloned())
            .collect(),
        events,
        cron_marks,
        boot_marks,
        trigger_queues,
        ..Changes::default()
    }
}

/// How long a finished DAG run stays in the engine's memory (the store
/// keeps it; a retry loads it back).
const EVICT_AFTER: Millis = 10 * 60_000;

/// How often the pruner is sent an order.
const PRUNE_EVERY: Millis = 3_600_000;

/// Messages taken into one step at most.
const MAX_BATCH: usize = 4096;

/// A deadline found overdue by more than this means axd could not run
/// (stopped, a paused VM, a stalled thread) when it fell due.
const PAUSE_THRESHOLD: Millis = 500;

/// How long deadlines are held after such a pause, for the exits,
/// heartbeats and output that arrived meanwhile to reach the engine.
const SETTLE: Millis = 2_000;

/// A difference between the wall clock and the engine's view of it that is
/// handed to the engine (smaller ones are slewing, well inside cron's
/// accuracy).
const WALL_SYNC: Millis = 20;

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
    pub retention: crate::store::retention::Link,
    /// A sender on the queue `run` reads.
    pub own_queue: Sender<Msg>,
    pub metrics: crate::metrics::Metrics,
    /// The node registry's last snapshot (PostgreSQL store only).
    pub nodes: Option<crate::cluster::nodes::Registry>,
    /// What the claimer thread is told of this node's load (a cluster).
    pub claimer: Option<crate::cluster::claimer::Link>,
    /// The scanner thread's orders (`watcher::spawn_scanner`).
    pub scans: crate::jobs_folder::watcher::ScanLink,
    /// The notifier's queue (`notifier::run`).
    pub mailer: crate::notifier::Link,
}

/// A reload waiting for the scan it ordered.
struct WaitingReload {
    ticket: u64,
    actor: Arc<str>,
    /// Every DAG is defined anew (the daemon's timezone changed).
    define_all: bool,
    /// A `reload` request's answer, sent once the scan is in force.
    reply: Option<(ReplyTo, ReloadAnswer)>,
}

pub struct Scheduler {
    /// Secret values of ad-hoc DAG runs (`submit` with `secret_env`),
    /// held in memory only until the DAG run finishes: never stored, so
    /// lost with a restart (docs/job-files.md, "Secrets").
    held_secrets: HashMap<DagRunId, submit::HeldSecrets>,
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
    /// Shutdown leaves running jobs to their keepers.
    detached: bool,
    last_evict: Millis,
    last_prune: Millis,
    /// This thread's own queue, for the writer to say when triggered DAG
    /// runs are durable.
    own_queue: Sender<Msg>,
    metrics: crate::metrics::Metrics,
    writer: SyncSender<Step>,
    /// Set by the writer while the store refuses writes (disk full).
    fault: Fault,
    retention: crate::store::retention::Link,
    /// Runs the pruner deleted since counts were last read from the store;
    /// `status` subtracts them.
    pruned: BTreeMap<RunState, u64>,
    nodes: Option<crate::cluster::nodes::Registry>,
    claimer: Option<crate::cluster::claimer::Link>,
    /// The latest engine time an input was applied at: inputs stamped
    /// earlier are applied at it, so the engine's time never goes back.
    applied: Millis,
    /// When the last step ended: a deadline due before it was not missed
    /// in a pause (see `settle_after_pause`).
    step_ended: Millis,
    /// Requests that may answer a whole frame (`answers_big`), waiting
    /// their turn: oldest first, after the rest of each step.
    big_reads: std::collections::VecDeque<(Peer, Request, ReplyTo)>,
    scans: crate::jobs_folder::watcher::ScanLink,
    /// Reloads waiting for the scan they ordered, oldest first.
    reloads: Vec<WaitingReload>,
    mailer: crate::notifier::Link,
}

/// How long one step spends on big reads at most (at least one is
/// answered per step): what a flood of them adds to any other client's
/// wait, and to the engine's.
const BIG_READS_PER_STEP: Duration = Duration::from_millis(20);

type Answers = Vec<(ReplyTo, Result<Answer, RpcError>)>;

/// Logs a change of the cron leadership (a cluster).
fn announce_lead(leader: bool) {
    if leader {
        tracing::info!("this node is now the cluster's cron leader");
    } else {
        tracing::warn!("this node is no longer the cron leader (its lock's connection broke)");
    }
}

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
            held_secrets: HashMap::new(),
            started: crate::runtime::time::monotonic(),
            stored_terminal: parts.stored_terminal,
            shutdown: parts.shutdown,
            shutdown_at: None,
            detached: false,
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
            applied: Millis::MIN,
            step_ended: steady_ms(),
            big_reads: std::collections::VecDeque::new(),
            scans: parts.scans,
            reloads: Vec::new(),
            mailer: parts.mailer,
        }
    }

    pub fn pool_names(&self) -> Vec<String> {
        self.cfg.pools.keys().cloned().collect()
    }

    fn store_fault(&self) -> Option<String> {
        self.fault.current(self.cfg.heartbeat)
    }

    /// The thread body: runs until shutdown completes. Dropping the
    /// scheduler closes the writer's queue; the writer then writes what it
    /// holds and ends.
    pub fn run(mut self, rx: Receiver<Msg>, initial: Vec<Effect>) {
        let mut carried = initial;
        loop {
            // Start-up effects and waiting big reads are processed at once.
            let wait = if carried.is_empty() && self.big_reads.is_empty() {
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
            self.step(steady_ms(), batch, &mut effects);
            if self.finished() {
                return;
            }
        }
    }

    /// How long to sleep: until the engine's next deadline, the shutdown
    /// deadline or the next housekeeping, whichever is first.
    fn wait(&self) -> Duration {
        let now = steady_ms();
        let until = |t: Millis| Duration::from_millis((t - now).max(0) as u64);
        [
            self.engine.next_wakeup(),
            // `finished` gives up on the jobs this long after the grace.
            self.shutdown_at
                .map(|t| t + crate::runtime::shutdown::JOBS_MARGIN.as_millis() as Millis),
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
        self.follow_wall_clock(now, effects);
        self.settle_after_pause(now, effects);
        self.obey_shutdown(now, effects);
        for msg in batch {
            match msg {
                Msg::Request {
                    peer,
                    request,
                    reply,
                } if answers_big(&request) => self.big_reads.push_back((peer, request, reply)),
                Msg::Request {
                    peer,
                    request,
                    reply,
                } => {
                    let waits = request.is_write() && !matches!(request, Request::Heartbeat(_));
                    self.applied = now;
                    let reload = matches!(request, Request::Reload(_));
                    let answer = self.request(now, &peer, request, effects);
                    if reload && let Ok(v) = answer {
                        // Answered once the scan it ordered is in force.
                        immediate.extend(self.hold_reload_answer(reply, v));
                    } else if answer.is_ok() && waits {
                        durable.push((reply, answer));
                    } else {
                        immediate.push((reply, answer));
                    }
                }
                Msg::Exec(ExecEvent { at, input }) => {
                    if let Input::Exited { run, attempt, .. }
                    | Input::SpawnFailed { run, attempt, .. } = &input
                    {
                        self.exec.ended(*run, *attempt);
                    }
                    // At the time the executor saw it: an exit seen before
                    // its deadline wins, however late this thread runs.
                    // (`max` then `min`: no panic even if a clock misbehaved.)
                    let at = at.max(self.applied).min(now);
                    self.applied = at;
                    effects.extend(self.engine.handle(at, input).effects);
                }
                Msg::Wake => self.obey_shutdown(now, effects),
                Msg::WallStepped => {}
                Msg::TriggersDurable(dag_runs) => {
                    let input = Input::TriggerDurable { dag_runs };
                    effects.extend(self.engine.handle(now, input).effects);
                }
                Msg::Scanned { scan, ticket } => {
                    self.scanned(now, *scan, ticket, effects, &mut durable);
                }
                Msg::Cluster { input, done } => {
                    if let Input::Lead { leader, .. } = &input {
                        announce_lead(*leader);
                    }
                    effects.extend(self.engine.handle(now, input).effects);
                    adopted.extend(done);
                }
                Msg::Paused {
                    before,
                    now: paused,
                } => {
                    self.follow_paused(now, &before, &paused, effects);
                }
                Msg::RemoteEvents(events) => self.announce_remote(now, events),
                Msg::AttemptOf { pgid, reply } => {
                    let _ = reply.send(self.attempt_of(pgid));
                }
                Msg::DagNames {
                    runs,
                    dag_runs,
                    reply,
                } => {
                    let _ = reply.send(self.dag_names(&runs, &dag_runs));
                }
                Msg::IdsSeen { run, dag_run } => self.engine.skip_ids_past(run, dag_run),
                Msg::Mailed(m) => self.mailed(now, m, effects),
                Msg::Reload => {
                    let actor: Arc<str> = Arc::from("signal SIGHUP");
                    if let Err(e) = self.reload(now, &actor, effects) {
                        tracing::error!("reload refused, the running config stays: {}", e.message);
                    }
                }
            }
        }
        // The deadlines due by now, after every input that came before.
        effects.extend(self.engine.handle(now, Input::Tick).effects);
        self.applied = now;
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
        let wall = self.engine.wall(now);
        let registry = &self.registry;
        self.metrics
            .observe_at(now, wall, effects, |dag| registry.get(dag).is_some());
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
        self.answer_big_reads(now);
        self.maintain(steady_ms());
        self.step_ended = steady_ms();
    }

    /// Hands the wall clock to the engine when it moved against the
    /// engine's clock (a step, a resume from suspend, slewing beyond
    /// `WALL_SYNC`).
    fn follow_wall_clock(&mut self, now: Millis, effects: &mut Vec<Effect>) {
        let wall = now_ms();
        let drift = wall - self.engine.wall(now);
        if drift.abs() < WALL_SYNC {
            return;
        }
        if drift.abs() >= 1_000 {
            tracing::warn!(
                "the wall clock moved {drift:+} ms against the monotonic clock; \
                 timeouts and heartbeats are not affected, cron slots follow the wall clock"
            );
        }
        effects.extend(self.engine.handle(now, Input::WallClock { wall }).effects);
    }

    /// A deadline that fell due after the last step ended and is overdue by
    /// more than `PAUSE_THRESHOLD`: axd could not run meanwhile. The
    /// engine holds every deadline for `SETTLE`, so the exits, heartbeats
    /// and output that arrived in the pause are applied first.
    fn settle_after_pause(&mut self, now: Millis, effects: &mut Vec<Effect>) {
        let Some(due) = self.engine.next_wakeup() else {
            return;
        };
        if due < self.step_ended || now - due <= PAUSE_THRESHOLD {
            return;
        }
        tracing::warn!(
            "axd could not run for {} ms (stopped, a paused VM, a stall): deadlines wait {SETTLE} ms \
             for the exits and heartbeats that arrived meanwhile",
            now - due
        );
        let until = now + SETTLE;
        effects.extend(self.engine.handle(now, Input::Settle { until }).effects);
    }

    /// Answers waiting big reads, oldest first, for `BIG_READS_PER_STEP`
    /// at most; the rest wait for the next step (which comes at once). A
    /// read whose client has gone costs nothing. Reads change nothing, so
    /// they have no effects and need no commit.
    fn answer_big_reads(&mut self, now: Millis) {
        let began = std::time::Instant::now();
        while let Some((peer, request, reply)) = self.big_reads.pop_front() {
            if reply.is_closed() {
                continue;
            }
            let mut effects = Vec::new();
            let answer = self.request(now, &peer, request, &mut effects);
            debug_assert!(effects.is_empty(), "a read had effects");
            let _ = reply.send(answer);
            if began.elapsed() >= BIG_READS_PER_STEP {
                break;
            }
        }
    }

    /// Hands the step's changes, with the answers waiting on them, to the
    /// writer.
    fn write(&mut self, now: Millis, effects: &[Effect], replies: Answers) {
        let mut changes = commit_of(&self.engine, effects);
        let progress: Vec<u64> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::Progress { run } => Some(run.0),
                _ => None,
            })
            .collect();
        let mails = self.finished_reports(effects);
        // Nothing to write, answer or announce (a tick, an output
        // heartbeat, a read): no step.
        if changes.is_empty()
            && replies.is_empty()
            && progress.is_empty()
            && mails.is_empty()
            && !self.registry.has_pending()
        {
            // A hold whose submit created nothing guards no commit.
            drop(self.store.take_unique_holds());
            return;
        }
        let announce = self.notify.receiver_count() > 0
            && (!changes.events.is_empty() || !progress.is_empty());
        let defs = self.registry.take_pending();
        changes.paused = defs.paused;
        changes.dag_defs = defs.dag_defs;
        changes.removed_defs = defs.removed;
        changes.defs_complete = defs.complete;
        let step = Step {
            changes,
            progress,
            replies,
            status: announce.then(|| self.status(now)),
            on_commit: mail::then(
                mail::then(
                    self.on_commit_of_triggers(effects),
                    self.on_commit_of_mails(mails),
                ),
                self.exec.take_forgets(),
            ),
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
    fn on_commit_of_triggers(&self, effects: &[Effect]) -> Option<mail::OnCommit> {
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

    /// The order with its job's held secret values put in its `env`; an
    /// order whose values are not held (axd restarted) goes as it is, and
    /// the executor fails the attempt.
    fn with_held_secrets(&self, o: &SpawnOrder) -> SpawnOrder {
        let job = o.job();
        let Some(held) = self
            .held_secrets
            .get(&o.dag_run)
            .filter(|_| !job.held_secrets.is_empty())
        else {
            return o.clone();
        };
        let mut spec = (*o.spec).clone();
        let j = &mut spec.jobs[o.job_index as usize];
        for name in &job.held_secrets {
            if let Some(v) = held.get(&(job.id.clone(), name.clone())) {
                j.env.insert(name.clone(), v.clone());
            }
        }
        SpawnOrder {
            spec: Arc::new(spec),
            ..o.clone()
        }
    }

    fn execute(&mut self, effects: &[Effect]) {
        for e in effects {
            match e {
                Effect::Spawn(o) => {
                    self.exec.spawn(self.with_held_secrets(o));
                }
                Effect::Reattach(o) => self.exec.reattach(o.clone()),
                Effect::Kill {
                    run,
                    attempt,
                    reason,
                    grace_ms,
                } => {
                    // At shutdown every job gets the whole `shutdown_grace`
                    // to stop by itself, whatever its `kill_grace`.
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
                    self.held_secrets.remove(dag_run);
                    tracing::info!(dag = %dag, dag_run = dag_run.0, "DAG run finished: {state:?}");
                }
                _ => {}
            }
        }
    }

    /// Reads `axd.toml` again and puts it in force (docs/config.md), then
    /// orders a scan of the jobs folder, put in force when it arrives. A
    /// broken config changes nothing and is the error; so is a pool
    /// removed while runs are in it. Returns the restart-only keys that
    /// changed and were not applied.
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
            self.exec.set_job_env(&new);
            self.mailer.configure(crate::notifier::Settings::of(&new));
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
        self.order_scan(actor, define_all);
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
        // An empty step: the writer checks the state dir after it, so a
        // deleted one is noticed within a minute even while nothing is
        // written (`crate::runtime::state_dir`).
        let _ = self.writer.send(Step::default());
        // Finished times are wall-clock times; the cadence is monotonic.
        let wall = self.engine.wall(now);
        let held_before = wall - EVICT_AFTER;
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
        let order = crate::store::retention::Order {
            age_before: wall - self.cfg.log_retain.as_millis() as Millis,
            held_before,
            keep_runs,
        };
        // The pruner ends only after this thread drops its end.
        let _ = self.retention.orders.send(order);
    }
}
