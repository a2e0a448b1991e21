//! The `nodes` table: each axd's heartbeat and lease (docs/operations.md,
//! "Cluster"). Times come from the database server's clock, so a node's
//! age and lease do not depend on how well the machines' clocks agree.
//!
//! A beat renews the lease: `lease_until = now + lease_ms`. While each
//! renewal lands before the previous lease ends, `valid_since` stays put:
//! it says since when the node has held a lease without a gap, which is
//! what allows it to judge others (`PgStore::release_dead`).

use ax_shared::RunState;
use deadpool_postgres::Transaction;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Row, Statement};

use super::fence::{self, Me};
use super::{PgStore, SERVER_NOW, on_client};
use crate::store::StoreError;
use crate::store::rows::{Code, Columns};

/// What a node says of itself in each beat.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    pub id: String,
    pub host: String,
    pub version: String,
    pub slots: u32,
    pub heartbeat_ms: u64,
    /// How long each renewal keeps this node alive for the others.
    pub lease_ms: u64,
}

/// A row of `nodes` as one beat read it.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeRow {
    pub id: String,
    pub host: String,
    pub version: String,
    pub slots: u32,
    pub heartbeat_ms: u64,
    pub started_at: i64,
    pub last_beat: i64,
    /// The age of `last_beat` when read, in ms.
    pub age_ms: u64,
    /// What was left of the node's lease when read, in ms (negative:
    /// expired that long ago).
    pub lease_left_ms: i64,
}

/// What one beat read back.
#[derive(Clone, Debug, PartialEq)]
pub struct Beat {
    pub nodes: Vec<NodeRow>,
    /// The paused DAGs, as any node last set them.
    pub paused: Vec<String>,
    /// Runs running per pool, on every node.
    pub pool_running: Vec<(String, u32)>,
    /// The versions of each DAG the nodes have loaded (`node_dags`).
    pub dag_versions: Vec<DagVersionRow>,
    /// Attempts running per node (nodes with none are absent).
    pub node_running: Vec<(String, u32)>,
    /// Unfinished runs per state over the cluster (states with none are
    /// absent).
    pub unfinished: Vec<(RunState, u64)>,
    /// Runs of any node that ended failed or timed out in the last hour
    /// (by the server's clock).
    pub failed_last_hour: u64,
    /// The highest run and DAG run ids stored, by any node.
    pub highest_ids: (u64, u64),
}

/// The nodes (by id, sorted) that have loaded version `hash` of `dag`.
#[derive(Clone, Debug, PartialEq)]
pub struct DagVersionRow {
    pub dag: String,
    pub hash: String,
    pub nodes: Vec<String>,
}

/// This node's row: one clock reading for it; a first beat of a life, or
/// one that comes after the lease ended, starts a new unbroken stretch.
/// Parameters: id, host, version, slots, heartbeat, first beat of a life
/// (`$6`), lease.
fn upsert_sql() -> String {
    format!(
        "INSERT INTO nodes (id, host, version, slots, heartbeat_ms, started_at, last_beat,
                            lease_ms, lease_until, valid_since)
         SELECT $1, $2, $3, $4, $5, t.now, t.now, $7, t.now + $7, t.now
         FROM (SELECT {SERVER_NOW} AS now) t
         ON CONFLICT (id) DO UPDATE SET host = excluded.host, version = excluded.version,
           slots = excluded.slots, heartbeat_ms = excluded.heartbeat_ms,
           started_at = CASE WHEN $6 THEN excluded.started_at ELSE nodes.started_at END,
           valid_since = CASE WHEN NOT $6 AND nodes.lease_until >= excluded.last_beat
                              THEN nodes.valid_since ELSE excluded.valid_since END,
           last_beat = excluded.last_beat, lease_ms = excluded.lease_ms,
           lease_until = excluded.lease_until, released = false"
    )
}

/// Every node, with the age of its beat and what is left of its lease.
fn nodes_sql() -> String {
    format!(
        "SELECT id, host, version, slots, heartbeat_ms, started_at, last_beat,
                GREATEST({SERVER_NOW} - last_beat, 0), lease_until - {SERVER_NOW}
         FROM nodes ORDER BY id"
    )
}

