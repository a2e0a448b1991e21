//! Logs across a cluster (docs/operations.md, "Cluster": `ax` connected to
//! any node sees the whole cluster): the log of an attempt that runs on
//! node B reads the same through node A, whole, by range, by tail, and
//! followed while the job still prints, ending with `eof`; pruning its DAG
//! run deletes the shipped log. Without a server each test says
//! `skipped: …` and passes, unless `AX_REQUIRE_PG=1`.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::*;
use crate::{cluster_config, node_id};
use ax_daemon::store::postgres::{PgStore, PgUrl, ShippedChunk, ShippedDone};
use ax_daemon::store::prune::Prune;
use ax_protocol::client::Client;
use ax_testkit::pg::TestDb;
use serde_json::{Value, json};

/// A job that prints a line, waits for `gate` to exist, then prints a
/// few thousand numbered lines and a last one.
fn printer(gate: &Path) -> String {
    format!(
        "overlap = \"replace\"\ncommand = \"echo first; while [ ! -e {} ]; do sleep 0.05; done; seq 1 3000; echo last\"\n",
        gate.display()
    )
}

/// What the printer's log holds once it has ended.
fn printed() -> String {
    let mut want = String::from("first\n");
    for i in 1..=3000 {
        want.push_str(&format!("{i}\n"));
    }
    want.push_str("last\n");
    want
}

