//! Work sharing between the nodes of one database (docs/operations.md,
//! "Cluster"): node numbers and epochs, claiming offered DAG runs with
//! `FOR UPDATE SKIP LOCKED`, handing back the DAG runs of a dead node, the
//! `ax_work` wake-ups (LISTEN on a connection of its own) and the cron
//! leader's advisory lock (a session lock on a connection of its own, lost
//! with it).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio_postgres::types::ToSql;
use tokio_postgres::{AsyncMessage, NoTls};

use super::fence::{Me, check_epoch};
use super::load::{DagRuns, dag_runs_where};
use super::{PgStore, SERVER_NOW, int, on_client};
use crate::store::StoreError;
use ax_engine::{RestoredDagRun, RunId};

/// Ids are `k * STRIDE + node number`: at most this many node ids per
/// database, each with its own residue.
pub const STRIDE: u64 = 1024;

/// The advisory lock held while a node number is given out ("axnodeno").
const REGISTER_LOCK: i64 = 0x6178_6e6f_6465_6e6f;
/// The transaction advisory lock a node judging others holds
/// ("axjudges"): one judge at a time, so judges never wait for each
/// other's locks.
const JUDGE_LOCK: i64 = 0x6178_6a75_6467_6573;
/// The session advisory lock of the cron leader ("axleader").
const LEADER_LOCK: i64 = 0x6178_6c65_6164_6572;
/// The channel that says offered work exists.
pub(super) const WORK_CHANNEL: &str = "ax_work";
/// Notified by a commit that finished a DAG run.
pub const DONE_CHANNEL: &str = "ax_done";
/// How long a lost LISTEN or leader connection waits before reconnecting.
const RECONNECT: Duration = Duration::from_secs(1);

/// Claims offered DAG runs for node `$4`, at most `$1`, by effective
/// priority (docs/config.md, "`[aging]`": `min(cap $2, priority +
/// ⌊waited / every $3⌋)`, a priority above the cap kept), then oldest
/// first. Without a sort of every offered row: the oldest of a priority
/// level has the highest effective priority of its level, so a loose
/// index scan finds the levels (at most 100) and the oldest `2 × $1` of
/// each are the only candidates; twice the limit, so that a claimer racing
/// another for the same rows (skipped while locked) still finds some.
const CLAIM: &str = "WITH RECURSIVE levels(priority) AS (
         (SELECT priority FROM dag_runs WHERE owner IS NULL AND state = 'active'
          ORDER BY priority DESC LIMIT 1)
       UNION ALL
         SELECT (SELECT d.priority FROM dag_runs d
                 WHERE d.owner IS NULL AND d.state = 'active' AND d.priority < l.priority
                 ORDER BY d.priority DESC LIMIT 1)
         FROM levels l WHERE l.priority IS NOT NULL),
     candidates AS (
       SELECT o.id, o.created_at,
              CASE WHEN o.priority >= $2::int8 THEN o.priority
                   ELSE LEAST($2::int8, o.priority + GREATEST(0,
                     (extract(epoch FROM clock_timestamp()) * 1000)::bigint - o.created_at) / $3::int8)
              END AS effective
       FROM levels l CROSS JOIN LATERAL (
         SELECT id, priority, created_at FROM dag_runs d
         WHERE d.owner IS NULL AND d.state = 'active' AND d.priority = l.priority
         ORDER BY created_at, id LIMIT 2 * $1::int8) o
       WHERE l.priority IS NOT NULL),
     c AS (
       SELECT d.id FROM dag_runs d JOIN candidates k ON k.id = d.id
       WHERE d.owner IS NULL AND d.state = 'active'
       ORDER BY k.effective DESC, k.created_at, d.id LIMIT $1::int8
       FOR UPDATE OF d SKIP LOCKED)
     UPDATE dag_runs d SET owner = $4 FROM c WHERE d.id = c.id RETURNING d.id";
/// Leases to node `$4` at most `$3` free slots of pool `$1` below `$2`.
const LEASE: &str = "WITH c AS (
       SELECT slot FROM pool_slots WHERE pool = $1 AND node IS NULL AND slot < $2
       ORDER BY slot LIMIT $3 FOR UPDATE SKIP LOCKED)
     UPDATE pool_slots p SET node = $4 FROM c WHERE p.pool = $1 AND p.slot = c.slot RETURNING p.slot";
