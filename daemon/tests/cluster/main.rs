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

/// pg_share's tests (three axd each, with sub-second heartbeats) hold
/// this alone: beside another test's cluster on two cores, nodes starve
/// long enough to be declared dead or to learn another node's ends late.
/// Every other test of this binary holds it shared.
pub static CLUSTERS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// The config of a cluster node on `db`'s database, beating every `beat`.
pub fn cluster_config(db: &ax_testkit::pg::TestDb, beat: &str) -> String {
    format!(
        "store = \"{}\"\n{BASE_CONFIG}\n[cluster]\nheartbeat = \"{beat}\"\n",
        db.url
    )
}

/// A node's id, as axd keeps it in its state dir.
pub fn node_id(d: &Daemon) -> String {
    std::fs::read_to_string(d.path("state/node-id"))
        .unwrap()
        .trim()
        .to_string()
}

/// Polls `sql` (one number) until `done` holds; returns the last value.
pub fn wait_count(
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
