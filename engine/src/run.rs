//! Runs, their attempts and DAG runs as the engine holds them.

use super::*;

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
    /// The cluster node that ran it (`None` alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Bytes of its output that could not be written to its log (a full
    /// disk); 0 while the log is complete.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub log_lost: u64,
}

impl Attempt {
    /// Attempt `n`, started at `started_at` (wall time) on `slot`, not
    /// ended yet.
    pub fn started(n: u32, started_at: Millis, slot: u32, node: Option<String>) -> Attempt {
        Attempt {
            n,
            started_at,
            finished_at: None,
            outcome: None,
            exit_code: None,
            signal: None,
            pid: None,
            pid_start: None,
            slot,
            error: None,
            node,
            log_lost: 0,
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What a delayed run waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Delay {
    Backoff,
    RetryBudget,
    /// A scheduled DAG run's planned start (`jitter`).
    Jitter,
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
    /// Held runs that depend on this one. Every id names a held run:
    /// eviction unlinks the runs it removes.
    pub downstream: Vec<RunId>,
    /// Some run was ever linked downstream of this one (true even once
    /// those left memory), so its final state outlives its own eviction.
    pub(super) depended_on: bool,
    /// Created by a trigger whose step is not yet known to be committed:
    /// once ready, the run waits outside every queue (see
    /// `Effect::Triggered`).
    pub(super) awaits_commit: bool,
    pub(super) succeeded_up: u32,
    pub(super) failed_up: u32,
    pub(super) kill: Option<KillReason>,
    pub(super) slot: Option<u32>,
    pub(super) timers: RunTimers,
}

#[derive(Clone, Copy, Debug, Default)]
pub(super) struct RunTimers {
    /// When the running attempt started, on the engine's clock (its
    /// `started_at` is wall time, for display).
    pub(super) started_mono: Option<Millis>,
    /// The running attempt waits for the daemon's resources to start
    /// (`Input::SpawnWaiting`): its deadlines are armed at `Started`.
    pub(super) awaiting_spawn: bool,
    pub(super) wake: Option<Millis>,
    pub(super) timeout: Option<Millis>,
    pub(super) heartbeat: Option<Millis>,
}

impl Run {
    /// The one way a run comes to be: waiting, no attempt yet, links,
    /// upstream counts, slot and timers empty (the engine sets them as it
    /// places the run). The store's loader then sets the stored fields of
    /// a run it reads back; `reason` is empty until the caller gives it.
    pub fn waiting(
        id: RunId,
        dag_run: DagRunId,
        dag: Arc<str>,
        spec: Arc<DagSpec>,
        job_index: u32,
        created_at: Millis,
        upstream: Vec<RunId>,
    ) -> Run {
        Run {
            id,
            dag_run,
            dag,
            spec,
            job_index,
            state: RunState::Waiting,
            attempts: Vec::new(),
            counted_failures: 0,
            created_at,
            ready_at: None,
            started_at: None,
            finished_at: None,
            next_at: None,
            delay: None,
            reason: String::new(),
            message: None,
            progress: None,
            upstream,
            downstream: Vec::new(),
            depended_on: false,
            awaits_commit: false,
            succeeded_up: 0,
            failed_up: 0,
            kill: None,
            slot: None,
            timers: RunTimers::default(),
        }
    }

    pub fn job(&self) -> &JobSpec {
        &self.spec.jobs[self.job_index as usize]
    }
    pub fn priority(&self) -> u8 {
        self.job().priority
    }
    pub fn pool(&self) -> &str {
        &self.job().pool
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
    /// A hook's DAG run: the DAG run whose end started it.
    pub hook_of: Option<DagRunId>,
    pub(super) unfinished: usize,
    /// Offered to the cluster: stored without an owner for any node to
    /// claim (see `Engine::set_offering`).
    pub offered: bool,
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
            hook_of: self.hook_of,
            unfinished: self.unfinished,
            offered: self.offered,
        }
    }
}

#[derive(Clone, Debug)]
pub struct RestoredDagRun {
    pub id: DagRunId,
    /// The DAG's name, shared with its runs' `dag`.
    pub dag: Arc<str>,
    pub spec: Arc<DagSpec>,
    pub state: DagRunState,
    pub created_at: Millis,
    pub trigger: String,
    pub unique_key: Option<String>,
    /// Its runs as stored, built with `Run::waiting` and the stored fields.
    pub runs: Vec<Run>,
}

impl RestoredDagRun {
    /// Its stored row with another state, for the store (the replay of
    /// the ends journal, `crate::journal`).
    pub fn row_with(&self, state: DagRunState, finished_at: Option<Millis>) -> DagRun {
        DagRun {
            id: self.id,
            dag: self.dag.clone(),
            spec: self.spec.clone(),
            runs: Vec::new(),
            state,
            created_at: self.created_at,
            finished_at,
            trigger: self.trigger.clone(),
            unique_key: self.unique_key.clone(),
            // The store never rewrites it once the row exists.
            hook_of: None,
            unfinished: 0,
            offered: false,
        }
    }
}
