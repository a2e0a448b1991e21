//! The scheduling engine: a pure state machine that applies the rules of
//! docs/job-files.md and docs/config.md to runs.
//!
//! `Engine::handle(now, input)` applies one input at time `now` and returns
//! what to do about it (`Effect`s: spawn, kill, events, finished DAG runs)
//! plus a reply for the caller. `next_wakeup()` says when it next needs to be
//! called with `Input::Tick`. It never reads a clock, spawns, sleeps or does
//! I/O; randomness (retry jitter) comes from a seeded RNG given at
//! construction, so every run of a test is reproducible.
//!
//! Invariants kept by every step:
//! * a `Ready` run of an unpaused DAG is in exactly one pool queue; of a
//!   paused DAG, in `held` instead; one created by a trigger whose commit
//!   is not yet acknowledged (`awaits_commit`), in neither;
//! * `pool.running` and `running_total` count `Running` runs, whose slots
//!   are only released when the executor reports the process reaped
//!   (`Exited` / `SpawnFailed`);
//! * a run has at most one timer of each kind, recorded on the run so it
//!   can be removed exactly (no stale timers, `next_wakeup` is exact);
//! * every id in a held run's `downstream` names a held run (eviction
//!   unlinks what it removes), and every unfinished run's pool exists
//!   (restore ends the others), so no input meets a missing table entry;
//! * after every step, no ready run could start: dispatch runs last.
//!
//! Two clocks (docs/operations.md, "Clock steps and suspend"): `now` is
//! the engine's clock, monotonic (the daemon derives it from
//! CLOCK_MONOTONIC), and every deadline lives on it: timeouts, heartbeats,
//! backoff, the retry budget, queue ages. The wall clock is an input
//! (`Input::WallClock`, kept as the offset wall − now): what is recorded or
//! shown (events, attempts' and runs' times, `next_at`) is stamped in wall
//! time, and cron slots are wall-clock instants whose timers are placed on
//! the engine's clock through the offset, re-placed when the offset moves.
//!
//! Each concern lives in its own file with its own `impl Engine`: `io` (inputs,
//! replies, effects), `run` (runs and DAG runs), `pool` (slots, queues, the
//! retry budget), `submit`, `restore`, `lifecycle` (transitions, cancel,
//! retry, pause), `attempts`, `timers`, `dispatch`, `explain` (`why`),
//! `triggers` (cron and `after`), `cluster` (one node of a cluster),
//! `reconfigure` (a reloaded config), and the data structures `queue` and
//! `table`. `sim` drives the engine on a virtual clock for tests and
//! benchmarks.

mod at_boot;
mod attempts;
mod cluster;
mod dispatch;
mod explain;
mod io;
mod lifecycle;
mod pool;
mod queue;
mod reconfigure;
mod restore;
mod run;
/// A driver for tests and benchmarks: the engine on a virtual clock.
pub mod sim;
mod submit;
mod table;
mod timers;
mod triggers;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use ax_shared::{DagSpec, DepMode, JobSpec, Outcome, RunState, Timeout};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

pub use cluster::{IdScheme, PoolLease};
pub use io::{
    Effect, EngineError, Event, Input, KillReason, Reattach, Reply, SpawnOrder, StepOutput, Submit,
    Unique, UniqueHolder,
};
use pool::{Pool, TokenBucket};
pub use queue::{Aging, Candidate, ReadyQueue};
pub use run::{Attempt, DagRun, DagRunState, Delay, RestoredDagRun, Run};
use table::RunTable;
use timers::{Timer, TimerKind};
pub use triggers::{Fired, Trigger, TriggerMarks};

/// Hashes sequential ids with a Fibonacci multiply: ids are trusted
/// (allocated by the engine), so SipHash's DoS resistance buys nothing and
/// costs a third of a dispatch.
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type IdMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<IdHasher>>;

/// Milliseconds: since the Unix epoch for wall-clock times; on the
/// engine's monotonic clock for `now` and deadlines (see the module doc).
pub type Millis = i64;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RunId(pub u64);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DagRunId(pub u64);

impl std::fmt::Display for RunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}
impl std::fmt::Display for DagRunId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Scheduling limits and policies from `axd.toml`.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub max_concurrency: u32,
    pub pools: BTreeMap<String, u32>,
    pub burst_priority: u8,
    pub burst_extra: u32,
    pub aging: Aging,
    /// Retry tokens per minute; also the bucket's capacity.
    pub retry_per_minute: u32,
    /// `None` = no default timeout.
    pub default_timeout: Option<Millis>,
    /// A pool's timeout for its jobs that set none, in place of
    /// `default_timeout` (`None` inside: no limit).
    pub pool_timeouts: BTreeMap<String, Option<Millis>>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_concurrency: 8,
            pools: BTreeMap::from([("default".to_string(), 8)]),
            burst_priority: 90,
            burst_extra: 3,
            aging: Aging {
                every: 600_000,
                cap: 90,
            },
            retry_per_minute: 100,
            default_timeout: None,
            pool_timeouts: BTreeMap::new(),
        }
    }
}

