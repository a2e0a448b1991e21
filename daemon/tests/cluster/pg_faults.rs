//! Store faults in a cluster (docs/operations.md, "Faults and what ax
//! guarantees"): real axd processes on one PostgreSQL database, each
//! node's store URL through a TCP fault proxy of the test's own.
//!
//! * a shared stall or cut of 20 s, shorter than the lease, fences no
//!   node, and no run runs twice;
//! * 100 ms of added latency each way with `heartbeat = "2s"` fences
//!   nobody;
//! * a node whose store connection is black-holed kills its attempts
//!   before the survivor may take them over: no attempt of a run ever
//!   runs on two nodes at once (the jobs record their own start and
//!   ticks);
//! * `ax status` (and the metrics) report a stalled store within about
//!   two heartbeats, and the report clears once it heals.
//!
//! Without a server each test says `skipped: …` and passes, unless
//! `AX_REQUIRE_PG=1`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::node_id;
use crate::support::*;
use ax_protocol::api::{NodeView, StatusView};
use ax_protocol::client::Client;
use ax_testkit::pg::TestDb;
use ax_testkit::proxy::Proxy;
use serde_json::json;

/// A cluster node's config whose store goes through `proxy`.
fn node_config(db: &TestDb, proxy: &Proxy, beat: &str, lease: Option<&str>) -> String {
    let lease = lease
        .map(|l| format!("lease = \"{l}\"\n"))
        .unwrap_or_default();
    format!(
        "store = \"{}\"\n{BASE_CONFIG}\n[cluster]\nheartbeat = \"{beat}\"\n{lease}",
        proxy.url_for(&db.url)
    )
}

async fn status(c: &mut Client) -> StatusView {
    serde_json::from_value(c.call("status", json!({})).await.unwrap()).unwrap()
}

async fn nodes(c: &mut Client) -> Vec<NodeView> {
    status(c).await.cluster.map(|c| c.nodes).unwrap_or_default()
}

