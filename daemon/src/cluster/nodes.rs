//! The node registry (docs/operations.md, "Cluster"): on a PostgreSQL
//! store every axd renews a lease in its row of `nodes` from a thread of
//! its own (never the scheduler's: a slow database must not delay a
//! step), at a fixed rate, and reads every node back with the same
//! transaction. `status` shows that snapshot, aged by the time since it
//! was taken, so the scheduler does no database I/O for it; a node is
//! alive while its lease (on the database's clock) lasts.
//!
//! Self-fencing: a guard thread watches the time since the last renewal
//! that succeeded was sent, on the boot-time clock (which counts a
//! suspend, as the database's clock does). One heartbeat before the lease
//! could end for the others, it kills every attempt of this node and
//! exits: no other node may take those runs before then.

use std::collections::HashMap;
use std::path::Path;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use ax_protocol::api::{ClusterRuns, DagVersions, NodeVersion, NodeView};
use ax_shared::time::Timestamp;

use crate::bus::fault::Fault;
use crate::runtime::fencing::{FENCED_EXIT, fence_self, fenced};
use crate::store::StoreError;
use crate::store::postgres::{DagVersionRow, NodeInfo, NodeRow, PgStore};

/// The last snapshot of `nodes`, shared by the heartbeat thread (writer)
/// and the scheduler (`status`).
#[derive(Clone, Default)]
pub struct Registry {
    inner: Arc<Mutex<Option<Snapshot>>>,
    me: Arc<str>,
}

struct Snapshot {
    taken: Instant,
    rows: Vec<NodeRow>,
    pool_running: Vec<(String, u32)>,
    versions: Arc<ByDag>,
    /// Attempts running per node (absent: none).
    node_running: HashMap<String, u32>,
    runs: ClusterRuns,
}

/// What a beat read besides the node rows.
#[derive(Default)]
struct Published {
    pool_running: Vec<(String, u32)>,
    dag_versions: Vec<DagVersionRow>,
    node_running: Vec<(String, u32)>,
    runs: ClusterRuns,
}

/// DAG → each version loaded and the nodes (by id, sorted) that loaded it.
type ByDag = HashMap<String, Vec<(String, Vec<String>)>>;

/// The DAG versions of the other alive nodes, as of the last beat: what
/// the `dags` answer compares this node's versions with.
pub struct Versions {
    by_dag: Arc<ByDag>,
    /// The other nodes alive now, by id.
    others: Vec<String>,
}

impl Versions {
    /// How the other alive nodes' versions of `dag` compare with this
    /// node's, `mine`.
    pub fn of(&self, dag: &str, mine: Option<&str>) -> DagVersions {
        let held = self.by_dag.get(dag);
        let mut out = DagVersions {
            hash: mine.map(String::from),
            agree: 1,
            differ: Vec::new(),
        };
        for node in &self.others {
            let theirs = held
                .and_then(|v| v.iter().find(|(_, nodes)| nodes.contains(node)))
                .map(|(hash, _)| hash.as_str());
            if theirs == mine {
                out.agree += 1;
            } else {
                out.differ.push(NodeVersion {
                    node: node.clone(),
                    hash: theirs.map(String::from),
                });
            }
        }
        out
    }
}

impl Registry {
    pub fn new(me: &str) -> Registry {
        Registry {
            inner: Arc::default(),
            me: Arc::from(me),
        }
    }

    fn publish(&self, rows: Vec<NodeRow>, beat: Published) {
        self.publish_taken(rows, beat, Instant::now());
    }

    fn publish_taken(&self, rows: Vec<NodeRow>, beat: Published, taken: Instant) {
        let Published {
            pool_running,
            dag_versions,
            node_running,
            runs,
        } = beat;
        let mut versions = ByDag::new();
        for v in dag_versions {
            versions.entry(v.dag).or_default().push((v.hash, v.nodes));
        }
        *self.inner.lock().unwrap_or_else(|e| e.into_inner()) = Some(Snapshot {
            taken,
            rows,
            pool_running,
            versions: Arc::new(versions),
            node_running: node_running.into_iter().collect(),
            runs,
        });
    }

    /// The cluster's unfinished runs and recent failures, as of the last
    /// beat; `None` before the first beat succeeded.
    pub fn runs(&self) -> Option<ClusterRuns> {
        let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().map(|s| s.runs.clone())
    }

    /// The other alive nodes' DAG versions; `None` before the first beat.
    /// A dead node's versions are left out (its rows go when it is
    /// declared dead).
    pub fn versions(&self) -> Option<Versions> {
        let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let snapshot = guard.as_ref()?;
        let others = snapshot
            .rows
            .iter()
            .filter(|r| *r.id != *self.me && alive(r, snapshot.taken.elapsed()))
            .map(|r| r.id.clone())
            .collect();
        Some(Versions {
            by_dag: snapshot.versions.clone(),
            others,
        })
    }