pub struct Engine {
    cfg: EngineConfig,
    rng: SmallRng,
    runs: RunTable,
    dag_runs: IdMap<DagRunId, DagRun>,
    next_run: u64,
    next_dag_run: u64,
    pools: BTreeMap<String, Pool>,
    running_total: u32,
    timers: BTreeSet<(Millis, Timer)>,
    budget: TokenBucket,
    budget_waiters: VecDeque<RunId>,
    paused: HashSet<String>,
    /// Ready runs of paused DAGs.
    held: HashMap<Arc<str>, BTreeSet<RunId>>,
    /// Unfinished runs by DAG name (for pause and removal).
    active_by_dag: HashMap<Arc<str>, BTreeSet<RunId>>,
    unique: HashMap<String, DagRunId>,
    /// States of finished runs that are upstream of loaded runs but were not
    /// loaded themselves (restored from the store).
    external: HashMap<RunId, RunState>,
    shutting_down: bool,
    /// Attempts of an earlier life whose processes still run, to be taken
    /// over by the first restore (`set_reattach`).
    reattach: HashMap<(RunId, u32), Reattach>,
    /// Of those, the ones the restore took (`reattached`).
    reattached: Vec<(RunId, u32)>,
    counts: [u64; 8],
    effects: Vec<Effect>,
    /// The actor of the engine's own decisions, allocated once.
    scheduler: Arc<str>,
    cron_actor: Arc<str>,
    dags: HashMap<String, triggers::DagDef>,
    dag_keys: HashMap<String, u32>,
    dag_names: Vec<String>,
    dag_timers: HashMap<u32, Millis>,
    /// Unfinished DAG runs by DAG name (overlap policies).
    active_dag_runs: HashMap<String, BTreeSet<DagRunId>>,
    /// The DAG whose active runs a new slot is cancelling (`overlap =
    /// "replace"`): its queue waits for the replacing run.
    replacing: Option<String>,
    /// Trigger queues from the store not yet claimed by a DAG definition.
    stored_queues: HashMap<String, Vec<Trigger>>,
    /// DAG runs in the order they finished, for eviction.
    finished_order: VecDeque<(Millis, DagRunId)>,
    evicted_counts: [u64; 8],
    /// How `next_run` and `next_dag_run` (counters) become ids.
    ids: IdScheme,
    /// Submitted DAG runs are offered to the cluster (`cluster`).
    offering: bool,
    /// DAG runs offered in this step, forgotten by `forget_offered`.
    offered: Vec<DagRunId>,
    /// Of `offered`, those a trigger created: watched once forgotten.
    offered_by_trigger: HashSet<DagRunId>,
    /// Unfinished DAG runs of defined DAGs that other nodes hold or may
    /// claim, by DAG name: the overlap policies count them as active.
    elsewhere: HashMap<String, BTreeSet<DagRunId>>,
    /// Cron slots are fired here (false on a cluster's followers).
    cron_leader: bool,
    /// The machine's boot id (`set_boot`): `@reboot` DAGs fire once for
    /// each; `None`, when it cannot be read, fires none.
    boot: Option<Arc<str>>,
    /// Pools' slots are leased from the cluster (`Input::Leases`).
    leasing: bool,
    /// This node's id in a cluster, recorded on each attempt it starts.
    node: Option<String>,
    /// Wall clock minus engine clock, as last given (`Input::WallClock`).
    wall_offset: Millis,
    /// No timer fires before this instant (`Input::Settle`).
    settle_until: Millis,
}

fn state_index(s: RunState) -> usize {
    RunState::ALL
        .iter()
        .position(|x| *x == s)
        .expect("every state is listed")
}

fn clock(ms: Millis) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%H:%M:%S UTC").to_string())
        .unwrap_or_else(|| ms.to_string())
}

const SCHEDULER: &str = "scheduler";

