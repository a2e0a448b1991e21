//! Deleting finished DAG runs (retention: `keep_runs` and `retain` in
//! axd.toml), for the pruner thread's own connection (`crate::store::retention`):
//! the `Prune` trait, and what a pruned DAG run takes with it. Each
//! backend writes its SQL (`sqlite/prune.rs`, `postgres/prune.rs`).
//!
//! Candidates are read outside any write transaction; each batch is then
//! deleted in one short transaction that checks every candidate again
//! (still finished, finished before the cutoff), so the writer thread
//! waits for at most one batch. The upstream runs of active DAG runs are
//! never deleted.

use std::collections::BTreeMap;

use ax_shared::RunState;

use super::StoreError;

/// What one deleted batch held.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    pub dag_runs: u64,
    /// Deleted runs by their (terminal) state.
    pub runs: BTreeMap<RunState, u64>,
    /// (run, attempt) of every deleted attempt, whose log files go too.
    pub attempts: Vec<(u64, u32)>,
}

/// A DAG's finished runs past its `keep` newest (`Prune::beyond_newest`).
pub struct BeyondNewest<'a> {
    pub dag: &'a str,
    pub keep: u32,
    pub before: i64,
    pub limit: usize,
}

/// What the pruner needs from a store.
pub trait Prune: Send {
    /// Up to `limit` finished DAG runs with an id above `after`, finished
    /// before `before`, oldest id first.
    fn finished_before(
        &mut self,
        before: i64,
        after: u64,
        limit: usize,
    ) -> Result<Vec<u64>, StoreError>;
    /// Up to `limit` finished DAG runs of `dag` older than its newest
    /// `keep` DAG runs (active ones count among the newest), finished
    /// before `before`.
    fn beyond_newest(&mut self, q: &BeyondNewest<'_>) -> Result<Vec<u64>, StoreError>;
    /// Deletes those of `ids` that are still finished and finished before
    /// `before`, with their runs, attempts and events, in one transaction.
    /// A finished run that a run of an active DAG run still waits on
    /// (`--after`) stays, with its DAG run: a restart reads its state from
    /// the store.
    fn delete_dag_runs(&mut self, ids: &[u64], before: i64) -> Result<Pruned, StoreError>;
    /// Deletes specs no DAG run and no DAG definition refers to. Safe
    /// beside the writer's spec cache because a spec is only cached while
    /// its `Arc` lives, and a live `Arc` belongs to a DAG run the engine
    /// holds (never pruned) or to a loaded DAG, whose spec `dag_defs`
    /// refers to.
    fn delete_unused_specs(&mut self) -> Result<u64, StoreError>;
    /// The bytes the store occupies, for `ax status`; `None` when unknown.
    fn store_bytes(&mut self) -> Option<u64>;
}

/// How a table's rows belong to a DAG run.
#[derive(Clone, Copy, Debug)]
pub(crate) enum By {
    /// Its `run` is one of the DAG run's runs.
    Run,
    /// Its `dag_run` is the DAG run.
    DagRun,
    /// It is the DAG run (`id`).
    Id,
}

/// A table a pruned DAG run's rows are deleted from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deleted {
    pub table: &'static str,
    pub by: By,
    /// Only a cluster's store has the table (shipped logs).
    pub cluster_only: bool,
}

/// What a pruned DAG run takes with it, in the order deleted: every row
/// that refers to its runs before the runs, the runs before it.
pub(crate) const DELETED: [Deleted; 6] = [
    Deleted {
        table: "attempts",
        by: By::Run,
        cluster_only: false,
    },
    // Shipped logs go with their attempts, as log files do on the node
    // that ran them.
    Deleted {
        table: "log_chunks",
        by: By::Run,
        cluster_only: true,
    },
    Deleted {
        table: "log_done",
        by: By::Run,
        cluster_only: true,
    },
    Deleted {
        table: "events",
        by: By::DagRun,
        cluster_only: false,
    },
    Deleted {
        table: "runs",
        by: By::DagRun,
        cluster_only: false,
    },
    Deleted {
        table: "dag_runs",
        by: By::Id,
        cluster_only: false,
    },
];

/// The statements deleting `DELETED` (without the cluster's tables unless
/// `cluster`); `picked(column)` is the backend's SQL for "`column` is one
/// of the picked DAG runs".
pub(crate) fn delete_statements(cluster: bool, picked: impl Fn(&str) -> String) -> Vec<String> {
    DELETED
        .iter()
        .filter(|d| cluster || !d.cluster_only)
        .map(|d| {
            let table = d.table;
            match d.by {
                By::Run => format!(
                    "DELETE FROM {table} WHERE run IN (SELECT id FROM runs WHERE {})",
                    picked("dag_run")
                ),
                By::DagRun => format!("DELETE FROM {table} WHERE {}", picked("dag_run")),
                By::Id => format!("DELETE FROM {table} WHERE {}", picked("id")),
            }
        })
        .collect()
}
