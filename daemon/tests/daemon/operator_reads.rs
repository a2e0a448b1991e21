//! What the operator reads, against the real axd (docs/operations.md,
//! "Hostile local users" and "The audit trail"): every request that
//! changes state leaves an event naming who asked, and text from job
//! files or clients cannot forge a line of axd's log.

use crate::support::*;
use ax_protocol::api::EventView;
use ax_protocol::request::Events;
use serde_json::json;

const SLOW: &str = "[[job]]\nid = \"slow\"\ncommand = \"sleep 1000\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_state_changing_request_records_an_event_with_its_actor() {
    let d = Daemon::start(&[("etl.toml", SLOW)]);
    let mut c = ax_protocol::client::Client::connect(&d.socket, "audit-test")
        .await
        .unwrap();
    let actor = "via audit-test";
    c.call("pause", json!({"dag": "etl"})).await.unwrap();
    c.call("resume", json!({"dag": "etl"})).await.unwrap();
    c.call("pause", json!({"all": true})).await.unwrap();
    c.call("resume", json!({"all": true})).await.unwrap();
    c.call("reload", json!({})).await.unwrap();
    let triggered = trigger(&mut c, "etl").await[0];
    c.call("cancel", json!({"id": triggered})).await.unwrap();
    wait_state(&mut c, triggered, "cancelled", 30).await;
    c.call("retry", json!({"id": triggered})).await.unwrap();
    let submitted = submit(&mut c, json!({"command": "sleep 1000"})).await[0];
    let events: Vec<EventView> = c
        .request(Events {
            limit: Some(10_000),
            ..Events::default()
        })
        .await
        .unwrap();
    let by_us = |what: &dyn Fn(&EventView) -> bool| {
        events
            .iter()
            .any(|e| what(e) && e.actor.contains(actor) && e.actor.contains(" (uid "))
    };
    for text in ["DAG etl paused", "DAG etl resumed"] {
        let n = events
            .iter()
            .filter(|e| e.reason == text && e.actor.contains(actor))
            .count();
        // Once by name, once by --all.
        assert_eq!(n, 2, "{text:?} in {events:#?}");
    }
    assert!(
        by_us(&|e| e.run.is_none()
            && e.dag_run == 0
            && e.reason.starts_with("reloaded: 1 DAGs, 0 with errors")),
        "reload: {events:#?}"
    );
    for (run, to) in [(triggered, "waiting"), (submitted, "waiting")] {
        assert!(
            by_us(&|e| e.run == Some(run) && e.to.map(|s| s.as_str()) == Some(to)),
            "run {run} → {to} by {actor}: {events:#?}"
        );
    }
    assert!(by_us(
        &|e| e.run == Some(triggered) && e.reason.starts_with("cancel requested")
    ));
    assert!(by_us(
        &|e| e.run == Some(triggered) && e.reason == "manual retry"
    ));
    // Pausing a paused DAG changes nothing and records nothing.
    c.call("pause", json!({"dag": "etl"})).await.unwrap();
    c.call("pause", json!({"dag": "etl"})).await.unwrap();
    let again: Vec<EventView> = c
        .request(Events {
            limit: Some(10_000),
            ..Events::default()
        })
        .await
        .unwrap();
    let paused = again
        .iter()
        .filter(|e| e.reason == "DAG etl paused")
        .count();
    assert_eq!(paused, 3);
}

/// A line axd's log must never hold at its start: only a value with a raw
/// newline in it could put it there.
const FORGED: &str = "2026-01-01T00:00:00.000000Z ERROR axd: FORGED";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn newlines_in_names_and_job_files_cannot_forge_log_lines() {
    // A job file whose name holds a newline (its DAG name is logged), and
    // one whose error quotes a key holding one.
    let bad_key = format!("\"x\\n{FORGED}\" = 1\n{SLOW}");
    let named = format!("a\n{FORGED}.toml");
    let mut d = Daemon::prepare(BASE_CONFIG, &[(&named, SLOW), ("key.toml", &bad_key)]);
    d.set_log_level("debug");
    d.spawn();
    let mut c = d.client().await;
    // An ad-hoc run named with a newline, if axd takes such a name (its
    // end is logged with the name).
    if let Ok(answer) = c
        .call(
            "submit",
            json!({"command": "true", "name": format!("n\n{FORGED}")}),
        )
        .await
    {
        let id = run_ids(&answer)[0];
        wait_state(&mut c, id, "success", 30).await;
    }
    c.call("reload", json!({})).await.unwrap();
    d.term();
    let log = d.log();
    assert!(log.contains("FORGED"), "the names reached the log: {log}");
    for line in log.lines() {
        assert!(
            !line.starts_with(FORGED),
            "a forged line in axd's log: {line:?}\n{log}"
        );
    }
}
