//! The SQLite store: WAL, `synchronous = FULL` by default, `BEGIN
//! IMMEDIATE` for every write, schema versioned in `user_version`.
//!
//! Three connections to one database: the scheduler thread's serves reads,
//! the writer thread's writes, the pruner's deletes in short batches
//! (`sqlite::prune`). Every commit is one transaction (group commit: the
//! steps waiting at the writer, however many submissions and transitions
//! they hold, cost one fsync).

use std::path::Path;

use rusqlite::{Connection, TransactionBehavior};

mod events;
mod load;
mod prune;
mod queries;
mod schema;
mod write;

use super::StoreError;
use super::specs::SpecHashes;
use schema::MIGRATIONS;

pub struct SqliteStore {
    conn: Connection,
    spec_hashes: SpecHashes,
}

impl SqliteStore {
    pub fn open(path: &Path, synchronous_full: bool) -> Result<SqliteStore, StoreError> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Corrupt(format!(
                "cannot enable WAL (journal_mode = {mode})"
            )));
        }
        conn.execute_batch(if synchronous_full {
            "PRAGMA synchronous = FULL;"
        } else {
            "PRAGMA synchronous = NORMAL;"
        })?;
        // Bounded WAL: checkpoint every 1000 pages (SQLite's default, stated
        // here because the bound matters) and truncate the file back to
        // 64 MiB after a checkpoint.
        conn.execute_batch("PRAGMA wal_autocheckpoint = 1000; PRAGMA journal_size_limit = 67108864; PRAGMA foreign_keys = OFF;")?;
        let mut store = SqliteStore {
            conn,
            spec_hashes: SpecHashes::default(),
        };
        store.migrate()?;
        Ok(store)
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
        let version: i64 = self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version as usize > MIGRATIONS.len() {
            return Err(StoreError::Corrupt(format!(
                "database schema version {version} is newer than this axd understands ({})",
                MIGRATIONS.len()
            )));
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute_batch(sql)?;
            tx.execute_batch(&format!("PRAGMA user_version = {}", i + 1))?;
            tx.commit()?;
        }
        Ok(())
    }
}

/// Every row `stmt` returns for `params`, each read by `read` (a shared
/// reader of `rows`).
fn all<'s, T>(
    stmt: &'s mut rusqlite::Statement<'_>,
    params: impl rusqlite::Params,
    read: impl Fn(&rusqlite::Row<'s>) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    let mut rows = stmt.query(params)?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push(read(r)?);
    }
    Ok(out)
}
