//! The `nodes` table: each axd's heartbeat and lease (docs/operations.md,
//! "Cluster"). Times come from the database server's clock, so a node's
//! age and lease do not depend on how well the machines' clocks agree.
//!
//! A beat renews the lease: `lease_until = now + lease_ms`. While each
//! renewal lands before the previous lease ends, `valid_since` stays put:
//! it says since when the node has held a lease without a gap, which is
//! what allows it to judge others (`PgStore::release_dead`).

use ax_shared::RunState;
use tokio_postgres::types::ToSql;

use super::{PgStore, int, on_client, parse_state};
use crate::store::StoreError;

/// The server's clock in ms.
pub(super) const SERVER_NOW: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

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

impl PgStore {
    /// Writes this node's beat (the first of a life also sets
    /// `started_at`) and reads every node, the paused DAGs, the running
    /// counts and the nodes' DAG versions back, in one transaction.
    pub fn beat(&mut self, me: &NodeInfo, first: bool) -> Result<Beat, StoreError> {
        // One clock reading for the row; a first beat of a life, or one
        // that comes after the lease ended, starts a new unbroken stretch.
        let upsert = format!(
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
        );
        let read = format!(
            "SELECT id, host, version, slots, heartbeat_ms, started_at, last_beat,
                    GREATEST({SERVER_NOW} - last_beat, 0), lease_until - {SERVER_NOW}
             FROM nodes ORDER BY id"
        );
        let registered = self.shared.node.get().cloned();
        // Index ranges of `runs_state`: the unfinished states, and the
        // failed ones (bounded by retention), never the whole table.
        let unfinished_states: Vec<&str> = RunState::ALL
            .into_iter()
            .filter(|s| !s.is_terminal())
            .map(crate::store::state_str)
            .collect();
        let failed_states = [RunState::Failed, RunState::TimedOut].map(crate::store::state_str);
        let failed_sql = format!(
            "SELECT count(*) FROM runs WHERE state = ANY($1)
             AND finished_at >= {SERVER_NOW} - 3600000"
        );
        on_client!(self, |client| async {
            let tx = client.transaction().await?;
            // Every statement prepared first (no round trip once cached),
            // then all sent at once: a beat costs three round trips (begin,
            // the statements, commit) however far the database is. The
            // server runs them in the order sent: the epoch check's share
            // lock comes before the row's update (the lock order of
            // `PgStore::release_dead`), and a node declared dead does not
            // beat as if alive (its transaction is rolled back).
            let (
                epoch,
                upsert,
                read,
                paused,
                pools,
                per_node,
                unfinished,
                failed,
                highest,
                versions,
            ) = tokio::try_join!(
                biased;
                tx.prepare_cached(super::cluster::EPOCH),
                tx.prepare_cached(&upsert),
                tx.prepare_cached(&read),
                tx.prepare_cached("SELECT dag FROM paused ORDER BY dag"),
                tx.prepare_cached(
                    "SELECT pool, count(*) FROM runs WHERE state = 'running' GROUP BY pool",
                ),
                // From the running runs (an index), not a scan of every
                // attempt: an unfinished attempt belongs to a running run.
                tx.prepare_cached(
                    "SELECT a.node, count(*) FROM runs r
                         JOIN attempts a ON a.run = r.id AND a.finished_at IS NULL
                         WHERE r.state = 'running' AND a.node IS NOT NULL GROUP BY a.node",
                ),
                tx.prepare_cached(
                    "SELECT state, count(*) FROM runs WHERE state = ANY($1) GROUP BY state",
                ),
                tx.prepare_cached(&failed_sql),
                // Two primary-key lookups.
                tx.prepare_cached(
                    "SELECT (SELECT COALESCE(max(id), 0) FROM runs),
                            (SELECT COALESCE(max(id), 0) FROM dag_runs)",
                ),
                // One row per DAG and version, not per node: a cluster
                // that agrees costs one row per DAG.
                tx.prepare_cached(
                    "SELECT dag, hash, array_agg(node ORDER BY node) FROM node_dags
                     GROUP BY dag, hash ORDER BY dag, hash",
                ),
            )?;
            let no_id = String::new();
            let my_id = registered.as_ref().map_or(&no_id, |m| &m.id);
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
            let failed_states = &failed_states[..];
            let failed_params: [&(dyn ToSql + Sync); 1] = [&failed_states];
            // Biased: polled, so sent, in this order.
            let (
                epoch_rows,
                _,
                rows,
                paused,
                pools,
                per_node,
                unfinished_rows,
                failed,
                highest,
                versions,
            ) = tokio::try_join!(
                biased;
                tx.query(&epoch, &epoch_params),
                tx.execute(&upsert, &upsert_params),
                tx.query(&read, &[]),
                tx.query(&paused, &[]),
                tx.query(&pools, &[]),
                tx.query(&per_node, &[]),
                tx.query(&unfinished, &unfinished_params),
                tx.query_one(&failed, &failed_params),
                tx.query_one(&highest, &[]),
                tx.query(&versions, &[]),
            )?;
            if let Some(me) = &registered {
                super::cluster::epoch_is(&epoch_rows, me)?;
            }
            let paused = paused
                .iter()
                .map(|r| r.try_get(0))
                .collect::<Result<_, _>>()?;
            let mut pool_running = Vec::new();
            for r in pools {
                pool_running.push((r.try_get(0)?, int(r.try_get(1)?, "running")?));
            }
            let mut node_running = Vec::new();
            for r in per_node {
                node_running.push((r.try_get(0)?, int(r.try_get(1)?, "running")?));
            }
            let mut unfinished = Vec::new();
            for r in unfinished_rows {
                let state: &str = r.try_get(0)?;
                unfinished.push((parse_state(state)?, int(r.try_get(1)?, "runs")?));
            }
            let failed_last_hour = int(failed.try_get(0)?, "failed runs")?;
            let highest_ids = (
                int(highest.try_get(0)?, "run id")?,
                int(highest.try_get(1)?, "DAG run id")?,
            );
            let dag_versions = versions
                .iter()
                .map(|r| {
                    Ok(DagVersionRow {
                        dag: r.try_get(0)?,
                        hash: r.try_get(1)?,
                        nodes: r.try_get(2)?,
                    })
                })
                .collect::<Result<_, tokio_postgres::Error>>()?;
            tx.commit().await?;
            let nodes = rows
                .iter()
                .map(|r| {
                    Ok(NodeRow {
                        id: r.try_get(0)?,
                        host: r.try_get(1)?,
                        version: r.try_get(2)?,
                        slots: int(r.try_get(3)?, "slots")?,
                        heartbeat_ms: int(r.try_get(4)?, "heartbeat")?,
                        started_at: r.try_get(5)?,
                        last_beat: r.try_get(6)?,
                        age_ms: int(r.try_get(7)?, "age")?,
                        lease_left_ms: r.try_get(8)?,
                    })
                })
                .collect::<Result<_, StoreError>>()?;
            Ok(Beat {
                nodes,
                paused,
                pool_running,
                dag_versions,
                node_running,
                unfinished,
                failed_last_hour,
                highest_ids,
            })
        })
    }
}
