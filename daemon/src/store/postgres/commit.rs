//! Group commit on PostgreSQL: a commit's rows become one column array
//! per field, and each table gets one multi-row statement
//! (`INSERT … SELECT * FROM UNNEST($1, $2, …)`), all sent together
//! (tokio-postgres pipelines the statements of one connection) inside one
//! transaction. However many runs a group of steps touched, a commit costs
//! the same few round trips.
//!
//! A multi-row upsert may not touch one row twice, so each table's rows
//! are reduced to the last version of each key, which is what the SQLite
//! store's row-by-row writes leave too.

use std::collections::HashSet;
use std::hash::Hash;

use futures_util::future::try_join_all;
use tokio_postgres::types::ToSql;

use super::{PgStore, text};
use crate::store::rows::Code;
use crate::store::specs::{SpecHashes, def_text, definition_hash};
use crate::store::{Commit, StoreError, attempts_to_write};

const SPECS: &str = "INSERT INTO specs (hash, spec) SELECT * FROM UNNEST($1::text[], $2::text[])
     ON CONFLICT (hash) DO NOTHING";
const DEFS: &str = "INSERT INTO dag_defs (name, file, hash, loaded_at)
     SELECT n, f, h, $4 FROM UNNEST($1::text[], $2::text[], $3::text[]) AS t(n, f, h)
     ON CONFLICT (name) DO UPDATE SET file = excluded.file, hash = excluded.hash, loaded_at = excluded.loaded_at";
const REMOVE_DEFS: &str = "DELETE FROM dag_defs WHERE name = ANY($1)";
/// What node `$1` has loaded: each DAG's definition hash.
const NODE_DAGS: &str = "INSERT INTO node_dags (node, dag, hash, loaded_at)
     SELECT $1, d, h, $4 FROM UNNEST($2::text[], $3::text[]) AS t(d, h)
     ON CONFLICT (node, dag) DO UPDATE SET hash = excluded.hash, loaded_at = excluded.loaded_at";
const REMOVE_NODE_DAGS: &str = "DELETE FROM node_dags WHERE node = $1 AND dag = ANY($2)";
/// Node `$1` defines exactly the DAGs `$2`: its other rows go.
const ONLY_NODE_DAGS: &str = "DELETE FROM node_dags WHERE node = $1 AND NOT (dag = ANY($2))";
/// A new DAG run is owned by the node writing it (`$9`), or by none when
/// offered; the owner is never changed by a later write of the row.
const DAG_RUNS: &str = "INSERT INTO dag_runs (id, dag, spec_hash, state, trigger, unique_key, created_at, finished_at, owner, priority, hook_of)
     SELECT i, g, h, s, t, u, c, f, CASE WHEN o THEN NULL ELSE $9::text END, p, k
     FROM UNNEST($1::int8[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int8[], $8::int8[],
       $10::bool[], $11::int8[], $12::int8[]) AS x(i, g, h, s, t, u, c, f, o, p, k)
     ON CONFLICT (id) DO UPDATE SET state = excluded.state, finished_at = excluded.finished_at";
const RUNS: &str = "INSERT INTO runs (id, dag_run, dag, job, job_index, state, priority, pool, retries, upstream,
       counted_failures, created_at, ready_at, started_at, finished_at, next_at, delay, reason, message, progress)
     SELECT * FROM UNNEST($1::int8[], $2::int8[], $3::text[], $4::text[], $5::int8[], $6::text[], $7::int8[],
       $8::text[], $9::int8[], $10::text[], $11::int8[], $12::int8[], $13::int8[], $14::int8[], $15::int8[],
       $16::int8[], $17::text[], $18::text[], $19::text[], $20::float8[])
     ON CONFLICT (id) DO UPDATE SET state = excluded.state, counted_failures = excluded.counted_failures,
       ready_at = excluded.ready_at, started_at = excluded.started_at, finished_at = excluded.finished_at,
       next_at = excluded.next_at, delay = excluded.delay, reason = excluded.reason,
       message = excluded.message, progress = excluded.progress";
const ATTEMPTS: &str = "INSERT INTO attempts (run, n, started_at, finished_at, outcome, exit_code, signal, pid, pid_start, slot, error, log_lost, node)
     SELECT x.*, $13::text FROM UNNEST($1::int8[], $2::int8[], $3::int8[], $4::int8[], $5::text[], $6::int8[], $7::int8[],
       $8::int8[], $9::int8[], $10::int8[], $11::text[], $12::int8[]) AS x
     ON CONFLICT (run, n) DO UPDATE SET started_at = excluded.started_at, finished_at = excluded.finished_at,
       outcome = excluded.outcome, exit_code = excluded.exit_code, signal = excluded.signal, pid = excluded.pid,
       pid_start = excluded.pid_start, slot = excluded.slot, error = excluded.error, log_lost = excluded.log_lost,
       node = COALESCE(attempts.node, excluded.node)";
