//! The scheduling engine: a pure state machine (SPEC §3–4).
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
//!   paused DAG, in `held` instead;
//! * `pool.running` and `running_total` count `Running` runs, whose slots
//!   are only released when the executor reports the process reaped
//!   (`Exited` / `SpawnFailed`);
//! * a run has at most one timer of each kind, recorded on the run so it
//!   can be removed exactly (no stale timers, `next_wakeup` is exact);
//! * after every step, no ready run could start: dispatch runs last.

mod queue;
mod table;
mod triggers;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use ax_shared::{DagSpec, DepMode, JobSpec, Outcome, RunState, Timeout};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

pub use queue::{Aging, Candidate, ReadyQueue};
use table::RunTable;

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

/// Wall-clock time in milliseconds since the Unix epoch.
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
            default_timeout: Some(3_600_000),
        }
    }
}

/// Why a running attempt is being killed; decides its outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KillReason {
    Timeout,
    Stalled,
    Cancel,
    Preempt,
    Shutdown,
}

impl KillReason {
    fn outcome(self) -> Outcome {
        match self {
            KillReason::Timeout => Outcome::TimedOut,
            KillReason::Stalled => Outcome::Stalled,
            KillReason::Cancel => Outcome::Cancelled,
            KillReason::Preempt => Outcome::Preempted,
            KillReason::Shutdown => Outcome::Interrupted,
        }
    }
}

/// One process execution of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    pub n: u32,
    pub started_at: Millis,
    pub finished_at: Option<Millis>,
    pub outcome: Option<Outcome>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub pid: Option<u32>,
    /// The process's start time (clock ticks since boot, from
    /// /proc/PID/stat) so a later life never kills a reused pid.
    pub pid_start: Option<u64>,
    pub slot: u32,
    pub error: Option<String>,
}

/// What a delayed run waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delay {
    Backoff,
    RetryBudget,
}

/// One job inside one DAG run.
#[derive(Clone, Debug)]
pub struct Run {
    pub id: RunId,
    pub dag_run: DagRunId,
    pub dag: Arc<str>,
    /// The DAG version this run was created from (shared by its DAG run;
    /// a changed file never alters runs already started).
    pub spec: Arc<DagSpec>,
    pub job_index: u32,
    pub state: RunState,
    pub attempts: Vec<Attempt>,
    /// Attempts that counted against `retries` since the last manual retry.
    pub counted_failures: u32,
    pub created_at: Millis,
    pub ready_at: Option<Millis>,
    pub started_at: Option<Millis>,
    pub finished_at: Option<Millis>,
    pub next_at: Option<Millis>,
    pub delay: Option<Delay>,
    /// Reason of the last transition (`upstream_failed: fetch`, …).
    pub reason: String,
    pub message: Option<String>,
    pub progress: Option<f64>,
    pub upstream: Vec<RunId>,
    pub downstream: Vec<RunId>,
    succeeded_up: u32,
    failed_up: u32,
    kill: Option<KillReason>,
    slot: Option<u32>,
    timers: RunTimers,
}

#[derive(Clone, Copy, Debug, Default)]
struct RunTimers {
    wake: Option<Millis>,
    timeout: Option<Millis>,
    heartbeat: Option<Millis>,
}

