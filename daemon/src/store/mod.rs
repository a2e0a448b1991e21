//! Persistence behind the `Store` trait, on SQLite (one node) or
//! PostgreSQL (a cluster; docs/operations.md, "Cluster"). Everything one
//! scheduler step decides is written by a single `commit` call, in one
//! transaction. Both backends share one row model (`rows`): what each
//! column holds and what rows become.

pub(crate) mod journal;
pub mod postgres;
pub mod prune;
pub(crate) mod retention;
pub(crate) mod rows;
pub(crate) mod specs;
pub mod sqlite;
pub(crate) mod writer;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use ax_protocol::api::{EventView, RunView};
use ax_shared::time::Timestamp;
use ax_shared::{DagSpec, RunState};

use ax_engine::{
    DagRun, DagRunState, Event, RestoredDagRun, Run, RunId, Trigger, TriggerMarks, UniqueHolder,
};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("store: {0}")]
    Corrupt(String),
    /// A coded column (a state, an outcome, a delay) holds text that is
    /// none of its type's codes.
    #[error("store: {column} holds unknown value {value:?}")]
    Unknown { column: &'static str, value: String },
    /// A numeric column holds a value its Rust type cannot.
    #[error("store: {column} holds {value}, out of range")]
    OutOfRange { column: &'static str, value: i64 },
    #[error("store: {0}")]
    Io(#[from] std::io::Error),
    /// The message holds the error's whole chain (tokio-postgres says
    /// only *db error* or *error connecting to server* at the top), so the
    /// error has no `source` of its own: the chain is not printed twice.
    #[error("store: PostgreSQL: {0}")]
    Postgres(String),
    /// The server closed the connection under the call (it restarted, or
    /// an administrator ended the session): the call may be made again
    /// on a new connection.
    #[error("store: PostgreSQL: {0}")]
    ConnectionLost(String),
    /// Another node declared this one dead and handed its work to others:
    /// nothing more may be written by it (its epoch moved on).
    #[error("store: node {0} was declared dead by another node (fenced)")]
    Fenced(String),
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> StoreError {
        // Class 57P: the server is shutting the session down
        // (admin_shutdown, crash_shutdown, cannot_connect_now).
        let shut_down = e.code().is_some_and(|c| c.code().starts_with("57P"));
        if e.is_closed() || shut_down {
            StoreError::ConnectionLost(error_chain(&e))
        } else {
            StoreError::Postgres(error_chain(&e))
        }
    }
}

impl From<deadpool_postgres::PoolError> for StoreError {
    fn from(e: deadpool_postgres::PoolError) -> StoreError {
        StoreError::Postgres(error_chain(&e))
    }
}

/// `e` and its sources, `: `-separated, each said once.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let part = cause.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        next = cause.source();
    }
    text
}

/// The attempts of `r` a commit writes: the last two, since one step can
/// end an attempt and start the next (an interrupted one at start-up, a
/// retry with no backoff).
/// By position, not by `started_at`: start times are wall-clock times, and
/// after the wall clock was stepped back a later attempt can have started
/// "before" the one it follows.
pub(crate) fn attempts_to_write(r: &Run) -> impl Iterator<Item = &ax_engine::Attempt> {
    r.attempts.iter().skip(r.attempts.len().saturating_sub(2))
}

/// A stored trigger queue (JSON).
pub(crate) fn parse_trigger_queue(dag: &str, json: &str) -> Result<Vec<Trigger>, StoreError> {
    serde_json::from_str(json)
        .map_err(|e| StoreError::Corrupt(format!("trigger queue of {dag:?}: {e}")))
}