impl Engine {
    pub fn new(cfg: EngineConfig, seed: u64) -> Engine {
        let pools = cfg
            .pools
            .iter()
            .map(|(name, slots)| (name.clone(), Pool::new(*slots)))
            .collect();
        let budget = TokenBucket::new(cfg.retry_per_minute);
        Engine {
            cfg,
            rng: SmallRng::seed_from_u64(seed),
            runs: RunTable::default(),
            dag_runs: IdMap::default(),
            next_run: 1,
            next_dag_run: 1,
            pools,
            running_total: 0,
            timers: BTreeSet::new(),
            budget,
            budget_waiters: VecDeque::new(),
            paused: HashSet::new(),
            held: HashMap::new(),
            active_by_dag: HashMap::new(),
            unique: HashMap::new(),
            external: HashMap::new(),
            shutting_down: false,
            reattach: HashMap::new(),
            reattached: Vec::new(),
            counts: [0; 8],
            effects: Vec::new(),
            scheduler: Arc::from(SCHEDULER),
            cron_actor: Arc::from("cron"),
            dags: HashMap::new(),
            dag_keys: HashMap::new(),
            dag_names: Vec::new(),
            dag_timers: HashMap::new(),
            active_dag_runs: HashMap::new(),
            replacing: None,
            stored_queues: HashMap::new(),
            finished_order: VecDeque::new(),
            evicted_counts: [0; 8],
            ids: IdScheme::default(),
            offering: false,
            offered: Vec::new(),
            offered_by_trigger: HashSet::new(),
            elsewhere: HashMap::new(),
            cron_leader: true,
            boot: None,
            leasing: false,
            node: None,
            wall_offset: 0,
            settle_until: Millis::MIN,
        }
    }

    /// The wall-clock time at engine time `now`.
    pub fn wall(&self, now: Millis) -> Millis {
        now.saturating_add(self.wall_offset)
    }

