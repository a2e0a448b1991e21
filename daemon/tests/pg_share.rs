//! Work sharing between real axd nodes on one PostgreSQL database
//! (SPEC §9): submitted DAG runs are offered and claimed so that every run
//! runs exactly once and every node takes part; a node killed with SIGKILL
//! is declared dead and its runs finish elsewhere, as `interrupted`
//! attempts; cron fires each slot once, also across a leader's death.
//! Without a server each test says `skipped: …` and passes, unless
//! `AX_REQUIRE_PG=1`.

mod support;

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use ax_testkit::pg::TestDb;
use serde_json::json;
use support::*;

/// Three nodes on `db`, beating every `beat`, with `jobs` in each one's
/// jobs folder.
fn cluster(db: &TestDb, beat: &str, jobs: &[(&str, &str)]) -> Vec<Daemon> {
    let config = format!(
        "store = \"{}\"\n{BASE_CONFIG}\n[cluster]\nheartbeat = \"{beat}\"\n",
        db.url
    );
    (0..3).map(|_| Daemon::start_with(&config, jobs)).collect()
}

fn node_id(d: &Daemon) -> String {
    std::fs::read_to_string(d.path("state/node-id"))
        .unwrap()
        .trim()
        .to_string()
}

/// Polls `sql` (one number) until `done` holds; returns the last value.
fn wait_count(db: &TestDb, sql: &str, secs: u64, done: impl Fn(u64) -> bool) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let n: u64 = db.query(sql).unwrap()[0][0].parse().unwrap();
        if done(n) {
            return n;
        }
        assert!(Instant::now() < deadline, "{sql}: stuck at {n}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs per node that ran an attempt.
fn attempts_by_node(db: &TestDb) -> BTreeMap<String, u64> {
    db.query("SELECT node, count(*) FROM attempts GROUP BY node")
        .unwrap()
        .into_iter()
        .map(|r| (r[0].clone(), r[1].parse().unwrap()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_run_every_submitted_run_exactly_once() {
    let Some(db) = TestDb::create("pg_share_once") else {
        return;
    };
    let nodes = cluster(&db, "500ms", &[]);
    let ledger = nodes[0].path("ledger");
    let command = format!("echo $AX_RUN_ID >> {}", ledger.display());
    const TOTAL: usize = 5000;
    const CLIENTS_PER_NODE: usize = 4;
    let per_client = TOTAL / (3 * CLIENTS_PER_NODE) + 1;
    let mut tasks = Vec::new();
    let mut left = TOTAL;
    for d in &nodes {
        for _ in 0..CLIENTS_PER_NODE {
            let n = per_client.min(left);
            left -= n;
            let mut c = d.client().await;
            let command = command.clone();
            tasks.push(tokio::spawn(async move {
                let mut ids = Vec::with_capacity(n);
                for _ in 0..n {
                    ids.extend(submit(&mut c, json!({"command": command, "name": "led"})).await);
                }
                ids
            }));
        }
    }
    let mut submitted = Vec::new();
    for t in tasks {
        submitted.extend(t.await.unwrap());
    }
    assert_eq!(submitted.len(), TOTAL);
    let unique: HashSet<u64> = submitted.iter().copied().collect();
    assert_eq!(unique.len(), TOTAL, "ids are unique across nodes");

    wait_count(
        &db,
        "SELECT count(*) FROM runs WHERE state = 'success'",
        120,
        |n| n == TOTAL as u64,
    );
    let text = std::fs::read_to_string(&ledger).unwrap();
    let mut ran: Vec<u64> = text.lines().map(|l| l.trim().parse().unwrap()).collect();
    ran.sort_unstable();
    let mut expected = submitted.clone();
    expected.sort_unstable();
    assert_eq!(ran, expected, "every id ran exactly once");
    let by_node = attempts_by_node(&db);
    assert_eq!(by_node.values().sum::<u64>(), TOTAL as u64, "{by_node:?}");
    for d in &nodes {
        let id = node_id(d);
        assert!(
            by_node.get(&id).is_some_and(|n| *n > 0),
            "node {id} ran nothing: {by_node:?}"
        );
    }
    assert_eq!(
        db.query("SELECT count(*) FROM dag_runs WHERE owner IS NULL")
            .unwrap()[0][0],
        "0",
        "every DAG run was claimed"
    );
}