impl Run {
    pub fn job(&self) -> &JobSpec {
        &self.spec.jobs[self.job_index as usize]
    }
    pub fn priority(&self) -> u8 {
        self.job().priority
    }
    pub fn pool(&self) -> &str {
        &self.job().pool
    }
    pub fn kill_reason(&self) -> Option<KillReason> {
        self.kill
    }
    pub fn slot(&self) -> Option<u32> {
        self.slot
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DagRunState {
    Active,
    Success,
    Failed,
    Cancelled,
}

#[derive(Clone, Debug)]
pub struct DagRun {
    pub id: DagRunId,
    pub dag: Arc<str>,
    pub spec: Arc<DagSpec>,
    pub runs: Vec<RunId>,
    pub state: DagRunState,
    pub created_at: Millis,
    pub finished_at: Option<Millis>,
    pub trigger: String,
    pub unique_key: Option<String>,
    unfinished: usize,
}

impl DagRun {
    /// A copy for the store, which keeps the DAG run's own fields but not
    /// its list of runs (each run row names its DAG run): copying that
    /// list for every step of a 100,000-job DAG run cost 800 KB a step.
    pub fn row(&self) -> DagRun {
        DagRun {
            id: self.id,
            dag: self.dag.clone(),
            spec: self.spec.clone(),
            runs: Vec::new(),
            state: self.state,
            created_at: self.created_at,
            finished_at: self.finished_at,
            trigger: self.trigger.clone(),
            unique_key: self.unique_key.clone(),
            unfinished: self.unfinished,
        }
    }
}

/// A run as loaded from the store at start-up.
#[derive(Clone, Debug)]
pub struct RestoredRun {
    pub id: RunId,
    pub job_index: u32,
    pub state: RunState,
    pub attempts: Vec<Attempt>,
    pub counted_failures: u32,
    pub created_at: Millis,
    pub ready_at: Option<Millis>,
    pub started_at: Option<Millis>,
    pub finished_at: Option<Millis>,
    pub next_at: Option<Millis>,
    pub delay: Option<Delay>,
    pub reason: String,
    pub message: Option<String>,
    pub progress: Option<f64>,
    pub upstream: Vec<RunId>,
}

#[derive(Clone, Debug)]
pub struct RestoredDagRun {
    pub id: DagRunId,
    pub spec: Arc<DagSpec>,
    pub state: DagRunState,
    pub created_at: Millis,
    pub trigger: String,
    pub unique_key: Option<String>,
    pub runs: Vec<RestoredRun>,
}

/// A request to create a DAG run.
#[derive(Clone, Debug)]
pub struct Submit {
    pub dag: Arc<DagSpec>,
    pub trigger: String,
    pub actor: Arc<str>,
    pub unique: Option<Unique>,
    /// Existing runs that the new DAG run's root jobs also depend on.
    pub after: Vec<RunId>,
}

#[derive(Clone, Debug)]
pub struct Unique {
    pub key: String,
    /// Also deduplicate against finished DAG runs created this recently.
    pub within: Option<Millis>,
}

#[derive(Clone, Debug)]
pub enum Input {
    Submit(Submit),
    /// The executor spawned the attempt's process.
    Started {
        run: RunId,
        attempt: u32,
        pid: u32,
        pid_start: Option<u64>,
    },
    /// The attempt's process could not be spawned; its slot is free.
    SpawnFailed {
        run: RunId,
        attempt: u32,
        error: String,
    },
    /// The attempt's process exited and was reaped; its slot is free.
    Exited {
        run: RunId,
        attempt: u32,
        code: Option<i32>,
        signal: Option<i32>,
    },
    /// `ax heartbeat` from inside the job.
    Beat {
        run: RunId,
        message: Option<String>,
        progress: Option<f64>,
    },
    /// The attempt wrote output (counts as a heartbeat).
    Output {
        run: RunId,
    },
    Cancel {
        run: RunId,
        actor: Arc<str>,
    },
    CancelDagRun {
        dag_run: DagRunId,
        actor: Arc<str>,
    },
    Retry {
        run: RunId,
        actor: Arc<str>,
    },
    Pause {
        dag: String,
    },
    Resume {
        dag: String,
    },
    /// A DAG definition from the jobs folder (new, changed, or at start-up
    /// with the watermark the store remembers).
    DefineDag {
        spec: Arc<DagSpec>,
        zone: chrono_tz::Tz,
        watermark: Option<Millis>,
    },
    /// The DAG's file was deleted: cancel its runs that have not started.
    RemoveDag {
        dag: String,
        actor: Arc<str>,
    },
    /// Stop dispatching and kill every running attempt as `interrupted`.
    Shutdown,
    /// Time passed; fire due timers.
    Tick,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    Done,
    Submitted {
        dag_run: DagRunId,
        runs: Vec<RunId>,
        deduplicated: bool,
    },
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    InvalidState(String),
    #[error("{0}")]
    Invalid(String),
}

impl EngineError {
    /// Stable error code for the protocol.
    pub fn code(&self) -> &'static str {
        match self {
            EngineError::NotFound(_) => "not_found",
            EngineError::InvalidState(_) => "invalid_state",
            EngineError::Invalid(_) => "invalid_params",
        }
    }
}

/// An order for the executor.
#[derive(Clone, Debug, PartialEq)]
pub struct SpawnOrder {
    pub run: RunId,
    pub dag_run: DagRunId,
    pub dag: Arc<str>,
    pub attempt: u32,
    pub slot: u32,
    pub spec: Arc<DagSpec>,
    pub job_index: u32,
}

impl SpawnOrder {
    pub fn job(&self) -> &JobSpec {
        &self.spec.jobs[self.job_index as usize]
    }
}

/// One line of the audit trail (SPEC §3). `run` is `None` for DAG-run-level
/// events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub at: Millis,
    pub run: Option<RunId>,
    pub dag_run: DagRunId,
    pub from: Option<RunState>,
    pub to: Option<RunState>,
    pub reason: String,
    pub actor: Arc<str>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    Spawn(SpawnOrder),
    /// SIGTERM the attempt's process group, wait `grace_ms`, SIGKILL.
    Kill {
        run: RunId,
        attempt: u32,
        reason: KillReason,
        grace_ms: Millis,
    },
    Event(Event),
    /// Message/progress of a running run changed (no state transition).
    Progress {
        run: RunId,
    },
    /// The run's row changed with nothing to announce (a started
    /// attempt's pid, which a restart needs to find its processes).
    Persist {
        run: RunId,
    },
    DagRunFinished {
        dag_run: DagRunId,
        dag: Arc<str>,
        state: DagRunState,
    },
    /// A DAG's cron watermark advanced to `slot` (commit with the runs).
    CronMark {
        dag: String,
        slot: Millis,
    },
}

/// Result of one `handle` call.
#[derive(Debug)]
pub struct Step {
    pub reply: Result<Reply, EngineError>,
    pub effects: Vec<Effect>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    Wake(RunId),
    Timeout(RunId),
    Heartbeat(RunId),
    RetryBudget,
    /// A DAG's next cron slot (by interned DAG key).
    Cron(u32),
}

