//! Deleting finished DAG runs (retention: docs/config.md, "`[logs]`"), for
//! the pruner thread's own connection (`crate::store::retention`): the `Prune`
//! trait, and its SQLite implementation (PostgreSQL's is in
//! `postgres/prune.rs`).
//!
//! Candidates are read outside any write transaction; each batch is then
//! deleted in one short `BEGIN IMMEDIATE` transaction that checks every
//! candidate again (still finished, finished before the cutoff), so the
//! writer thread waits for at most one batch. The upstream runs of active
//! DAG runs are never deleted.

use std::collections::BTreeMap;

use ax_shared::RunState;
use rusqlite::{TransactionBehavior, params};

use super::StoreError;
use super::sqlite::SqliteStore;

/// What one deleted batch held.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    pub dag_runs: u64,
    /// Deleted runs by their (terminal) state.
    pub runs: BTreeMap<RunState, u64>,
    /// (run, attempt) of every deleted attempt, whose log files go too.
    pub attempts: Vec<(u64, u32)>,
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
    fn beyond_newest(
        &mut self,
        dag: &str,
        keep: u32,
        before: i64,
        limit: usize,
    ) -> Result<Vec<u64>, StoreError>;
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

impl Prune for SqliteStore {
    fn finished_before(
        &mut self,
        before: i64,
        after: u64,
        limit: usize,
    ) -> Result<Vec<u64>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id FROM dag_runs WHERE id > ?1 AND state != 'active' AND finished_at < ?2 ORDER BY id LIMIT ?3",
        )?;
        let ids = stmt
            .query_map(params![after as i64, before, limit as i64], |r| {
                r.get::<_, i64>(0)
            })?
            .map(|r| r.map(|id| id as u64))
            .collect::<Result<_, _>>()?;
        Ok(ids)
    }

    fn beyond_newest(
        &mut self,
        dag: &str,
        keep: u32,
        before: i64,
        limit: usize,
    ) -> Result<Vec<u64>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id FROM dag_runs WHERE dag = ?1 AND state != 'active' AND finished_at < ?3
               AND id < (SELECT id FROM dag_runs WHERE dag = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2 - 1)
             ORDER BY id LIMIT ?4",
        )?;
        let ids = stmt
            .query_map(params![dag, i64::from(keep), before, limit as i64], |r| {
                r.get::<_, i64>(0)
            })?
            .map(|r| r.map(|id| id as u64))
            .collect::<Result<_, _>>()?;
        Ok(ids)
    }

    fn delete_dag_runs(&mut self, ids: &[u64], before: i64) -> Result<Pruned, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute_batch(
            "CREATE TEMP TABLE IF NOT EXISTS prune_dr (id INTEGER PRIMARY KEY); DELETE FROM prune_dr;",
        )?;
        {
            let mut pick = tx.prepare_cached(
                "INSERT INTO prune_dr SELECT id FROM dag_runs WHERE id = ?1 AND state != 'active' AND finished_at < ?2",
            )?;
            for id in ids {
                pick.execute(params![*id as i64, before])?;
            }
        }
        // A finished run that a run of an active DAG run still waits on
        // (`--after`) stays: a restart reads its state from the store.
        tx.execute_batch(
            "DELETE FROM prune_dr WHERE id IN (
               SELECT u.dag_run FROM dag_runs d JOIN runs r ON r.dag_run = d.id, json_each(r.upstream) j
                 JOIN runs u ON u.id = j.value
               WHERE d.state = 'active' AND r.upstream != '[]');",
        )?;
        let mut pruned = Pruned {
            dag_runs: tx.query_row("SELECT COUNT(*) FROM prune_dr", [], |r| r.get::<_, i64>(0))?
                as u64,
            ..Pruned::default()
        };
        {
            let mut stmt = tx.prepare_cached(
                "SELECT state, COUNT(*) FROM runs WHERE dag_run IN (SELECT id FROM prune_dr) GROUP BY state",
            )?;
            let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
            for row in rows {
                let (state, n) = row?;
                let state = RunState::parse(&state)
                    .ok_or_else(|| StoreError::Corrupt(format!("unknown run state {state:?}")))?;
                pruned.runs.insert(state, n as u64);
            }
            let mut stmt = tx.prepare_cached(
                "SELECT a.run, a.n FROM attempts a JOIN runs r ON r.id = a.run WHERE r.dag_run IN (SELECT id FROM prune_dr)",
            )?;
            pruned.attempts = stmt
                .query_map([], |r| {
                    Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u32))
                })?
                .collect::<Result<_, _>>()?;
        }
        tx.execute_batch(
            "DELETE FROM attempts WHERE run IN (SELECT id FROM runs WHERE dag_run IN (SELECT id FROM prune_dr));
             DELETE FROM events WHERE dag_run IN (SELECT id FROM prune_dr);
             DELETE FROM runs WHERE dag_run IN (SELECT id FROM prune_dr);
             DELETE FROM dag_runs WHERE id IN (SELECT id FROM prune_dr);",
        )?;
        tx.commit()?;
        Ok(pruned)
    }

    fn delete_unused_specs(&mut self) -> Result<u64, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let n = tx.execute(
            "DELETE FROM specs WHERE hash NOT IN (SELECT spec_hash FROM dag_runs) AND hash NOT IN (SELECT hash FROM dag_defs)",
            [],
        )?;
        tx.commit()?;
        Ok(n as u64)
    }

    /// The database file and its WAL.
    fn store_bytes(&mut self) -> Option<u64> {
        let db = self.conn.path()?.to_string();
        let wal = format!("{db}-wal");
        Some(
            [db, wal]
                .iter()
                .filter_map(|p| std::fs::metadata(p).ok())
                .map(|m| m.len())
                .sum(),
        )
    }
}
