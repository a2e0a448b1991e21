//! JSON shapes of docs/protocol.md, "Shapes" (field names are part of the
//! contract): the views of runs, DAGs and the daemon, and the answers of every
//! method.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use ax_shared::jobfile::FileError;
use ax_shared::time::Timestamp;
use ax_shared::{Outcome, RunState};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AttemptView {
    pub n: u32,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    /// `None` while the attempt runs.
    pub outcome: Option<Outcome>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// The cluster node that ran it (PostgreSQL store only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Bytes of its output that could not be written to its log (a full
    /// disk): the log is incomplete. Absent when 0.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub log_lost: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EventView {
    pub seq: i64,
    pub time: Timestamp,
    pub run: Option<u64>,
    pub dag_run: u64,
    pub from: Option<RunState>,
    pub to: Option<RunState>,
    pub reason: String,
    pub actor: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunView {
    pub id: u64,
    pub dag: String,
    pub job: String,
    pub dag_run: u64,
    pub state: RunState,
    pub priority: u8,
    pub effective_priority: u8,
    pub pool: String,
    pub attempts: Vec<AttemptView>,
    /// Retries allowed after the first attempt.
    #[serde(default)]
    pub retries: u32,
    pub created_at: Option<Timestamp>,
    pub ready_at: Option<Timestamp>,
    pub started_at: Option<Timestamp>,
    pub finished_at: Option<Timestamp>,
    pub next_at: Option<Timestamp>,
    pub reason: Option<String>,
    pub why: Option<String>,
    pub message: Option<String>,
    pub progress: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<EventView>>,
    /// The user the run's job runs as (absent when not known: a run
    /// listed from the store).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolView {
    pub name: String,
    pub slots: u32,
    pub running: u32,
    /// Ready runs waiting for one of the pool's slots (absent from
    /// daemons that predate it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<u32>,
    /// Running on every node of the cluster, as of this node's last
    /// heartbeat (PostgreSQL store only; `slots` is the cluster's total).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_running: Option<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusView {
    pub version: String,
    pub uptime_s: u64,
    pub pools: Vec<PoolView>,
    pub max_concurrency: u32,
    #[serde(default)]
    pub burst_in_use: u32,
    #[serde(default)]
    pub burst_extra: u32,
    pub runs: BTreeMap<String, u64>,
    /// Runs that ended failed or timed out in the last hour (counted by
    /// this axd since it started).
    #[serde(default)]
    pub failed_last_hour: u64,
    /// Job files that fail to load, and folders of the jobs folder the last
    /// scan could not read (`line` absent).
    pub errors: Vec<FileError>,
    /// The jobs folder's scans. Left out while none is known (an axd
    /// counts its start-up scan, so only an axd that does not report scans
    /// sends none), which keeps such answers as they were.
    #[serde(default, skip_serializing_if = "JobsFolderView::is_unknown")]
    pub jobs_folder: JobsFolderView,
    /// Set while the store refuses writes (disk full): new writes are
    /// refused until it recovers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_error: Option<String>,
    /// Bytes of the store (database and its WAL), as the pruner last
    /// measured them; absent until it has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_bytes: Option<u64>,
    /// Bytes of the log folder, as the pruner last measured them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_bytes: Option<u64>,
    /// The config in force, reloads included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Box<ConfigView>>,
    /// The cluster sharing this PostgreSQL store (docs/operations.md,
    /// "Cluster"); absent on SQLite. Boxed: a status rides in every `changed`
    /// notification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<Box<ClusterView>>,
}

/// The jobs folder's scans, as `ax status` reports them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JobsFolderView {
    /// Scans put in force since axd started (the one at start included).
    pub scans: u64,
    /// A scan is reading the folder now (off the scheduler: requests are
    /// answered meanwhile).
    pub scanning: bool,
}

impl JobsFolderView {
    /// No scan put in force and none under way: nothing to report.
    pub fn is_unknown(&self) -> bool {
        self.scans == 0 && !self.scanning
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterView {
    /// Every registered node, as this node's heartbeat last read them.
    pub nodes: Vec<NodeView>,
    /// Runs over every node, as of the same heartbeat (the rest of a
    /// `StatusView` describes the node that answered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<ClusterRuns>,
}

/// Runs over a whole cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ClusterRuns {
    /// Unfinished runs per state (`waiting`, `delayed`, `ready`,
    /// `running`); a state with none is absent.
    pub unfinished: BTreeMap<RunState, u64>,
    /// Runs that ended `failed` or `timed_out` in the last hour.
    pub failed_last_hour: u64,
}

/// One axd of a cluster, from the `nodes` table. Times are the database
/// server's clock, so the nodes' clocks need not agree.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeView {
    /// Stable per state dir (`state_dir/node-id`).
    pub id: String,
    pub host: String,
    pub version: String,
    /// `max_concurrency` of that node.
    pub slots: u32,
    /// Its heartbeat interval, in ms.
    pub heartbeat_ms: u64,
    pub started_at: Timestamp,
    pub last_beat: Timestamp,
    /// How old its last heartbeat is now, in ms.
    pub beat_age_ms: u64,
    /// `false` once its last heartbeat is older than 1.5 × its interval.
    pub alive: bool,
    /// The node that answered this `status`.
    #[serde(default)]
    pub this: bool,
    /// Attempts running on that node (started, not finished), as the
    /// answering node's last heartbeat read them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<u32>,
}