    /// Runs running in `pool` on every node, as of the last beat.
    pub fn pool_running(&self, pool: &str) -> Option<u32> {
        let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let snapshot = guard.as_ref()?;
        Some(
            snapshot
                .pool_running
                .iter()
                .find(|(p, _)| p == pool)
                .map_or(0, |(_, n)| *n),
        )
    }

    /// The nodes as of the last beat, aged to now; `None` before the
    /// first beat succeeded.
    pub fn view(&self) -> Option<Vec<NodeView>> {
        let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let snapshot = guard.as_ref()?;
        let since = snapshot.taken.elapsed().as_millis() as u64;
        Some(
            snapshot
                .rows
                .iter()
                .map(|r| {
                    let age = r.age_ms.saturating_add(since);
                    NodeView {
                        id: r.id.clone(),
                        host: r.host.clone(),
                        version: r.version.clone(),
                        slots: r.slots,
                        heartbeat_ms: r.heartbeat_ms,
                        started_at: Timestamp::from_millis(r.started_at),
                        last_beat: Timestamp::from_millis(r.last_beat),
                        beat_age_ms: age,
                        alive: alive(r, snapshot.taken.elapsed()),
                        this: *r.id == *self.me,
                        running: Some(snapshot.node_running.get(&r.id).copied().unwrap_or(0)),
                    }
                })
                .collect(),
        )
    }
}

/// Alive while what was left of its lease at the read outlasts the time
/// since the read: a healthy node's snapshot is at most a heartbeat old
/// and a lease several, so live nodes stay alive between reads, while a
/// node whose own reads stall sees the leases it last read run out.
fn alive(row: &NodeRow, since_read: Duration) -> bool {
    row.lease_left_ms > since_read.as_millis() as i64
}

/// The boot-time clock (`CLOCK_BOOTTIME`): monotonic, and it goes on
/// through a suspend of the machine, as the database's clock does.
fn boot_clock() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill; the clock id
    // is a constant Linux has had since 2.6.39.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if rc != 0 {
        // Not expected on Linux; the monotonic clock is the next best.
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        return START.get_or_init(Instant::now).elapsed();
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// When the last renewal that succeeded was sent (boot clock), shared by
/// the heartbeat thread and the guard.
struct LeaseClock {
    /// The send time of the last renewal that succeeded; `None` once the
    /// node stops beating at shutdown (every attempt has ended by then).
    renewed: Mutex<Option<Duration>>,
    moved: Condvar,
}

impl LeaseClock {
    fn renewed(&self, sent: Duration) {
        let mut r = self.renewed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = r.as_mut() {
            *r = (*r).max(sent);
        }
        self.moved.notify_all();
    }

    fn disarm(&self) {
        *self.renewed.lock().unwrap_or_else(|e| e.into_inner()) = None;
        self.moved.notify_all();
    }
}

/// How long after the send of its last renewal that succeeded a node
/// stops its attempts: one heartbeat before the lease can end on the
/// database's clock (which started it no earlier than the send), the
/// margin for the kill and for the clocks' rates to differ.
pub(crate) fn fence_after(heartbeat: Duration, lease: Duration) -> Duration {
    lease.saturating_sub(heartbeat)
}

