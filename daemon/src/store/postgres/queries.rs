//! The read side of the `Store` trait on PostgreSQL, query for query as
//! the SQLite store answers it.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use ax_protocol::api::{EventView, RunView};
use ax_shared::{DagSpec, RunState};
use deadpool_postgres::Object;
use futures_util::future::try_join_all;
use tokio_postgres::types::ToSql;

use super::{PgStore, on_client};
use crate::store::rows::{self, ATTEMPT_VIEW_COLUMNS, Columns, EVENT_COLUMNS, RUN_VIEW_COLUMNS};
use crate::store::specs::parse_spec;
use crate::store::{EventQuery, LastDagRun, Loaded, RunQuery, Store, StoreError};
use crate::store::{actor_matches, owner_match};
use ax_engine::{DagRunId, RestoredDagRun, RunId, UniqueHolder};

/// SQL with numbered parameters, built clause by clause.
#[derive(Default)]
struct Params {
    values: Vec<Box<dyn ToSql + Sync + Send>>,
}

impl Params {
    /// Adds a value; returns its placeholder (`$3`).
    fn add(&mut self, v: impl ToSql + Sync + Send + 'static) -> String {
        self.values.push(Box::new(v));
        format!("${}", self.values.len())
    }

    fn refs(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.values
            .iter()
            .map(|v| &**v as &(dyn ToSql + Sync))
            .collect()
    }
}