const PAUSE: &str =
    "INSERT INTO paused (dag) SELECT * FROM UNNEST($1::text[]) ON CONFLICT (dag) DO NOTHING";
const UNPAUSE: &str = "DELETE FROM paused WHERE dag = ANY($1)";
/// A mark never moves back (two leaders in turn must not refire a slot).
const CRON_MARKS: &str =
    "INSERT INTO cron_marks (dag, last_slot) SELECT * FROM UNNEST($1::text[], $2::int8[])
     ON CONFLICT (dag) DO UPDATE SET last_slot = excluded.last_slot
     WHERE cron_marks.last_slot < excluded.last_slot";
/// The boots each `@reboot` DAG saw, on any node.
const BOOT_MARKS: &str =
    "INSERT INTO boot_marks (dag, boot_id) SELECT * FROM UNNEST($1::text[], $2::text[])
     ON CONFLICT (dag, boot_id) DO NOTHING";
/// Wakes the claimers of every node (delivered at commit).
const NOTIFY_WORK: &str = "SELECT pg_notify('ax_work', '')";
/// Wakes the claimers that watch DAG runs of other nodes (delivered at
/// commit; see `Engine::watched_elsewhere`).
const NOTIFY_DONE: &str = "SELECT pg_notify('ax_done', '')";
const SET_QUEUES: &str =
    "INSERT INTO trigger_queues (dag, queue) SELECT * FROM UNNEST($1::text[], $2::text[])
     ON CONFLICT (dag) DO UPDATE SET queue = excluded.queue";
const CLEAR_QUEUES: &str = "DELETE FROM trigger_queues WHERE dag = ANY($1)";
/// The change feed (`feed`): delivered at commit.
const NOTIFY_EVENTS: &str = "SELECT pg_notify('ax_events', $1)";
const NEXT_SEQS: &str = "SELECT nextval('events_seq_seq') FROM generate_series(1, $1::int8)";
const EVENTS: &str = "INSERT INTO events (seq, at, run, dag_run, from_state, to_state, reason, actor)
     SELECT * FROM UNNEST($1::int8[], $2::int8[], $3::int8[], $4::int8[], $5::text[], $6::text[], $7::text[], $8::text[])";

#[derive(Default)]
struct DagRunRows {
    id: Vec<i64>,
    dag: Vec<String>,
    spec_hash: Vec<String>,
    state: Vec<&'static str>,
    trigger: Vec<String>,
    unique_key: Vec<Option<String>>,
    created_at: Vec<i64>,
    finished_at: Vec<Option<i64>>,
    offered: Vec<bool>,
    priority: Vec<i64>,
    hook_of: Vec<Option<i64>>,
}

#[derive(Default)]
struct RunRows {
    id: Vec<i64>,
    dag_run: Vec<i64>,
    dag: Vec<String>,
    job: Vec<String>,
    job_index: Vec<i64>,
    state: Vec<&'static str>,
    priority: Vec<i64>,
    pool: Vec<String>,
    retries: Vec<i64>,
    upstream: Vec<String>,
    counted_failures: Vec<i64>,
    created_at: Vec<i64>,
    ready_at: Vec<Option<i64>>,
    started_at: Vec<Option<i64>>,
    finished_at: Vec<Option<i64>>,
    next_at: Vec<Option<i64>>,
    delay: Vec<Option<&'static str>>,
    reason: Vec<String>,
    message: Vec<Option<String>>,
    progress: Vec<Option<f64>>,
}

#[derive(Default)]
struct AttemptRows {
    run: Vec<i64>,
    n: Vec<i64>,
    started_at: Vec<i64>,
    finished_at: Vec<Option<i64>>,
    outcome: Vec<Option<&'static str>>,
    exit_code: Vec<Option<i64>>,
    signal: Vec<Option<i64>>,
    pid: Vec<Option<i64>>,
    pid_start: Vec<Option<i64>>,
    slot: Vec<i64>,
    error: Vec<Option<String>>,
    log_lost: Vec<i64>,
}

#[derive(Default)]
struct EventRows {
    at: Vec<i64>,
    run: Vec<Option<i64>>,
    dag_run: Vec<i64>,
    from: Vec<Option<&'static str>>,
    to: Vec<Option<&'static str>>,
    reason: Vec<String>,
    actor: Vec<String>,
}