/// The `axd.toml` values in force (durations as written in the file:
/// `1h`, `10m`; `default_timeout` null = none).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ConfigView {
    /// The file read, or null when axd runs on defaults.
    pub file: Option<String>,
    pub jobs_dir: String,
    pub state_dir: String,
    pub socket: String,
    pub timezone: String,
    pub default_timeout: Option<String>,
    pub shutdown_grace: String,
    pub retry_per_minute: u32,
    pub aging_every: String,
    pub aging_cap: u8,
    pub burst_priority: u8,
    pub log_max_bytes: u64,
    pub log_retain: String,
    /// `store`'s URL without its password; absent for SQLite in state_dir.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DagView {
    pub name: String,
    pub file: String,
    pub jobs: Vec<String>,
    pub schedule: Option<String>,
    pub timezone: Option<String>,
    pub next_fire: Option<Timestamp>,
    /// `jitter`: the most a slot's DAG run waits past its slot (`12h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<String>,
    /// When the DAG run waiting out its jitter starts (the earliest, if
    /// several wait).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planned_start: Option<Timestamp>,
    pub paused: bool,
    pub last_run_state: Option<DagRunViewState>,
    /// When the newest DAG run ended, or started while it is active
    /// (absent when the DAG never ran, or the daemon does not know).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run_at: Option<Timestamp>,
    pub error: Option<FileError>,
    /// Job id → its deps, for drawing.
    #[serde(default)]
    pub deps: BTreeMap<String, Vec<String>>,
    /// Whether the alive nodes of a cluster hold this version of the DAG
    /// (docs/operations.md, "Cluster"); absent on a single node (SQLite) and
    /// before the node's first heartbeat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versions: Option<DagVersions>,
}

/// How a DAG's definition on the node answering compares with the one
/// each other alive node of the cluster has loaded from its own jobs
/// folder. A version is the content hash of the definition without its
/// file path (nodes may keep the folder in different places).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DagVersions {
    /// This node's version; absent while its file never parsed.
    pub hash: Option<String>,
    /// Alive nodes with the same version, this one included.
    pub agree: u32,
    /// Alive nodes with another version, or none, by node id.
    #[serde(default)]
    pub differ: Vec<NodeVersion>,
}

/// What another node has loaded of a DAG.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeVersion {
    pub node: String,
    /// Absent: that node has no such DAG.
    pub hash: Option<String>,
}

impl DagVersions {
    /// How many hex digits of a version are shown.
    pub const SHORT: usize = 8;

    pub fn agrees(&self) -> bool {
        self.differ.is_empty()
    }

    /// `3 nodes agree`, `1 node`, or `DIFFERS`.
    pub fn summary(&self) -> String {
        match (self.agrees(), self.agree) {
            (false, _) => "DIFFERS".into(),
            (true, 1) => "1 node".into(),
            (true, n) => format!("{n} nodes agree"),
        }
    }

