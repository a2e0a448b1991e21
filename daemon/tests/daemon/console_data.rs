//! What the console's DAGs and pools views read from a real axd: when a
//! DAG's last DAG run started or ended, and each pool's queue.

use std::time::{Duration, Instant};

use crate::support::*;
use ax_protocol::api::{DagRunViewState, DagView, StatusView};
use ax_protocol::client::Client;
use serde_json::{Value, json};

async fn dag(c: &mut Client, name: &str) -> DagView {
    serde_json::from_value(c.call("get_dag", json!({ "name": name })).await.unwrap()).unwrap()
}

async fn wait_dag(c: &mut Client, name: &str, pred: impl Fn(&DagView) -> bool) -> DagView {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let d = dag(c, name).await;
        if pred(&d) {
            return d;
        }
        assert!(Instant::now() < deadline, "condition not reached: {d:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dags_say_when_they_last_ran_and_pools_count_their_queue() {
    let d = Daemon::start_with(
        "max_concurrency = 8\n[pools.default]\nslots = 8\n[pools.one]\nslots = 1\n",
        &[
            ("quick.toml", "command = \"true\"\n"),
            ("slow.toml", "command = \"sleep 30\"\n"),
        ],
    );
    let mut c = d.client().await;
    // Never ran: no state, no time.
    let never = dag(&mut c, "quick").await;
    assert_eq!((never.last_run_state, never.last_run_at), (None, None));
    // Ended: when it ended.
    let before = chrono::Utc::now();
    trigger(&mut c, "quick").await;
    let ended = wait_dag(&mut c, "quick", |d| {
        d.last_run_state == Some(DagRunViewState::Success)
    })
    .await;
    let at = ended.last_run_at.and_then(|t| t.to_datetime()).unwrap();
    assert!(
        at >= before - chrono::Duration::milliseconds(5),
        "{at} {before}"
    );
    assert!(at <= chrono::Utc::now());
    // Active: when it started.
    trigger(&mut c, "slow").await;
    let active = wait_dag(&mut c, "slow", |d| {
        d.last_run_state == Some(DagRunViewState::Active)
    })
    .await;
    assert!(active.last_run_at.is_some(), "{active:#?}");
    // A pool of one slot with three runs: one runs, two queue.
    for _ in 0..3 {
        submit(&mut c, json!({"command": "sleep 30", "pool": "one"})).await;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s: StatusView =
            serde_json::from_value(c.call("status", Value::Null).await.unwrap()).unwrap();
        let one = s.pools.iter().find(|p| p.name == "one").unwrap().clone();
        if (one.running, one.queued) == (1, Some(2)) {
            break;
        }
        assert!(Instant::now() < deadline, "{one:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
