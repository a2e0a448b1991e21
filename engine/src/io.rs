//! What goes into and comes out of `Engine::handle`.

use super::*;

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
    pub(super) fn outcome(self) -> Outcome {
        match self {
            KillReason::Timeout => Outcome::TimedOut,
            KillReason::Stalled => Outcome::Stalled,
            KillReason::Cancel => Outcome::Cancelled,
            KillReason::Preempt => Outcome::Preempted,
            KillReason::Shutdown => Outcome::Interrupted,
        }
    }
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
    /// The newest DAG run with this key that the store holds, looked up by
    /// the caller when the engine does not hold the key (it was evicted from
    /// memory or finished in an earlier life). Only needed with `within`:
    /// an unfinished DAG run is always held by the engine.
    pub stored: Option<UniqueHolder>,
}

/// A DAG run that carries a unique key.
#[derive(Clone, Debug, PartialEq)]
pub struct UniqueHolder {
    pub dag_run: DagRunId,
    pub created_at: Millis,
    pub runs: Vec<RunId>,
}

#[derive(Clone, Debug)]
pub enum Input {
    Submit(Submit),
    /// A reloaded config's scheduling limits and policies.
    Reconfigure(EngineConfig),
    /// The executor spawned the attempt's process.
    Started {
        run: RunId,
        attempt: u32,
        pid: u32,
        pid_start: Option<u64>,
    },
    /// The attempt's process could not be spawned yet for lack of the
    /// daemon's own resources (descriptors, processes, memory); the
    /// executor keeps trying, and the attempt keeps its slot. Its timeout
    /// and heartbeat wait for `Started`: they count from the spawn.
    SpawnWaiting {
        run: RunId,
        attempt: u32,
        error: String,
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
    /// `bytes` of the attempt's output could not be written to its log
    /// (sent before its `Exited`).
    LogLost {
        run: RunId,
        attempt: u32,
        bytes: u64,
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
    /// `ax trigger`: a DAG run now, subject to the DAG's overlap policy
    /// unless `force`.
    Trigger {
        dag: String,
        actor: Arc<str>,
        force: bool,
    },
    Pause {
        dag: String,
    },
    Resume {
        dag: String,
    },
    /// A DAG definition from the jobs folder (new, changed, or at start-up
    /// with the watermark and the boots the store remembers).
    DefineDag {
        spec: Arc<DagSpec>,
        zone: chrono_tz::Tz,
        watermark: Option<Millis>,
        boots_seen: Vec<Arc<str>>,
    },
    /// The DAG's file was deleted: cancel its runs that have not started.
    RemoveDag {
        dag: String,
        actor: Arc<str>,
    },
    /// Stop dispatching and kill every running attempt as `interrupted`.
    Shutdown,
    /// Stop dispatching and leave running attempts running: the daemon
    /// exits and its next life takes them over (`Engine::set_reattach`).
    Detach,
    /// The steps that created these DAG runs (`Effect::Triggered`) are
    /// committed: their runs may start.
    TriggerDurable {
        dag_runs: Vec<DagRunId>,
    },
    /// DAG runs this node claimed from the store (a cluster): taken in
    /// as at start-up. `external`: final states of runs outside them that
    /// they depend on.
    Adopt {
        dag_runs: Vec<RestoredDagRun>,
        external: Vec<(RunId, RunState)>,
    },
    /// This node became the cluster's cron leader, with every DAG's last
    /// fired slot as the store says (`marks`) and the unfinished DAG runs
    /// of defined DAGs (`active`, by DAG name), or stopped being it.
    Lead {
        leader: bool,
        marks: TriggerMarks,
        active: Vec<(String, DagRunId)>,
    },
    /// DAG runs this engine watched on other nodes (see
    /// `Engine::watched_elsewhere`) have ended.
    EndedElsewhere {
        dag_runs: Vec<DagRunId>,
    },
    /// The slot numbers of `pool` this node may use from now on, leased
    /// from the cluster; a slot taken away stays with its running attempt
    /// until it ends.
    Leases {
        pool: String,
        slots: Vec<u32>,
    },
    /// The wall clock reads `wall` at this input's `now` (the daemon sends
    /// it when the wall clock moved against the engine's monotonic clock:
    /// an NTP step, `date -s`, a resume from suspend). Only what is
    /// stamped or shown and the cron slots follow it; deadlines do not.
    WallClock {
        wall: Millis,
    },
    /// The daemon could not run for a while (SIGSTOP, a paused VM, a long
    /// stall): inputs that arrived meanwhile (exits, heartbeats, output)
    /// are still on their way to the engine. No timer fires before `until`,
    /// so they are applied before the deadlines that fell due in the pause.
    Settle {
        until: Millis,
    },
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
    /// The answer to `Input::Trigger`.
    Triggered(Box<Fired>),
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
    /// How long the run was ready before this start (queue wait).
    pub waited_ms: Millis,
}

impl SpawnOrder {
    pub fn job(&self) -> &JobSpec {
        &self.spec.jobs[self.job_index as usize]
    }
}

/// One line of the audit trail (`ax events`, docs/cli.md). `run` is `None`
/// for DAG-run-level events.
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

/// An attempt of an earlier life whose process is still held for the
/// daemon (docs/operations.md, "Upgrade"): the restore keeps its run
/// running rather than interrupting it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reattach {
    /// When its process was spawned, on the engine's clock.
    pub spawned: Millis,
    pub slot: u32,
    /// Its process has ended meanwhile: when (engine's clock), and how.
    pub ended: Option<(Millis, Option<i32>, Option<i32>)>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    Spawn(SpawnOrder),
    /// Supervise again the attempt of an earlier life that the restore
    /// kept running (its process was not started by this daemon).
    Reattach(SpawnOrder),
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
    /// An attempt ended (for the metrics; the run's row carries it too).
    AttemptEnded {
        dag: Arc<str>,
        spec: Arc<DagSpec>,
        job_index: u32,
        outcome: Outcome,
        ran_ms: Millis,
    },
    DagRunFinished {
        dag_run: DagRunId,
        dag: Arc<str>,
        state: DagRunState,
    },
    /// A DAG run created by a trigger (a cron slot, `after`, a hook).
    /// None of its runs starts until `Input::TriggerDurable` names it: the
    /// trigger (its DAG run with the `<dag>@<slot>` key, the watermark) is
    /// committed before any process of it exists, so a slot fires at most
    /// once even when axd dies between deciding and committing.
    Triggered {
        dag_run: DagRunId,
    },
    /// A DAG's queue of triggers changed to `queue` (commit with the runs:
    /// a queued slot survives a restart).
    TriggerQueue {
        dag: String,
        queue: Vec<Trigger>,
    },
    /// A DAG's cron watermark advanced to `slot` (commit with the runs).
    /// Of the slots it passed, `fired` started or queued a DAG run and
    /// `skipped` did not (left out by `catchup`, or `overlap = "skip"`).
    CronMark {
        dag: String,
        slot: Millis,
        fired: u32,
        skipped: u32,
    },
    /// An `@reboot` DAG has seen boot `boot` (commit with the runs, added to
    /// the boots it saw): it fired a DAG run for it, or, newly defined,
    /// waits for the next one.
    BootMark {
        dag: String,
        boot: Arc<str>,
        fired: bool,
    },
}

/// Result of one `handle` call.
#[derive(Debug)]
pub struct StepOutput {
    pub reply: Result<Reply, EngineError>,
    pub effects: Vec<Effect>,
}
