//! Reading the store back at start-up (and one DAG run for a retry):
//! DAG runs with their runs and attempts, and what else a restart needs.

use std::collections::HashMap;

use rusqlite::Connection;

use super::{SqliteStore, all};
use crate::store::rows::{
    ATTEMPT_COLUMNS, Assemble, AttemptRow, Columns, DAG_RUN_COLUMNS, DagRunRow, RUN_COLUMNS, RunRow,
};
use crate::store::{Loaded, Store, StoreError, parse_trigger_queue};
use ax_engine::{RunId, Trigger};

impl SqliteStore {
    /// DAG runs matching `filter` (SQL over `dag_runs d`) with their runs
    /// and attempts, plus what start-up needs besides.
    pub(super) fn load_where(&mut self, filter: &str) -> Result<Loaded, StoreError> {
        let next_id = |table: &str| -> Result<u64, StoreError> {
            let mut stmt = self
                .conn
                .prepare(&format!("SELECT COALESCE(MAX(id), 0) + 1 FROM {table}"))?;
            let ids = all(&mut stmt, [], |r| r.int(0, "next id"))?;
            Ok(ids.into_iter().next().unwrap_or(1))
        };
        let (next_run, next_dag_run) = (next_id("runs")?, next_id("dag_runs")?);
        let assembled = dag_runs_where(&self.conn, filter)?;
        let mut external = Vec::new();
        for u in assembled.outside {
            if let Some(s) = self.run_state(u)? {
                external.push((RunId(u), s));
            }
        }
        let mut stmt = self.conn.prepare("SELECT dag FROM paused")?;
        let paused = all(&mut stmt, [], |r| r.string(0, "paused.dag"))?;
        let mut stmt = self.conn.prepare("SELECT dag, last_slot FROM cron_marks")?;
        let cron_marks: HashMap<String, i64> = all(&mut stmt, [], |r| {
            Ok((
                r.string(0, "cron_marks.dag")?,
                r.int(1, "cron_marks.last_slot")?,
            ))
        })?
        .into_iter()
        .collect();
        let mut stmt = self.conn.prepare("SELECT dag, queue FROM trigger_queues")?;
        let trigger_queues: HashMap<String, Vec<Trigger>> = all(&mut stmt, [], |r| {
            let dag = r.string(0, "trigger_queues.dag")?;
            let queue = parse_trigger_queue(&dag, r.str(1, "trigger_queues.queue")?)?;
            Ok((dag, queue))
        })?
        .into_iter()
        .collect();
        Ok(Loaded {
            dag_runs: assembled.dag_runs,
            external,
            next_run,
            next_dag_run,
            paused,
            cron_marks,
            trigger_queues,
            orphans: assembled.orphans,
        })
    }
}

/// DAG runs matching `filter` with their runs and attempts.
fn dag_runs_where(
    conn: &Connection,
    filter: &str,
) -> Result<crate::store::rows::Assembled, StoreError> {
    let mut assemble = Assemble::default();
    let mut stmt = conn.prepare(&format!(
        "SELECT {DAG_RUN_COLUMNS}
         FROM dag_runs d JOIN specs s ON s.hash = d.spec_hash WHERE {filter} ORDER BY d.id",
    ))?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        assemble.dag_run(DagRunRow::read(r)?)?;
    }
    // One node alone: no attempt names the node that ran it.
    let mut stmt = conn.prepare(&format!(
        "SELECT {ATTEMPT_COLUMNS}, NULL
         FROM attempts a JOIN runs r ON r.id = a.run JOIN dag_runs d ON d.id = r.dag_run
         WHERE {filter} ORDER BY a.run, a.n",
    ))?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        assemble.attempt(AttemptRow::read(r)?);
    }
    let mut stmt = conn.prepare(&format!(
        "SELECT {RUN_COLUMNS}
         FROM runs r JOIN dag_runs d ON d.id = r.dag_run WHERE {filter} ORDER BY r.id",
    ))?;
    let mut rows = stmt.query([])?;
    while let Some(r) = rows.next()? {
        assemble.run(RunRow::read(r)?);
    }
    Ok(assemble.finish())
}