    /// The differences in words: `node-b has 0123abcd (this node
    /// 89abcdef); node-c lacks it`; empty when the nodes agree.
    pub fn describe(&self) -> String {
        let short = |h: &Option<String>| match h {
            Some(h) => h.chars().take(Self::SHORT).collect::<String>(),
            None => "none".into(),
        };
        self.differ
            .iter()
            .map(|d| match &d.hash {
                Some(_) => format!(
                    "{} has {} (this node {})",
                    d.node,
                    short(&d.hash),
                    short(&self.hash)
                ),
                None => format!("{} lacks it", d.node),
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SubmitResult {
    /// The DAG run created, or 0 when a trigger created none (queued or
    /// skipped: see `trigger`).
    pub dag_run: u64,
    pub runs: Vec<u64>,
    pub deduplicated: bool,
    /// `trigger` only: what the DAG's overlap policy made of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger: Option<TriggerOutcome>,
}

impl SubmitResult {
    /// What a trigger did, in words: "started DAG run N", "queued behind
    /// DAG run M", "replaced DAG run M with DAG run N", "skipped because
    /// DAG run M is active".
    pub fn trigger_summary(&self) -> String {
        match &self.trigger {
            None | Some(TriggerOutcome::Started) => format!("started DAG run {}", self.dag_run),
            Some(TriggerOutcome::Queued { behind }) => {
                format!("queued behind DAG run {behind} (overlap = queue)")
            }
            Some(TriggerOutcome::Replaced { dag_runs }) => {
                let ids: Vec<String> = dag_runs.iter().map(u64::to_string).collect();
                format!(
                    "replaced DAG run {} with DAG run {} (overlap = replace)",
                    ids.join(", "),
                    self.dag_run
                )
            }
            Some(TriggerOutcome::Skipped { active }) => {
                format!("skipped because DAG run {active} is active (overlap = skip)")
            }
        }
    }
}

/// What `trigger` did while a DAG run of the DAG was active (docs/protocol.md,
/// "`trigger` (write)").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "overlap", rename_all = "snake_case")]
pub enum TriggerOutcome {
    /// A DAG run was started (none was active, `overlap = "allow"`, or
    /// `force`).
    Started,
    /// Waits behind DAG run `behind` (`overlap = "queue"`).
    Queued { behind: u64 },
    /// Started after cancelling these active DAG runs (`overlap = "replace"`).
    Replaced { dag_runs: Vec<u64> },
    /// Nothing started: DAG run `active` is still active (`overlap = "skip"`).
    Skipped { active: u64 },
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LogChunk {
    pub run: u64,
    pub attempt: u32,
    pub offset: u64,
    pub data: String,
    /// The attempt has ended and everything was read.
    pub eof: bool,
}

/// A DAG run's state as a view reports it: the engine's `DagRunState`
/// (active, or how it ended), or `Finished`, said of a DAG run only the
/// store holds, whose end state the answer does not look up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DagRunViewState {
    Active,
    Success,
    Failed,
    Cancelled,
    Finished,
}

impl DagRunViewState {
    pub const ALL: [DagRunViewState; 5] = [
        DagRunViewState::Active,
        DagRunViewState::Success,
        DagRunViewState::Failed,
        DagRunViewState::Cancelled,
        DagRunViewState::Finished,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DagRunViewState::Active => "active",
            DagRunViewState::Success => "success",
            DagRunViewState::Failed => "failed",
            DagRunViewState::Cancelled => "cancelled",
            DagRunViewState::Finished => "finished",
        }
    }

    pub fn parse(text: &str) -> Option<DagRunViewState> {
        DagRunViewState::ALL
            .into_iter()
            .find(|s| s.as_str() == text)
    }
}

impl fmt::Display for DagRunViewState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`: widths and alignment in format strings apply (table columns).
        f.pad(self.as_str())
    }
}

/// `get_dag_run`: a DAG run with its jobs' deps and states, for drawing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DagRunView {
    pub id: u64,
    pub dag: String,
    pub state: DagRunViewState,
    pub jobs: Vec<DagRunJob>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DagRunJob {
    pub id: String,
    pub deps: Vec<String>,
    /// `None` for a job that has no run in this DAG run.
    pub run: Option<u64>,
    pub state: Option<RunState>,
}

/// What a client is allowed to do (docs/protocol.md, "Access").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The daemon's own uid or root.
    Owner,
    /// Member of `admin_group`: may act.
    Admin,
    /// Member of `socket_group`: may only read.
    Viewer,
    /// Allowed by `[users]`: sees and acts on their own DAGs and runs only
    /// (docs/users.md).
    User,
    /// A job's process whose user has no other role: may heartbeat the
    /// run it belongs to, nothing else.
    Job,
}

/// `hello`'s answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HelloAnswer {
    pub protocol: u32,
    pub server: String,
    pub version: String,
    pub role: Role,
}

/// The answer of actions that return nothing else (`cancel`, `retry`, …).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Done {
    pub ok: bool,
}

impl Done {
    pub const OK: Done = Done { ok: true };
}

/// `pause` / `resume`: the DAGs they applied to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PauseAnswer {
    pub ok: bool,
    pub dags: Vec<String>,
}

/// `reload`: how many DAGs are known now, and how many of them have errors.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReloadAnswer {
    pub ok: bool,
    pub dags: usize,
    pub errors: usize,
    /// Keys of the new config that differ from the running one but take
    /// effect only at the next start (`state_dir`, `socket`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_applied: Vec<String>,
}

/// `shutdown`: axd is stopping; `running` jobs were running when it was
/// asked, and they keep running unless `stop_jobs`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShutdownAnswer {
    pub stop_jobs: bool,
    pub running: u32,
}

/// `metrics`: the Prometheus text exposition (OpenMetrics 1.0).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricsText {
    pub text: String,
}

/// `subscribe`: the status at the moment notifications start.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubscribeAnswer {
    pub status: StatusView,
}

/// `log_info`: how many attempts a run has, and whether its last runs now.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogInfoView {
    pub attempts: u32,
    pub running: bool,
    /// The cluster node that ran the attempt asked about (PostgreSQL
    /// store only): another node's log is read from the store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// `apply_dags`: the DAGs stored and loaded, or the files' errors (then
/// nothing was stored).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ApplyAnswer {
    /// Full names (`@alice/standup`), in the request's order.
    pub applied: Vec<String>,
    pub errors: Vec<FileError>,
}

/// `export_dag`: a stored user DAG's file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DagText {
    pub name: String,
    pub text: String,
}
