//! A pool's slots shared fairly between real axd nodes that all have
//! ready runs of it (docs/operations.md, "Cluster"): a node holding the
//! whole pool while another node wants slots of it gives up its excess as
//! its attempts end, and the pool's total holds throughout. Without a
//! server the test says `skipped: …` and passes, unless `AX_REQUIRE_PG=1`.

use std::time::{Duration, Instant};

use crate::support::*;
use crate::{cluster_config, node_id, wait_count};
use ax_testkit::pg::TestDb;
use serde_json::json;

/// The first start (ms) of an attempt of job `job` on `node`, and the
/// last.
fn starts(db: &TestDb, job: &str, node: &str) -> (i64, i64) {
    let row = db
        .query(&format!(
            "SELECT min(a.started_at), max(a.started_at) FROM attempts a JOIN runs r ON r.id = a.run
             WHERE r.job = '{job}' AND a.node = '{node}'"
        ))
        .unwrap();
    (row[0][0].parse().unwrap(), row[0][1].parse().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_holding_a_pool_shares_it_with_a_node_that_wants_it() {
    let _turn = crate::module_turn(module_path!()).await;
    let Some(db) = TestDb::create("pg_rebalance") else {
        return;
    };
    let config = cluster_config(&db, "500ms");
    // Each job counts the jobs of pool `two` running at once, on either
    // node, by the files present in a shared folder while it runs.
    let a = Daemon::start_with(&config, &[]);
    let dir = a.path("two");
    std::fs::create_dir_all(&dir).unwrap();
    let log = a.path("two.log");
    let command = format!(
        "touch {d}/$AX_RUN_ID; echo $(ls {d} | wc -l) $AX_SLOT >> {l}; sleep 1.2; rm {d}/$AX_RUN_ID",
        d = dir.display(),
        l = log.display()
    );
    let (id_a, pool_slots) = (
        node_id(&a),
        "SELECT count(*) FROM pool_slots WHERE pool = 'two'",
    );
    // Alone, A claims as many DAG runs as it may run (max_concurrency 8)
    // and leases both slots of the pool.
    const FROM_A: u64 = 8;
    let mut ca = a.client().await;
    for _ in 0..FROM_A {
        submit(
            &mut ca,
            json!({"command": command, "name": "from_a", "pool": "two"}),
        )
        .await;
    }
    let owned_by = |node: &str, job: &str| {
        format!(
            "SELECT count(*) FROM dag_runs d JOIN runs r ON r.dag_run = d.id
             WHERE d.owner = '{node}' AND r.job = '{job}'"
        )
    };
    wait_count(&db, &owned_by(&id_a, "from_a"), 20, |n| n == FROM_A);
    wait_count(&db, pool_slots, 20, |n| n == 2);
    let leased_to = |node: &str| {
        format!("SELECT count(*) FROM pool_slots WHERE pool = 'two' AND node = '{node}'")
    };
    wait_count(&db, &leased_to(&id_a), 20, |n| n == 2);

    // B starts with A busy (no room to claim): the DAG runs submitted
    // through B are B's, its ready runs wait for slots of the same pool.
    let b = Daemon::start_with(&config, &[]);
    let id_b = node_id(&b);
    let mut cb = b.client().await;
    const FROM_B: u64 = 4;
    for _ in 0..FROM_B {
        submit(
            &mut cb,
            json!({"command": command, "name": "from_b", "pool": "two"}),
        )
        .await;
    }
    wait_count(&db, &owned_by(&id_b, "from_b"), 20, |n| n >= 1);
    // While both have ready runs, the pool is split one slot each.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let by_node = db
            .query("SELECT node, count(*) FROM pool_slots WHERE pool = 'two' AND node IS NOT NULL GROUP BY node ORDER BY node")
            .unwrap();
        let held = |id: &str| {
            by_node
                .iter()
                .find(|r| r[0] == id)
                .map_or(0, |r| r[1].parse::<u64>().unwrap())
        };
        if held(&id_a) == 1 && held(&id_b) == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never one slot each: {by_node:?}\nA:\n{}\nB:\n{}",
            a.log(),
            b.log()
        );
        std::thread::sleep(Duration::from_millis(25));
    }

    let total = FROM_A + FROM_B;
    wait_count(
        &db,
        "SELECT count(*) FROM runs WHERE state = 'success'",
        60,
        |n| n == total,
    );
    // B started a run of the pool before A's queue had drained.
    let (_, a_last) = starts(&db, "from_a", &id_a);
    let (b_first, _) = starts(&db, "from_b", &id_b);
    assert!(
        b_first < a_last,
        "B first started at {b_first}, after A's last start at {a_last}"
    );
    // The pool's total held on both nodes throughout.
    let text = std::fs::read_to_string(&log).unwrap();
    let samples: Vec<(u32, u32)> = text
        .lines()
        .map(|l| {
            let (n, slot) = l.trim().split_once(' ').unwrap();
            (n.parse().unwrap(), slot.parse().unwrap())
        })
        .collect();
    assert_eq!(samples.len() as u64, total);
    assert!(
        samples.iter().all(|(n, _)| *n <= 2),
        "over 2 at once: {samples:?}"
    );
    assert!(
        samples.iter().all(|(_, s)| *s < 2),
        "AX_SLOT beyond the pool: {samples:?}"
    );
    // With nothing left waiting, no node records a demand.
    wait_count(&db, "SELECT count(*) FROM pool_wants", 20, |n| n == 0);
}
