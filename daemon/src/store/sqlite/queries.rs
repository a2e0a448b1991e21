//! The read side of the `Store` trait on SQLite (and `commit`, which
//! `write.rs` carries out).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use ax_protocol::api::{EventView, RunView};
use ax_shared::{DagSpec, RunState};
use rusqlite::{OptionalExtension, params};

use super::{SqliteStore, all, events};
use crate::store::rows::{
    self, ATTEMPT_VIEW_COLUMNS, Columns, EVENT_COLUMNS, RUN_VIEW_COLUMNS, decode, fit,
};
use crate::store::specs::parse_spec;
use crate::store::{
    Commit, EventQuery, LastDagRun, Loaded, RunQuery, Store, StoreError, owner_match,
};
use ax_engine::{DagRunId, RestoredDagRun, RunId, UniqueHolder};

impl SqliteStore {
    /// Runs with their attempts.
    fn run_views(
        &self,
        sql: &str,
        params: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<RunView>, StoreError> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        let mut views = all(&mut stmt, params, rows::run_view)?;
        if views.is_empty() {
            return Ok(views);
        }
        let list = views
            .iter()
            .map(|v| v.id.to_string())
            .collect::<Vec<_>>()
            .join(",");
        // One node alone: no attempt names another.
        let sql = format!(
            "SELECT {ATTEMPT_VIEW_COLUMNS}, NULL FROM attempts WHERE run IN ({list}) ORDER BY run, n"
        );
        // Not cached: the text differs from call to call.
        let mut stmt = self.conn.prepare(&sql)?;
        let attempts = all(&mut stmt, [], rows::attempt_view)?;
        rows::attach_attempts(&mut views, attempts);
        Ok(views)
    }
}

impl Store for SqliteStore {
    fn commit(&mut self, c: &Commit<'_>) -> Result<Vec<i64>, StoreError> {
        if c.is_empty() {
            return Ok(Vec::new());
        }
        let new_specs = self.spec_hashes.new_specs(c)?;
        let written = self.write(c, &new_specs);
        if written.is_err() {
            self.spec_hashes.rollback();
        }
        written
    }

    fn load(&mut self) -> Result<Loaded, StoreError> {
        self.load_where("d.state = 'active'")
    }