/// One commit as column arrays, owned (sent to the store's runtime).
#[derive(Default)]
struct Rows {
    spec_hash: Vec<String>,
    spec_text: Vec<String>,
    def_name: Vec<String>,
    def_file: Vec<String>,
    def_hash: Vec<String>,
    /// Each of `def_name`'s definition hash (`specs::definition_hash`).
    def_version: Vec<String>,
    /// `def_name` is every DAG the node defines.
    defs_complete: bool,
    loaded_at: i64,
    removed_defs: Vec<String>,
    dag_runs: DagRunRows,
    runs: RunRows,
    attempts: AttemptRows,
    pause: Vec<String>,
    unpause: Vec<String>,
    cron_dag: Vec<String>,
    cron_slot: Vec<i64>,
    boot_dag: Vec<String>,
    boot_id: Vec<String>,
    queue_dag: Vec<String>,
    queue_json: Vec<String>,
    clear_queues: Vec<String>,
    events: EventRows,
    /// The node writing (PostgreSQL cluster), owner of what it creates.
    node: Option<String>,
}

/// The items of `items` whose key is not seen again later, in order:
/// the last version of each key.
fn last_of_each<T, K: Eq + Hash>(
    items: impl DoubleEndedIterator<Item = T>,
    key: impl Fn(&T) -> K,
) -> Vec<T> {
    let mut seen = HashSet::new();
    let mut out: Vec<T> = items.rev().filter(|t| seen.insert(key(t))).collect();
    out.reverse();
    out
}

impl Rows {
    fn of(
        c: &Commit<'_>,
        specs: &SpecHashes,
        new_specs: Vec<(String, String)>,
    ) -> Result<Rows, StoreError> {
        let mut rows = Rows::default();
        for (hash, spec) in new_specs {
            rows.spec_hash.push(hash);
            rows.spec_text.push(spec);
        }
        // A DAG defined and removed in one commit ends removed, as the
        // SQLite store's upsert-then-delete leaves it.
        let removed: HashSet<&str> = c.removed_defs.iter().map(String::as_str).collect();
        for (def, _) in last_of_each(c.dag_defs.iter(), |(d, _)| d.name.clone()) {
            let (hash, spec) = def_text(def)?;
            if !rows.spec_hash.contains(&hash) {
                rows.spec_hash.push(hash.clone());
                rows.spec_text.push(spec);
            }
            if !removed.contains(def.name.as_str()) {
                rows.def_name.push(def.name.clone());
                rows.def_file.push(def.file.clone());
                rows.def_hash.push(hash);
                rows.def_version.push(definition_hash(def));
            }
        }
        rows.removed_defs = c.removed_defs.clone();
        rows.defs_complete = c.defs_complete;
        rows.loaded_at = crate::runtime::time::now_ms();
        let d = &mut rows.dag_runs;
        for r in last_of_each(c.dag_runs.iter(), |r| r.id) {
            d.id.push(r.id.0 as i64);
            d.dag.push(r.dag.to_string());
            d.spec_hash.push(specs.hash_of(&r.spec).to_string());
            d.state.push(r.state.code());
            d.trigger.push(text(&r.trigger));
            d.unique_key.push(r.unique_key.as_deref().map(text));
            d.created_at.push(r.created_at);
            d.finished_at.push(r.finished_at);
            d.offered.push(r.offered);
            let priority = r.spec.jobs.iter().map(|j| j.priority).max().unwrap_or(0);
            d.priority.push(i64::from(priority));
            d.hook_of.push(r.hook_of.map(|h| h.0 as i64));
        }
        let (o, a) = (&mut rows.runs, &mut rows.attempts);
        for r in last_of_each(c.runs.iter(), |r| r.id) {
            o.id.push(r.id.0 as i64);
            o.dag_run.push(r.dag_run.0 as i64);
            o.dag.push(r.dag.to_string());
            o.job.push(r.job().id.clone());
            o.job_index.push(i64::from(r.job_index));
            o.state.push(r.state.code());
            o.priority.push(i64::from(r.priority()));
            o.pool.push(r.pool().to_string());
            o.retries.push(i64::from(r.job().retries));
            o.upstream.push(
                serde_json::to_string(&r.upstream)
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?,
            );
            o.counted_failures.push(i64::from(r.counted_failures));
            o.created_at.push(r.created_at);
            o.ready_at.push(r.ready_at);
            o.started_at.push(r.started_at);
            o.finished_at.push(r.finished_at);
            o.next_at.push(r.next_at);
            o.delay.push(r.delay.map(Code::code));
            o.reason.push(text(&r.reason));
            o.message.push(r.message.as_deref().map(text));
            o.progress.push(r.progress);
            let recent: Vec<_> = attempts_to_write(r).collect();
            for t in last_of_each(recent.into_iter(), |t| t.n) {
                a.run.push(r.id.0 as i64);
                a.n.push(i64::from(t.n));
                a.started_at.push(t.started_at);
                a.finished_at.push(t.finished_at);
                a.outcome.push(t.outcome.map(|o| o.as_str()));
                a.exit_code.push(t.exit_code.map(i64::from));
                a.signal.push(t.signal.map(i64::from));
                a.pid.push(t.pid.map(i64::from));
                a.pid_start.push(t.pid_start.map(|v| v as i64));
                a.slot.push(i64::from(t.slot));
                a.error.push(t.error.as_deref().map(text));
                a.log_lost.push(t.log_lost as i64);
            }
        }
        for (dag, paused) in last_of_each(c.paused.iter(), |(d, _)| d.clone()) {
            if *paused {
                rows.pause.push(dag.clone());
            } else {
                rows.unpause.push(dag.clone());
            }
        }
        for (dag, slot) in last_of_each(c.cron_marks.iter(), |(d, _)| d.clone()) {
            rows.cron_dag.push(dag.clone());
            rows.cron_slot.push(*slot);
        }
        for (dag, boot) in last_of_each(c.boot_marks.iter(), |(d, b)| (d.clone(), b.clone())) {
            rows.boot_dag.push(dag.clone());
            rows.boot_id.push(boot.to_string());
        }
        // A DAG's last queue of the group wins.
        for (dag, queue) in last_of_each(c.trigger_queues.iter(), |(d, _)| d.clone()) {
            if queue.is_empty() {
                rows.clear_queues.push(dag.clone());
            } else {
                rows.queue_dag.push(dag.clone());
                rows.queue_json.push(
                    serde_json::to_string(queue)
                        .map_err(|e| StoreError::Corrupt(format!("trigger queue: {e}")))?,
                );
            }
        }
        let e = &mut rows.events;
        for ev in &c.events {
            e.at.push(ev.at);
            e.run.push(ev.run.map(|r| r.0 as i64));
            e.dag_run.push(ev.dag_run.0 as i64);
            e.from.push(ev.from.map(Code::code));
            e.to.push(ev.to.map(Code::code));
            e.reason.push(text(&ev.reason));
            e.actor.push(text(&ev.actor));
        }
        Ok(rows)
    }