#[derive(Debug)]
struct Pool {
    slots: u32,
    running: u32,
    free: BTreeSet<u32>,
    queue: ReadyQueue,
    /// Running preemptible runs not yet being killed, lowest priority first,
    /// then the most recently started (least work lost).
    victims: BTreeSet<(u8, std::cmp::Reverse<Millis>, RunId)>,
    /// Preemption kills issued for this pool and not yet reaped.
    preempting: u32,
}

impl Pool {
    fn new(slots: u32) -> Pool {
        Pool {
            slots,
            running: 0,
            free: (0..slots).collect(),
            queue: ReadyQueue::default(),
            victims: BTreeSet::new(),
            preempting: 0,
        }
    }
}

#[derive(Debug)]
struct TokenBucket {
    capacity: f64,
    tokens: f64,
    per_ms: f64,
    last: Millis,
}

impl TokenBucket {
    fn new(per_minute: u32) -> TokenBucket {
        let capacity = f64::from(per_minute.max(1));
        TokenBucket {
            capacity,
            tokens: capacity,
            per_ms: capacity / 60_000.0,
            last: Millis::MIN,
        }
    }
    fn refill(&mut self, now: Millis) {
        if self.last != Millis::MIN && now > self.last {
            self.tokens = (self.tokens + (now - self.last) as f64 * self.per_ms).min(self.capacity);
        }
        self.last = self.last.max(now);
    }
    fn take(&mut self, now: Millis) -> bool {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
    /// When the next whole token will be available.
    fn next_token_at(&self, now: Millis) -> Millis {
        let missing = (1.0 - self.tokens).max(0.0);
        now + (missing / self.per_ms).ceil() as Millis
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
    /// DAG runs in the order they finished, for eviction.
    finished_order: VecDeque<(Millis, DagRunId)>,
    evicted_counts: [u64; 8],
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
            counts: [0; 8],
            effects: Vec::new(),
            scheduler: Arc::from(SCHEDULER),
            cron_actor: Arc::from("cron"),
            dags: HashMap::new(),
            dag_keys: HashMap::new(),
            dag_names: Vec::new(),
            dag_timers: HashMap::new(),
            active_dag_runs: HashMap::new(),
            finished_order: VecDeque::new(),
            evicted_counts: [0; 8],
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// Applies one input at `now`, then fires due timers and dispatches.
    pub fn handle(&mut self, now: Millis, input: Input) -> Step {
        // Deadlines strictly before `now` happened before the input did;
        // one falling exactly at `now` loses the tie (a process that exits
        // at its timeout instant has exited, not timed out).
        self.fire_timers(now - 1);
        let reply = self.apply(now, input);
        self.fire_timers(now);
        self.dispatch(now);
        Step {
            reply,
            effects: std::mem::take(&mut self.effects),
        }
    }

    /// When `handle(_, Input::Tick)` must next be called, if ever.
    pub fn next_wakeup(&self) -> Option<Millis> {
        self.timers.first().map(|(t, _)| *t)
    }

    /// Forgets DAG runs that finished before `before`: they live on in the
    /// store, and the engine's memory follows the work in flight rather
    /// than the whole history. A run that unfinished runs depend on is
    /// remembered by its final state only. Returns how many DAG runs went.
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
            let dr = self.dag_runs.remove(&id).expect("checked");
            for r in &dr.runs {
                if let Some(run) = self.runs.remove(r) {
                    if !run.downstream.is_empty() {
                        self.external.insert(run.id, run.state);
                    }
                    self.counts[state_index(run.state)] -= 1;
                    self.evicted_counts[state_index(run.state)] += 1;
                }
            }
            if let Some(k) = &dr.unique_key
                && self.unique.get(k) == Some(&id)
            {
                self.unique.remove(k);
            }
            evicted += 1;
        }
        evicted
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

    /// Loads unfinished DAG runs from the store at start-up (SPEC §5.3).
    /// Runs found `running` from an earlier life get an `interrupted`
    /// attempt and go back to `ready` without consuming a retry. Returns
    /// the resulting effects (events to record).
    pub fn restore(
        &mut self,
        now: Millis,
        mut dag_runs: Vec<RestoredDagRun>,
        next_run: u64,
        next_dag_run: u64,
    ) -> Vec<Effect> {
        dag_runs.sort_by_key(|d| d.id);
        let mut all = Vec::new();
        for d in dag_runs {
            let dag: Arc<str> = Arc::from(d.spec.name.as_str());
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
                self.runs.insert(
                    r.id,
                    Run {
                        id: r.id,
                        dag_run: d.id,
                        dag: dag.clone(),
                        spec: d.spec.clone(),
                        job_index: r.job_index,
                        state: r.state,
                        attempts: r.attempts,
                        counted_failures: r.counted_failures,
                        created_at: r.created_at,
                        ready_at: r.ready_at,
                        started_at: r.started_at,
                        finished_at: r.finished_at,
                        next_at: r.next_at,
                        delay: r.delay,
                        reason: r.reason,
                        message: r.message,
                        progress: r.progress,
                        upstream: r.upstream,
                        downstream: Vec::new(),
                        succeeded_up: 0,
                        failed_up: 0,
                        kill: None,
                        slot: None,
                        timers: RunTimers::default(),
                    },
                );
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
                    finished_at: if unfinished > 0 { None } else { Some(now) },
                    trigger: d.trigger,
                    unique_key: d.unique_key,
                    unfinished,
                },
            );
        }
        for &id in &all {
            let ups = self.runs[&id].upstream.clone();
            for u in ups {
                if let Some(up) = self.runs.get_mut(&u) {
                    up.downstream.push(id);
                }
            }
        }
        let scheduler = self.scheduler.clone();
        for &id in &all {
            match self.runs[&id].state {
                RunState::Running => {
                    let r = self.runs.get_mut(&id).expect("exists");
                    let n = r.attempts.len();
                    if let Some(a) = r.attempts.last_mut()
                        && a.outcome.is_none()
                    {
                        a.outcome = Some(Outcome::Interrupted);
                        a.finished_at = Some(now);
                    }
                    self.requeue_in_place(
                        now,
                        id,
                        format!("attempt {n} interrupted: the daemon stopped while it ran"),
                        &scheduler,
                    );
                }
                RunState::Ready => {
                    let r = &self.runs[&id];
                    let (p, at, pool, dag) = (
                        r.priority(),
                        r.ready_at.unwrap_or(now),
                        r.job().pool.clone(),
                        r.dag.clone(),
                    );
                    if !self.pools.contains_key(&pool) {
                        // The pool was removed from the config: the run
                        // can never start; end it with a reason.
                        self.end(
                            now,
                            id,
                            RunState::Failed,
                            format!("pool {pool:?} no longer exists"),
                            &scheduler,
                        );
                    } else if self.paused.contains(&*dag) {
                        self.held.entry(dag).or_default().insert(id);
                    } else {
                        self.pools
                            .get_mut(&pool)
                            .expect("pool")
                            .queue
                            .insert(p, at, id);
                    }
                }
                RunState::Delayed => {
                    let at = self.runs[&id].next_at.unwrap_or(now);
                    self.runs.get_mut(&id).expect("exists").delay = Some(Delay::Backoff);
                    self.set_timer(id, TimerKind::Wake, Some(at));
                }
                RunState::Waiting => {
                    self.recount_upstream(id);
                    self.evaluate_waiting(now, id, &scheduler);
                }
                _ => {}
            }
        }
        self.next_run = self.next_run.max(next_run);
        self.next_dag_run = self.next_dag_run.max(next_dag_run);
        self.fire_timers(now);
        self.dispatch(now);
        std::mem::take(&mut self.effects)
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

