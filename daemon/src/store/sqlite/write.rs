//! One commit's transaction on SQLite: row by row, in `BEGIN IMMEDIATE`.

use rusqlite::{Transaction, TransactionBehavior, params};

use super::SqliteStore;
use crate::store::rows::Code;
use crate::store::specs::SpecHashes;
use crate::store::specs::def_text;
use crate::store::{Commit, StoreError, attempts_to_write};

impl SqliteStore {
    /// One commit's transaction (`new_specs`: the specs it must add).
    pub(super) fn write(
        &mut self,
        c: &Commit<'_>,
        new_specs: &[(String, String)],
    ) -> Result<Vec<i64>, StoreError> {
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        write_specs(&tx, c, new_specs)?;
        write_dag_runs(&tx, c, &self.spec_hashes)?;
        write_runs(&tx, c)?;
        write_marks(&tx, c)?;
        let seqs = write_events(&tx, c)?;
        tx.commit()?;
        Ok(seqs)
    }
}

/// New specs and the DAG definitions loaded or removed.
fn write_specs(
    tx: &Transaction<'_>,
    c: &Commit<'_>,
    new_specs: &[(String, String)],
) -> Result<(), StoreError> {
    let mut spec = tx.prepare_cached("INSERT OR IGNORE INTO specs (hash, spec) VALUES (?1, ?2)")?;
    for (hash, text) in new_specs {
        spec.execute(params![hash, text])?;
    }
    for (def, _) in &c.dag_defs {
        let (hash, text) = def_text(def)?;
        spec.execute(params![hash, text])?;
        tx.prepare_cached(
            "INSERT OR REPLACE INTO dag_defs (name, file, hash, loaded_at) VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![
            def.name,
            def.file,
            hash,
            crate::runtime::time::now_ms()
        ])?;
    }
    for name in &c.removed_defs {
        tx.prepare_cached("DELETE FROM dag_defs WHERE name = ?1")?
            .execute([name])?;
    }
    Ok(())
}

fn write_dag_runs(
    tx: &Transaction<'_>,
    c: &Commit<'_>,
    spec_hashes: &SpecHashes,
) -> Result<(), StoreError> {
    let mut dr = tx.prepare_cached(
                "INSERT INTO dag_runs (id, dag, spec_hash, state, trigger, unique_key, created_at, finished_at, hook_of)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                 ON CONFLICT(id) DO UPDATE SET state = excluded.state, finished_at = excluded.finished_at",
            )?;
    for d in &c.dag_runs {
        let hash = spec_hashes.hash_of(&d.spec);
        dr.execute(params![
            d.id.0 as i64,
            &*d.dag,
            hash,
            d.state.code(),
            d.trigger,
            d.unique_key,
            d.created_at,
            d.finished_at,
            d.hook_of.map(|h| h.0 as i64)
        ])?;
    }
    Ok(())
}

/// Runs, and the attempts of each that one step can change.
fn write_runs(tx: &Transaction<'_>, c: &Commit<'_>) -> Result<(), StoreError> {
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
        let upstream =
            serde_json::to_string(&r.upstream).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let delay = r.delay.map(Code::code);
        run.execute(params![
            r.id.0 as i64,
            r.dag_run.0 as i64,
            &*r.dag,
            r.job().id,
            r.job_index,
            r.state.code(),
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
        for a in attempts_to_write(r) {
            att.execute(params![
                r.id.0 as i64,
                a.n,
                a.started_at,
                a.finished_at,
                a.outcome.map(Code::code),
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
    Ok(())
}

/// Paused DAGs, cron marks and trigger queues.
fn write_marks(tx: &Transaction<'_>, c: &Commit<'_>) -> Result<(), StoreError> {
    for (dag, paused) in &c.paused {
        if *paused {
            tx.prepare_cached("INSERT OR IGNORE INTO paused (dag) VALUES (?1)")?
                .execute([dag])?;
        } else {
            tx.prepare_cached("DELETE FROM paused WHERE dag = ?1")?
                .execute([dag])?;
        }
    }
    for (dag, boot) in &c.boot_marks {
        tx.prepare_cached("INSERT OR IGNORE INTO boot_marks (dag, boot_id) VALUES (?1, ?2)")?
            .execute(params![dag, &**boot])?;
    }
    for (dag, slot) in &c.cron_marks {
        tx.prepare_cached("INSERT OR REPLACE INTO cron_marks (dag, last_slot) VALUES (?1, ?2)")?
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
    Ok(())
}

/// The events; returns the sequence number each was given, in order.
fn write_events(tx: &Transaction<'_>, c: &Commit<'_>) -> Result<Vec<i64>, StoreError> {
    let mut seqs = Vec::with_capacity(c.events.len());
    let mut ev = tx.prepare_cached(
                "INSERT INTO events (at, run, dag_run, from_state, to_state, reason, actor) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?;
    for e in &c.events {
        ev.execute(params![
            e.at,
            e.run.map(|r| r.0 as i64),
            e.dag_run.0 as i64,
            e.from.map(Code::code),
            e.to.map(Code::code),
            e.reason,
            &*e.actor
        ])?;
        seqs.push(tx.last_insert_rowid());
    }
    Ok(seqs)
}
