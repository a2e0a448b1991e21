//! The real axd on PostgreSQL (`store = "postgres://…"`;
//! docs/operations.md, "PostgreSQL"): a DAG with a dependency and a retry,
//! a paused DAG, a run cut by SIGTERM and a per-second cron DAG, then a
//! restart that must find all of it in the database. Without a server the
//! test says `skipped: …` and passes, unless `AX_REQUIRE_PG=1`.

use std::time::{Duration, Instant};

use crate::support::*;
use ax_testkit::pg::TestDb;
use chrono::{DateTime, Utc};
use serde_json::json;

const ETL: &str = r#"
[[job]]
id = "fetch"
command = "test $AX_ATTEMPT -ge 2"
retries = 1
backoff = { kind = "none" }
[[job]]
id = "load"
command = "echo loaded"
deps = ["fetch"]
"#;

/// Every second; missed slots all run, one after the other.
const TICK: &str = r#"
schedule = "* * * * * *"
catchup = "all"
overlap = "queue"
[[job]]
id = "t"
command = "true"
"#;

const HELD: &str = r#"
[[job]]
id = "h"
command = "true"
"#;

fn slot_label(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .unwrap()
        .format("cron slot %Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Polls `sql` (one integer) until `pred` holds; returns the value.
fn wait_value(db: &TestDb, sql: &str, secs: u64, pred: impl Fn(i64) -> bool) -> i64 {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let value = db
            .query(sql)
            .unwrap()
            .first()
            .and_then(|r| r[0].parse().ok());
        if let Some(v) = value
            && pred(v)
        {
            return v;
        }
        assert!(Instant::now() < deadline, "{sql}: last {value:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn triggers(db: &TestDb, dag: &str) -> Vec<String> {
    db.query(&format!(
        "SELECT trigger FROM dag_runs WHERE dag = '{dag}' ORDER BY id"
    ))
    .unwrap()
    .into_iter()
    .map(|r| r[0].clone())
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn axd_on_postgres_restarts_from_what_the_database_holds() {
    let _turn = crate::module_turn(module_path!()).await;
    let Some(db) = TestDb::create("pg_e2e_restart") else {
        return;
    };
    let config = format!("store = \"{}\"\n{BASE_CONFIG}", db.url);
    let mut d = Daemon::start_with(
        &config,
        &[("etl.toml", ETL), ("tick.toml", TICK), ("held.toml", HELD)],
    );
    assert!(
        !d.path("state/ax.db").exists(),
        "no SQLite store beside PostgreSQL"
    );
    let mut c = d.client().await;
    let etl = trigger(&mut c, "etl").await;
    let load = wait_state(&mut c, etl[1], "success", 20).await;
    let fetch = get_run(&mut c, etl[0]).await;
    assert_eq!(fetch.state.as_str(), "success");
    assert_eq!(fetch.attempts.len(), 2, "failed once, then retried");
    assert_eq!(fetch.attempts[0].exit_code, Some(1));
    c.call("pause", json!({"dag": "held"})).await.unwrap();
    let slow = submit(&mut c, json!({"command": "sleep 60", "name": "slow"})).await;
    wait_state(&mut c, slow[0], "running", 20).await;
    let mark_sql = "SELECT last_slot FROM cron_marks WHERE dag = 'tick'";
    wait_value(&db, mark_sql, 20, |_| true);
    drop(c);

    assert_eq!(d.term(), Some(0));
    let mark = wait_value(&db, mark_sql, 1, |_| true);
    let max_run = wait_value(&db, "SELECT MAX(id) FROM runs", 1, |_| true);
    assert_eq!(
        triggers(&db, "tick")
            .iter()
            .filter(|t| **t == slot_label(mark))
            .count(),
        1
    );
    // Two slots pass while axd is down.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Utc::now().timestamp_millis() < mark + 2_500 {
        assert!(Instant::now() < deadline, "the clock does not advance");
        std::thread::sleep(Duration::from_millis(20));
    }

    d.spawn();
    let mut c = d.client().await;
    // Runs, attempts and DAG runs come back from the database.
    let again = get_run(&mut c, etl[0]).await;
    assert_eq!(again.attempts, fetch.attempts);
    assert_eq!(again.state, fetch.state);
    assert_eq!(get_run(&mut c, etl[1]).await.finished_at, load.finished_at);
    let dag_run: serde_json::Value = c
        .call("get_dag_run", json!({"id": fetch.dag_run}))
        .await
        .unwrap();
    assert_eq!(dag_run["state"], "finished", "{dag_run}");
    assert_eq!(dag_run["jobs"][1]["state"], "success", "{dag_run}");
    // The run cut by SIGTERM is interrupted and starts again.
    let cut = wait_run(&mut c, slow[0], 20, |r| {
        r.attempts.len() == 2 && r.state.as_str() == "running"
    })
    .await;
    assert_eq!(
        cut.attempts[0].outcome.map(|o| o.as_str()),
        Some("interrupted")
    );
    // The paused DAG is still paused.
    let dags = c.call("list_dags", json!({})).await.unwrap();
    let held = dags
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "held")
        .unwrap();
    assert_eq!(held["paused"], true, "{held}");
    // The cron mark came back: the slots missed while down are caught
    // up, and the marked slot did not fire again.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let t = triggers(&db, "tick");
        // Caught-up slots wait their turn: `cron slot … (queued)`.
        let has = |ms: i64| {
            let label = slot_label(ms);
            t.iter()
                .filter(|x| **x == label || x.starts_with(&format!("{label} ")))
                .count()
        };
        assert_eq!(has(mark), 1, "slot {mark} fired once");
        if has(mark + 1_000) == 1 && has(mark + 2_000) == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "missed slots not caught up: {t:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // New ids follow the stored ones.
    let next = submit(&mut c, json!({"command": "true", "name": "after"})).await;
    assert!(next[0] as i64 > max_run, "{next:?} after run {max_run}");
    drop(c);
    assert_eq!(d.term(), Some(0));
}

/// No server needed: an unreachable store stops axd at start with the
/// URL (password hidden) and the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_store_stops_axd_with_a_clear_error() {
    let _turn = crate::module_turn(module_path!()).await;
    let config = format!("store = \"postgres://ax:hunter2@127.0.0.1:1/ax\"\n{BASE_CONFIG}");
    let mut d = Daemon::prepare(&config, &[]);
    let err = ax_testkit::Daemon::spawn(&mut d).unwrap_err().to_string();
    assert!(
        err.contains("cannot open postgres://ax:***@127.0.0.1:1/ax"),
        "{err}"
    );
    assert!(err.contains("Connection refused"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
}

/// The server drops axd's connections (as a restart of PostgreSQL or a
/// network cut does): the pool replaces them and what happens meanwhile
/// is still written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_connections_are_replaced_and_nothing_is_lost() {
    let _turn = crate::module_turn(module_path!()).await;
    let Some(db) = TestDb::create("pg_e2e_reconnect") else {
        return;
    };
    let config = format!("store = \"{}\"\n{BASE_CONFIG}", db.url);
    let d = Daemon::start_with(&config, &[]);
    let mut c = d.client().await;
    let ids = submit(&mut c, json!({"command": "sleep 0.5", "name": "through"})).await;
    wait_state(&mut c, ids[0], "running", 20).await;
    let killed = db
        .query(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE datname = current_database() AND application_name = 'axd'",
        )
        .unwrap();
    assert_ne!(killed[0][0], "0", "axd's connections were there to cut");
    wait_state(&mut c, ids[0], "success", 20).await;
    let state = format!("SELECT state FROM runs WHERE id = {}", ids[0]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while db.query(&state).unwrap()[0][0] != "success" {
        assert!(
            Instant::now() < deadline,
            "the success never reached the database"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Later writes go through as well.
    let more = submit(&mut c, json!({"command": "true", "name": "after"})).await;
    wait_state(&mut c, more[0], "success", 20).await;
}
