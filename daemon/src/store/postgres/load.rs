//! Reading the store back at start-up (and one DAG run for a retry):
//! DAG runs with their runs and attempts (put together by the shared
//! `rows::Assemble`), and what else a restart needs.

use std::collections::HashMap;

use deadpool_postgres::Object;
use tokio_postgres::types::ToSql;

use super::SERVER_NOW;
use crate::store::rows::{
    ATTEMPT_COLUMNS, Assemble, AttemptRow, Columns, DAG_RUN_COLUMNS, DagRunRow, RUN_COLUMNS, RunRow,
};
use crate::store::{Loaded, StoreError, parse_trigger_queue};
use ax_engine::{RestoredDagRun, RunId, Trigger};

/// DAG runs matching `filter` (SQL over `dag_runs d`) with their runs and
/// attempts, plus what start-up needs besides. Values go in `params`.
pub(super) async fn load_where(
    client: &Object,
    filter: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Loaded, StoreError> {
    // The next ids follow every stored one, whoever made it.
    let next_run: u64 = client
        .query_one("SELECT COALESCE(MAX(id), 0) + 1 FROM runs", &[])
        .await?
        .int(0, "next run id")?;
    let next_dag_run: u64 = client
        .query_one("SELECT COALESCE(MAX(id), 0) + 1 FROM dag_runs", &[])
        .await?
        .int(0, "next DAG run id")?;
    let DagRuns {
        dag_runs,
        external,
        orphans,
    } = dag_runs_where(&***client, filter, params).await?;
    let paused: Vec<String> = client
        .query("SELECT dag FROM paused", &[])
        .await?
        .iter()
        .map(|r| r.string(0, "paused.dag"))
        .collect::<Result<_, _>>()?;
    let cron_marks: HashMap<String, i64> = client
        .query("SELECT dag, last_slot FROM cron_marks", &[])
        .await?
        .iter()
        .map(|r| {
            Ok((
                r.string(0, "cron_marks.dag")?,
                r.int(1, "cron_marks.last_slot")?,
            ))
        })
        .collect::<Result<_, StoreError>>()?;
    let mut trigger_queues: HashMap<String, Vec<Trigger>> = HashMap::new();
    for r in &client
        .query("SELECT dag, queue FROM trigger_queues", &[])
        .await?
    {
        let dag = r.string(0, "trigger_queues.dag")?;
        let queue = parse_trigger_queue(&dag, r.str(1, "trigger_queues.queue")?)?;
        trigger_queues.insert(dag, queue);
    }
    Ok(Loaded {
        dag_runs,
        external,
        next_run,
        next_dag_run,
        paused,
        cron_marks,
        trigger_queues,
        orphans,
    })
}

/// Attempts `node` started that ended `interrupted` in the last day
/// (another node took their run over) with the pid they had: (pid, pid
/// start time). A pid whose start time differs is another process now,
/// and is left alone (`executor::sweep_orphan`).
pub(super) async fn interrupted_elsewhere(
    client: &Object,
    node: &str,
) -> Result<Vec<(u32, Option<u64>)>, StoreError> {
    let sql = format!(
        "SELECT pid, pid_start FROM attempts
         WHERE node = $1 AND outcome = 'interrupted' AND pid IS NOT NULL
           AND finished_at >= {SERVER_NOW} - 86400000"
    );
    let rows = client.query(&sql, &[&node]).await?;
    rows.iter()
        .map(|r| {
            Ok((
                r.int(0, "attempts.pid")?,
                r.opt_int(1, "attempts.pid_start")?,
            ))
        })
        .collect()
}

/// DAG runs read back, with what they need from outside themselves.
pub(super) struct DagRuns {
    pub dag_runs: Vec<RestoredDagRun>,
    /// Finished runs outside them that their runs depend on.
    pub external: Vec<(RunId, ax_shared::RunState)>,
    /// Attempts found running: (pid, pid start time).
    pub orphans: Vec<(u32, Option<u64>)>,
}

/// DAG runs matching `filter` (SQL over `dag_runs d`) with their runs and
/// attempts. Values go in `params` (`$1`, …), never into `filter`'s text.
pub(super) async fn dag_runs_where(
    client: &impl tokio_postgres::GenericClient,
    filter: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<DagRuns, StoreError> {
    let mut assemble = Assemble::default();
    let sql = format!(
        "SELECT {DAG_RUN_COLUMNS}
         FROM dag_runs d JOIN specs s ON s.hash = d.spec_hash WHERE {filter} ORDER BY d.id"
    );
    for r in &client.query(&sql, params).await? {
        assemble.dag_run(DagRunRow::read(r)?)?;
    }
    let sql = format!(
        "SELECT {ATTEMPT_COLUMNS}, a.node
         FROM attempts a JOIN runs r ON r.id = a.run JOIN dag_runs d ON d.id = r.dag_run
         WHERE {filter} ORDER BY a.run, a.n"
    );
    for r in &client.query(&sql, params).await? {
        assemble.attempt(AttemptRow::read(r)?);
    }
    let sql = format!(
        "SELECT {RUN_COLUMNS}
         FROM runs r JOIN dag_runs d ON d.id = r.dag_run WHERE {filter} ORDER BY r.id"
    );
    for r in &client.query(&sql, params).await? {
        assemble.run(RunRow::read(r)?);
    }
    let assembled = assemble.finish();
    let mut external = Vec::new();
    if !assembled.outside.is_empty() {
        let ids: Vec<i64> = assembled.outside.iter().map(|&u| u as i64).collect();
        let rows = client
            .query(
                "SELECT id, state FROM runs WHERE id = ANY($1) ORDER BY id",
                &[&ids],
            )
            .await?;
        for r in &rows {
            external.push((RunId(r.int(0, "runs.id")?), r.code(1, "runs.state")?));
        }
    }
    Ok(DagRuns {
        dag_runs: assembled.dag_runs,
        external,
        orphans: assembled.orphans,
    })
}