/// What one scheduler step changes in the store, owned: built straight
/// from the engine (`scheduler::commit_of`) and handed to the writer
/// inside its `Step`.
#[derive(Default)]
pub struct Changes {
    pub dag_runs: Vec<DagRun>,
    pub runs: Vec<Run>,
    pub events: Vec<Event>,
    pub paused: Vec<(String, bool)>,
    pub cron_marks: Vec<(String, i64)>,
    /// `@reboot` DAGs' boot seen.
    pub boot_marks: Vec<(String, Arc<str>)>,
    /// Each DAG's whole queue of triggers as it now is (empty: none).
    pub trigger_queues: Vec<(String, Vec<Trigger>)>,
    pub dag_defs: Vec<Arc<DagSpec>>,
    pub removed_defs: Vec<String>,
    /// `dag_defs` is every DAG the node defines: in a cluster its record
    /// of loaded versions (`node_dags`) is replaced, not updated.
    pub defs_complete: bool,
}

impl Changes {
    /// The store's view of these changes alone.
    pub fn commit(&self) -> Commit<'_> {
        Commit::merged(std::iter::once(self))
    }

    pub fn is_empty(&self) -> bool {
        self.dag_runs.is_empty()
            && self.runs.is_empty()
            && self.events.is_empty()
            && self.paused.is_empty()
            && self.cron_marks.is_empty()
            && self.boot_marks.is_empty()
            && self.trigger_queues.is_empty()
            && self.dag_defs.is_empty()
            && self.removed_defs.is_empty()
            && !self.defs_complete
    }
}

/// What one transaction writes: the changes of one or more steps, borrowed
/// from them (the writer keeps the steps until they are durable, for a
/// retry and for the journal, so the view copies no row). Of a row
/// changed by several steps, the last version; rows in id order, so new
/// rows go to the end of their B-trees (SQLite's append path) instead of
/// splitting pages in the middle.
#[derive(Default)]
pub struct Commit<'a> {
    pub dag_runs: Vec<&'a DagRun>,
    pub runs: Vec<&'a Run>,
    pub events: Vec<&'a Event>,
    pub paused: Vec<(String, bool)>,
    pub cron_marks: Vec<(String, i64)>,
    /// `@reboot` DAGs' boot seen.
    pub boot_marks: Vec<(String, Arc<str>)>,
    /// Each DAG's whole queue of triggers as it now is (empty: none).
    pub trigger_queues: Vec<(String, Vec<Trigger>)>,
    pub dag_defs: Vec<(&'a DagSpec, String)>,
    pub removed_defs: Vec<String>,
    /// `dag_defs` is every DAG the node defines: in a cluster its record
    /// of loaded versions (`node_dags`) is replaced, not updated.
    pub defs_complete: bool,
}

