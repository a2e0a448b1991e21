//! Reading the store back at start-up (and one DAG run for a retry):
//! DAG runs with their runs and attempts, and what else a restart needs.

use super::{SqliteStore, all};
use crate::store::rows::{Assemble, Columns, Part};
use crate::store::{Loaded, Store, StoreError};
use ax_engine::RunId;

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
        let mut assemble = Assemble::default();
        for part in Part::ALL {
            // One node alone: no attempt names the node that ran it.
            let mut stmt = self.conn.prepare(&part.sql(filter, "NULL"))?;
            let mut rows = stmt.query([])?;
            while let Some(r) = rows.next()? {
                assemble.add(part, r)?;
            }
        }
        let assembled = assemble.finish();
        let mut external = Vec::new();
        for &u in &assembled.outside {
            if let Some(s) = self.run_state(u)? {
                external.push((RunId(u), s));
            }
        }
        Ok(assembled.loaded(external, next_run, next_dag_run))
    }
}
