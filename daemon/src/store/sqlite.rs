//! The SQLite store: WAL, `synchronous = FULL` by default, `BEGIN
//! IMMEDIATE` for every write, schema versioned in `user_version`.
//!
//! Three connections to one database: the scheduler thread's serves reads,
//! the writer thread's writes, the pruner's deletes in short batches
//! (`store::prune`). Every commit is one transaction (group commit: the
//! steps waiting at the writer, however many submissions and transitions
//! they hold, cost one fsync).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use ax_protocol::api::{AttemptView, EventView, RunView};
use ax_shared::{DagSpec, Outcome, RunState};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

mod events;
mod load;

use super::specs::{SpecHashes, def_text};
use super::{Commit, EventQuery, Loaded, RunQuery, Store, StoreError};
use super::{
    LastDagRun, dag_run_state_str, parse_dag_run_state, parse_outcome, parse_state, state_str,
};
use ax_engine::{Attempt, DagRunId, RestoredDagRun, Run, RunId, Trigger, UniqueHolder};
use ax_shared::time::Timestamp;

/// Maps keyed by our own sequential ids: no need for SipHash.
type IdMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<ax_engine::IdHasher>>;

const MIGRATIONS: &[&str] = &[
    // 1: the initial schema
    r#"
    CREATE TABLE specs (hash TEXT PRIMARY KEY, spec TEXT NOT NULL);
    CREATE TABLE dag_defs (name TEXT PRIMARY KEY, file TEXT NOT NULL, hash TEXT NOT NULL, loaded_at INTEGER NOT NULL);
    CREATE TABLE dag_runs (
        id INTEGER PRIMARY KEY, dag TEXT NOT NULL, spec_hash TEXT NOT NULL, state TEXT NOT NULL,
        trigger TEXT NOT NULL, unique_key TEXT, created_at INTEGER NOT NULL, finished_at INTEGER);
    CREATE INDEX dag_runs_dag ON dag_runs(dag, id);
    CREATE INDEX dag_runs_active ON dag_runs(state) WHERE state = 'active';
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY, dag_run INTEGER NOT NULL, dag TEXT NOT NULL, job TEXT NOT NULL,
        job_index INTEGER NOT NULL, state TEXT NOT NULL, priority INTEGER NOT NULL, pool TEXT NOT NULL,
        retries INTEGER NOT NULL, upstream TEXT NOT NULL, counted_failures INTEGER NOT NULL,
        created_at INTEGER NOT NULL, ready_at INTEGER, started_at INTEGER, finished_at INTEGER,
        next_at INTEGER, delay TEXT, reason TEXT NOT NULL, message TEXT, progress REAL);
    CREATE INDEX runs_state ON runs(state, id);
    CREATE INDEX runs_dag ON runs(dag, id);
    CREATE INDEX runs_dag_run ON runs(dag_run);
    CREATE TABLE attempts (
        run INTEGER NOT NULL, n INTEGER NOT NULL, started_at INTEGER NOT NULL, finished_at INTEGER,
        outcome TEXT, exit_code INTEGER, signal INTEGER, pid INTEGER, pid_start INTEGER,
        slot INTEGER NOT NULL, error TEXT, PRIMARY KEY (run, n)) WITHOUT ROWID;
    CREATE TABLE events (
        seq INTEGER PRIMARY KEY, at INTEGER NOT NULL, run INTEGER, dag_run INTEGER NOT NULL,
        from_state TEXT, to_state TEXT, reason TEXT NOT NULL, actor TEXT NOT NULL);
    CREATE INDEX events_run ON events(run) WHERE run IS NOT NULL;
    CREATE TABLE cron_marks (dag TEXT PRIMARY KEY, last_slot INTEGER NOT NULL);
    CREATE TABLE paused (dag TEXT PRIMARY KEY);
    "#,
    // 2: unique keys are looked up in the store (`--unique-for` spans
    // eviction from memory and restarts)
    r#"
    CREATE INDEX dag_runs_unique ON dag_runs(unique_key, id) WHERE unique_key IS NOT NULL;
    "#,
    // 3: queued triggers, one JSON list per DAG
    r#"
    CREATE TABLE trigger_queues (dag TEXT PRIMARY KEY, queue TEXT NOT NULL);
    "#,
    // 4: `events` filters by DAG and by time use an index (and pruning
    // finds a DAG run's events without a scan)
    r#"
    CREATE INDEX events_dag_run ON events(dag_run);
    CREATE INDEX events_at ON events(at);
    "#,
    // 5: output an attempt could not write to its log (a full disk)
    r#"
    ALTER TABLE attempts ADD COLUMN log_lost INTEGER NOT NULL DEFAULT 0;
    "#,
];