impl<'a> Commit<'a> {
    /// One transaction's view of several steps' changes, in order.
    pub fn merged(steps: impl IntoIterator<Item = &'a Changes>) -> Commit<'a> {
        let steps: Vec<&'a Changes> = steps.into_iter().collect();
        let mut c = Commit::default();
        if let [one] = steps[..] {
            c.dag_runs = one.dag_runs.iter().collect();
            c.runs = one.runs.iter().collect();
        } else {
            let mut dag_runs: BTreeMap<u64, &DagRun> = BTreeMap::new();
            let mut runs: BTreeMap<u64, &Run> = BTreeMap::new();
            for s in &steps {
                for d in &s.dag_runs {
                    dag_runs.insert(d.id.0, d);
                }
                for r in &s.runs {
                    runs.insert(r.id.0, r);
                }
            }
            c.dag_runs = dag_runs.into_values().collect();
            c.runs = runs.into_values().collect();
        }
        for s in steps {
            c.events.extend(s.events.iter());
            c.paused.extend(s.paused.iter().cloned());
            c.cron_marks.extend(s.cron_marks.iter().cloned());
            c.boot_marks.extend(s.boot_marks.iter().cloned());
            c.trigger_queues.extend(s.trigger_queues.iter().cloned());
            c.dag_defs
                .extend(s.dag_defs.iter().map(|d| (&**d, String::new())));
            c.removed_defs.extend(s.removed_defs.iter().cloned());
            c.defs_complete |= s.defs_complete;
        }
        c
    }

    pub fn is_empty(&self) -> bool {
        self.dag_runs.is_empty()
            && self.runs.is_empty()
            && self.events.is_empty()
            && self.paused.is_empty()
            && self.cron_marks.is_empty()
            && self.boot_marks.is_empty()
            && self.trigger_queues.is_empty()
            && self.dag_defs.is_empty()
            && self.removed_defs.is_empty()
            && !self.defs_complete
    }
}

/// What start-up needs from the store.
pub struct Loaded {
    pub dag_runs: Vec<RestoredDagRun>,
    /// Finished runs that loaded runs depend on.
    pub external: Vec<(RunId, RunState)>,
    pub next_run: u64,
    pub next_dag_run: u64,
    pub paused: Vec<String>,
    /// The last cron slot and `@reboot` boot of each DAG.
    pub marks: TriggerMarks,
    /// Triggers queued behind active runs (`overlap = "queue"`, catch-up).
    pub trigger_queues: HashMap<String, Vec<Trigger>>,
    /// Attempts found running: (pid, pid start time) to sweep.
    pub orphans: Vec<(u32, Option<u64>)>,
}

#[derive(Clone, Debug, Default)]
pub struct RunQuery {
    pub states: Vec<RunState>,
    pub dag: Option<String>,
    pub dag_run: Option<u64>,
    /// Substring of the DAG or job name.
    pub text: Option<String>,
    /// Only runs with an id below this (paging, newest first).
    pub before: Option<u64>,
    pub limit: usize,
    /// Only runs of this user's DAGs (names starting `@owner/`,
    /// docs/users.md, "Who may do what on the socket").
    pub owner: Option<String>,
    /// Leave out the runs of hooks' DAG runs (`on_failure`, `on_success`).
    pub without_hooks: bool,
}

/// A read of the event log: events after `after` matching every filter
/// given, at most `limit` of them; the oldest such, or with `newest` the
/// newest such (the answer is oldest first either way).
#[derive(Clone, Debug, Default)]
pub struct EventQuery {
    pub after: i64,
    pub limit: usize,
    pub run: Option<u64>,
    pub dag: Option<String>,
    /// Who asked: a user name or a uid, matched against the actor text
    /// `alice (uid 1000) via ax` as a whole word (`alice` is not
    /// `alice2`; `scheduler` is the actor `scheduler`); any other text is
    /// matched as a substring (`via ax-tui`).
    pub actor: Option<String>,
    pub since: Option<Timestamp>,
    pub newest: bool,
    /// Only events of this user's DAG runs (see `RunQuery::owner`).
    pub owner: Option<String>,
}

/// One condition on a text column, literal (no wildcards), as both
/// stores write it in SQL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TextMatch {
    Exact(String),
    Prefix(String),
    Contains(String),
}

/// What an actor filter matches: for a user name (or another one-word
/// actor, `scheduler`) or a uid, the forms an actor text names it in
/// (`alice (uid 1000) via …`, `uid 1000 via …`); for other text, the text
/// anywhere. Any one of them matches.
pub(crate) fn actor_matches(actor: &str) -> Vec<TextMatch> {
    let account = !actor.is_empty()
        && actor
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '$'));
    if !account {
        return vec![TextMatch::Contains(actor.to_string())];
    }
    // The name as the actor's first word: `alice (uid 1000) via ax`,
    // `scheduler`, not `alice2 …`.
    let mut out = vec![
        TextMatch::Exact(actor.to_string()),
        TextMatch::Prefix(format!("{actor} ")),
    ];
    if actor.chars().all(|c| c.is_ascii_digit()) {
        out.push(TextMatch::Contains(format!(" (uid {actor}) via ")));
        out.push(TextMatch::Prefix(format!("uid {actor} via ")));
    }
    out
}

impl TextMatch {
    /// The condition on `column` (`find` is `instr` in SQLite, `strpos`
    /// in PostgreSQL: both 1-based, 0 when absent); `bind` binds the text
    /// and gives its placeholder.
    pub(crate) fn sql(
        &self,
        find: &str,
        column: &str,
        bind: impl FnOnce(String) -> String,
    ) -> String {
        match self {
            TextMatch::Exact(t) => format!("{column} = {}", bind(t.clone())),
            TextMatch::Prefix(t) => format!("{find}({column}, {}) = 1", bind(t.clone())),
            TextMatch::Contains(t) => format!("{find}({column}, {}) > 0", bind(t.clone())),
        }
    }
}

