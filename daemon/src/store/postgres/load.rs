//! Reading the store back at start-up (and one DAG run for a retry), as
//! the SQLite store's `load_where` does: DAG runs with their runs and
//! attempts, and what else a restart needs.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ax_shared::DagSpec;
use deadpool_postgres::Object;
use tokio_postgres::types::ToSql;

use super::nodes::SERVER_NOW;
use super::{int, opt_int, parse_state};
use crate::store::specs::parse_spec;
use crate::store::{
    Loaded, StoreError, parse_dag_run_state, parse_delay, parse_outcome, parse_trigger_queue,
};
use ax_engine::{Attempt, DagRunId, RestoredDagRun, Run, RunId, Trigger};

/// DAG runs matching `filter` (SQL over `dag_runs d`) with their runs and
/// attempts, plus what start-up needs besides. Values go in `params`.
pub(super) async fn load_where(
    client: &Object,
    filter: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Loaded, StoreError> {
    // The next ids follow every stored one, whoever made it.
    let next_run: i64 = client
        .query_one("SELECT COALESCE(MAX(id), 0) + 1 FROM runs", &[])
        .await?
        .try_get(0)?;
    let next_dag_run: i64 = client
        .query_one("SELECT COALESCE(MAX(id), 0) + 1 FROM dag_runs", &[])
        .await?
        .try_get(0)?;
    let DagRuns {
        dag_runs,
        external,
        orphans,
    } = dag_runs_where(&***client, filter, params).await?;
    let paused: Vec<String> = client
        .query("SELECT dag FROM paused", &[])
        .await?
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<_, _>>()?;
    let cron_marks: HashMap<String, i64> = client
        .query("SELECT dag, last_slot FROM cron_marks", &[])
        .await?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<_, tokio_postgres::Error>>()?;
    let mut trigger_queues: HashMap<String, Vec<Trigger>> = HashMap::new();
    for r in &client
        .query("SELECT dag, queue FROM trigger_queues", &[])
        .await?
    {
        let dag: String = r.try_get(0)?;
        let queue = parse_trigger_queue(&dag, r.try_get(1)?)?;
        trigger_queues.insert(dag, queue);
    }
    Ok(Loaded {
        dag_runs,
        external,
        next_run: next_run as u64,
        next_dag_run: next_dag_run as u64,
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
        .map(|r| Ok((int(r.try_get(0)?, "pid")?, opt_int(r, 1, "pid start time")?)))
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
    let mut specs: HashMap<String, Arc<DagSpec>> = HashMap::new();
    let mut dag_runs: Vec<RestoredDagRun> = Vec::new();
    let mut index: HashMap<u64, usize> = HashMap::new();
    let rows = client
        .query(
            &format!(
                "SELECT d.id, d.spec_hash, s.spec, d.state, d.created_at, d.trigger, d.unique_key
                 FROM dag_runs d JOIN specs s ON s.hash = d.spec_hash WHERE {filter} ORDER BY d.id"
            ),
            params,
        )
        .await?;
    for r in &rows {
        let hash: &str = r.try_get(1)?;
        let spec = match specs.get(hash) {
            Some(s) => s.clone(),
            None => {
                let spec = Arc::new(parse_spec(r.try_get(2)?, &format!("spec {hash}"))?);
                specs.insert(hash.to_string(), spec.clone());
                spec
            }
        };
        let id: u64 = int(r.try_get(0)?, "DAG run id")?;
        index.insert(id, dag_runs.len());
        dag_runs.push(RestoredDagRun {
            id: DagRunId(id),
            dag: Arc::from(spec.name.as_str()),
            spec,
            state: parse_dag_run_state(r.try_get(3)?),
            created_at: r.try_get(4)?,
            trigger: r.try_get(5)?,
            unique_key: r.try_get(6)?,
            runs: Vec::new(),
        });
    }
    let mut attempts: HashMap<u64, Vec<Attempt>> = HashMap::new();
    let mut orphans = Vec::new();
    let rows = client
        .query(
            &format!(
                "SELECT a.run, a.n, a.started_at, a.finished_at, a.outcome, a.exit_code, a.signal, a.pid, a.pid_start, a.slot, a.error, a.node, a.log_lost
                 FROM attempts a JOIN runs r ON r.id = a.run JOIN dag_runs d ON d.id = r.dag_run
                 WHERE {filter} ORDER BY a.run, a.n"
            ),
            params,
        )
        .await?;
    for r in &rows {
        let a = Attempt {
            n: int(r.try_get(1)?, "attempt number")?,
            started_at: r.try_get(2)?,
            finished_at: r.try_get(3)?,
            outcome: r.try_get::<_, Option<&str>>(4)?.and_then(parse_outcome),
            exit_code: opt_int(r, 5, "exit code")?,
            signal: opt_int(r, 6, "signal")?,
            pid: opt_int(r, 7, "pid")?,
            pid_start: r.try_get::<_, Option<i64>>(8)?.map(|v| v as u64),
            slot: int(r.try_get(9)?, "slot")?,
            error: r.try_get(10)?,
            node: r.try_get(11)?,
            log_lost: int(r.try_get(12)?, "lost log bytes")?,
        };
        if a.outcome.is_none()
            && let Some(pid) = a.pid
        {
            orphans.push((pid, a.pid_start));
        }
        attempts
            .entry(int(r.try_get(0)?, "run id")?)
            .or_default()
            .push(a);
    }
    let mut upstream_ids: Vec<i64> = Vec::new();
    let rows = client
        .query(
            &format!(
                "SELECT r.id, r.dag_run, r.job_index, r.state, r.counted_failures, r.created_at, r.ready_at, r.started_at,
                        r.finished_at, r.next_at, r.delay, r.reason, r.message, r.progress, r.upstream
                 FROM runs r JOIN dag_runs d ON d.id = r.dag_run WHERE {filter} ORDER BY r.id"
            ),
            params,
        )
        .await?;
    for r in &rows {
        let id: u64 = int(r.try_get(0)?, "run id")?;
        let dag_run: u64 = int(r.try_get(1)?, "DAG run id")?;
        let text: &str = r.try_get(14)?;
        let upstream: Vec<RunId> = if text == "[]" {
            Vec::new()
        } else {
            serde_json::from_str(text)
                .map_err(|e| StoreError::Corrupt(format!("run {id} upstream: {e}")))?
        };
        upstream_ids.extend(upstream.iter().map(|u| u.0 as i64));
        let Some(&i) = index.get(&dag_run) else {
            continue;
        };
        let owner = &dag_runs[i];
        let mut run = Run::waiting(
            RunId(id),
            owner.id,
            owner.dag.clone(),
            owner.spec.clone(),
            int(r.try_get(2)?, "job index")?,
            r.try_get(5)?,
            upstream,
        );
        run.state = parse_state(r.try_get(3)?)?;
        run.attempts = attempts.remove(&id).unwrap_or_default();
        run.counted_failures = int(r.try_get(4)?, "counted failures")?;
        run.ready_at = r.try_get(6)?;
        run.started_at = r.try_get(7)?;
        run.finished_at = r.try_get(8)?;
        run.next_at = r.try_get(9)?;
        run.delay = parse_delay(r.try_get(10)?);
        run.reason = r.try_get(11)?;
        run.message = r.try_get(12)?;
        run.progress = r.try_get(13)?;
        dag_runs[i].runs.push(run);
    }
    // Upstream runs outside the loaded DAG runs (`--after` links).
    let loaded: HashSet<i64> = dag_runs
        .iter()
        .flat_map(|d| d.runs.iter().map(|r| r.id.0 as i64))
        .collect();
    upstream_ids.retain(|u| !loaded.contains(u));
    let mut external = Vec::new();
    if !upstream_ids.is_empty() {
        let rows = client
            .query(
                "SELECT id, state FROM runs WHERE id = ANY($1) ORDER BY id",
                &[&upstream_ids],
            )
            .await?;
        for r in &rows {
            external.push((
                RunId(int(r.try_get(0)?, "run id")?),
                parse_state(r.try_get(1)?)?,
            ));
        }
    }
    Ok(DagRuns {
        dag_runs,
        external,
        orphans,
    })
}