    /// The statements to send, with their parameters; tables with no rows
    /// send nothing.
    fn statements(&self) -> Vec<(&'static str, Vec<&(dyn ToSql + Sync)>)> {
        let mut out: Vec<(&'static str, Vec<&(dyn ToSql + Sync)>)> = Vec::new();
        if !self.spec_hash.is_empty() {
            out.push((SPECS, vec![&self.spec_hash, &self.spec_text]));
        }
        if !self.def_name.is_empty() {
            out.push((
                DEFS,
                vec![
                    &self.def_name,
                    &self.def_file,
                    &self.def_hash,
                    &self.loaded_at,
                ],
            ));
        }
        if !self.removed_defs.is_empty() {
            out.push((REMOVE_DEFS, vec![&self.removed_defs]));
        }
        // What this node loaded, in a cluster (a registered node); the
        // statements touch disjoint rows, so their order does not matter.
        if let Some(node) = &self.node {
            if !self.def_name.is_empty() {
                out.push((
                    NODE_DAGS,
                    vec![node, &self.def_name, &self.def_version, &self.loaded_at],
                ));
            }
            if !self.removed_defs.is_empty() {
                out.push((REMOVE_NODE_DAGS, vec![node, &self.removed_defs]));
            }
            if self.defs_complete {
                out.push((ONLY_NODE_DAGS, vec![node, &self.def_name]));
            }
        }
        let d = &self.dag_runs;
        if !d.id.is_empty() {
            out.push((
                DAG_RUNS,
                vec![
                    &d.id,
                    &d.dag,
                    &d.spec_hash,
                    &d.state,
                    &d.trigger,
                    &d.unique_key,
                    &d.created_at,
                    &d.finished_at,
                    &self.node,
                    &d.offered,
                    &d.priority,
                    &d.hook_of,
                ],
            ));
            if d.offered.contains(&true) {
                out.push((NOTIFY_WORK, Vec::new()));
            }
            if d.finished_at.iter().any(Option::is_some) {
                out.push((NOTIFY_DONE, Vec::new()));
            }
        }
        let r = &self.runs;
        if !r.id.is_empty() {
            out.push((
                RUNS,
                vec![
                    &r.id,
                    &r.dag_run,
                    &r.dag,
                    &r.job,
                    &r.job_index,
                    &r.state,
                    &r.priority,
                    &r.pool,
                    &r.retries,
                    &r.upstream,
                    &r.counted_failures,
                    &r.created_at,
                    &r.ready_at,
                    &r.started_at,
                    &r.finished_at,
                    &r.next_at,
                    &r.delay,
                    &r.reason,
                    &r.message,
                    &r.progress,
                ],
            ));
        }
        let a = &self.attempts;
        if !a.run.is_empty() {
            out.push((
                ATTEMPTS,
                vec![
                    &a.run,
                    &a.n,
                    &a.started_at,
                    &a.finished_at,
                    &a.outcome,
                    &a.exit_code,
                    &a.signal,
                    &a.pid,
                    &a.pid_start,
                    &a.slot,
                    &a.error,
                    &a.log_lost,
                    &self.node,
                ],
            ));
        }
        if !self.pause.is_empty() {
            out.push((PAUSE, vec![&self.pause]));
        }
        if !self.unpause.is_empty() {
            out.push((UNPAUSE, vec![&self.unpause]));
        }
        if !self.boot_dag.is_empty() {
            out.push((BOOT_MARKS, vec![&self.boot_dag, &self.boot_id]));
        }
        if !self.cron_dag.is_empty() {
            out.push((CRON_MARKS, vec![&self.cron_dag, &self.cron_slot]));
        }
        if !self.queue_dag.is_empty() {
            out.push((SET_QUEUES, vec![&self.queue_dag, &self.queue_json]));
        }
        if !self.clear_queues.is_empty() {
            out.push((CLEAR_QUEUES, vec![&self.clear_queues]));
        }
        out
    }
}

impl PgStore {
    /// `Store::commit`: one transaction; returns the events' sequence
    /// numbers in order.
    pub(super) fn write(&mut self, c: &Commit<'_>) -> Result<Vec<i64>, StoreError> {
        if c.is_empty() {
            return Ok(Vec::new());
        }
        let new_specs = self.spec_hashes.new_specs(c)?;
        let me = self.shared.node.get().cloned();
        let rows = Rows::of(c, &self.spec_hashes, new_specs).map(|mut rows| {
            rows.node = me.as_ref().map(|m| m.id.clone());
            rows
        });
        let written = match rows {
            Ok(rows) => {
                super::on_client!(self, |client| transaction(&mut client, &rows, me.as_ref()))
            }
            Err(e) => Err(e),
        };
        if written.is_err() {
            self.spec_hashes.rollback();
        }
        written
    }
}

/// `me`: the node writing, whose epoch must still be the one it
/// registered with, or nothing is written (`StoreError::Fenced`).
async fn transaction(
    client: &mut deadpool_postgres::Object,
    rows: &Rows,
    me: Option<&super::Me>,
) -> Result<Vec<i64>, StoreError> {
    let tx = client.transaction().await?;
    if let Some(me) = me {
        super::fence::check_epoch(&tx, me).await?;
    }
    let statements = rows.statements();
    let e = &rows.events;
    let count = e.at.len() as i64;
    let writes = try_join_all(statements.iter().map(|(sql, params)| {
        let tx = &tx;
        async move {
            let statement = tx.prepare_cached(sql).await?;
            tx.execute(&statement, params).await
        }
    }));
    // Event numbers come from the sequence before the insert, so that the
    // i-th event of the commit gets the i-th number however the server
    // orders the rows of a multi-row insert.
    let seqs = async {
        if count == 0 {
            return Ok(Vec::new());
        }
        let statement = tx.prepare_cached(NEXT_SEQS).await?;
        let rows = tx.query(&statement, &[&count]).await?;
        let mut seqs = rows
            .iter()
            .map(|r| r.try_get::<_, i64>(0))
            .collect::<Result<Vec<i64>, _>>()?;
        seqs.sort_unstable();
        Ok::<_, tokio_postgres::Error>(seqs)
    };
    let (_, seqs) = futures_util::future::try_join(writes, seqs).await?;
    if count > 0 {
        let statement = tx.prepare_cached(EVENTS).await?;
        tx.execute(
            &statement,
            &[
                &seqs, &e.at, &e.run, &e.dag_run, &e.from, &e.to, &e.reason, &e.actor,
            ],
        )
        .await?;
        // Other nodes announce these events to their subscribers.
        if let Some(me) = me {
            let payload = super::feed::payload(&me.id, &seqs);
            tx.execute(NOTIFY_EVENTS, &[&payload]).await?;
        }
    }
    tx.commit().await?;
    Ok(seqs)
}
