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
    /// Held runs that depend on this one. Every id names a held run:
    /// eviction unlinks the runs it removes.
    pub downstream: Vec<RunId>,
    /// Some run was ever linked downstream of this one (true even once
    /// those left memory), so its final state outlives its own eviction.
    pub(super) depended_on: bool,
    pub(super) succeeded_up: u32,
    pub(super) failed_up: u32,
    pub(super) kill: Option<KillReason>,
    pub(super) slot: Option<u32>,
    pub(super) timers: RunTimers,
}

#[derive(Clone, Copy, Debug, Default)]
pub(super) struct RunTimers {
    pub(super) wake: Option<Millis>,
    pub(super) timeout: Option<Millis>,
    pub(super) heartbeat: Option<Millis>,
}

impl Run {
    /// The one way a run comes to be: from its stored fields (a fresh run's
    /// are `RestoredRun::waiting`) plus its DAG run. Links to downstream
    /// runs, upstream counts, slot and timers start empty; the engine sets
    /// them as it places the run.
    pub(super) fn new(
        dag_run: DagRunId,
        dag: Arc<str>,
        spec: Arc<DagSpec>,
        row: RestoredRun,
    ) -> Run {
        Run {
            id: row.id,
            dag_run,
            dag,
            spec,
            job_index: row.job_index,
            state: row.state,
            attempts: row.attempts,
            counted_failures: row.counted_failures,
            created_at: row.created_at,
            ready_at: row.ready_at,
            started_at: row.started_at,
            finished_at: row.finished_at,
            next_at: row.next_at,
            delay: row.delay,
            reason: row.reason,
            message: row.message,
            progress: row.progress,
            upstream: row.upstream,
            downstream: Vec::new(),
            depended_on: false,
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
    pub(super) unfinished: usize,
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

impl RestoredRun {
    /// The fields of a run just created: waiting, no attempt yet.
    pub(super) fn waiting(
        id: RunId,
        job_index: u32,
        created_at: Millis,
        reason: String,
        upstream: Vec<RunId>,
    ) -> RestoredRun {
        RestoredRun {
            id,
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
            reason,
            message: None,
            progress: None,
            upstream,
        }
    }
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