/// The guard's body: sleeps until `fence_after` past the last renewal and
/// fences this node unless a renewal moved that point meanwhile; ends
/// when disarmed.
fn guard(clock: &LeaseClock, id: &str, heartbeat: Duration, lease: Duration) {
    let after = fence_after(heartbeat, lease);
    let mut renewed = clock.renewed.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let Some(last) = *renewed else {
            return;
        };
        let now = boot_clock();
        let deadline = last + after;
        if now >= deadline {
            drop(renewed);
            fence_self(id, now.saturating_sub(last), lease);
        }
        renewed = clock
            .moved
            .wait_timeout(renewed, deadline - now)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// This node's id: kept in `state_dir/node-id`, made once as
/// `HOST-RANDOM`. One axd per state dir (the lock), so ids are unique
/// among live nodes and stable across restarts.
pub(crate) fn node_id(state_dir: &Path, host: &str) -> std::io::Result<String> {
    let path = state_dir.join("node-id");
    if let Ok(text) = std::fs::read_to_string(&path)
        && !text.trim().is_empty()
    {
        return Ok(text.trim().to_string());
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let random = nanos ^ (u64::from(std::process::id()) << 40);
    let id = format!("{host}-{:08x}", random as u32 ^ (random >> 32) as u32);
    std::fs::write(&path, format!("{id}\n"))?;
    Ok(id)
}

/// The machine's name (`/proc/sys/kernel/hostname`), `localhost` if unknown.
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// What the heartbeat thread needs besides its store and registry.
pub(crate) struct Beating {
    pub me: NodeInfo,
    pub lease: Duration,
    /// When the renewal axd made at start-up, after loading and before
    /// its scheduler starts any attempt, was sent (`now`): the guard
    /// counts from there until the thread's first beat.
    pub registered: Duration,
    pub fault: Fault,
    pub scheduler: std::sync::mpsc::Sender<crate::bus::Msg>,
    /// The paused DAGs as loaded.
    pub loaded_paused: Vec<String>,
}

/// The boot clock now, for `Beating::registered`.
pub(crate) fn now() -> Duration {
    boot_clock()
}

/// The heartbeat thread's body: beats at a fixed rate (each beat is due
/// one heartbeat after the last was due, however long it took; a late one
/// goes at once) until `stop` is dropped, then hands this node's
/// unfinished DAG runs back and removes its row. After each beat that
/// renewed the lease it declares dead the nodes whose lease ended
/// (`PgStore::release_dead`). A failed beat is logged once per outage and
/// tried again at the next tick; a fenced node exits, and so does one
/// whose lease cannot be renewed in time (the guard, `fence_self`).
///
/// A DAG paused or resumed through another node is paused or resumed
/// here too: each beat reads the stored set, and what changed since the
/// last beat goes to the scheduler (`Msg::Paused`).
pub(crate) fn run(mut store: PgStore, beating: Beating, registry: Registry, stop: Receiver<()>) {
    let Beating {
        me,
        lease,
        registered,
        fault,
        scheduler,
        loaded_paused,
    } = beating;
    let interval = Duration::from_millis(me.heartbeat_ms);
    let clock = Arc::new(LeaseClock {
        renewed: Mutex::new(Some(registered)),
        moved: Condvar::new(),
    });
    {
        let (clock, id) = (clock.clone(), me.id.clone());
        let started = std::thread::Builder::new()
            .name("ax-lease".into())
            .spawn(move || guard(&clock, &id, interval, lease));
        if let Err(e) = started {
            // Without the guard this node could run on past its lease.
            tracing::error!("cannot start the lease guard thread ({e}): exiting");
            std::process::exit(FENCED_EXIT);
        }
    }
    fault.beating(Instant::now());
    fault.beat_done(true);
    let mut first = true;
    let mut failing = false;
    // Compared with from the first beat on: a pause or resume another node
    // committed between this node's load and its first beat is followed
    // too.
    let mut paused = loaded_paused;
    // The highest ids stored, as last told to the scheduler: its new ids
    // follow them, so ids stay roughly in creation order across nodes.
    let mut highest_ids = (0, 0);
    let mut due = Instant::now();
    loop {
        let sent = boot_clock();
        fault.beating(Instant::now());
        let result = store.beat(&me, first);
        fault.beat_done(result.is_ok());
        match result {
            Ok(beat) => {
                clock.renewed(sent);
                let rows = beat.nodes;
                // Judging costs round trips; it is only needed once some
                // other node's lease has ended.
                let judge = rows.iter().any(|r| r.id != me.id && r.lease_left_ms < 0);
                if beat.highest_ids > highest_ids {
                    highest_ids = beat.highest_ids;
                    let _ = scheduler.send(crate::bus::Msg::IdsSeen {
                        run: highest_ids.0,
                        dag_run: highest_ids.1,
                    });
                }
                if paused != beat.paused {
                    let _ = scheduler.send(crate::bus::Msg::Paused {
                        before: std::mem::replace(&mut paused, beat.paused),
                        now: paused.clone(),
                    });
                }
                if failing {
                    tracing::info!("node heartbeat written again");
                }
                first = false;
                failing = false;
                registry.publish(
                    rows,
                    Published {
                        pool_running: beat.pool_running,
                        dag_versions: beat.dag_versions,
                        node_running: beat.node_running,
                        runs: ClusterRuns {
                            unfinished: beat.unfinished.into_iter().collect(),
                            failed_last_hour: beat.failed_last_hour,
                        },
                    },
                );
                match judge.then(|| store.release_dead(interval)) {
                    Some(Ok(dead)) if !dead.is_empty() => tracing::warn!(
                        "node(s) {} declared dead (lease ended): their DAG runs go back to the cluster",
                        dead.join(", ")
                    ),
                    None | Some(Ok(_)) => {}
                    Some(Err(StoreError::Fenced(id))) => fenced(&id),
                    Some(Err(e)) => tracing::warn!("cannot look for dead nodes: {e}"),
                }
            }
            Err(StoreError::Fenced(id)) => fenced(&id),
            Err(e) => {
                if !failing {
                    tracing::warn!("node heartbeat failed: {e}");
                }
                failing = true;
            }
        }
        due += interval;
        let now = Instant::now();
        if due < now {
            due = now;
        }
        match stop.recv_timeout(due - now) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    clock.disarm();
    if let Err(e) = store.leave(&me.id) {
        if let StoreError::Fenced(id) = e {
            fenced(&id);
        }
        tracing::warn!("cannot remove node {} from the registry: {e}", me.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_stops_its_attempts_a_heartbeat_before_its_lease_ends() {
        let s = Duration::from_secs;
        assert_eq!(fence_after(s(5), s(30)), s(25));
        assert_eq!(fence_after(s(1), s(3)), s(2));
    }

    #[test]
    fn the_boot_clock_moves_forward() {
        let a = boot_clock();
        std::thread::sleep(Duration::from_millis(5));
        assert!(boot_clock() >= a + Duration::from_millis(5));
    }

    #[test]
    fn the_node_id_is_made_once_per_state_dir() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let id = node_id(a.path(), "h").unwrap();
        assert!(id.starts_with("h-"), "{id}");
        assert_eq!(node_id(a.path(), "h").unwrap(), id, "stable");
        assert_ne!(node_id(b.path(), "h").unwrap(), id, "another state dir");
    }

    /// A node's row as the beat reads it.
    fn node_row(id: &str, heartbeat_ms: u64, age_ms: u64, lease_left_ms: i64) -> NodeRow {
        NodeRow {
            id: id.into(),
            host: "h".into(),
            version: "v".into(),
            slots: 4,
            heartbeat_ms,
            started_at: 0,
            last_beat: 0,
            age_ms,
            lease_left_ms,
        }
    }

    #[test]
    fn the_view_ages_the_snapshot_and_marks_this_node() {
        let r = Registry::new("me");
        assert!(r.view().is_none());
        let row = |id: &str, age_ms: u64| node_row(id, 1000, age_ms, 1500 - age_ms as i64);
        r.publish(
            vec![row("me", 10), row("other", 1600)],
            Published {
                pool_running: vec![("io".into(), 3)],
                node_running: vec![("other".into(), 2)],
                ..Published::default()
            },
        );
        assert_eq!(r.pool_running("io"), Some(3));
        assert_eq!(r.pool_running("default"), Some(0));
        let v = r.view().unwrap();
        assert!(v[0].this && v[0].alive);
        assert!(!v[1].this && !v[1].alive);
        assert!(v[1].beat_age_ms >= 1600);
        assert_eq!((v[0].running, v[1].running), (Some(0), Some(2)));
    }

    #[test]
    fn a_lease_read_runs_out_as_the_snapshot_ages() {
        let r = Registry::new("me");
        let row = |id: &str, lease_left_ms| node_row(id, 1000, 0, lease_left_ms);
        // Read 900 ms ago: the peer's lease had 1.4 s left (alive still),
        // the other's 0.8 s (ended since, as far as this node knows).
        let taken = Instant::now()
            .checked_sub(Duration::from_millis(900))
            .unwrap();
        r.publish_taken(
            vec![row("me", 5000), row("other", 800), row("peer", 1400)],
            Published::default(),
            taken,
        );
        let v = r.view().unwrap();
        assert!(v[0].alive && !v[1].alive && v[2].alive, "{v:?}");
        assert!(v[2].beat_age_ms >= 900);
        assert_eq!(r.versions().unwrap().others, vec!["peer".to_string()]);
    }

    #[test]
    fn versions_compare_the_alive_nodes_only() {
        let r = Registry::new("a");
        assert!(r.versions().is_none());
        let row = |id: &str, age_ms: u64| node_row(id, 60_000, age_ms, 360_000 - age_ms as i64);
        let version = |dag: &str, hash: &str, nodes: &[&str]| DagVersionRow {
            dag: dag.into(),
            hash: hash.into(),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
        };
        r.publish(
            vec![row("a", 0), row("b", 0), row("c", 0), row("dead", 999_999)],
            Published {
                dag_versions: vec![
                    version("etl", "h1", &["a", "b", "dead"]),
                    version("etl", "h2", &["c"]),
                    version("report", "h3", &["a", "b", "c"]),
                ],
                ..Published::default()
            },
        );
        let v = r.versions().unwrap();
        let etl = v.of("etl", Some("h1"));
        assert_eq!(etl.agree, 2);
        assert_eq!(
            etl.differ,
            vec![NodeVersion {
                node: "c".into(),
                hash: Some("h2".into())
            }]
        );
        assert_eq!(etl.describe(), "c has h2 (this node h1)");
        let report = v.of("report", Some("h3"));
        assert!(report.agrees() && report.agree == 3, "{report:?}");
        assert_eq!(report.summary(), "3 nodes agree");
        let only_here = v.of("new", Some("h4"));
        assert_eq!(only_here.summary(), "DIFFERS");
        assert_eq!(only_here.describe(), "b lacks it; c lacks it");
    }
}
