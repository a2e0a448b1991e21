//! Reading the store back at start-up (and one DAG run for a retry):
//! DAG runs with their runs and attempts (put together by the shared
//! `rows::Assemble`), and what else a restart needs.

use ax_shared::RunState;
use deadpool_postgres::Object;
use tokio_postgres::types::ToSql;

use super::SERVER_NOW;
use crate::store::rows::{Assemble, Assembled, Columns, Part};
use crate::store::{Loaded, StoreError};
use ax_engine::{RestoredDagRun, RunId};

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
    let (assembled, external) = read(&***client, filter, params, &Part::ALL).await?;
    Ok(assembled.loaded(external, next_run, next_dag_run))
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
    pub external: Vec<(RunId, RunState)>,
}

/// DAG runs matching `filter` (SQL over `dag_runs d`) with their runs and
/// attempts. Values go in `params` (`$1`, …), never into `filter`'s text.
pub(super) async fn dag_runs_where(
    client: &impl tokio_postgres::GenericClient,
    filter: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<DagRuns, StoreError> {
    let (assembled, external) = read(client, filter, params, &Part::DAG_RUNS).await?;
    Ok(DagRuns {
        dag_runs: assembled.dag_runs,
        external,
    })
}

/// `parts` of the DAG runs matching `filter`, and the states of the runs
/// outside them that their runs depend on.
async fn read(
    client: &impl tokio_postgres::GenericClient,
    filter: &str,
    params: &[&(dyn ToSql + Sync)],
    parts: &[Part],
) -> Result<(Assembled, Vec<(RunId, RunState)>), StoreError> {
    let mut assemble = Assemble::default();
    for &part in parts {
        let params = if part.filtered() { params } else { &[] };
        for r in &client.query(&part.sql(filter, "a.node"), params).await? {
            assemble.add(part, r)?;
        }
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
    Ok((assembled, external))
}
