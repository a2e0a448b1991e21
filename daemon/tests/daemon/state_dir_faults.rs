//! Faults of the state dir under a real axd (docs/operations.md, "Faults
//! and what ax guarantees"): the state dir deleted under a running axd, an
//! empty or missing `ax.db` beside the logs of an earlier store, and a log
//! file that already exists where a new attempt's log goes.

use std::time::{Duration, Instant};

use crate::support::*;
use serde_json::json;

/// The data of attempt 1's log of `run`.
async fn log_of(c: &mut ax_protocol::client::Client, run: u64) -> String {
    let chunk = c.call("logs", json!({"run": run})).await.unwrap();
    chunk["data"].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_database_beside_logs_is_refused_and_says_how_to_start_fresh() {
    let mut d = Daemon::start(&[]);
    let mut c = d.client().await;
    let old = submit(&mut c, json!({"command": "echo output-of-the-old-store"})).await[0];
    wait_state(&mut c, old, "success", 10).await;
    drop(c);
    assert_eq!(d.term(), Some(0));

    // The database is emptied (a failed restore, a bad copy); its logs stay.
    let state = d.path("state");
    std::fs::write(state.join("ax.db"), b"").unwrap();
    for side in ["ax.db-wal", "ax.db-shm"] {
        let _ = std::fs::remove_file(state.join(side));
    }
    let refused = ax_testkit::Daemon::spawn(&mut d);
    let err = refused
        .expect_err("axd started a new store beside old logs")
        .to_string();
    assert!(err.contains("ax.db is empty"), "{err}");
    assert!(
        err.contains("mv "),
        "the error says how to start fresh: {err}"
    );

    // Missing is the same as empty.
    std::fs::remove_file(state.join("ax.db")).unwrap();
    let err = ax_testkit::Daemon::spawn(&mut d)
        .expect_err("started")
        .to_string();
    assert!(err.contains("ax.db is missing"), "{err}");

    // Following the advice starts a fresh store: run ids begin again, and
    // the new run 1 shows only its own output.
    std::fs::rename(state.join("logs"), state.join("logs.old")).unwrap();
    d.spawn();
    let mut c = d.client().await;
    let new = submit(&mut c, json!({"command": "echo fresh"})).await[0];
    assert_eq!(new, old, "a fresh store numbers from the start again");
    wait_state(&mut c, new, "success", 10).await;
    assert_eq!(log_of(&mut c, new).await, "fresh\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_file_left_at_a_new_attempts_path_is_set_aside_not_shown() {
    let mut d = Daemon::start(&[]);
    let mut c = d.client().await;
    let first = submit(&mut c, json!({"command": "true"})).await[0];
    wait_state(&mut c, first, "success", 10).await;
    drop(c);
    assert_eq!(d.term(), Some(0));

    // Logs of some other store's runs with the next ids (logs copied in
    // from elsewhere, a store restored from an older backup).
    let logs = d.path("state/logs");
    for id in first + 1..first + 5 {
        std::fs::write(logs.join(format!("{id}.1.log")), "OLD OUTPUT\n").unwrap();
    }
    d.spawn();
    let mut c = d.client().await;
    let go = d.path("go");
    let cmd = format!(
        "while [ ! -e {} ]; do sleep 0.02; done; echo new",
        go.display()
    );
    let run = submit(&mut c, json!({"command": cmd})).await[0];
    assert!(run > first && run < first + 5, "run {run}");
    wait_state(&mut c, run, "running", 10).await;
    // Before its first byte of output the attempt's log is empty, not the
    // old file.
    let before = log_of(&mut c, run).await;
    assert!(
        !before.contains("OLD"),
        "a new attempt shows an old log: {before:?}"
    );
    std::fs::write(&go, b"").unwrap();
    wait_state(&mut c, run, "success", 10).await;
    assert_eq!(log_of(&mut c, run).await, "new\n");
    // The old file is kept aside, whole.
    let aside: Vec<_> = std::fs::read_dir(&logs)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("{run}.1.log.stale-")))
        .collect();
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(
        std::fs::read_to_string(logs.join(&aside[0])).unwrap(),
        "OLD OUTPUT\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_state_dir_stops_acknowledging_and_axd_exits_non_zero() {
    let config = BASE_CONFIG.replace("shutdown_grace = \"5s\"", "shutdown_grace = \"1s\"");
    let mut d = Daemon::start_with(&config, &[]);
    let mut c = d.client().await;
    let before = submit(&mut c, json!({"command": "echo kept"})).await[0];
    wait_state(&mut c, before, "success", 10).await;

    std::fs::remove_dir_all(d.path("state")).unwrap();
    // The next write is not acknowledged: it went into a deleted file. (The
    // commit of the first run's end may land after the removal and be the
    // one that reveals it: axd is then already stopping.)
    let t = Instant::now();
    let r = c.call("submit", json!({"command": "true"})).await;
    let err = r.expect_err("a submission into a deleted state dir was acknowledged");
    match err.kind() {
        Some("store_error") => {
            assert!(err.to_string().contains("state dir was deleted"), "{err}");
        }
        Some("shutting_down") => {}
        _ => panic!("{err}"),
    }
    drop(c);
    // axd stops by itself, loudly, with exit code 1.
    let bound = Duration::from_secs(1 + 12);
    let status = d
        .wait_exit(bound)
        .unwrap()
        .unwrap_or_else(|| panic!("axd runs on without its state dir:\n{}", d.log()));
    assert!(t.elapsed() < bound, "{:?}", t.elapsed());
    assert_eq!(status.code(), Some(1), "{}", d.log());
    assert!(
        d.log().contains("ERROR"),
        "no error in the log:\n{}",
        d.log()
    );
    assert!(
        d.log().contains("axd.lock has no links left"),
        "{}",
        d.log()
    );

    // A new axd on the same path starts cleanly on a new state dir.
    d.spawn();
    let mut c = d.client().await;
    let fresh = submit(&mut c, json!({"command": "echo fresh"})).await[0];
    wait_state(&mut c, fresh, "success", 10).await;
    drop(c);
    assert_eq!(d.term(), Some(0));
}
