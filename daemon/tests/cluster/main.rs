//! Real `axd` on PostgreSQL: one node, and several nodes on one database
//! sharing work, logs, DAG versions and pools, under store faults. One
//! test binary, a module per concern.

use std::time::{Duration, Instant};

use support::{BASE_CONFIG, Daemon};

#[path = "../support/mod.rs"]
mod support;

mod pg_cluster;
mod pg_dags_versions;
mod pg_e2e;
mod pg_faults;
mod pg_logs;
mod pg_rebalance;
mod pg_share;
mod pg_unique;

/// The tests of one module run beside each other, never beside another
/// module's: the concurrency each file had as a binary of its own. Several
/// clusters of axd with sub-second heartbeats on two cores starve each
/// other long enough for nodes to be declared dead or to learn another
/// node's ends late.
pub(crate) async fn module_turn(module: &'static str) -> ModuleTurn {
    loop {
        let notified = TURN_CHANGED.notified();
        {
            let mut turn = TURN.lock().unwrap();
            match &mut *turn {
                Some((m, n)) if *m == module => {
                    *n += 1;
                    return ModuleTurn;
                }
                None => {
                    *turn = Some((module, 1));
                    return ModuleTurn;
                }
                Some(_) => {}
            }
        }
        notified.await;
    }
}

/// Which module's tests run now, and how many of them.
static TURN: std::sync::Mutex<Option<(&'static str, usize)>> = std::sync::Mutex::new(None);
static TURN_CHANGED: tokio::sync::Notify = tokio::sync::Notify::const_new();

/// Held by a test while it runs (`module_turn`).
pub(crate) struct ModuleTurn;

impl Drop for ModuleTurn {
    fn drop(&mut self) {
        let mut turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, n)) = &mut *turn {
            *n -= 1;
            if *n == 0 {
                *turn = None;
                TURN_CHANGED.notify_waiters();
            }
        }
    }
}

/// The config of a cluster node on `db`'s database, beating every `beat`.
pub(crate) fn cluster_config(db: &ax_testkit::pg::TestDb, beat: &str) -> String {
    format!(
        "store = \"{}\"\n{BASE_CONFIG}\n[cluster]\nheartbeat = \"{beat}\"\n",
        db.url
    )
}

/// A node's id, as axd keeps it in its state dir.
pub(crate) fn node_id(d: &Daemon) -> String {
    std::fs::read_to_string(d.path("state/node-id"))
        .unwrap()
        .trim()
        .to_string()
}

/// Polls `sql` (one number) until `done` holds; returns the last value.
pub(crate) fn wait_count(
    db: &ax_testkit::pg::TestDb,
    sql: &str,
    secs: u64,
    done: impl Fn(u64) -> bool,
) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let n: u64 = db.query(sql).unwrap()[0][0].parse().unwrap();
        if done(n) {
            return n;
        }
        assert!(Instant::now() < deadline, "{sql}: stuck at {n}");
        // Not faster: the query counts over a busy cluster's tables.
        std::thread::sleep(Duration::from_millis(100));
    }
}