/// Runs with their attempts.
async fn run_views(
    client: &Object,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<Vec<RunView>, StoreError> {
    let statement = client.prepare_cached(sql).await?;
    let mut views = client
        .query(&statement, params)
        .await?
        .iter()
        .map(rows::run_view)
        .collect::<Result<Vec<_>, _>>()?;
    if views.is_empty() {
        return Ok(views);
    }
    let ids: Vec<i64> = views.iter().map(|v| v.id as i64).collect();
    let statement = client
        .prepare_cached(&format!(
            "SELECT {ATTEMPT_VIEW_COLUMNS}, node FROM attempts WHERE run = ANY($1) ORDER BY run, n"
        ))
        .await?;
    let attempts = client
        .query(&statement, &[&ids])
        .await?
        .iter()
        .map(rows::attempt_view)
        .collect::<Result<Vec<_>, _>>()?;
    rows::attach_attempts(&mut views, attempts);
    Ok(views)
}

async fn list_runs(client: &Object, q: &RunQuery) -> Result<Vec<RunView>, StoreError> {
    let mut p = Params::default();
    let before = q.before.map(|b| b as i64).unwrap_or(i64::MAX);
    let mut sql = format!(
        "SELECT {RUN_VIEW_COLUMNS} FROM runs WHERE id < {}",
        p.add(before)
    );
    if !q.states.is_empty() {
        let states: Vec<&'static str> = q.states.iter().map(|s| s.as_str()).collect();
        sql.push_str(&format!(" AND state = ANY({})", p.add(states)));
    }
    if let Some(dag) = &q.dag {
        sql.push_str(&format!(" AND dag = {}", p.add(dag.clone())));
    }
    if let Some(owner) = &q.owner {
        let cond = owner_match(owner).sql("strpos", "dag", |t| p.add(t));
        sql.push_str(&format!(" AND {cond}"));
    }
    if let Some(dr) = q.dag_run {
        sql.push_str(&format!(" AND dag_run = {}", p.add(dr as i64)));
    }
    if q.without_hooks {
        sql.push_str(" AND dag_run NOT IN (SELECT id FROM dag_runs WHERE hook_of IS NOT NULL)");
    }
    if let Some(t) = &q.text {
        // ILIKE: SQLite's LIKE ignores ASCII case too.
        let pattern = format!(
            "%{}%",
            t.replace('\\', "\\\\")
                .replace('%', "\\%")
                .replace('_', "\\_")
        );
        let n = p.add(pattern);
        sql.push_str(&format!(
            " AND (dag ILIKE {n} ESCAPE '\\' OR job ILIKE {n} ESCAPE '\\')"
        ));
    }
    let limit = q.limit.clamp(1, 10_000) as i64;
    sql.push_str(&format!(" ORDER BY id DESC LIMIT {}", p.add(limit)));
    run_views(client, &sql, &p.refs()).await
}

async fn events(client: &Object, q: &EventQuery) -> Result<Vec<EventView>, StoreError> {
    let mut p = Params::default();
    let mut conditions = vec![format!("seq > {}", p.add(q.after))];
    if let Some(run) = q.run {
        conditions.push(format!("run = {}", p.add(run as i64)));
    }
    if let Some(dag) = &q.dag {
        conditions.push(format!(
            "dag_run IN (SELECT id FROM dag_runs WHERE dag = {})",
            p.add(dag.clone())
        ));
    }
    if let Some(actor) = &q.actor {
        // `strpos`, not LIKE: the text is matched literally.
        let any: Vec<String> = actor_matches(actor)
            .iter()
            .map(|m| m.sql("strpos", "actor", |t| p.add(t)))
            .collect();
        conditions.push(format!("({})", any.join(" OR ")));
    }
    if let Some(owner) = &q.owner {
        let cond = owner_match(owner).sql("strpos", "dag", |t| p.add(t));
        conditions.push(format!("dag_run IN (SELECT id FROM dag_runs WHERE {cond})"));
    }
    if let Some(since) = q.since {
        conditions.push(format!("at >= {}", p.add(since.millis())));
    }
    let order = if q.newest { "DESC" } else { "ASC" };
    let sql = format!(
        "SELECT {EVENT_COLUMNS} FROM events WHERE {} ORDER BY seq {order} LIMIT {}",
        conditions.join(" AND "),
        p.add(q.limit as i64)
    );
    let statement = client.prepare_cached(&sql).await?;
    let mut events = client
        .query(&statement, &p.refs())
        .await?
        .iter()
        .map(rows::event_view)
        .collect::<Result<Vec<_>, _>>()?;
    if q.newest {
        events.reverse();
    }
    Ok(events)
}

async fn run_state(client: &Object, id: u64) -> Result<Option<RunState>, StoreError> {
    let statement = client
        .prepare_cached("SELECT state FROM runs WHERE id = $1")
        .await?;
    match client.query_opt(&statement, &[&(id as i64)]).await? {
        Some(r) => Ok(Some(r.code(0, "runs.state")?)),
        None => Ok(None),
    }
}

async fn state_counts(client: &Object) -> Result<BTreeMap<String, u64>, StoreError> {
    let statement = client
        .prepare_cached("SELECT COUNT(*) FROM runs WHERE state = $1")
        .await?;
    // One index range count per state, all sent at once.
    let counts = try_join_all(RunState::ALL.into_iter().map(|s| {
        let statement = &statement;
        async move {
            let n: u64 = client
                .query_one(statement, &[&s.as_str()])
                .await?
                .int(0, "count")?;
            Ok::<_, StoreError>((s.as_str().to_string(), n))
        }
    }))
    .await?;
    Ok(counts.into_iter().collect())
}

/// See `Store::failed_since`; `node`: this node's id once registered
/// (every node's runs before).
async fn failed_since(
    client: &Object,
    since: i64,
    node: Option<&str>,
) -> Result<Vec<i64>, StoreError> {
    let statement = client
        .prepare_cached(
            "SELECT r.finished_at FROM runs r
             WHERE r.state IN ('failed', 'timed_out') AND r.finished_at >= $1
             AND ($2::TEXT IS NULL OR $2 = (SELECT a.node FROM attempts a
                  WHERE a.run = r.id ORDER BY a.n DESC LIMIT 1))
             ORDER BY r.finished_at",
        )
        .await?;
    client
        .query(&statement, &[&since, &node])
        .await?
        .iter()
        .map(|r| r.int(0, "runs.finished_at"))
        .collect()
}

async fn newest_with_unique_key(
    client: &Object,
    key: &str,
) -> Result<Option<UniqueHolder>, StoreError> {
    let statement = client
        .prepare_cached(
            "SELECT id, created_at FROM dag_runs WHERE unique_key = $1
             ORDER BY created_at DESC, id DESC LIMIT 1",
        )
        .await?;
    let Some(head) = client.query_opt(&statement, &[&key]).await? else {
        return Ok(None);
    };
    let id: i64 = head.int(0, "dag_runs.id")?;
    let statement = client
        .prepare_cached("SELECT id FROM runs WHERE dag_run = $1 ORDER BY job_index")
        .await?;
    let runs = client
        .query(&statement, &[&id])
        .await?
        .iter()
        .map(|r| Ok(RunId(r.int(0, "runs.id")?)))
        .collect::<Result<_, StoreError>>()?;
    Ok(Some(UniqueHolder {
        dag_run: DagRunId(rows::fit("dag_runs.id", id)?),
        created_at: head.int(1, "dag_runs.created_at")?,
        runs,
    }))
}

impl Store for PgStore {
    fn commit(&mut self, c: &crate::store::Commit<'_>) -> Result<Vec<i64>, StoreError> {
        self.write(c)
    }

    fn take_dag_run(&mut self, dag_run: u64) -> Result<Result<(), String>, StoreError> {
        self.take(dag_run)
    }

    fn hold_unique_key(&mut self, key: &str) -> Result<(), StoreError> {
        self.hold_key(key)
    }

    fn take_unique_holds(&mut self) -> Option<crate::store::Hold> {
        self.take_key_holds()
    }

    /// A registered node loads only the DAG runs it owns, and the attempts
    /// it started that another node ended as `interrupted` (it was
    /// declared dead) as orphans: their processes may outlive the axd
    /// that started them, and this node is the one on their machine.
    fn load(&mut self) -> Result<Loaded, StoreError> {
        let me = self.shared.node.get().cloned();
        on_client!(self, |client| async {
            let mut loaded = match &me {
                Some(me) => {
                    let filter = "d.state = 'active' AND d.owner = $1";
                    super::load::load_where(&client, filter, &[&me.id]).await?
                }
                None => super::load::load_where(&client, "d.state = 'active'", &[]).await?,
            };
            if let Some(me) = &me {
                loaded
                    .orphans
                    .extend(super::load::interrupted_elsewhere(&client, &me.id).await?);
            }
            Ok::<_, StoreError>(loaded)
        })
    }

    fn list_runs(&mut self, q: &RunQuery) -> Result<Vec<RunView>, StoreError> {
        on_client!(self, |client| list_runs(&client, q))
    }

    fn get_run(&mut self, id: u64) -> Result<Option<RunView>, StoreError> {
        let sql = format!("SELECT {RUN_VIEW_COLUMNS} FROM runs WHERE id = $1");
        let views = on_client!(self, |client| run_views(&client, &sql, &[&(id as i64)]))?;
        Ok(views.into_iter().next())
    }

    fn run_events(&mut self, run: u64, limit: usize) -> Result<Vec<EventView>, StoreError> {
        on_client!(self, |client| async {
            let statement = client
                .prepare_cached(&format!(
                    "SELECT {EVENT_COLUMNS} FROM events WHERE run = $1 ORDER BY seq LIMIT $2"
                ))
                .await?;
            client
                .query(&statement, &[&(run as i64), &(limit as i64)])
                .await?
                .iter()
                .map(rows::event_view)
                .collect()
        })
    }

    fn events(&mut self, q: &EventQuery) -> Result<Vec<EventView>, StoreError> {
        on_client!(self, |client| events(&client, q))
    }

    fn run_state(&mut self, id: u64) -> Result<Option<RunState>, StoreError> {
        on_client!(self, |client| run_state(&client, id))
    }

    fn state_counts(&mut self) -> Result<BTreeMap<String, u64>, StoreError> {
        on_client!(self, |client| state_counts(&client))
    }

    fn failed_since(&mut self, since: i64) -> Result<Vec<i64>, StoreError> {
        let node = self.shared.node.get().map(|m| m.id.clone());
        on_client!(self, |client| failed_since(&client, since, node.as_deref()))
    }

    fn last_dag_runs(&mut self) -> Result<HashMap<String, LastDagRun>, StoreError> {
        on_client!(self, |client| async {
            let statement = client
                .prepare_cached(
                    "SELECT dag, state, COALESCE(finished_at, created_at) FROM dag_runs
                     WHERE id IN (SELECT MAX(id) FROM dag_runs GROUP BY dag)",
                )
                .await?;
            client
                .query(&statement, &[])
                .await?
                .iter()
                .map(rows::last_dag_run)
                .collect::<Result<_, StoreError>>()
        })
    }

    fn dag_history(&mut self) -> Result<HashMap<String, crate::metrics::DagHistory>, StoreError> {
        on_client!(self, |client| async {
            let statement = client
                .prepare_cached(
                    "SELECT dag,
                            MAX(CASE WHEN state = 'success' THEN finished_at END),
                            MAX(CASE WHEN state IN ('failed', 'cancelled') THEN finished_at END)
                     FROM dag_runs WHERE finished_at IS NOT NULL GROUP BY dag",
                )
                .await?;
            client
                .query(&statement, &[])
                .await?
                .iter()
                .map(rows::dag_history)
                .collect::<Result<_, StoreError>>()
        })
    }

    fn newest_with_unique_key(&mut self, key: &str) -> Result<Option<UniqueHolder>, StoreError> {
        on_client!(self, |client| newest_with_unique_key(&client, key))
    }

    fn load_dag_run(&mut self, id: u64) -> Result<Option<RestoredDagRun>, StoreError> {
        let id = id as i64;
        let loaded = on_client!(self, |client| super::load::load_where(
            &client,
            "d.id = $1",
            &[&id]
        ))?;
        Ok(loaded.dag_runs.into_iter().next())
    }

    fn load_dag_defs(&mut self) -> Result<Vec<DagSpec>, StoreError> {
        on_client!(self, |client| async {
            let rows = client
                .query(
                    "SELECT s.spec FROM dag_defs d JOIN specs s ON s.hash = d.hash ORDER BY d.name",
                    &[],
                )
                .await?;
            rows.iter()
                .map(|r| parse_spec(r.str(0, "specs.spec")?, "stored DAG definition"))
                .collect()
        })
    }

    fn dag_run_spec(&mut self, dag_run: u64) -> Result<Option<Arc<DagSpec>>, StoreError> {
        on_client!(self, |client| async {
            let statement = client
                .prepare_cached(
                    "SELECT s.spec FROM dag_runs d JOIN specs s ON s.hash = d.spec_hash WHERE d.id = $1",
                )
                .await?;
            match client.query_opt(&statement, &[&(dag_run as i64)]).await? {
                Some(r) => Ok(Some(Arc::new(parse_spec(
                    r.str(0, "specs.spec")?,
                    "stored spec",
                )?))),
                None => Ok(None),
            }
        })
    }
}