    /// The engine time at which the wall clock will read `wall` (as far as
    /// the offset known now says).
    fn engine_time(&self, wall: Millis) -> Millis {
        wall.saturating_sub(self.wall_offset)
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// Applies one input at `now`, then fires due timers and dispatches.
    pub fn handle(&mut self, now: Millis, input: Input) -> StepOutput {
        // Deadlines strictly before `now` happened before the input did;
        // one falling exactly at `now` loses the tie (a process that exits
        // at its timeout instant has exited, not timed out). A settle
        // comes first: it holds back deadlines that fell due while the
        // daemon could not run.
        if !matches!(input, Input::Settle { .. }) {
            self.fire_timers(now - 1);
        }
        let reply = self.apply(now, input);
        self.fire_timers(now);
        self.dispatch(now);
        StepOutput {
            reply,
            effects: std::mem::take(&mut self.effects),
        }
    }

    /// When `handle(_, Input::Tick)` must next be called, if ever.
    pub fn next_wakeup(&self) -> Option<Millis> {
        self.timers
            .first()
            .map(|(t, _)| (*t).max(self.settle_until))
    }

    /// Sets whether a DAG is paused (restored from the store at start-up).
    pub fn set_paused(&mut self, now: Millis, dag: &str, paused: bool) {
        if paused {
            self.pause(dag);
        } else {
            self.resume(now, dag);
        }
    }

    // ----- queries ---------------------------------------------------------

    pub fn run(&self, id: RunId) -> Option<&Run> {
        self.runs.get(&id)
    }

    pub fn runs(&self) -> impl Iterator<Item = &Run> {
        self.runs.values()
    }

    pub fn dag_run(&self, id: DagRunId) -> Option<&DagRun> {
        self.dag_runs.get(&id)
    }

    pub fn dag_runs(&self) -> impl Iterator<Item = &DagRun> {
        self.dag_runs.values()
    }

    /// Whether the engine holds a DAG run with this unique key (every
    /// unfinished one, and finished ones until they are evicted).
    pub fn holds_unique_key(&self, key: &str) -> bool {
        self.unique.contains_key(key)
    }

    /// Whether the DAG run holding this unique key here is unfinished
    /// (one that ended says nothing of other nodes' DAG runs).
    pub fn holds_active_unique_key(&self, key: &str) -> bool {
        self.unique
            .get(key)
            .and_then(|id| self.dag_runs.get(id))
            .is_some_and(|d| d.state == DagRunState::Active)
    }

    pub fn is_paused(&self, dag: &str) -> bool {
        self.paused.contains(dag)
    }

    pub fn count(&self, state: RunState) -> u64 {
        self.counts[state_index(state)]
    }

    pub fn running_total(&self) -> u32 {
        self.running_total
    }

    /// Running attempts being killed (a cancel, timeout, stall or
    /// preemption in its grace): a daemon that stops leaving its jobs
    /// running waits for these to end, since the kill is not stored.
    pub fn being_killed(&self) -> usize {
        self.runs
            .values()
            .filter(|r| r.state == RunState::Running && r.kill.is_some())
            .count()
    }

    /// `(name, slots, running)` of every pool.
    pub fn pool_usage(&self) -> Vec<(String, u32, u32)> {
        self.pools
            .iter()
            .map(|(n, p)| (n.clone(), p.slots, p.running))
            .collect()
    }

    /// Ready runs queued for a slot, per pool.
    pub fn pool_queued(&self) -> Vec<(String, u32)> {
        self.pools
            .iter()
            .map(|(n, p)| (n.clone(), p.queue.len() as u32))
            .collect()
    }

    /// Retry tokens available at `now` (the bucket is not changed).
    pub fn retry_tokens(&self, now: Millis) -> f64 {
        let mut bucket = self.budget.clone();
        bucket.refill(now);
        bucket.tokens
    }

    /// Burst slots in use: running runs beyond `max_concurrency`.
    pub fn burst_in_use(&self) -> u32 {
        self.running_total.saturating_sub(self.cfg.max_concurrency)
    }

    pub fn effective_priority(&self, id: RunId, now: Millis) -> Option<u8> {
        let run = self.runs.get(&id)?;
        Some(match (run.state, run.ready_at) {
            (RunState::Ready, Some(at)) => self.cfg.aging.effective(run.priority(), at, now),
            _ => run.priority(),
        })
    }

    // ----- inputs ----------------------------------------------------------

    /// A run the engine holds, or `NotFound` for an input that names another.
    fn known_run(&self, id: RunId) -> Result<&Run, EngineError> {
        self.runs
            .get(&id)
            .ok_or_else(|| EngineError::NotFound(format!("run {id}")))
    }

    /// The unfinished runs of `dag`, copied out so the caller may change them.
    fn unfinished_runs_of(&self, dag: &str) -> Vec<RunId> {
        self.active_by_dag
            .get(dag)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default()
    }

    fn apply(&mut self, now: Millis, input: Input) -> Result<Reply, EngineError> {
        match input {
            Input::Submit(s) => self.submit(now, s),
            Input::Reconfigure(cfg) => self.reconfigure(now, cfg),
            // The executor's reports on attempts (attempts.rs).
            Input::Started {
                run,
                attempt,
                pid,
                pid_start,
            } => self.started(now, run, attempt, pid, pid_start),
            Input::SpawnWaiting {
                run,
                attempt,
                error,
            } => self.spawn_waiting(now, run, attempt, error),
            Input::SpawnFailed {
                run,
                attempt,
                error,
            } => self.spawn_failed(now, run, attempt, error),
            Input::Exited {
                run,
                attempt,
                code,
                signal,
            } => self.exited(now, run, attempt, code, signal),
            Input::Beat {
                run,
                message,
                progress,
            } => self.beat_with_report(now, run, message, progress),
            Input::Output { run } => {
                self.beat(now, run)?;
                Ok(Reply::Done)
            }
            Input::LogLost {
                run,
                attempt,
                bytes,
            } => self.log_lost(run, attempt, bytes),
            // Operators' actions on runs and DAGs (lifecycle.rs).
            Input::Cancel { run, actor } => self.cancel(now, run, &actor),
            Input::CancelDagRun { dag_run, actor } => self.cancel_dag_run(now, dag_run, &actor),
            Input::Retry { run, actor } => self.retry(now, run, &actor),
            Input::Pause { dag } => {
                self.pause(&dag);
                Ok(Reply::Done)
            }
            Input::Resume { dag } => {
                self.resume(now, &dag);
                Ok(Reply::Done)
            }
            Input::Shutdown => {
                self.shutdown();
                Ok(Reply::Done)
            }
            Input::Detach => {
                self.shutting_down = true;
                Ok(Reply::Done)
            }
            // DAG definitions and their triggers (triggers.rs).
            Input::Trigger { dag, actor, force } => self
                .trigger_manual(now, &dag, &actor, force)
                .map(|fired| Reply::Triggered(Box::new(fired))),
            Input::DefineDag {
                spec,
                zone,
                watermark,
                boots_seen,
            } => {
                self.define_dag(now, spec, zone, watermark, boots_seen);
                Ok(Reply::Done)
            }
            Input::RemoveDag { dag, actor } => {
                self.remove_dag(now, &dag, &actor);
                Ok(Reply::Done)
            }
            Input::TriggerDurable { dag_runs } => {
                self.trigger_durable(&dag_runs);
                Ok(Reply::Done)
            }
            // One node of a cluster (cluster.rs).
            Input::Adopt { dag_runs, external } => self.adopt(now, dag_runs, external),
            Input::Leases { pool, slots } => {
                self.set_leases(&pool, slots);
                Ok(Reply::Done)
            }
            Input::Lead {
                leader,
                marks,
                active,
            } => {
                self.lead(now, leader, marks, active);
                Ok(Reply::Done)
            }
            Input::EndedElsewhere { dag_runs } => {
                self.ended_elsewhere(now, &dag_runs);
                Ok(Reply::Done)
            }
            // Clocks (timers.rs).
            Input::WallClock { wall } => {
                self.set_wall(now, wall);
                Ok(Reply::Done)
            }
            Input::Settle { until } => {
                self.settle(until);
                Ok(Reply::Done)
            }
            Input::Tick => Ok(Reply::Done),
        }
    }
}