/// Node `$3` gives back slots `$2` of pool `$1`; claimers are woken.
const UNLEASE: &str = "WITH u AS (
       UPDATE pool_slots SET node = NULL WHERE pool = $1 AND slot = ANY($2) AND node = $3 RETURNING 1)
     SELECT pg_notify('ax_work', '') FROM u LIMIT 1";

/// The aging rule claims order by (`[aging]` of the claiming node).
#[derive(Clone, Copy, Debug)]
pub struct ClaimAging {
    pub cap: u8,
    pub every: Duration,
}

/// DAG runs this node has just claimed, read back for its engine.
#[derive(Debug, Default)]
pub struct Claimed {
    pub dag_runs: Vec<RestoredDagRun>,
    pub external: Vec<(RunId, ax_shared::RunState)>,
}

impl PgStore {
    /// Registers this node: keeps (or gives it, the smallest free) its
    /// number and raises its epoch, which fences every write of its
    /// earlier life. Every handle of this store then writes as this node.
    pub fn register(&mut self, id: &str) -> Result<Me, StoreError> {
        let me = on_client!(self, |client| async {
            let tx = client.transaction().await?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&REGISTER_LOCK])
                .await?;
            let known = tx
                .query_opt("SELECT no FROM node_numbers WHERE id = $1", &[&id])
                .await?;
            let no: i64 = match known {
                Some(r) => r.try_get(0)?,
                None => {
                    let free = tx
                        .query_opt(
                            "SELECT n FROM generate_series(0::int8, $1::int8 - 1) n
                             WHERE NOT EXISTS (SELECT 1 FROM node_numbers WHERE no = n)
                             ORDER BY n LIMIT 1",
                            &[&(STRIDE as i64)],
                        )
                        .await?;
                    let Some(free) = free else {
                        return Err(StoreError::Corrupt(format!(
                            "all {STRIDE} node numbers are taken (table node_numbers): delete the rows of node ids that will not come back"
                        )));
                    };
                    let no: i64 = free.try_get(0)?;
                    tx.execute(
                        "INSERT INTO node_numbers (id, no, epoch) VALUES ($1, $2, 0)",
                        &[&id, &no],
                    )
                    .await?;
                    no
                }
            };
            let epoch: i64 = tx
                .query_one(
                    "UPDATE node_numbers SET epoch = epoch + 1 WHERE id = $1 RETURNING epoch",
                    &[&id],
                )
                .await?
                .try_get(0)?;
            // Slots leased in an earlier life: its engine starts with none.
            tx.execute("UPDATE pool_slots SET node = NULL WHERE node = $1", &[&id])
                .await?;
            tx.execute("DELETE FROM pool_wants WHERE node = $1", &[&id])
                .await?;
            // A node restarting within its lease is alive again from now:
            // its row of the last life must not get it declared dead (and
            // fenced) before its first beat, which renews the lease anew.
            tx.execute(
                &format!(
                    "UPDATE nodes SET last_beat = t.now, released = false,
                       lease_until = GREATEST(lease_until, t.now + lease_ms), valid_since = t.now
                     FROM (SELECT {SERVER_NOW} AS now) t WHERE id = $1"
                ),
                &[&id],
            )
            .await?;
            tx.commit().await?;
            Ok(Me {
                id: id.to_string(),
                no: int(no, "node number")?,
                epoch,
            })
        })?;
        let _ = self.shared.node.set(me.clone());
        Ok(me)
    }

    /// This node, once registered.
    pub fn me(&self) -> Option<&Me> {
        self.shared.node.get()
    }

    /// Claims up to `limit` offered DAG runs (highest effective priority
    /// under `aging`, then oldest first) in one transaction that skips
    /// rows other claimers hold, and reads them back in that same
    /// transaction: a claim whose answer is lost (the connection cut
    /// before the read-back) is rolled back rather than left owned by a
    /// node whose engine never heard of it.
    pub fn claim(&mut self, limit: u32, aging: ClaimAging) -> Result<Claimed, StoreError> {
        let Some(me) = self.shared.node.get().cloned() else {
            return Ok(Claimed::default());
        };
        let every = (aging.every.as_millis() as i64).max(1);
        let (limit, cap) = (i64::from(limit), i64::from(aging.cap));
        on_client!(self, |client| async {
            let tx = client.transaction().await?;
            check_epoch(&tx, &me).await?;
            let statement = tx.prepare_cached(CLAIM).await?;
            let rows = tx
                .query(&statement, &[&limit, &cap, &every, &me.id])
                .await?;
            if rows.is_empty() {
                return Ok(Claimed::default());
            }
            let ids: Vec<i64> = rows
                .iter()
                .map(|r| r.try_get::<_, i64>(0))
                .collect::<Result<_, _>>()?;
            let DagRuns { dag_runs, external } =
                dag_runs_where(&*tx, "d.id = ANY($1)", &[&ids]).await?;
            tx.commit().await?;
            Ok(Claimed { dag_runs, external })
        })
    }

    /// Runs `sql` as this node, whose id is its last parameter after
    /// `params`, in a transaction checked against its epoch; returns its
    /// rows (none before the node registered).
    pub(super) fn as_node(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        let Some(me) = self.shared.node.get().cloned() else {
            return Ok(Vec::new());
        };
        let mut all = params.to_vec();
        all.push(&me.id);
        on_client!(self, |client| async {
            let tx = client.transaction().await?;
            check_epoch(&tx, &me).await?;
            let statement = tx.prepare_cached(sql).await?;
            let rows = tx.query(&statement, &all).await?;
            tx.commit().await?;
            Ok(rows)
        })
    }

    /// `Store::take_dag_run`: this node owns the DAG run if it is offered
    /// or finished (whoever ran it), in one conditional update; else the
    /// node running it is the answer.
    pub(super) fn take(&mut self, dag_run: u64) -> Result<Result<(), String>, StoreError> {
        let Some(me) = self.shared.node.get().cloned() else {
            return Ok(Ok(()));
        };
        let id = dag_run as i64;
        on_client!(self, |client| async {
            let tx = client.transaction().await?;
            check_epoch(&tx, &me).await?;
            let taken = tx
                .execute(
                    "UPDATE dag_runs SET owner = $1
                     WHERE id = $2 AND (owner IS NULL OR owner = $1 OR state <> 'active')",
                    &[&me.id, &id],
                )
                .await?;
            let answer = if taken > 0 {
                Ok(())
            } else {
                let owner = tx
                    .query_opt("SELECT owner FROM dag_runs WHERE id = $1", &[&id])
                    .await?;
                Err(match owner {
                    Some(r) => r.try_get::<_, Option<String>>(0)?.unwrap_or_default(),
                    None => String::new(),
                })
            };
            tx.commit().await?;
            Ok(answer)
        })
    }

    /// Makes sure `pool` has rows for slots `0..slots` (nodes with a
    /// smaller `slots` lease only below theirs).
    pub fn ensure_pool_slots(&mut self, pools: &[(String, u32)]) -> Result<(), StoreError> {
        on_client!(self, |client| async {
            for (pool, slots) in pools {
                client
                    .execute(
                        "INSERT INTO pool_slots (pool, slot)
                         SELECT $1, g FROM generate_series(0::int8, $2::int8 - 1) g
                         ON CONFLICT DO NOTHING",
                        &[pool, &i64::from(*slots)],
                    )
                    .await?;
            }
            Ok(())
        })
    }

    /// Leases up to `want` free slots of `pool` below `slots` to this
    /// node; returns their numbers.
    pub fn lease(&mut self, pool: &str, slots: u32, want: u32) -> Result<Vec<u32>, StoreError> {
        let rows = self.as_node(LEASE, &[&pool, &i64::from(slots), &i64::from(want)])?;
        rows.iter().map(|r| int(r.try_get(0)?, "slot")).collect()
    }

    /// Gives leased slots of `pool` back, and wakes every claimer.
    pub fn unlease(&mut self, pool: &str, slots: &[u32]) -> Result<(), StoreError> {
        let slots: Vec<i64> = slots.iter().map(|s| i64::from(*s)).collect();
        self.as_node(UNLEASE, &[&pool, &slots])?;
        Ok(())
    }

    /// Declares dead every other node whose lease has ended (server
    /// clock), if this node itself holds a lease now and has held one
    /// without a gap for a whole lease (its own or the other's, the longer):
    /// right after an outage of its own it judges nobody, so the others
    /// have the same time it had to renew. Each one declared dead is
    /// marked handled, its epoch raised (its later writes fail) and its
    /// unfinished DAG runs handed back to the cluster, in one transaction.
    /// The claiming node's engine interrupts the attempts found running,
    /// as a restart does. Returns the nodes declared dead.
    ///
    /// No deadlock with the judged node's beats and commits: every
    /// transaction of a node share-locks its `node_numbers` row before it
    /// touches its `nodes` row or its DAG runs, and the judge locks the
    /// judged rows in that same order (`node_numbers` first, by id), then
    /// reads their leases again. Judges take turns (`JUDGE_LOCK`, skipped
    /// when busy), and a lock held by a node cut off mid-transaction is
    /// waited for at most `lock_wait`: the judge tries again next beat.
    pub fn release_dead(&mut self, lock_wait: Duration) -> Result<Vec<String>, StoreError> {
        let Some(me) = self.shared.node.get().cloned() else {
            return Ok(Vec::new());
        };
        // `j`: this node, the judge; `n`: a node judged.
        let expired = format!(
            "FROM nodes j, (SELECT {SERVER_NOW} AS now) t
             WHERE j.id = $1 AND j.lease_until > t.now
               AND j.valid_since <= t.now - GREATEST(j.lease_ms, n.lease_ms)
               AND n.id <> $1 AND NOT n.released AND n.lease_until < t.now"
        );
        let candidates_sql = format!("SELECT n.id FROM nodes n, LATERAL (SELECT 1 {expired}) x");
        let dead_sql = format!(
            "UPDATE nodes n SET released = true {expired} AND n.id = ANY($2) RETURNING n.id"
        );
        let wait = format!(
            "SET LOCAL lock_timeout = '{}ms'",
            lock_wait.as_millis().max(1)
        );
        on_client!(self, |client| async {
            let tx = client.transaction().await?;
            tx.batch_execute(&wait).await?;
            let turn: bool = tx
                .query_one("SELECT pg_try_advisory_xact_lock($1)", &[&JUDGE_LOCK])
                .await?
                .try_get(0)?;
            if !turn {
                return Ok(Vec::new());
            }
            check_epoch(&tx, &me).await?;
            let candidates: Vec<String> = tx
                .query(&candidates_sql, &[&me.id])
                .await?
                .iter()
                .map(|r| r.try_get(0))
                .collect::<Result<_, _>>()?;
            if candidates.is_empty() {
                return Ok(candidates);
            }
            // Waits for their transactions under way (a beat among them
            // may renew the lease), and keeps new ones out.
            tx.execute(
                "SELECT 1 FROM node_numbers WHERE id = ANY($1) ORDER BY id FOR UPDATE",
                &[&candidates],
            )
            .await?;
            let dead: Vec<String> = tx
                .query(&dead_sql, &[&me.id, &candidates])
                .await?
                .iter()
                .map(|r| r.try_get(0))
                .collect::<Result<_, _>>()?;
            if dead.is_empty() {
                return Ok(dead);
            }
            tx.execute(
                "UPDATE node_numbers SET epoch = epoch + 1 WHERE id = ANY($1)",
                &[&dead],
            )
            .await?;
            hand_back(&tx, &dead).await?;
            tx.commit().await?;
            Ok(dead)
        })
    }

    /// A clean stop: this node's unfinished DAG runs go back to the
    /// cluster and its row leaves the registry, together (a node without
    /// a row is never declared dead, so nothing it owned may stay owned).
    pub fn leave(&mut self, id: &str) -> Result<(), StoreError> {
        let me = self.shared.node.get().cloned();
        on_client!(self, |client| async {
            let tx = client.transaction().await?;
            if let Some(me) = &me {
                check_epoch(&tx, me).await?;
                hand_back(&tx, std::slice::from_ref(&me.id)).await?;
            }
            tx.execute("DELETE FROM nodes WHERE id = $1", &[&id])
                .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    /// Calls `wake(channel, payload)` at each `ax_work`, `ax_done` and
    /// `ax_events` notification, and `wake(WORK_CHANNEL, "")` once each
    /// time the dedicated LISTEN connection is (re)established, since
    /// notifications sent while it was down are lost. Runs on the store's
    /// runtime for as long as the store lives.
    pub fn listen(&self, wake: impl Fn(&str, &str) + Send + Sync + 'static) {
        let config = self.shared.config.clone();
        let wake = Arc::new(wake);
        self.spawn(async move {
            loop {
                if let Ok((client, mut conn)) = config.connect(NoTls).await {
                    let on_message = wake.clone();
                    let driver = tokio::spawn(async move {
                        let mut messages =
                            futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
                        while let Some(Ok(m)) = messages.next().await {
                            if let AsyncMessage::Notification(n) = m {
                                on_message(n.channel(), n.payload());
                            }
                        }
                    });
                    if client
                        .batch_execute(&format!(
                            "LISTEN {WORK_CHANNEL}; LISTEN {DONE_CHANNEL}; LISTEN {}",
                            super::feed::EVENTS_CHANNEL
                        ))
                        .await
                        .is_ok()
                    {
                        wake(WORK_CHANNEL, "");
                        let _ = driver.await;
                    } else {
                        driver.abort();
                    }
                }
                tokio::time::sleep(RECONNECT).await;
            }
        });
    }

    /// Competes for the cron leader's lock every `interval` on a
    /// connection of its own: `on_change(true, leading)` when this node
    /// becomes leader (what it needs, read under the lock),
    /// `on_change(false, ..)` when that connection breaks (the server
    /// frees the lock with it).
    pub fn lead(
        &self,
        interval: Duration,
        on_change: impl Fn(bool, Leading) + Send + Sync + 'static,
    ) {
        let config = self.shared.config.clone();
        self.spawn(async move {
            loop {
                if let Ok((client, conn)) = config.connect(NoTls).await {
                    let driver = tokio::spawn(conn);
                    let mut leading = false;
                    loop {
                        if leading {
                            if client.simple_query("SELECT 1").await.is_err() {
                                break;
                            }
                        } else {
                            match try_lead(&client).await {
                                Ok(Some(state)) => {
                                    leading = true;
                                    on_change(true, state);
                                }
                                Ok(None) => {}
                                Err(_) => break,
                            }
                        }
                        tokio::time::sleep(interval).await;
                    }
                    if leading {
                        on_change(false, Leading::default());
                    }
                    drop(client);
                    driver.abort();
                }
                tokio::time::sleep(RECONNECT).await;
            }
        });
    }

    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        if let Some(rt) = self.shared.rt.0.as_ref() {
            rt.spawn(task);
        }
    }
}

/// What a new cron leader reads under its lock.
#[derive(Debug, Default)]
pub struct Leading {
    /// Every DAG's last fired slot.
    pub marks: ax_engine::TriggerMarks,
    /// Unfinished DAG runs of the DAGs the jobs folders define, by DAG
    /// name, wherever they run: what the overlap policies count.
    pub active: Vec<(String, i64)>,
}

/// Takes the leader's lock if free; then the cron marks and the active
/// DAG runs of defined DAGs as they are.
async fn try_lead(
    client: &tokio_postgres::Client,
) -> Result<Option<Leading>, tokio_postgres::Error> {
    let got: bool = client
        .query_one("SELECT pg_try_advisory_lock($1)", &[&LEADER_LOCK])
        .await?
        .try_get(0)?;
    if !got {
        return Ok(None);
    }
    let slots = client
        .query("SELECT dag, last_slot FROM cron_marks", &[])
        .await?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<_, tokio_postgres::Error>>()?;
    let mut boots: HashMap<String, Vec<Arc<str>>> = HashMap::new();
    for r in client
        .query("SELECT dag, boot_id FROM boot_marks", &[])
        .await?
    {
        let boot = Arc::from(r.try_get::<_, &str>(1)?);
        boots.entry(r.try_get(0)?).or_default().push(boot);
    }
    let marks = ax_engine::TriggerMarks { slots, boots };
    let active = client
        .query(
            "SELECT dag, id FROM dag_runs WHERE state = 'active' AND dag IN (SELECT name FROM dag_defs)",
            &[],
        )
        .await?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?)))
        .collect::<Result<_, tokio_postgres::Error>>()?;
    Ok(Some(Leading { marks, active }))
}