/// The DAG names of `owner`'s DAGs: `@owner/…`.
pub(crate) fn owner_match(owner: &str) -> TextMatch {
    TextMatch::Prefix(ax_shared::users::user_dag_name(owner, ""))
}

pub trait Store: Send {
    /// Writes one step's changes atomically; returns the sequence numbers
    /// given to `c.events`, in order.
    fn commit(&mut self, c: &Commit<'_>) -> Result<Vec<i64>, StoreError>;
    fn load(&mut self) -> Result<Loaded, StoreError>;
    fn list_runs(&mut self, q: &RunQuery) -> Result<Vec<RunView>, StoreError>;
    fn get_run(&mut self, id: u64) -> Result<Option<RunView>, StoreError>;
    fn run_events(&mut self, run: u64, limit: usize) -> Result<Vec<EventView>, StoreError>;
    /// The events matching `q`, oldest first.
    fn events(&mut self, q: &EventQuery) -> Result<Vec<EventView>, StoreError>;
    fn run_state(&mut self, id: u64) -> Result<Option<RunState>, StoreError>;
    /// Count of runs per state, over the whole store.
    fn state_counts(&mut self) -> Result<BTreeMap<String, u64>, StoreError>;
    /// When runs ended failed or timed out at or after `since` (ms),
    /// oldest first: what `ax status`'s failures of the last hour start
    /// from, so a restart does not reset them. In a cluster, the runs whose
    /// last attempt ran on this node.
    fn failed_since(&mut self, since: i64) -> Result<Vec<i64>, StoreError>;
    /// The newest DAG run of each DAG: its state, and when it ended (or,
    /// active, began).
    fn last_dag_runs(&mut self) -> Result<HashMap<String, LastDagRun>, StoreError>;
    /// When each DAG last had a DAG run succeed and fail (or be cancelled),
    /// in ms: what the metrics' per-DAG timestamps start from.
    fn dag_history(&mut self) -> Result<HashMap<String, crate::metrics::DagHistory>, StoreError>;
    /// The newest DAG run created with this unique key, finished or not.
    fn newest_with_unique_key(&mut self, key: &str) -> Result<Option<UniqueHolder>, StoreError>;
    /// One DAG run, finished or not, to load it back into the engine
    /// (a retry of a run the engine no longer holds).
    fn load_dag_run(&mut self, id: u64) -> Result<Option<RestoredDagRun>, StoreError>;
    /// The last good version of every DAG the jobs folder defined.
    fn load_dag_defs(&mut self) -> Result<Vec<DagSpec>, StoreError>;
    /// The spec a DAG run was created from.
    fn dag_run_spec(&mut self, dag_run: u64) -> Result<Option<Arc<DagSpec>>, StoreError>;
    /// Makes this node the owner of a DAG run it is about to load back
    /// (to cancel or retry one of its runs), unless another node is
    /// running it: `Err(node)` then. One node alone owns everything.
    fn take_dag_run(&mut self, _dag_run: u64) -> Result<Result<(), String>, StoreError> {
        Ok(Ok(()))
    }
    /// Waits until no other node is between looking up this unique key
    /// and committing the DAG run it creates with it, and holds the key
    /// until what `take_unique_holds` returns next is dropped (after this
    /// node's commit of the step). One node alone needs no hold: its
    /// engine sees every key.
    fn hold_unique_key(&mut self, _key: &str) -> Result<(), StoreError> {
        Ok(())
    }
    /// The keys held since the last call, released when dropped.
    fn take_unique_holds(&mut self) -> Option<Hold> {
        None
    }
}

/// A DAG's newest DAG run, as the store has it.
#[derive(Clone, Debug, PartialEq)]
pub struct LastDagRun {
    pub state: DagRunState,
    /// `finished_at`, or `created_at` while it is active (ms).
    pub at: i64,
}

/// Something held until it is dropped (a lock in the store).
pub type Hold = Box<dyn Send>;