async fn logs(c: &mut Client, params: Value) -> Value {
    c.call("logs", params).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_of_another_node_reads_and_follows_the_same_through_any_node() {
    let _turn = crate::module_turn(module_path!()).await;
    let Some(db) = TestDb::create("pg_logs_follow") else {
        return;
    };
    let gates = tempfile::tempdir().unwrap();
    let gate = gates.path().join("go");
    let config = cluster_config(&db, "500ms");
    let jobs = [("printer.toml", printer(&gate))];
    let jobs: Vec<(&str, &str)> = jobs.iter().map(|(n, j)| (*n, j.as_str())).collect();
    let a = Daemon::start_with(&config, &jobs);
    let b = Daemon::start_with(&config, &jobs);
    let (id_a, id_b) = (node_id(&a), node_id(&b));
    let mut ca = a.client().await;
    let mut cb = b.client().await;

    // A triggered DAG run of a `replace` DAG stays on the node that
    // triggered it: B.
    let run = trigger(&mut cb, "printer").await[0];
    let seen = wait_run(&mut ca, run, 20, |r| {
        r.state.as_str() == "running" && !r.attempts.is_empty()
    })
    .await;
    assert_eq!(seen.attempts[0].node.as_deref(), Some(id_b.as_str()));
    assert_ne!(id_a, id_b);

    // Followed through A while the job waits at its gate: the first line
    // comes, without eof.
    let mut got = String::new();
    let mut offset = 0u64;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !got.contains("first\n") {
        assert!(
            Instant::now() < deadline,
            "the first line never came: {got:?}"
        );
        let chunk = logs(
            &mut ca,
            json!({"run": run, "offset": offset, "follow": true, "wait_ms": 2000}),
        )
        .await;
        assert_eq!(chunk["eof"], false, "{chunk}");
        assert_eq!(chunk["attempt"], 1);
        got.push_str(chunk["data"].as_str().unwrap());
        offset = chunk["offset"].as_u64().unwrap();
    }
    assert_eq!(got, "first\n");
    // Nothing more while the job waits: a follow answers empty, not eof.
    let idle = logs(
        &mut ca,
        json!({"run": run, "offset": offset, "follow": true, "wait_ms": 300}),
    )
    .await;
    assert_eq!(
        (idle["data"].as_str(), idle["eof"].as_bool()),
        (Some(""), Some(false))
    );

    // Let it print the rest: the follow through A reads all of it, then
    // eof once the attempt has ended.
    std::fs::write(&gate, "").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "no eof; got {} bytes", got.len());
        let chunk = logs(
            &mut ca,
            json!({"run": run, "offset": offset, "follow": true, "max": 4096}),
        )
        .await;
        let data = chunk["data"].as_str().unwrap();
        assert!(data.len() <= 4096);
        got.push_str(data);
        offset = chunk["offset"].as_u64().unwrap();
        if chunk["eof"] == true {
            assert_eq!(data, "", "eof comes with no data");
            break;
        }
    }
    let want = printed();
    assert_eq!(got, want);
    assert_eq!(offset, want.len() as u64);
    let on_disk = std::fs::read_to_string(b.path(&format!("state/logs/{run}.1.log"))).unwrap();
    assert_eq!(on_disk, want, "B's own file");
    assert!(
        !a.path(&format!("state/logs/{run}.1.log")).exists(),
        "A has no file of its own: it read the store"
    );
    wait_state(&mut ca, run, "success", 10).await;

    // The same through both nodes: whole, a range, a tail, an attempt
    // that does not exist.
    for c in [&mut ca, &mut cb] {
        let whole = logs(c, json!({"run": run})).await;
        assert_eq!(whole["data"].as_str().unwrap(), want);
        assert_eq!(
            whole["eof"], false,
            "not a follow: eof only once read past the end"
        );
        let end = logs(c, json!({"run": run, "offset": want.len()})).await;
        assert_eq!(
            (end["data"].as_str(), end["eof"].as_bool()),
            (Some(""), Some(true))
        );
        let range = logs(c, json!({"run": run, "offset": 6, "max": 8})).await;
        assert_eq!(range["data"], "1\n2\n3\n4\n");
        assert_eq!(range["offset"], 14);
        let tail = logs(c, json!({"run": run, "tail": 10})).await;
        assert_eq!(tail["data"], "3000\nlast\n");
        let err = c
            .call("logs", json!({"run": run, "attempt": 2}))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("no attempt 2"), "{err}");
    }

    // Retention: pruning the DAG run deletes its shipped log with it.
    let chunks = format!("SELECT count(*) FROM log_chunks WHERE run = {run}");
    assert_ne!(db.query(&chunks).unwrap()[0][0], "0");
    let dag_run = get_run(&mut ca, run).await.dag_run;
    drop((ca, cb));
    drop((a, b));
    // The store's calls wait for their answers: off the test's runtime.
    let url = db.url.clone();
    let pruned = tokio::task::spawn_blocking(move || {
        let mut store = PgStore::open(&PgUrl::parse(&url).unwrap()).unwrap();
        store.delete_dag_runs(&[dag_run], i64::MAX).unwrap()
    })
    .await
    .unwrap();
    assert_eq!(pruned.dag_runs, 1);
    assert_eq!(db.query(&chunks).unwrap()[0][0], "0");
    let done = format!("SELECT count(*) FROM log_done WHERE run = {run}");
    assert_eq!(db.query(&done).unwrap()[0][0], "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capped_log_and_a_silent_one_read_the_same_through_another_node() {
    let _turn = crate::module_turn(module_path!()).await;
    let Some(db) = TestDb::create("pg_logs_cap") else {
        return;
    };
    let config = format!(
        "store = \"{}\"\n{BASE_CONFIG}\n[cluster]\nheartbeat = \"500ms\"\n[logs]\nmax_bytes = 2000\n",
        db.url
    );
    let jobs = [
        // `replace`: their DAG runs stay on the node that triggers them.
        (
            "chatty.toml",
            "overlap = \"replace\"\ncommand = \"yes line | head -n 1000\"\n",
        ),
        ("silent.toml", "overlap = \"replace\"\ncommand = \"true\"\n"),
    ];
    let a = Daemon::start_with(&config, &jobs);
    let b = Daemon::start_with(&config, &jobs);
    let mut ca = a.client().await;
    let mut cb = b.client().await;
    let chatty = trigger(&mut cb, "chatty").await[0];
    let silent = trigger(&mut cb, "silent").await[0];
    for run in [chatty, silent] {
        let r = wait_state(&mut ca, run, "success", 20).await;
        assert_eq!(r.attempts[0].node.as_deref(), Some(node_id(&b).as_str()));
    }

    // A follow through A from the start reads the capped log whole, as B
    // wrote it, then eof.
    let mut got = String::new();
    let mut offset = 0u64;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(Instant::now() < deadline, "no eof; got {got:?}");
        let chunk = logs(
            &mut ca,
            json!({"run": chatty, "offset": offset, "follow": true}),
        )
        .await;
        got.push_str(chunk["data"].as_str().unwrap());
        offset = chunk["offset"].as_u64().unwrap();
        if chunk["eof"] == true {
            break;
        }
    }
    let file = std::fs::read_to_string(b.path(&format!("state/logs/{chatty}.1.log"))).unwrap();
    assert_eq!(got, file);
    assert!(got.starts_with("line\nline\n"), "{got:.40}");
    assert!(
        got.contains("[ax] log reached logs.max_bytes (2000 bytes)") && got.len() < 2300,
        "{got}"
    );

    // A silent attempt has no file; through A its log is empty and
    // complete (eof at once, not after a wait).
    let started = Instant::now();
    let chunk = logs(&mut ca, json!({"run": silent, "follow": true})).await;
    assert_eq!(
        (chunk["data"].as_str(), chunk["eof"].as_bool()),
        (Some(""), Some(true))
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shipped_chunks_read_as_one_range_and_complete_only_at_the_mark() {
    let _turn = crate::module_turn(module_path!()).await;
    let Some(db) = TestDb::create("pg_logs_store") else {
        return;
    };
    // Opening waits for the database: off the test's runtime.
    let url = db.url.clone();
    let store =
        tokio::task::spawn_blocking(move || PgStore::open(&PgUrl::parse(&url).unwrap()).unwrap())
            .await
            .unwrap();
    let logs = store.logs();
    let chunk = |offset: u64, data: &str| ShippedChunk {
        run: 7,
        attempt: 1,
        offset,
        data: data.as_bytes().to_vec(),
    };
    let ship = |chunks: Vec<ShippedChunk>, done: Vec<ShippedDone>| {
        let logs = logs.clone();
        async move {
            tokio::task::spawn_blocking(move || logs.ship(chunks, &done))
                .await
                .unwrap()
                .unwrap()
        }
    };
    ship(vec![chunk(0, "hello"), chunk(5, " world")], vec![]).await;
    let r = logs.read(7, 1, 3, 4).await.unwrap();
    assert_eq!(
        (r.data.as_slice(), r.next, r.done),
        (&b"lo w"[..], 7, false)
    );
    // A batch shipped twice (its commit's answer lost) changes nothing.
    ship(vec![chunk(5, " world")], vec![]).await;
    // A gap (a chunk whose predecessor is missing) is never read past.
    ship(vec![chunk(20, "later")], vec![]).await;
    let r = logs.read(7, 1, 0, 100).await.unwrap();
    assert_eq!(
        (r.data.as_slice(), r.next, r.done),
        (&b"hello world"[..], 11, false)
    );
    assert_eq!(logs.len(7, 1).await.unwrap(), 25);

    // Complete once marked, and only at its end.
    let done = ShippedDone {
        run: 7,
        attempt: 1,
        bytes: 11,
    };
    ship(vec![], vec![done]).await;
    let r = logs.read(7, 1, 6, 100).await.unwrap();
    assert_eq!((r.data.as_slice(), r.done), (&b"world"[..], true));
    let r = logs.read(7, 1, 2, 3).await.unwrap();
    assert_eq!((r.data.as_slice(), r.done), (&b"llo"[..], false));
    let r = logs.read(7, 1, 11, 100).await.unwrap();
    assert!(r.data.is_empty() && r.done);
    // Another attempt of the same run is its own log.
    let r = logs.read(7, 2, 0, 100).await.unwrap();
    assert!(r.data.is_empty() && !r.done && r.finished_at.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_restarted_in_its_grace_takes_its_job_over_and_ships_the_rest_of_its_log() {
    let _turn = crate::module_turn(module_path!()).await;
    let Some(db) = TestDb::create("pg_logs_restart") else {
        return;
    };
    // A long heartbeat: B comes back well within its grace and takes its
    // own DAG run back.
    let config = cluster_config(&db, "5s");
    // `replace`: the DAG run stays on the node that triggers it.
    let jobs = [(
        "sleeper.toml",
        "overlap = \"replace\"\ncommand = \"echo before; sleep 60\"\n",
    )];
    let a = Daemon::start_with(&config, &jobs);
    let mut b = Daemon::start_with(&config, &jobs);
    let mut ca = a.client().await;
    let run = trigger(&mut b.client().await, "sleeper").await[0];
    let mut offset = 0u64;
    let deadline = Instant::now() + Duration::from_secs(20);
    while offset < 7 {
        assert!(Instant::now() < deadline, "\"before\" never came through A");
        let chunk = logs(
            &mut ca,
            json!({"run": run, "offset": offset, "follow": true, "wait_ms": 1000}),
        )
        .await;
        offset = chunk["offset"].as_u64().unwrap();
    }

    // B dies; its job goes on. Output that B never shipped (appended here
    // while B is down) is shipped when B comes back and takes the job over.
    b.kill9();
    let file = b.path(&format!("state/logs/{run}.1.log"));
    let mut text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text, "before\n");
    text.push_str("written while down\n");
    std::fs::write(&file, &text).unwrap();
    b.spawn();

    let mut got = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got != "written while down\n" {
        assert!(
            Instant::now() < deadline,
            "not shipped within 10 s; got {got:?}"
        );
        let chunk = logs(
            &mut ca,
            json!({"run": run, "attempt": 1, "offset": offset, "follow": true, "wait_ms": 1000}),
        )
        .await;
        got.push_str(chunk["data"].as_str().unwrap());
        offset = chunk["offset"].as_u64().unwrap();
    }
    // B took its running attempt over: one attempt, still running; a
    // cancel on B (the run's node) ends it, and the log ends with it.
    let r = get_run(&mut ca, run).await;
    assert_eq!(r.attempts.len(), 1, "{r:#?}");
    assert!(r.attempts[0].outcome.is_none(), "{r:#?}");
    b.client()
        .await
        .call("cancel", json!({"id": run}))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(Instant::now() < deadline, "no eof within 20 s");
        let chunk = logs(
            &mut ca,
            json!({"run": run, "attempt": 1, "offset": offset, "follow": true, "wait_ms": 1000}),
        )
        .await;
        offset = chunk["offset"].as_u64().unwrap();
        if chunk["eof"] == true {
            break;
        }
    }
    let r = wait_run(&mut ca, run, 20, |r| r.attempts[0].outcome.is_some()).await;
    assert_eq!(
        r.attempts[0].outcome.map(|o| o.to_string()).as_deref(),
        Some("cancelled")
    );
}