impl PgStore {
    /// Of `dag_runs`, those stored as finished.
    pub fn ended_among(&mut self, dag_runs: &[u64]) -> Result<Vec<u64>, StoreError> {
        let ids: Vec<i64> = dag_runs.iter().map(|&d| d as i64).collect();
        let rows = on_client!(self, |client| async {
            // Stored and finished: a DAG run this node offered is watched
            // from before its step is committed, and a row not there yet
            // has not ended.
            let rows = client
                .query(
                    "SELECT id FROM dag_runs WHERE id = ANY($1::int8[]) AND state <> 'active'",
                    &[&ids],
                )
                .await?;
            Ok::<_, StoreError>(rows)
        })?;
        rows.iter()
            .map(|r| int(r.try_get::<_, i64>(0)?, "DAG run id"))
            .collect()
    }
}

/// The unfinished DAG runs of `nodes` lose their owner and their pool
/// slots, and every node's claimer is woken. Their record of loaded DAG
/// versions and their pool demands go too: a node that comes back writes
/// them anew (DAG versions from its jobs folder at start-up).
async fn hand_back(
    tx: &deadpool_postgres::Transaction<'_>,
    nodes: &[String],
) -> Result<(), StoreError> {
    tx.execute("DELETE FROM node_dags WHERE node = ANY($1)", &[&nodes])
        .await?;
    tx.execute("DELETE FROM pool_wants WHERE node = ANY($1)", &[&nodes])
        .await?;
    let n = tx
        .execute(
            "UPDATE dag_runs SET owner = NULL WHERE owner = ANY($1) AND state = 'active'",
            &[&nodes],
        )
        .await?;
    let freed = tx
        .execute(
            "UPDATE pool_slots SET node = NULL WHERE node = ANY($1)",
            &[&nodes],
        )
        .await?;
    if n + freed > 0 {
        tx.execute("SELECT pg_notify($1, '')", &[&WORK_CHANNEL])
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::postgres::PgUrl;
    use ax_testkit::pg::TestDb;

    fn info(id: &str) -> crate::store::postgres::NodeInfo {
        crate::store::postgres::NodeInfo {
            id: id.into(),
            host: "h".into(),
            version: "v".into(),
            slots: 4,
            heartbeat_ms: 1000,
            lease_ms: 3000,
        }
    }

    /// A node whose lease ended renews it while a judge is declaring it
    /// dead: the judge waits for the renewal, reads the lease again and
    /// declares nobody dead; neither side meets a deadlock (the judge
    /// locked the beat's rows in the opposite order before).
    #[test]
    fn a_renewal_racing_the_judge_neither_deadlocks_nor_is_fenced() {
        let Some(db) = TestDb::create("pg_judge_race") else {
            return;
        };
        let url = PgUrl::parse(&db.url).unwrap();
        let mut judge = PgStore::open(&url).unwrap();
        let mut judged = PgStore::open(&url).unwrap();
        judge.register("a").unwrap();
        judged.register("b").unwrap();
        judge.beat(&info("a"), true).unwrap();
        judged.beat(&info("b"), true).unwrap();
        // A has held its lease for long; B's has just ended.
        db.execute(
            "UPDATE nodes SET valid_since = valid_since - 100000 WHERE id = 'a';
             UPDATE nodes SET lease_until = lease_until - 100000 WHERE id = 'b'",
        )
        .unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (client, conn) = db
                .url
                .parse::<tokio_postgres::Config>()
                .unwrap()
                .connect(NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            // B's beat, as `PgStore::beat` orders it: the epoch's share
            // lock first, then its row.
            client.batch_execute("BEGIN").await.unwrap();
            client
                .query(super::super::fence::EPOCH, &[&"b"])
                .await
                .unwrap();
            let judging = std::thread::spawn(move || judge.release_dead(Duration::from_secs(10)));
            tokio::time::sleep(Duration::from_millis(500)).await;
            client
                .execute(
                    &format!("UPDATE nodes SET lease_until = {SERVER_NOW} + 3000 WHERE id = 'b'"),
                    &[],
                )
                .await
                .expect("B's renewal");
            client.batch_execute("COMMIT").await.expect("B's commit");
            let dead = judging.join().unwrap().expect("the judge's transaction");
            assert!(dead.is_empty(), "{dead:?}");
        });
        judged.beat(&info("b"), false).expect("B is not fenced");
    }

    #[test]
    fn claims_go_by_effective_priority_with_aging() {
        let Some(db) = TestDb::create("pg_claim_aging") else {
            return;
        };
        let mut store = PgStore::open(&PgUrl::parse(&db.url).unwrap()).unwrap();
        store.register("a").unwrap();
        let now = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";
        // (id, priority, waited in minutes) → effective with every 10m,
        // cap 90: 1 → 56, 2 → 55, 3 → 95 (above the cap, kept), 4 → 90.
        for (id, priority, waited) in [(1, 50, 60), (2, 55, 0), (3, 95, 0), (4, 10, 6000)] {
            db.execute(&format!(
                "INSERT INTO dag_runs (id, dag, spec_hash, state, trigger, created_at, priority)
                 VALUES ({id}, 'd', 'h', 'active', 'test', {now} - {waited} * 60000, {priority})"
            ))
            .unwrap();
        }
        let every = 600_000i64;
        let mut order = Vec::new();
        for _ in 0..4 {
            let rows = store.as_node(CLAIM, &[&1i64, &90i64, &every]).unwrap();
            order.push(rows[0].get::<_, i64>(0));
        }
        assert_eq!(order, vec![3, 4, 1, 2]);
        assert!(
            store
                .as_node(CLAIM, &[&1i64, &90i64, &every])
                .unwrap()
                .is_empty()
        );
    }
}