/// Runs of the states `$1` that finished in the last hour.
fn failed_sql() -> String {
    format!(
        "SELECT count(*) FROM runs WHERE state = ANY($1)
         AND finished_at >= {SERVER_NOW} - 3600000"
    )
}

/// The statements of one beat, in the order they are sent.
struct BeatStatements {
    epoch: Statement,
    upsert: Statement,
    nodes: Statement,
    paused: Statement,
    pools: Statement,
    per_node: Statement,
    unfinished: Statement,
    failed: Statement,
    highest: Statement,
    versions: Statement,
}

/// What one beat's statements returned (the upsert returns nothing).
struct BeatRows {
    epoch: Vec<Row>,
    nodes: Vec<Row>,
    paused: Vec<Row>,
    pools: Vec<Row>,
    per_node: Vec<Row>,
    unfinished: Vec<Row>,
    failed: Row,
    highest: Row,
    versions: Vec<Row>,
}

/// Prepares every statement of a beat at once (no round trip once cached).
async fn prepare(tx: &Transaction<'_>) -> Result<BeatStatements, StoreError> {
    let (upsert, nodes, failed) = (upsert_sql(), nodes_sql(), failed_sql());
    let (epoch, upsert, nodes, paused, pools, per_node, unfinished, failed, highest, versions) = tokio::try_join!(
        biased;
        tx.prepare_cached(fence::EPOCH),
        tx.prepare_cached(&upsert),
        tx.prepare_cached(&nodes),
        tx.prepare_cached("SELECT dag FROM paused ORDER BY dag"),
        tx.prepare_cached("SELECT pool, count(*) FROM runs WHERE state = 'running' GROUP BY pool"),
        // From the running runs (an index), not a scan of every attempt:
        // an unfinished attempt belongs to a running run.
        tx.prepare_cached(
            "SELECT a.node, count(*) FROM runs r
                 JOIN attempts a ON a.run = r.id AND a.finished_at IS NULL
                 WHERE r.state = 'running' AND a.node IS NOT NULL GROUP BY a.node",
        ),
        tx.prepare_cached("SELECT state, count(*) FROM runs WHERE state = ANY($1) GROUP BY state"),
        tx.prepare_cached(&failed),
        // Two primary-key lookups.
        tx.prepare_cached(
            "SELECT (SELECT COALESCE(max(id), 0) FROM runs),
                    (SELECT COALESCE(max(id), 0) FROM dag_runs)",
        ),
        // One row per DAG and version, not per node: a cluster that
        // agrees costs one row per DAG.
        tx.prepare_cached(
            "SELECT dag, hash, array_agg(node ORDER BY node) FROM node_dags
             GROUP BY dag, hash ORDER BY dag, hash",
        ),
    )?;
    Ok(BeatStatements {
        epoch,
        upsert,
        nodes,
        paused,
        pools,
        per_node,
        unfinished,
        failed,
        highest,
        versions,
    })
}

/// Sends every statement of a beat at once. The server runs them in the
/// order sent (the joins are biased: polled, so sent, in order): the
/// epoch check's share lock comes before the row's update (the lock order
/// of `PgStore::release_dead`), and a node declared dead does not beat as
/// if alive (its transaction is rolled back).
async fn send(
    tx: &Transaction<'_>,
    st: &BeatStatements,
    me: &NodeInfo,
    registered: Option<&Me>,
    first: bool,
) -> Result<BeatRows, StoreError> {
    // Index ranges of `runs_state`: the unfinished states, and the failed
    // ones (bounded by retention), never the whole table.
    let unfinished_states: Vec<&str> = RunState::ALL
        .into_iter()
        .filter(|s| !s.is_terminal())
        .map(Code::code)
        .collect();
    let failed_states = [RunState::Failed, RunState::TimedOut].map(Code::code);
    let failed_states = &failed_states[..];
    let no_id = String::new();
    let my_id = registered.map_or(&no_id, |m| &m.id);
    let (slots, beat_ms, lease_ms) = (
        i64::from(me.slots),
        me.heartbeat_ms as i64,
        me.lease_ms as i64,
    );
    let epoch_params: [&(dyn ToSql + Sync); 1] = [my_id];
    let upsert_params: [&(dyn ToSql + Sync); 7] = [
        &me.id,
        &me.host,
        &me.version,
        &slots,
        &beat_ms,
        &first,
        &lease_ms,
    ];
    let unfinished_params: [&(dyn ToSql + Sync); 1] = [&unfinished_states];
    let failed_params: [&(dyn ToSql + Sync); 1] = [&failed_states];
    let (epoch, _, nodes, paused, pools, per_node, unfinished, failed, highest, versions) = tokio::try_join!(
        biased;
        tx.query(&st.epoch, &epoch_params),
        tx.execute(&st.upsert, &upsert_params),
        tx.query(&st.nodes, &[]),
        tx.query(&st.paused, &[]),
        tx.query(&st.pools, &[]),
        tx.query(&st.per_node, &[]),
        tx.query(&st.unfinished, &unfinished_params),
        tx.query_one(&st.failed, &failed_params),
        tx.query_one(&st.highest, &[]),
        tx.query(&st.versions, &[]),
    )?;
    Ok(BeatRows {
        epoch,
        nodes,
        paused,
        pools,
        per_node,
        unfinished,
        failed,
        highest,
        versions,
    })
}