    fn load_dag_defs(&mut self) -> Result<Vec<DagSpec>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT s.spec FROM dag_defs d JOIN specs s ON s.hash = d.hash ORDER BY d.name",
        )?;
        all(&mut stmt, [], |r| {
            parse_spec(r.str(0, "specs.spec")?, "stored DAG definition")
        })
    }

    fn load_dag_run(&mut self, id: u64) -> Result<Option<RestoredDagRun>, StoreError> {
        let loaded = self.load_where(&format!("d.id = {id}"))?;
        Ok(loaded.dag_runs.into_iter().next())
    }

    fn list_runs(&mut self, q: &RunQuery) -> Result<Vec<RunView>, StoreError> {
        use rusqlite::types::Value;
        let limit = q.limit.clamp(1, 10_000) as i64;
        let before = q.before.map(|b| b as i64).unwrap_or(i64::MAX);
        let mut sql = format!("SELECT {RUN_VIEW_COLUMNS} FROM runs WHERE id < ?");
        let mut values = vec![Value::Integer(before)];
        if !q.states.is_empty() {
            let list = q
                .states
                .iter()
                .map(|s| format!("'{}'", s.as_str()))
                .collect::<Vec<_>>()
                .join(",");
            sql.push_str(&format!(" AND state IN ({list})"));
        }
        if let Some(dag) = &q.dag {
            sql.push_str(" AND dag = ?");
            values.push(Value::Text(dag.clone()));
        }
        if let Some(owner) = &q.owner {
            let cond = owner_match(owner).sql("instr", "dag", |t| {
                values.push(Value::Text(t));
                "?".into()
            });
            sql.push_str(&format!(" AND {cond}"));
        }
        if let Some(dr) = q.dag_run {
            sql.push_str(&format!(" AND dag_run = {dr}"));
        }
        if q.without_hooks {
            sql.push_str(" AND dag_run NOT IN (SELECT id FROM dag_runs WHERE hook_of IS NOT NULL)");
        }
        if let Some(t) = &q.text {
            let pattern = format!(
                "%{}%",
                t.replace('\\', "\\\\")
                    .replace('%', "\\%")
                    .replace('_', "\\_")
            );
            sql.push_str(" AND (dag LIKE ? ESCAPE '\\' OR job LIKE ? ESCAPE '\\')");
            values.push(Value::Text(pattern.clone()));
            values.push(Value::Text(pattern));
        }
        sql.push_str(" ORDER BY id DESC LIMIT ?");
        values.push(Value::Integer(limit));
        let params: Vec<&dyn rusqlite::ToSql> =
            values.iter().map(|v| v as &dyn rusqlite::ToSql).collect();
        self.run_views(&sql, &params)
    }

    fn get_run(&mut self, id: u64) -> Result<Option<RunView>, StoreError> {
        let sql = format!("SELECT {RUN_VIEW_COLUMNS} FROM runs WHERE id = ?1");
        Ok(self.run_views(&sql, &[&(id as i64)])?.pop())
    }

    fn run_events(&mut self, run: u64, limit: usize) -> Result<Vec<EventView>, StoreError> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE run = ?1 ORDER BY seq LIMIT ?2"
        ))?;
        all(
            &mut stmt,
            params![run as i64, limit as i64],
            rows::event_view,
        )
    }

    fn events(&mut self, q: &EventQuery) -> Result<Vec<EventView>, StoreError> {
        events::query(&self.conn, q)
    }

    fn run_state(&mut self, id: u64) -> Result<Option<RunState>, StoreError> {
        let s: Option<String> = self
            .conn
            .prepare_cached("SELECT state FROM runs WHERE id = ?1")?
            .query_row([id as i64], |r| r.get(0))
            .optional()?;
        s.map(|s| decode("runs.state", &s)).transpose()
    }

    fn state_counts(&mut self) -> Result<BTreeMap<String, u64>, StoreError> {
        let mut out = BTreeMap::new();
        for s in RunState::ALL {
            // One index range count per state: fast even with millions of runs.
            let n: i64 = self
                .conn
                .prepare_cached("SELECT COUNT(*) FROM runs WHERE state = ?1")?
                .query_row([s.as_str()], |r| r.get(0))?;
            out.insert(s.as_str().to_string(), fit("count", n)?);
        }
        Ok(out)
    }

    fn failed_since(&mut self, since: i64) -> Result<Vec<i64>, StoreError> {
        // The failed states' index range, bounded by retention.
        let mut stmt = self.conn.prepare_cached(
            "SELECT finished_at FROM runs WHERE state IN ('failed', 'timed_out')
             AND finished_at >= ?1 ORDER BY finished_at",
        )?;
        all(&mut stmt, [since], |r| r.int(0, "runs.finished_at"))
    }

    fn last_dag_runs(&mut self) -> Result<HashMap<String, LastDagRun>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT dag, state, COALESCE(finished_at, created_at) FROM dag_runs
             WHERE id IN (SELECT MAX(id) FROM dag_runs GROUP BY dag)",
        )?;
        Ok(all(&mut stmt, [], rows::last_dag_run)?
            .into_iter()
            .collect())
    }

    fn dag_history(&mut self) -> Result<HashMap<String, crate::metrics::DagHistory>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT dag,
                    MAX(CASE WHEN state = 'success' THEN finished_at END),
                    MAX(CASE WHEN state IN ('failed', 'cancelled') THEN finished_at END)
             FROM dag_runs WHERE finished_at IS NOT NULL GROUP BY dag",
        )?;
        Ok(all(&mut stmt, [], rows::dag_history)?.into_iter().collect())
    }

    fn newest_with_unique_key(&mut self, key: &str) -> Result<Option<UniqueHolder>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, created_at FROM dag_runs WHERE unique_key = ?1 ORDER BY id DESC LIMIT 1",
        )?;
        let head = all(&mut stmt, [key], |r| {
            Ok((
                r.int::<u64>(0, "dag_runs.id")?,
                r.int::<i64>(1, "dag_runs.created_at")?,
            ))
        })?;
        let Some(&(id, created_at)) = head.first() else {
            return Ok(None);
        };
        let mut stmt = self
            .conn
            .prepare_cached("SELECT id FROM runs WHERE dag_run = ?1 ORDER BY job_index")?;
        let runs = all(&mut stmt, [id as i64], |r| Ok(RunId(r.int(0, "runs.id")?)))?;
        Ok(Some(UniqueHolder {
            dag_run: DagRunId(id),
            created_at,
            runs,
        }))
    }

    fn dag_run_spec(&mut self, dag_run: u64) -> Result<Option<Arc<DagSpec>>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT s.spec FROM dag_runs d JOIN specs s ON s.hash = d.spec_hash WHERE d.id = ?1",
        )?;
        let specs = all(&mut stmt, [dag_run as i64], |r| {
            parse_spec(r.str(0, "specs.spec")?, "stored spec").map(Arc::new)
        })?;
        Ok(specs.into_iter().next())
    }
}
