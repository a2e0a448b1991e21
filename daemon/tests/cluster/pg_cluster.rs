//! The node registry (docs/operations.md, "Cluster"): two real axd on one
//! PostgreSQL database see each other in `status`; one killed with SIGKILL
//! is shown dead once its heartbeat is older than 1.5 × the interval, comes
//! back alive under the same id when restarted, and leaves the registry on
//! a clean stop; each node's running attempts are counted. Without a server
//! the test says `skipped: …` and passes, unless `AX_REQUIRE_PG=1`.

use std::time::{Duration, Instant};

use crate::cluster_config;
use crate::support::*;
use ax_protocol::api::{NodeView, StatusView};
use ax_protocol::client::Client;
use ax_testkit::pg::TestDb;
use serde_json::json;

async fn status(c: &mut Client) -> StatusView {
    serde_json::from_value(c.call("status", json!({})).await.unwrap()).unwrap()
}

/// Polls `c`'s `status` until its nodes satisfy `pred`; returns them.
async fn wait_nodes(
    c: &mut Client,
    what: &str,
    pred: impl Fn(&[NodeView]) -> bool,
) -> Vec<NodeView> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let nodes = status(c).await.cluster.map(|c| c.nodes).unwrap_or_default();
        if pred(&nodes) {
            return nodes;
        }
        assert!(Instant::now() < deadline, "never {what}: {nodes:#?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn node<'a>(nodes: &'a [NodeView], id: &str) -> Option<&'a NodeView> {
    nodes.iter().find(|n| n.id == id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_see_each_other_and_a_killed_one_is_shown_dead() {
    let _turn = crate::module_turn(module_path!()).await;
    let Some(db) = TestDb::create("pg_cluster_nodes") else {
        return;
    };
    let config = cluster_config(&db, "200ms");
    let a = Daemon::start_with(&config, &[]);
    let mut b = Daemon::start_with(&config, &[]);
    let id = |d: &Daemon| {
        std::fs::read_to_string(d.path("state/node-id"))
            .unwrap()
            .trim()
            .to_string()
    };
    let (id_a, id_b) = (id(&a), id(&b));
    assert_ne!(id_a, id_b);
    let mut ca = a.client().await;
    let mut cb = b.client().await;
    let both_alive = |n: &[NodeView]| n.len() == 2 && n.iter().all(|n| n.alive);
    let seen_by_a = wait_nodes(&mut ca, "both alive, seen by A", both_alive).await;
    let seen_by_b = wait_nodes(&mut cb, "both alive, seen by B", both_alive).await;
    assert!(node(&seen_by_a, &id_a).unwrap().this);
    assert!(!node(&seen_by_a, &id_b).unwrap().this);
    assert!(node(&seen_by_b, &id_b).unwrap().this);
    let nb = node(&seen_by_a, &id_b).unwrap();
    assert_eq!((nb.slots, nb.heartbeat_ms), (8, 200));
    assert_eq!(nb.version, env!("CARGO_PKG_VERSION"));
    assert!(nb.last_beat >= nb.started_at);
    assert!(
        !b.log().contains("share no work") && !b.log().contains("do not share work"),
        "{}",
        b.log()
    );

    drop(cb);
    b.kill9();
    let nodes = wait_nodes(&mut ca, "B dead", |n| {
        node(n, &id_b).is_some_and(|b| !b.alive)
    })
    .await;
    let dead = node(&nodes, &id_b).unwrap();
    assert!(dead.beat_age_ms > 300, "{dead:?}");
    assert!(node(&nodes, &id_a).unwrap().alive, "A beats on");

    // Restarted on its state dir: the same id, alive again.
    b.spawn();
    wait_nodes(&mut ca, "B alive again", |n| n.len() == 2 && both_alive(n)).await;
    // A clean stop leaves the registry.
    assert_eq!(b.term(), Some(0));
    let nodes = wait_nodes(&mut ca, "B gone", |n| n.len() == 1).await;
    assert_eq!(nodes[0].id, id_a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_node_shows_the_attempts_running_on_it() {
    let _turn = crate::module_turn(module_path!()).await;
    let Some(db) = TestDb::create("pg_cluster_running") else {
        return;
    };
    let config = cluster_config(&db, "200ms");
    let a = Daemon::start_with(&config, &[]);
    let b = Daemon::start_with(&config, &[]);
    let mut ca = a.client().await;
    let mut cb = b.client().await;
    let idle = |n: &[NodeView]| n.len() == 2 && n.iter().all(|n| n.alive && n.running == Some(0));
    wait_nodes(&mut cb, "both alive and idle", idle).await;
    let ids = submit(&mut ca, json!({"command": "sleep 3", "name": "busy"})).await;
    let run = wait_run(&mut ca, ids[0], 20, |r| {
        r.state.as_str() == "running" && r.attempts.first().is_some_and(|a| a.node.is_some())
    })
    .await;
    let on = run.attempts[0].node.clone().unwrap();
    // Seen through either node, whichever ran it.
    for c in [&mut ca, &mut cb] {
        wait_nodes(c, "one attempt running on its node", |n| {
            n.len() == 2
                && n.iter()
                    .all(|n| n.running == Some(if n.id == on { 1 } else { 0 }))
        })
        .await;
    }
    wait_state(&mut ca, ids[0], "success", 20).await;
    wait_nodes(&mut ca, "idle again", idle).await;
}

/// `status` through any node counts the whole cluster's unfinished runs
/// and recent failures, whichever node holds them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_counts_the_cluster_s_runs_through_any_node() {
    let _turn = crate::module_turn(module_path!()).await;
    let Some(db) = TestDb::create("pg_cluster_counts") else {
        return;
    };
    let config = cluster_config(&db, "200ms");
    let a = Daemon::start_with(&config, &[]);
    let b = Daemon::start_with(&config, &[]);
    let mut ca = a.client().await;
    let mut cb = b.client().await;
    let mut highest = 0;
    for _ in 0..2 {
        let ids = submit(&mut ca, json!({"command": "exit 3", "name": "bad"})).await;
        highest = highest.max(ids[0]);
        wait_state(&mut ca, ids[0], "failed", 20).await;
    }
    let long = submit(&mut cb, json!({"command": "sleep 30", "name": "long"})).await;
    wait_state(&mut cb, long[0], "running", 20).await;
    for c in [&mut ca, &mut cb] {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let runs = status(c).await.cluster.and_then(|c| c.runs);
            let seen = runs.as_ref().map(|r| {
                (
                    r.unfinished.get(&ax_shared::RunState::Running).copied(),
                    r.failed_last_hour,
                )
            });
            if seen == Some((Some(1), 2)) {
                break;
            }
            assert!(Instant::now() < deadline, "cluster counts: {runs:?}");
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
    // B's heartbeat has read A's runs: B numbers its next ones after them.
    let next = submit(&mut cb, json!({"command": "true", "name": "later"})).await;
    assert!(next[0] > highest, "{} after {highest}", next[0]);
}

/// A subscriber of one node hears of what another node commits: the
/// creation of a DAG run submitted through the other node, and the end
/// of its run wherever it ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscriber_of_one_node_hears_of_another_node_s_events() {
    let _turn = crate::module_turn(module_path!()).await;
    let Some(db) = TestDb::create("pg_cluster_feed") else {
        return;
    };
    let config = cluster_config(&db, "1s");
    let a = Daemon::start_with(&config, &[]);
    let b = Daemon::start_with(&config, &[]);
    let mut sub = a.client().await;
    sub.request(ax_protocol::request::Subscribe).await.unwrap();
    let mut cb = b.client().await;
    let answer = cb
        .call("submit", json!({"command": "true", "name": "far"}))
        .await
        .unwrap();
    let dag_run = answer["dag_run"].as_u64().unwrap();
    let run = run_ids(&answer)[0];
    let (mut created, mut ended) = (false, false);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(created && ended) {
        let left = deadline.saturating_duration_since(Instant::now());
        let note = tokio::time::timeout(left, sub.next_notification())
            .await
            .unwrap_or_else(|_| panic!("heard created: {created}, ended: {ended}"))
            .unwrap();
        if let ax_protocol::Notification::Changed(c) = note {
            for e in c.events {
                created |= e.dag_run == dag_run && e.reason.starts_with("DAG run created");
                ended |= e.run == Some(run) && e.to == Some(ax_shared::RunState::Success);
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_has_no_nodes_and_refuses_a_cluster_table() {
    let _turn = crate::module_turn(module_path!()).await;
    let d = Daemon::start(&[]);
    let mut c = d.client().await;
    let s = status(&mut c).await;
    assert!(s.cluster.is_none());
    assert!(s.config.unwrap().store.is_none());
    let mut bad = Daemon::prepare(
        &format!("{BASE_CONFIG}[cluster]\nheartbeat = \"1s\"\n"),
        &[],
    );
    let err = ax_testkit::Daemon::spawn(&mut bad).unwrap_err().to_string();
    assert!(err.contains("[cluster] needs a shared store"), "{err}");
}