pub struct SqliteStore {
    pub(super) conn: Connection,
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

    fn attempts_for(&self, ids: &[u64]) -> Result<HashMap<u64, Vec<AttemptView>>, StoreError> {
        let mut out: HashMap<u64, Vec<AttemptView>> = HashMap::new();
        if ids.is_empty() {
            return Ok(out);
        }
        let list = ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        let mut stmt = self.conn.prepare(&format!(
            "SELECT run, n, started_at, finished_at, outcome, exit_code, signal, log_lost FROM attempts WHERE run IN ({list}) ORDER BY run, n"
        ))?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)? as u64,
                AttemptView {
                    n: r.get::<_, i64>(1)? as u32,
                    started_at: r.get::<_, Option<i64>>(2)?.map(Timestamp::from_millis),
                    finished_at: r.get::<_, Option<i64>>(3)?.map(Timestamp::from_millis),
                    outcome: r
                        .get::<_, Option<String>>(4)?
                        .map(|o| parsed(4, &o, Outcome::parse))
                        .transpose()?,
                    exit_code: r.get(5)?,
                    signal: r.get(6)?,
                    node: None,
                    log_lost: r.get::<_, i64>(7)? as u64,
                },
            ))
        })?;
        for row in rows {
            let (run, a) = row?;
            out.entry(run).or_default().push(a);
        }
        Ok(out)
    }

    fn run_views(
        &self,
        sql: &str,
        params: &[&dyn rusqlite::ToSql],
    ) -> Result<Vec<RunView>, StoreError> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        let rows = stmt.query_map(params, |r| {
            let priority = r.get::<_, i64>(6)? as u8;
            Ok(RunView {
                id: r.get::<_, i64>(0)? as u64,
                dag: r.get(1)?,
                job: r.get(2)?,
                dag_run: r.get::<_, i64>(3)? as u64,
                state: parsed(4, &r.get::<_, String>(4)?, RunState::parse)?,
                pool: r.get(5)?,
                priority,
                effective_priority: priority,
                retries: r.get::<_, i64>(7)? as u32,
                created_at: r.get::<_, Option<i64>>(8)?.map(Timestamp::from_millis),
                ready_at: r.get::<_, Option<i64>>(9)?.map(Timestamp::from_millis),
                started_at: r.get::<_, Option<i64>>(10)?.map(Timestamp::from_millis),
                finished_at: r.get::<_, Option<i64>>(11)?.map(Timestamp::from_millis),
                next_at: r.get::<_, Option<i64>>(12)?.map(Timestamp::from_millis),
                reason: r.get(13)?,
                message: r.get(14)?,
                progress: r.get(15)?,
                ..RunView::default()
            })
        })?;
        let mut views: Vec<RunView> = rows.collect::<Result<_, _>>()?;
        let ids: Vec<u64> = views.iter().map(|v| v.id).collect();
        let mut attempts = self.attempts_for(&ids)?;
        for v in &mut views {
            v.attempts = attempts.remove(&v.id).unwrap_or_default();
        }
        Ok(views)
    }

    /// One commit's transaction (`new_specs`: the specs it must add).
    fn write(
        &mut self,
        c: &Commit<'_>,
        new_specs: &[(String, String)],
    ) -> Result<Vec<i64>, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        {
            let mut spec =
                tx.prepare_cached("INSERT OR IGNORE INTO specs (hash, spec) VALUES (?1, ?2)")?;
            for (hash, text) in new_specs {
                spec.execute(params![hash, text])?;
            }
            for (def, _) in &c.dag_defs {
                let (hash, text) = def_text(def)?;
                spec.execute(params![hash, text])?;
                tx.prepare_cached("INSERT OR REPLACE INTO dag_defs (name, file, hash, loaded_at) VALUES (?1, ?2, ?3, ?4)")?
                    .execute(params![def.name, def.file, hash, crate::runtime::time::now_ms()])?;
            }
            for name in &c.removed_defs {
                tx.prepare_cached("DELETE FROM dag_defs WHERE name = ?1")?
                    .execute([name])?;
            }
            let mut dr = tx.prepare_cached(
                "INSERT INTO dag_runs (id, dag, spec_hash, state, trigger, unique_key, created_at, finished_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
                 ON CONFLICT(id) DO UPDATE SET state = excluded.state, finished_at = excluded.finished_at",
            )?;
            for d in &c.dag_runs {
                let hash = self.spec_hashes.hash_of(&d.spec);
                dr.execute(params![
                    d.id.0 as i64,
                    &*d.dag,
                    hash,
                    dag_run_state_str(d.state),
                    d.trigger,
                    d.unique_key,
                    d.created_at,
                    d.finished_at
                ])?;
            }
            let mut run = tx.prepare_cached(
                "INSERT INTO runs (id, dag_run, dag, job, job_index, state, priority, pool, retries, upstream, counted_failures,
                                   created_at, ready_at, started_at, finished_at, next_at, delay, reason, message, progress)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)
                 ON CONFLICT(id) DO UPDATE SET state = excluded.state, counted_failures = excluded.counted_failures,
                   ready_at = excluded.ready_at, started_at = excluded.started_at, finished_at = excluded.finished_at,
                   next_at = excluded.next_at, delay = excluded.delay, reason = excluded.reason,
                   message = excluded.message, progress = excluded.progress",
            )?;
            let mut att = tx.prepare_cached(
                "INSERT OR REPLACE INTO attempts (run, n, started_at, finished_at, outcome, exit_code, signal, pid, pid_start, slot, error, log_lost)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            )?;
            for r in &c.runs {
                let upstream = serde_json::to_string(&r.upstream)
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?;
                let delay = r.delay.map(super::delay_str);
                run.execute(params![
                    r.id.0 as i64,
                    r.dag_run.0 as i64,
                    &*r.dag,
                    r.job().id,
                    r.job_index,
                    state_str(r.state),
                    r.priority(),
                    r.pool(),
                    r.job().retries,
                    upstream,
                    r.counted_failures,
                    r.created_at,
                    r.ready_at,
                    r.started_at,
                    r.finished_at,
                    r.next_at,
                    delay,
                    r.reason,
                    r.message,
                    r.progress
                ])?;
                for a in super::attempts_to_write(r) {
                    att.execute(params![
                        r.id.0 as i64,
                        a.n,
                        a.started_at,
                        a.finished_at,
                        a.outcome.map(|o| o.as_str()),
                        a.exit_code,
                        a.signal,
                        a.pid,
                        a.pid_start.map(|v| v as i64),
                        a.slot,
                        a.error,
                        a.log_lost as i64
                    ])?;
                }
            }
            for (dag, paused) in &c.paused {
                if *paused {
                    tx.prepare_cached("INSERT OR IGNORE INTO paused (dag) VALUES (?1)")?
                        .execute([dag])?;
                } else {
                    tx.prepare_cached("DELETE FROM paused WHERE dag = ?1")?
                        .execute([dag])?;
                }
            }
            for (dag, slot) in &c.cron_marks {
                tx.prepare_cached(
                    "INSERT OR REPLACE INTO cron_marks (dag, last_slot) VALUES (?1, ?2)",
                )?
                .execute(params![dag, slot])?;
            }
            // In step order: a DAG's last queue of the group wins.
            for (dag, queue) in &c.trigger_queues {
                if queue.is_empty() {
                    tx.prepare_cached("DELETE FROM trigger_queues WHERE dag = ?1")?
                        .execute([dag])?;
                } else {
                    let json = serde_json::to_string(queue)
                        .map_err(|e| StoreError::Corrupt(format!("trigger queue: {e}")))?;
                    tx.prepare_cached(
                        "INSERT OR REPLACE INTO trigger_queues (dag, queue) VALUES (?1, ?2)",
                    )?
                    .execute(params![dag, json])?;
                }
            }
        }
        let mut seqs = Vec::with_capacity(c.events.len());
        {
            let mut ev = tx.prepare_cached(
                "INSERT INTO events (at, run, dag_run, from_state, to_state, reason, actor) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?;
            for e in &c.events {
                ev.execute(params![
                    e.at,
                    e.run.map(|r| r.0 as i64),
                    e.dag_run.0 as i64,
                    e.from.map(state_str),
                    e.to.map(state_str),
                    e.reason,
                    &*e.actor
                ])?;
                seqs.push(tx.last_insert_rowid());
            }
        }
        tx.commit()?;
        Ok(seqs)
    }
}

