//! Retention on SQLite (see `store/prune.rs`): each batch is deleted in
//! one `BEGIN IMMEDIATE` transaction.

use rusqlite::{TransactionBehavior, params};

use super::{SqliteStore, all};
use crate::store::StoreError;
use crate::store::prune::{BeyondNewest, Prune, Pruned, delete_statements};
use crate::store::rows::{Columns, fit};

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
        all(
            &mut stmt,
            params![after as i64, before, limit as i64],
            |r| r.int(0, "dag_runs.id"),
        )
    }

    fn beyond_newest(&mut self, q: &BeyondNewest<'_>) -> Result<Vec<u64>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id FROM dag_runs WHERE dag = ?1 AND state != 'active' AND finished_at < ?3
               AND id < (SELECT id FROM dag_runs WHERE dag = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2 - 1)
             ORDER BY id LIMIT ?4",
        )?;
        all(
            &mut stmt,
            params![q.dag, i64::from(q.keep), q.before, q.limit as i64],
            |r| r.int(0, "dag_runs.id"),
        )
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
        let picked: i64 = tx.query_row("SELECT COUNT(*) FROM prune_dr", [], |r| r.get(0))?;
        let mut pruned = Pruned {
            dag_runs: fit("count", picked)?,
            ..Pruned::default()
        };
        {
            let mut stmt = tx.prepare_cached(
                "SELECT state, COUNT(*) FROM runs WHERE dag_run IN (SELECT id FROM prune_dr) GROUP BY state",
            )?;
            pruned.runs = all(&mut stmt, [], |r| {
                Ok((r.code(0, "runs.state")?, r.int(1, "count")?))
            })?
            .into_iter()
            .collect();
            let mut stmt = tx.prepare_cached(
                "SELECT a.run, a.n FROM attempts a JOIN runs r ON r.id = a.run WHERE r.dag_run IN (SELECT id FROM prune_dr)",
            )?;
            pruned.attempts = all(&mut stmt, [], |r| {
                Ok((r.int(0, "attempts.run")?, r.int(1, "attempts.n")?))
            })?;
        }
        for sql in delete_statements(false, |column| {
            format!("{column} IN (SELECT id FROM prune_dr)")
        }) {
            tx.execute(&sql, [])?;
        }
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