async fn wait_all_alive(c: &mut Client, n: usize, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let seen = nodes(c).await;
        if seen.len() == n && seen.iter().all(|n| n.alive) {
            return;
        }
        assert!(Instant::now() < deadline, "never {n} alive: {seen:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Fails unless every axd still runs.
fn assert_running(nodes: &mut [Daemon], when: &str) {
    for (i, d) in nodes.iter_mut().enumerate() {
        if let Some(status) = d.exited() {
            panic!("node {i} exited ({status}) {when}:\n{}", d.log());
        }
    }
}

/// Lines of `file` (each job appends `RUN ATTEMPT`) counted per run.
fn starts_per_run(file: &Path) -> BTreeMap<u64, u32> {
    let mut out = BTreeMap::new();
    for line in std::fs::read_to_string(file).unwrap_or_default().lines() {
        let run: u64 = line.split_whitespace().next().unwrap().parse().unwrap();
        *out.entry(run).or_default() += 1;
    }
    out
}

/// No node exits or is declared dead, and no run starts twice,
/// across a shared stall and then a shared cut of the store (20 s each,
/// within the 30 s lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_outage_fences_no_healthy_node() {
    let _turn = crate::module_turn(module_path!()).await;
    let Some(db) = TestDb::create("pg_faults_shared") else {
        return;
    };
    let proxy = Proxy::to_postgres(&db.url).unwrap();
    let config = node_config(&db, &proxy, "1s", Some("30s"));
    let mut cluster: Vec<Daemon> = (0..3).map(|_| Daemon::start_with(&config, &[])).collect();
    let mut c = cluster[0].client().await;
    wait_all_alive(&mut c, 3, 30).await;
    let started = cluster[0].path("starts");
    let job = format!(
        "echo \"$AX_RUN_ID $AX_ATTEMPT\" >> {}; sleep 3",
        started.display()
    );
    for outage in ["stall", "cut"] {
        assert_running(&mut cluster, &format!("before the shared {outage}"));
        let mut ids = Vec::new();
        for i in 0..9 {
            let through = cluster[i % 3].client().await;
            let mut through = through;
            ids.extend(submit(&mut through, json!({"command": job, "name": "w"})).await);
        }
        // Some running when the store goes away, some ending during it.
        wait_until(30, "runs started", || {
            starts_per_run(&started).len() >= ids.len() / 2
        });
        match outage {
            "stall" => proxy.stall(),
            _ => proxy.cut(),
        }
        std::thread::sleep(Duration::from_secs(20));
        proxy.heal();
        let deadline = Instant::now() + Duration::from_secs(60);
        for id in &ids {
            while get_run(&mut c, *id).await.state.as_str() != "success" {
                if Instant::now() > deadline {
                    let logs: Vec<String> = cluster.iter().map(|d| d.log()).collect();
                    panic!(
                        "run {id} not done 60 s after the {outage}: {:?}\n{}",
                        db.query("SELECT id, owner, state FROM dag_runs WHERE state = 'active'"),
                        logs.join("\n----\n")
                    );
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        // Longer than any judge's lease check after its own recovery.
        wait_all_alive(&mut c, 3, 30).await;
        assert_running(&mut cluster, &format!("after a shared {outage}"));
        let twice: Vec<_> = starts_per_run(&started)
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .collect();
        assert!(
            twice.is_empty(),
            "runs started twice (run, starts): {twice:?}"
        );
    }
    for d in &cluster {
        let log = d.log();
        assert!(!log.contains("declared dead"), "{log}");
    }
}

/// 100 ms of added latency each way makes every store round trip slow
/// (a beat takes over a second) but fences nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_fences_nobody() {
    let _turn = crate::module_turn(module_path!()).await;
    let Some(db) = TestDb::create("pg_faults_latency") else {
        return;
    };
    let proxy = Proxy::to_postgres(&db.url).unwrap();
    let config = node_config(&db, &proxy, "2s", None);
    let mut cluster: Vec<Daemon> = (0..3).map(|_| Daemon::start_with(&config, &[])).collect();
    let mut c = cluster[0].client().await;
    wait_all_alive(&mut c, 3, 30).await;
    proxy.delay(Duration::from_millis(100));
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.extend(submit(&mut c, json!({"command": "sleep 1", "name": "slow"})).await);
    }
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        assert_running(&mut cluster, "under latency");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for id in &ids {
        wait_state(&mut c, *id, "success", 60).await;
    }
    proxy.heal();
    wait_all_alive(&mut c, 3, 30).await;
    assert_running(&mut cluster, "after the latency");
    for d in &cluster {
        let log = d.log();
        assert!(!log.contains("declared dead"), "{log}");
    }
}

/// The job of the partition test: writes its start, then a tick every
/// 0.2 s for about 8 s, as nanoseconds since the epoch, to a file of its
/// own attempt.
fn ticking_job(dir: &Path) -> String {
    format!(
        "f={}/$AX_RUN_ID.$AX_ATTEMPT.$$; date +%s%N > $f; i=0; \
         while [ $i -lt 40 ]; do sleep 0.2; date +%s%N >> $f; i=$((i+1)); done",
        dir.display()
    )
}

/// Each attempt's `(run, attempt, first, last)` timestamps, as its job
/// recorded them.
fn attempt_spans(dir: &Path) -> Vec<(u64, u32, i64, i64)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let mut parts = name.split('.');
        let run: u64 = parts.next().unwrap().parse().unwrap();
        let attempt: u32 = parts.next().unwrap().parse().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let times: Vec<i64> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        if let (Some(first), Some(last)) = (times.first(), times.last()) {
            out.push((run, attempt, *first, *last));
        }
    }
    out
}