const RUN_COLUMNS: &str = "id, dag, job, dag_run, state, pool, priority, retries, created_at, ready_at, started_at, finished_at, next_at, reason, message, progress";

/// A state or outcome column's text as its type; unknown text is a
/// corrupt row.
fn parsed<T>(column: usize, text: &str, parse: fn(&str) -> Option<T>) -> rusqlite::Result<T> {
    parse(text).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            column,
            rusqlite::types::Type::Text,
            format!("unknown value {text:?}").into(),
        )
    })
}

fn event_view(r: &rusqlite::Row<'_>) -> rusqlite::Result<EventView> {
    Ok(EventView {
        seq: r.get(0)?,
        time: Timestamp::from_millis(r.get(1)?),
        run: r.get::<_, Option<i64>>(2)?.map(|v| v as u64),
        dag_run: r.get::<_, i64>(3)? as u64,
        from: r
            .get::<_, Option<String>>(4)?
            .map(|s| parsed(4, &s, RunState::parse))
            .transpose()?,
        to: r
            .get::<_, Option<String>>(5)?
            .map(|s| parsed(5, &s, RunState::parse))
            .transpose()?,
        reason: r.get(6)?,
        actor: r.get(7)?,
    })
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
        let mut stmt = self.conn.prepare(
            "SELECT s.spec FROM dag_defs d JOIN specs s ON s.hash = d.hash ORDER BY d.name",
        )?;
        let texts: Vec<String> = stmt
            .query_map([], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        texts
            .iter()
            .map(|t| {
                serde_json::from_str(t)
                    .map_err(|e| StoreError::Corrupt(format!("stored DAG definition: {e}")))
            })
            .collect()
    }

    fn load_dag_run(&mut self, id: u64) -> Result<Option<RestoredDagRun>, StoreError> {
        let loaded = self.load_where(&format!("d.id = {id}"))?;
        Ok(loaded.dag_runs.into_iter().next())
    }

    fn list_runs(&mut self, q: &RunQuery) -> Result<Vec<RunView>, StoreError> {
        let limit = q.limit.clamp(1, 10_000) as i64;
        let before = q.before.map(|b| b as i64).unwrap_or(i64::MAX);
        let mut sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id < ?1");
        if !q.states.is_empty() {
            let list = q
                .states
                .iter()
                .map(|s| format!("'{}'", s.as_str()))
                .collect::<Vec<_>>()
                .join(",");
            sql.push_str(&format!(" AND state IN ({list})"));
        }
        if q.dag.is_some() {
            sql.push_str(" AND dag = ?3");
        }
        if let Some(dr) = q.dag_run {
            sql.push_str(&format!(" AND dag_run = {dr}"));
        }
        let pattern = q.text.as_ref().map(|t| {
            format!(
                "%{}%",
                t.replace('\\', "\\\\")
                    .replace('%', "\\%")
                    .replace('_', "\\_")
            )
        });
        if pattern.is_some() {
            sql.push_str(" AND (dag LIKE ?4 ESCAPE '\\' OR job LIKE ?4 ESCAPE '\\')");
        }
        sql.push_str(" ORDER BY id DESC LIMIT ?2");
        let dag = q.dag.clone().unwrap_or_default();
        match (&q.dag, &pattern) {
            (Some(d), None) => self.run_views(&sql, &[&before, &limit, d]),
            (None, None) => self.run_views(&sql, &[&before, &limit]),
            (_, Some(p)) => self.run_views(&sql, &[&before, &limit, &dag, p]),
        }
    }

    fn get_run(&mut self, id: u64) -> Result<Option<RunView>, StoreError> {
        let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE id = ?1");
        Ok(self.run_views(&sql, &[&(id as i64)])?.pop())
    }

    fn run_events(&mut self, run: u64, limit: usize) -> Result<Vec<EventView>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT seq, at, run, dag_run, from_state, to_state, reason, actor FROM events WHERE run = ?1 ORDER BY seq LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![run as i64, limit as i64], event_view)?;
        Ok(rows.collect::<Result<_, _>>()?)
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
        s.map(|s| parse_state(&s)).transpose()
    }

    fn state_counts(&mut self) -> Result<BTreeMap<String, u64>, StoreError> {
        let mut out = BTreeMap::new();
        for s in RunState::ALL {
            // One index range count per state: fast even with millions of runs.
            let n: i64 = self
                .conn
                .prepare_cached("SELECT COUNT(*) FROM runs WHERE state = ?1")?
                .query_row([s.as_str()], |r| r.get(0))?;
            out.insert(s.as_str().to_string(), n as u64);
        }
        Ok(out)
    }

    fn last_dag_runs(&mut self) -> Result<HashMap<String, LastDagRun>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT dag, state, COALESCE(finished_at, created_at) FROM dag_runs
             WHERE id IN (SELECT MAX(id) FROM dag_runs GROUP BY dag)",
        )?;
        let rows = stmt.query_map([], |r| {
            let state: String = r.get(1)?;
            Ok((
                r.get(0)?,
                LastDagRun {
                    state: parse_dag_run_state(&state),
                    at: r.get(2)?,
                },
            ))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn dag_history(&mut self) -> Result<HashMap<String, crate::metrics::DagHistory>, StoreError> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT dag,
                    MAX(CASE WHEN state = 'success' THEN finished_at END),
                    MAX(CASE WHEN state IN ('failed', 'cancelled') THEN finished_at END)
             FROM dag_runs WHERE finished_at IS NOT NULL GROUP BY dag",
        )?;
        let rows = stmt.query_map([], |r| {
            let history = crate::metrics::DagHistory {
                last_success: r.get(1)?,
                last_failure: r.get(2)?,
            };
            Ok((r.get(0)?, history))
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    fn newest_with_unique_key(&mut self, key: &str) -> Result<Option<UniqueHolder>, StoreError> {
        let head: Option<(i64, i64)> = self
            .conn
            .prepare_cached(
                "SELECT id, created_at FROM dag_runs WHERE unique_key = ?1 ORDER BY id DESC LIMIT 1",
            )?
            .query_row([key], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let Some((id, created_at)) = head else {
            return Ok(None);
        };
        let mut stmt = self
            .conn
            .prepare_cached("SELECT id FROM runs WHERE dag_run = ?1 ORDER BY job_index")?;
        let runs = stmt
            .query_map([id], |r| r.get::<_, i64>(0))?
            .map(|r| r.map(|id| RunId(id as u64)))
            .collect::<Result<_, _>>()?;
        Ok(Some(UniqueHolder {
            dag_run: DagRunId(id as u64),
            created_at,
            runs,
        }))
    }

    fn dag_run_spec(&mut self, dag_run: u64) -> Result<Option<Arc<DagSpec>>, StoreError> {
        let text: Option<String> = self
            .conn
            .prepare_cached("SELECT s.spec FROM dag_runs d JOIN specs s ON s.hash = d.spec_hash WHERE d.id = ?1")?
            .query_row([dag_run as i64], |r| r.get(0))
            .optional()?;
        text.map(|t| {
            serde_json::from_str(&t)
                .map(Arc::new)
                .map_err(|e| StoreError::Corrupt(e.to_string()))
        })
        .transpose()
    }
}