    /// Number of runs held by the engine.
    pub fn run_count(&self) -> usize {
        self.runs.len()
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

    pub fn is_paused(&self, dag: &str) -> bool {
        self.paused.contains(dag)
    }

    pub fn count(&self, state: RunState) -> u64 {
        self.counts[state_index(state)]
    }

    pub fn running_total(&self) -> u32 {
        self.running_total
    }

    /// `(name, slots, running)` of every pool.
    pub fn pool_usage(&self) -> Vec<(String, u32, u32)> {
        self.pools
            .iter()
            .map(|(n, p)| (n.clone(), p.slots, p.running))
            .collect()
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

    /// Why an unfinished run that is not running has not started (SPEC §3).
    pub fn why(&self, id: RunId, now: Millis) -> Option<String> {
        let run = self.runs.get(&id)?;
        match run.state {
            RunState::Waiting => {
                let pending: Vec<String> = run
                    .upstream
                    .iter()
                    .filter_map(|u| self.runs.get(u))
                    .filter(|u| u.state != RunState::Success)
                    .map(|u| {
                        let name = if u.dag_run == run.dag_run {
                            u.job().id.clone()
                        } else {
                            format!("run {} ({}/{})", u.id, u.dag, u.job().id)
                        };
                        format!("{name} ({})", u.state)
                    })
                    .collect();
                Some(match (run.job().dep_mode, pending.len()) {
                    (_, 0) => "waiting for dependencies".into(),
                    (DepMode::Any, n) if n > 1 => {
                        format!("waiting for any of {}", pending.join(", "))
                    }
                    (_, 1) => format!("waiting for {}", pending[0]),
                    (_, n) => format!("waiting for {} and {} more", pending[0], n - 1),
                })
            }
            RunState::Delayed => {
                let at = run.next_at.unwrap_or(now);
                Some(match run.delay {
                    Some(Delay::RetryBudget) => format!("retry budget empty until {}", clock(at)),
                    _ => format!("backoff until {}", clock(at)),
                })
            }
            RunState::Ready => {
                if self.paused.contains(&*run.dag) {
                    return Some("DAG paused".into());
                }
                if self.shutting_down {
                    return Some("daemon shutting down".into());
                }
                let pool = &self.pools[run.pool()];
                if pool.running >= pool.slots {
                    return Some(format!(
                        "pool {} full ({}/{})",
                        run.pool(),
                        pool.running,
                        pool.slots
                    ));
                }
                let max = self.cfg.max_concurrency;
                if self.running_total >= max {
                    if run.priority() >= self.cfg.burst_priority {
                        return Some(format!(
                            "global slots full ({}/{max}) and burst full ({}/{})",
                            self.running_total.min(max),
                            self.burst_in_use(),
                            self.cfg.burst_extra
                        ));
                    }
                    return Some(format!(
                        "global slots full ({}/{max})",
                        self.running_total.min(max)
                    ));
                }
                Some("next in line".into())
            }
            _ => None,
        }
    }

    // ----- inputs ----------------------------------------------------------

    fn apply(&mut self, now: Millis, input: Input) -> Result<Reply, EngineError> {
        match input {
            Input::Submit(s) => self.submit(now, s),
            Input::Started {
                run,
                attempt,
                pid,
                pid_start,
            } => {
                let r = self.running_attempt(run, attempt)?;
                if let Some(a) = r.attempts.last_mut() {
                    a.pid = Some(pid);
                    a.pid_start = pid_start;
                }
                self.effects.push(Effect::Persist { run });
                Ok(Reply::Done)
            }
            Input::SpawnFailed {
                run,
                attempt,
                error,
            } => {
                self.running_attempt(run, attempt)?;
                self.finish_attempt(now, run, Outcome::SpawnError, None, None, Some(error));
                Ok(Reply::Done)
            }
            Input::Exited {
                run,
                attempt,
                code,
                signal,
            } => {
                let r = self.running_attempt(run, attempt)?;
                let outcome = match r.kill {
                    Some(k) => k.outcome(),
                    None if code == Some(0) => Outcome::Success,
                    None => Outcome::Failed,
                };
                self.finish_attempt(now, run, outcome, code, signal, None);
                Ok(Reply::Done)
            }
            Input::Beat {
                run,
                message,
                progress,
            } => {
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
            Input::Output { run } => {
                self.beat(now, run)?;
                Ok(Reply::Done)
            }
            Input::Cancel { run, actor } => self.cancel(now, run, &actor),
            Input::CancelDagRun { dag_run, actor } => {
                let runs = self
                    .dag_runs
                    .get(&dag_run)
                    .ok_or_else(|| EngineError::NotFound(format!("DAG run {dag_run}")))?
                    .runs
                    .clone();
                for id in runs {
                    if !self.runs[&id].state.is_terminal() {
                        self.cancel(now, id, &actor)?;
                    }
                }
                Ok(Reply::Done)
            }
            Input::Retry { run, actor } => self.retry(now, run, &actor),
            Input::Pause { dag } => {
                self.pause(&dag);
                Ok(Reply::Done)
            }
            Input::Resume { dag } => {
                self.resume(now, &dag);
                Ok(Reply::Done)
            }
            Input::DefineDag {
                spec,
                zone,
                watermark,
            } => {
                self.define_dag(now, spec, zone, watermark);
                Ok(Reply::Done)
            }
            Input::RemoveDag { dag, actor } => {
                self.undefine_dag(&dag);
                let ids: Vec<RunId> = self
                    .active_by_dag
                    .get(dag.as_str())
                    .map(|s| s.iter().copied().collect())
                    .unwrap_or_default();
                for id in ids {
                    let r = &self.runs[&id];
                    if matches!(
                        r.state,
                        RunState::Waiting | RunState::Ready | RunState::Delayed
                    ) {
                        self.end_unstarted(
                            now,
                            id,
                            RunState::Cancelled,
                            "definition removed".into(),
                            &actor,
                        );
                    }
                }
                Ok(Reply::Done)
            }
            Input::Shutdown => {
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
                Ok(Reply::Done)
            }
            Input::Tick => Ok(Reply::Done),
        }
    }

    fn running_attempt(&mut self, run: RunId, attempt: u32) -> Result<&mut Run, EngineError> {
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

    fn submit(&mut self, now: Millis, s: Submit) -> Result<Reply, EngineError> {
        let spec = s.dag;
        if spec.jobs.is_empty() {
            return Err(EngineError::Invalid("a DAG needs at least one job".into()));
        }
        let mut index: HashMap<&str, usize> = HashMap::new();
        for (i, job) in spec.jobs.iter().enumerate() {
            if !self.pools.contains_key(&job.pool) {
                return Err(EngineError::Invalid(format!(
                    "job {:?}: unknown pool {:?}",
                    job.id, job.pool
                )));
            }
            if !(1..=100).contains(&job.priority) {
                return Err(EngineError::Invalid(format!(
                    "job {:?}: priority out of range 1-100",
                    job.id
                )));
            }
            if index.insert(job.id.as_str(), i).is_some() {
                return Err(EngineError::Invalid(format!(
                    "duplicate job id {:?}",
                    job.id
                )));
            }
        }
        for job in &spec.jobs {
            for d in &job.deps {
                if !index.contains_key(d.as_str()) || d == &job.id {
                    return Err(EngineError::Invalid(format!(
                        "job {:?}: bad dep {d:?}",
                        job.id
                    )));
                }
            }
        }
        let order = topo_order(&spec, &index)
            .ok_or_else(|| EngineError::Invalid("the jobs' deps form a cycle".into()))?;
        for a in &s.after {
            if !self.runs.contains_key(a) && !self.external.contains_key(a) {
                return Err(EngineError::NotFound(format!("run {a}")));
            }
        }
        if let Some(u) = &s.unique
            && let Some(&existing) = self.unique.get(&u.key)
            && let Some(dr) = self.dag_runs.get(&existing)
        {
            let recent = u.within.is_some_and(|w| now - dr.created_at <= w);
            if dr.state == DagRunState::Active || recent {
                return Ok(Reply::Submitted {
                    dag_run: existing,
                    runs: dr.runs.clone(),
                    deduplicated: true,
                });
            }
        }

        let dag_run = DagRunId(self.next_dag_run);
        self.next_dag_run += 1;
        let dag: Arc<str> = Arc::from(spec.name.as_str());
        let ids: Vec<RunId> = (0..spec.jobs.len())
            .map(|i| RunId(self.next_run + i as u64))
            .collect();
        self.next_run += spec.jobs.len() as u64;
        for (i, job) in spec.jobs.iter().enumerate() {
            let mut upstream: Vec<RunId> =
                job.deps.iter().map(|d| ids[index[d.as_str()]]).collect();
            if job.deps.is_empty() {
                upstream.extend(s.after.iter().copied());
            }
            let run = Run {
                id: ids[i],
                dag_run,
                dag: dag.clone(),
                spec: spec.clone(),
                job_index: i as u32,
                state: RunState::Waiting,
                attempts: Vec::new(),
                counted_failures: 0,
                created_at: now,
                ready_at: None,
                started_at: None,
                finished_at: None,
                next_at: None,
                delay: None,
                reason: format!("created by {}", s.trigger),
                message: None,
                progress: None,
                upstream,
                downstream: Vec::new(),
                succeeded_up: 0,
                failed_up: 0,
                kill: None,
                slot: None,
                timers: RunTimers::default(),
            };
            self.counts[state_index(RunState::Waiting)] += 1;
            self.runs.insert(run.id, run);
            self.active_by_dag
                .entry(dag.clone())
                .or_default()
                .insert(ids[i]);
        }
        // Reverse-dependency index, in and across DAG runs.
        for &id in &ids {
            let ups = self.runs[&id].upstream.clone();
            for u in ups {
                // An upstream known only by its final state (evicted or from
                // the store) needs no link: it will not change again.
                if let Some(up) = self.runs.get_mut(&u) {
                    up.downstream.push(id);
                }
            }
        }
        self.dag_runs.insert(
            dag_run,
            DagRun {
                id: dag_run,
                dag: dag.clone(),
                spec: spec.clone(),
                runs: ids.clone(),
                state: DagRunState::Active,
                created_at: now,
                finished_at: None,
                trigger: s.trigger.clone(),
                unique_key: s.unique.as_ref().map(|u| u.key.clone()),
                unfinished: ids.len(),
            },
        );
        if let Some(u) = &s.unique {
            self.unique.insert(u.key.clone(), dag_run);
        }
        self.active_dag_runs
            .entry(spec.name.clone())
            .or_default()
            .insert(dag_run);
        self.dag_event(
            now,
            dag_run,
            format!("DAG run created by {}", s.trigger),
            &s.actor,
        );
        for &id in &ids {
            let reason = self.runs[&id].reason.clone();
            self.event(
                now,
                Some(id),
                dag_run,
                None,
                Some(RunState::Waiting),
                reason,
                &s.actor,
            );
        }
        // Evaluate in topological order so cancellations cascade correctly.
        for i in order {
            let id = ids[i];
            self.recount_upstream(id);
            self.evaluate_waiting(now, id, &s.actor);
        }
        Ok(Reply::Submitted {
            dag_run,
            runs: ids,
            deduplicated: false,
        })
    }

    fn recount_upstream(&mut self, id: RunId) {
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
    fn evaluate_waiting(&mut self, now: Millis, id: RunId, actor: &Arc<str>) {
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

    fn beat(&mut self, now: Millis, run: RunId) -> Result<(), EngineError> {
        let r = self
            .runs
            .get(&run)
            .ok_or_else(|| EngineError::NotFound(format!("run {run}")))?;
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

    fn cancel(&mut self, now: Millis, id: RunId, actor: &Arc<str>) -> Result<Reply, EngineError> {
        let r = self
            .runs
            .get(&id)
            .ok_or_else(|| EngineError::NotFound(format!("run {id}")))?;
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

    fn retry(&mut self, now: Millis, id: RunId, actor: &Arc<str>) -> Result<Reply, EngineError> {
        let r = self
            .runs
            .get(&id)
            .ok_or_else(|| EngineError::NotFound(format!("run {id}")))?;
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
                self.revive(now, id, "manual retry".into(), actor);
                // Revive downstream runs that were cancelled because of it.
                let mut stack = vec![id];
                while let Some(x) = stack.pop() {
                    let down = self.runs[&x].downstream.clone();
                    for d in down {
                        let dr = &self.runs[&d];
                        if dr.state == RunState::Cancelled
                            && dr.reason.starts_with("upstream_failed")
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
    fn revive(&mut self, now: Millis, id: RunId, reason: String, actor: &Arc<str>) {
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

    fn pause(&mut self, dag: &str) {
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
        let ids: Vec<RunId> = self
            .active_by_dag
            .get(dag)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default();
        for id in ids {
            let r = &self.runs[&id];
            if r.state == RunState::Ready {
                let (p, at, pool, dag) = (
                    r.priority(),
                    r.ready_at.unwrap_or(0),
                    r.job().pool.clone(),
                    r.dag.clone(),
                );
                self.pools
                    .get_mut(&pool)
                    .expect("pool")
                    .queue
                    .remove(p, at, id);
                self.held.entry(dag).or_default().insert(id);
            }
        }
    }

    fn resume(&mut self, now: Millis, dag: &str) {
        if !self.paused.remove(dag) {
            return;
        }
        self.catch_up(now, dag);
        for id in self.held.remove(dag).unwrap_or_default() {
            let r = &self.runs[&id];
            let (p, at, pool) = (r.priority(), r.ready_at.unwrap_or(0), r.job().pool.clone());
            self.pools
                .get_mut(&pool)
                .expect("pool")
                .queue
                .insert(p, at, id);
        }
    }

    // ----- transitions -----------------------------------------------------

    fn transition(
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
    fn event(
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
            at,
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
    fn dag_event(&mut self, now: Millis, dag_run: DagRunId, reason: String, actor: &Arc<str>) {
        self.event(now, None, dag_run, None, None, reason, actor);
    }

    fn make_ready(&mut self, now: Millis, id: RunId, reason: String, actor: &Arc<str>) {
        self.make_ready_at(now, now, id, reason, actor);
    }

    /// An attempt interrupted by the daemon stopping: the run goes back to the queue at its old place (its earlier
    /// `ready_at`), ahead of runs that queued after it, as Sidekiq requeues
    /// in-progress jobs at the head on shutdown.
    fn requeue_in_place(&mut self, now: Millis, id: RunId, reason: String, actor: &Arc<str>) {
        let at = self.runs[&id].ready_at.unwrap_or(now).min(now);
        self.make_ready_at(now, at, id, reason, actor);
    }

    fn make_ready_at(
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
        let (p, pool, dag) = (r.priority(), r.job().pool.clone(), r.dag.clone());
        if self.paused.contains(&*dag) {
            self.held.entry(dag).or_default().insert(id);
        } else {
            self.pools
                .get_mut(&pool)
                .expect("pool")
                .queue
                .insert(p, queue_at, id);
        }
    }

    fn leave_ready(&mut self, id: RunId) {
        let r = &self.runs[&id];
        let (p, at, pool, dag) = (
            r.priority(),
            r.ready_at.unwrap_or(0),
            r.job().pool.clone(),
            r.dag.clone(),
        );
        if !self
            .pools
            .get_mut(&pool)
            .expect("pool")
            .queue
            .remove(p, at, id)
            && let Some(h) = self.held.get_mut(&dag)
        {
            h.remove(&id);
        }
    }

    fn leave_delayed(&mut self, id: RunId) {
        self.set_timer(id, TimerKind::Wake, None);
        if self.runs[&id].delay == Some(Delay::RetryBudget) {
            self.budget_waiters.retain(|w| *w != id);
        }
    }

    /// Ends a run that holds no slot (waiting, delayed or ready), cascading
    /// to its downstream.
    fn end_unstarted(
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
    fn end(&mut self, now: Millis, id: RunId, to: RunState, reason: String, actor: &Arc<str>) {
        debug_assert!(to.is_terminal());
        self.transition(now, id, to, reason, actor);
        let (dag_run, dag) = {
            let r = self.runs.get_mut(&id).expect("exists");
            r.finished_at = Some(now);
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
            dr.finished_at = Some(now);
            let dag = dr.dag.clone();
            self.dag_event(
                now,
                dag_run,
                format!("DAG run finished: {state:?}").to_lowercase(),
                &self.scheduler.clone(),
            );
            self.finished_order.push_back((now, dag_run));
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

    fn kill(&mut self, id: RunId, reason: KillReason) {
        let r = self.runs.get_mut(&id).expect("exists");
        let previous = r.kill.replace(reason);
        let attempt = r.attempts.len() as u32;
        let grace_ms = r.job().kill_grace.as_millis() as Millis;
        let (p, started, pool) = (
            r.priority(),
            r.started_at.unwrap_or(0),
            r.job().pool.clone(),
        );
        let pool = self.pools.get_mut(&pool).expect("pool");
        pool.victims.remove(&(p, std::cmp::Reverse(started), id));
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
    fn finish_attempt(
        &mut self,
        now: Millis,
        id: RunId,
        outcome: Outcome,
        code: Option<i32>,
        signal: Option<i32>,
        error: Option<String>,
    ) {
        let scheduler = self.scheduler.clone();
        let r = self.runs.get_mut(&id).expect("exists");
        let kill = r.kill.take();
        let slot = r.slot.take();
        if let Some(a) = r.attempts.last_mut() {
            a.finished_at = Some(now);
            a.outcome = Some(outcome);
            a.exit_code = code;
            a.signal = signal;
            a.error = error.clone();
        }
        let (p, started, pool_name, n) = (
            r.priority(),
            r.started_at.unwrap_or(0),
            r.job().pool.clone(),
            r.attempts.len(),
        );
        let pool = self.pools.get_mut(&pool_name).expect("pool");
        pool.running -= 1;
        if let Some(s) = slot {
            pool.free.insert(s);
        }
        pool.victims.remove(&(p, std::cmp::Reverse(started), id));
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
                            clock(at)
                        ),
                        &scheduler,
                    );
                    let r = self.runs.get_mut(&id).expect("exists");
                    r.next_at = Some(at);
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

    // ----- timers ----------------------------------------------------------

    fn set_timer(&mut self, id: RunId, kind: TimerKind, at: Option<Millis>) {
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

    fn fire_timers(&mut self, now: Millis) {
        let scheduler = self.scheduler.clone();
        while let Some(&(at, timer)) = self.timers.first() {
            if at > now {
                break;
            }
            self.timers.pop_first();
            match timer {
                Timer::Wake(id) => {
                    self.runs.get_mut(&id).expect("exists").timers.wake = None;
                    if self.budget.take(now) {
                        self.make_ready(now, id, "backoff over".into(), &scheduler);
                    } else {
                        let next = self.budget.next_token_at(now);
                        let r = self.runs.get_mut(&id).expect("exists");
                        r.delay = Some(Delay::RetryBudget);
                        r.next_at = Some(next);
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
                        for w in &self.budget_waiters {
                            self.runs.get_mut(w).expect("exists").next_at = Some(next);
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

    // ----- dispatch --------------------------------------------------------

    fn dispatch(&mut self, now: Millis) {
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
                if pool.running >= pool.slots || pool.queue.is_empty() {
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

    fn start(&mut self, now: Millis, c: Candidate, pool_name: &str) {
        let pool = self.pools.get_mut(pool_name).expect("pool");
        pool.queue.remove(c.priority, c.ready_at, c.run);
        let slot = pool
            .free
            .pop_first()
            .expect("running < slots ⇒ a free slot");
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
        let default_timeout = self.cfg.default_timeout;
        let r = self.runs.get_mut(&c.run).expect("exists");
        r.started_at = Some(now);
        r.slot = Some(slot);
        r.kill = None;
        r.message = None;
        r.progress = None;
        let n = r.attempts.len() as u32 + 1;
        r.attempts.push(Attempt {
            n,
            started_at: now,
            finished_at: None,
            outcome: None,
            exit_code: None,
            signal: None,
            pid: None,
            pid_start: None,
            slot,
            error: None,
        });
        let timeout = match r.job().timeout {
            Timeout::Default => default_timeout,
            Timeout::Never => None,
            Timeout::After(d) => Some(d.as_millis() as Millis),
        };
        let heartbeat = r.job().heartbeat.map(|h| h.as_millis() as Millis);
        let order = SpawnOrder {
            run: c.run,
            dag_run: r.dag_run,
            dag: r.dag.clone(),
            attempt: n,
            slot,
            spec: r.spec.clone(),
            job_index: r.job_index,
        };
        if r.job().preemptible {
            self.pools
                .get_mut(pool_name)
                .expect("pool")
                .victims
                .insert((c.priority, std::cmp::Reverse(now), c.run));
        }
        self.set_timer(c.run, TimerKind::Timeout, timeout.map(|t| now + t));
        self.set_timer(c.run, TimerKind::Heartbeat, heartbeat.map(|h| now + h));
        self.effects.push(Effect::Spawn(order));
    }

    /// SPEC §4.4: an urgent run that cannot start even with burst may stop
    /// the lowest-priority preemptible running run (never one of equal or
    /// higher priority). One victim per blocked urgent pool at a time.
    fn preempt(&mut self, now: Millis) {
        let urgent = self.cfg.burst_priority;
        let global_full = self.running_total >= self.cfg.max_concurrency + self.cfg.burst_extra;
        let global_preempting: u32 = self.pools.values().map(|p| p.preempting).sum();
        let mut kills = Vec::new();
        let mut global_claimed = global_preempting > 0;
        for (name, pool) in &self.pools {
            let Some(head) = pool.queue.best(now, self.cfg.aging, urgent) else {
                continue;
            };
            let pool_full = pool.running >= pool.slots;
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

#[derive(Clone, Copy)]
enum TimerKind {
    Wake,
    Timeout,
    Heartbeat,
}

/// Kahn's algorithm over the file's deps; `None` on a cycle.
fn topo_order(spec: &DagSpec, index: &HashMap<&str, usize>) -> Option<Vec<usize>> {
    let n = spec.jobs.len();
    let mut indegree = vec![0usize; n];
    let mut down: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, job) in spec.jobs.iter().enumerate() {
        for d in &job.deps {
            let u = index[d.as_str()];
            indegree[i] += 1;
            down[u].push(i);
        }
    }
    let mut queue: VecDeque<usize> = (0..n).filter(|i| indegree[*i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(u) = queue.pop_front() {
        order.push(u);
        for &d in &down[u] {
            indegree[d] -= 1;
            if indegree[d] == 0 {
                queue.push_back(d);
            }
        }
    }
    (order.len() == n).then_some(order)
}