/// B's store connection is black-holed while its attempts run: B kills
/// them (and exits non-zero) before its lease can expire for A, and A then
/// runs them again. No attempt of a run overlaps another in time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_node_stops_its_attempts_before_another_takes_them() {
    let _turn = crate::module_turn(module_path!()).await;
    let Some(db) = TestDb::create("pg_faults_partition") else {
        return;
    };
    let (pa, pb) = (
        Proxy::to_postgres(&db.url).unwrap(),
        Proxy::to_postgres(&db.url).unwrap(),
    );
    let spans = tempfile::tempdir().unwrap();
    let mut b = Daemon::start_with(&node_config(&db, &pb, "500ms", Some("4s")), &[]);
    let mut cb = b.client().await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.extend(
            submit(
                &mut cb,
                json!({"command": ticking_job(spans.path()), "name": "t"}),
            )
            .await,
        );
    }
    for id in &ids {
        wait_state(&mut cb, *id, "running", 20).await;
    }
    let a = Daemon::start_with(&node_config(&db, &pa, "500ms", Some("4s")), &[]);
    let mut ca = a.client().await;
    wait_all_alive(&mut ca, 2, 20).await;
    // A has held its lease for a whole lease period: it may judge B.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let b_id = node_id(&b);
    pb.stall();
    let stalled = Instant::now();
    // B fences itself: exits non-zero, its attempts killed.
    let exit = loop {
        if let Some(status) = b.exited() {
            break status;
        }
        assert!(
            stalled.elapsed() < Duration::from_secs(20),
            "B still runs 20 s into its partition:\n{}",
            b.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(!exit.success(), "{exit}");
    assert!(
        stalled.elapsed() < Duration::from_secs(4),
        "B fenced itself {:?} after the stall, past its lease",
        stalled.elapsed()
    );
    for id in &ids {
        let run = wait_state(&mut ca, *id, "success", 60).await;
        let nodes: Vec<_> = run.attempts.iter().map(|a| a.node.clone()).collect();
        assert_eq!(
            nodes.first().cloned().flatten().as_deref(),
            Some(b_id.as_str())
        );
    }
    let spans = attempt_spans(spans.path());
    for id in &ids {
        let mut of_run: Vec<_> = spans.iter().filter(|s| s.0 == *id).collect();
        of_run.sort_by_key(|s| s.2);
        assert!(of_run.len() >= 2, "run {id}: {of_run:?}");
        for pair in of_run.windows(2) {
            eprintln!(
                "run {id}: attempt {} on B ended {} ms before attempt {} started",
                pair[0].1,
                (pair[1].2 - pair[0].3) / 1_000_000,
                pair[1].1
            );
            assert!(
                pair[0].3 < pair[1].2,
                "run {id}: attempt {} ran until {} on B, attempt {} started at {} (overlap {} ms)",
                pair[0].1,
                pair[0].3,
                pair[1].1,
                pair[1].2,
                (pair[0].3 - pair[1].2) / 1_000_000
            );
        }
    }
    let log = b.log();
    assert!(log.contains("fences itself"), "{log}");
}

/// A stalled store is a store fault in `ax status` and the metrics within
/// about two heartbeats, even on an idle node; it clears after the heal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_reports_a_store_stall_within_two_heartbeats() {
    let _turn = crate::module_turn(module_path!()).await;
    let Some(db) = TestDb::create("pg_faults_status") else {
        return;
    };
    let proxy = Proxy::to_postgres(&db.url).unwrap();
    let d = Daemon::start_with(&node_config(&db, &proxy, "1s", Some("20s")), &[]);
    let mut c = d.client().await;
    wait_all_alive(&mut c, 1, 20).await;
    assert_eq!(status(&mut c).await.store_error, None);
    proxy.stall();
    let stalled = Instant::now();
    let error = loop {
        if let Some(e) = status(&mut c).await.store_error {
            break e;
        }
        assert!(
            stalled.elapsed() < Duration::from_secs(10),
            "no store fault 10 s into a stall"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let seen_after = stalled.elapsed();
    assert!(
        seen_after < Duration::from_millis(3500),
        "store fault seen {seen_after:?} into the stall: {error}"
    );
    let metrics = c.call("metrics", json!({})).await.unwrap();
    let text = metrics["text"].as_str().unwrap().to_string();
    assert!(text.contains("ax_store_faulted 1"), "{text}");
    let wait_line = text
        .lines()
        .find(|l| l.starts_with("ax_store_write_wait_seconds "))
        .unwrap_or_else(|| panic!("{text}"));
    let waited: f64 = wait_line
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(waited >= 1.0, "{wait_line}");
    proxy.heal();
    let healed = Instant::now();
    while status(&mut c).await.store_error.is_some() {
        assert!(
            healed.elapsed() < Duration::from_secs(10),
            "the store fault stays 10 s after the heal"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let metrics = c.call("metrics", json!({})).await.unwrap();
    assert!(
        metrics["text"]
            .as_str()
            .unwrap()
            .contains("ax_store_faulted 0")
    );
}