/// (text, count) rows.
fn counts<T: TryFrom<i64>>(
    rows: &[Row],
    what: &'static str,
) -> Result<Vec<(String, T)>, StoreError> {
    rows.iter()
        .map(|r| Ok((r.string(0, what)?, r.int(1, "count")?)))
        .collect()
}

/// What a beat read, as its answer.
fn read(rows: &BeatRows) -> Result<Beat, StoreError> {
    let nodes = rows
        .nodes
        .iter()
        .map(|r| {
            Ok(NodeRow {
                id: r.string(0, "nodes.id")?,
                host: r.string(1, "nodes.host")?,
                version: r.string(2, "nodes.version")?,
                slots: r.int(3, "nodes.slots")?,
                heartbeat_ms: r.int(4, "nodes.heartbeat_ms")?,
                started_at: r.int(5, "nodes.started_at")?,
                last_beat: r.int(6, "nodes.last_beat")?,
                age_ms: r.int(7, "node age")?,
                lease_left_ms: r.int(8, "node lease left")?,
            })
        })
        .collect::<Result<_, StoreError>>()?;
    let paused = rows
        .paused
        .iter()
        .map(|r| r.string(0, "paused.dag"))
        .collect::<Result<_, _>>()?;
    let unfinished = rows
        .unfinished
        .iter()
        .map(|r| Ok((r.code(0, "runs.state")?, r.int(1, "count")?)))
        .collect::<Result<_, StoreError>>()?;
    let dag_versions = rows
        .versions
        .iter()
        .map(|r| {
            Ok(DagVersionRow {
                dag: r.try_get(0)?,
                hash: r.try_get(1)?,
                nodes: r.try_get(2)?,
            })
        })
        .collect::<Result<_, StoreError>>()?;
    Ok(Beat {
        nodes,
        paused,
        pool_running: counts(&rows.pools, "runs.pool")?,
        dag_versions,
        node_running: counts(&rows.per_node, "attempts.node")?,
        unfinished,
        failed_last_hour: rows.failed.int(0, "count")?,
        highest_ids: (
            rows.highest.int(0, "runs.id")?,
            rows.highest.int(1, "dag_runs.id")?,
        ),
    })
}

impl PgStore {
    /// Writes this node's beat (the first of a life also sets
    /// `started_at`) and reads every node, the paused DAGs, the running
    /// counts and the nodes' DAG versions back, in one transaction: three
    /// round trips (begin, the statements, commit) however far the
    /// database is.
    pub fn beat(&mut self, me: &NodeInfo, first: bool) -> Result<Beat, StoreError> {
        let registered = self.shared.node.get().cloned();
        on_client!(self, |client| async {
            let tx = client.transaction().await?;
            let statements = prepare(&tx).await?;
            let rows = send(&tx, &statements, me, registered.as_ref(), first).await?;
            if let Some(me) = &registered {
                fence::epoch_is(&rows.epoch, me)?;
            }
            let beat = read(&rows)?;
            tx.commit().await?;
            Ok(beat)
        })
    }
}
