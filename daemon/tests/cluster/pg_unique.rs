//! `--unique` across the nodes of a cluster (docs/protocol.md, "submit
//! (write)"; docs/operations.md, "Cluster"): submits with one key made at
//! the same instant through different nodes create one DAG run; every other
//! call gets its ids with `deduplicated: true`. Without a server the test
//! says `skipped: …` and passes, unless `AX_REQUIRE_PG=1`.

use std::collections::BTreeSet;

use crate::cluster_config;
use crate::support::*;
use ax_testkit::pg::TestDb;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simultaneous_unique_submits_on_two_nodes_make_one_dag_run() {
    let _turn = crate::module_turn(module_path!()).await;
    let Some(db) = TestDb::create("pg_unique_race") else {
        return;
    };
    let config = cluster_config(&db, "1s");
    let nodes = [
        Daemon::start_with(&config, &[]),
        Daemon::start_with(&config, &[]),
    ];
    const ROUNDS: usize = 8;
    const CALLS_PER_NODE: usize = 6;
    for round in 0..ROUNDS {
        let key = format!("nightly-{round}");
        // Every client connected first, then all released at once.
        let gate = std::sync::Arc::new(tokio::sync::Barrier::new(2 * CALLS_PER_NODE));
        let mut calls = Vec::new();
        for d in &nodes {
            for _ in 0..CALLS_PER_NODE {
                let mut c = d.client().await;
                let gate = gate.clone();
                let key = key.clone();
                calls.push(tokio::spawn(async move {
                    gate.wait().await;
                    c.call(
                        "submit",
                        json!({"command": "sleep 30", "name": "once", "unique": key}),
                    )
                    .await
                    .unwrap()
                }));
            }
        }
        let mut dag_runs = BTreeSet::new();
        let mut fresh = 0;
        for call in calls {
            let answer = call.await.unwrap();
            dag_runs.insert(answer["dag_run"].as_u64().unwrap());
            if !answer["deduplicated"].as_bool().unwrap_or(false) {
                fresh += 1;
            }
        }
        assert_eq!(dag_runs.len(), 1, "round {round}: DAG runs {dag_runs:?}");
        assert_eq!(fresh, 1, "round {round}: exactly one call created it");
        let stored = db
            .query(&format!(
                "SELECT count(*) FROM dag_runs WHERE unique_key = '{key}'"
            ))
            .unwrap();
        assert_eq!(stored[0][0], "1", "round {round}");
    }
}

/// A node that holds a finished DAG run with the key still asks the store:
/// another node's unfinished one deduplicates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_local_holder_does_not_hide_another_node_s_unfinished_one() {
    let _turn = crate::module_turn(module_path!()).await;
    let Some(db) = TestDb::create("pg_unique_finished") else {
        return;
    };
    let config = cluster_config(&db, "1s");
    let a = Daemon::start_with(&config, &[]);
    let b = Daemon::start_with(&config, &[]);
    let mut ca = a.client().await;
    let mut cb = b.client().await;
    let quick = json!({"command": "true", "name": "once", "unique": "k"});
    let first = ca.call("submit", quick.clone()).await.unwrap();
    let first_run = first["runs"][0].as_u64().unwrap();
    wait_state(&mut ca, first_run, "success", 20).await;
    let long = json!({"command": "sleep 30", "name": "once", "unique": "k"});
    let second = cb.call("submit", long).await.unwrap();
    assert_eq!(second["deduplicated"], false, "{second}");
    let again = ca.call("submit", quick).await.unwrap();
    assert_eq!(again["deduplicated"], true, "{again}");
    assert_eq!(again["dag_run"], second["dag_run"]);
}
