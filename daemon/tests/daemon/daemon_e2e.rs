//! The real `axd` in a temp dir, driven through its socket
//! (docs/protocol.md).

use std::time::{Duration, Instant};

use crate::ms;
use crate::support::*;
use serde_json::json;

const WEEKLY: &str = r#"
[[job]]
id = "fetch_a"
command = "sleep 0.4"
[[job]]
id = "fetch_b"
command = "sleep 0.4"
[[job]]
id = "fetch_c"
command = "sleep 0.4"
[[job]]
id = "calc"
command = "echo calc"
deps = ["fetch_a", "fetch_b", "fetch_c"]
[[job]]
id = "email"
command = "echo email"
deps = ["calc"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weekly_report_runs_in_dependency_order_with_parallel_fetches() {
    let d = Daemon::start(&[("weekly.toml", WEEKLY)]);
    let mut c = d.client().await;
    let ids = trigger(&mut c, "weekly").await;
    let email = wait_state(&mut c, ids[4], "success", 20).await;
    let mut runs = Vec::new();
    for id in &ids {
        runs.push(get_run(&mut c, *id).await);
    }
    let first_fetch_end = runs[..3].iter().map(|r| ms(&r.finished_at)).min().unwrap();
    let last_fetch_end = runs[..3].iter().map(|r| ms(&r.finished_at)).max().unwrap();
    for r in &runs[..3] {
        assert!(
            ms(&r.started_at) < first_fetch_end,
            "fetches overlap: {r:?}"
        );
    }
    assert!(
        ms(&runs[3].started_at) >= last_fetch_end,
        "calc after every fetch"
    );
    assert!(
        ms(&email.started_at) >= ms(&runs[3].finished_at),
        "email after calc"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_twice_then_succeeds_with_exponential_backoff() {
    let d = Daemon::start(&[]);
    let mut c = d.client().await;
    // Fails on attempts 1 and 2 (reads $AX_ATTEMPT).
    let job = r#"
command = "test $AX_ATTEMPT -ge 3"
retries = 3
backoff = { kind = "exponential", base = "300ms", max = "10s", jitter = "0s" }
"#;
    let ids = submit(&mut c, json!({"toml": job, "name": "flaky"})).await;
    let r = wait_state(&mut c, ids[0], "success", 20).await;
    assert_eq!(r.attempts.len(), 3);
    assert_eq!(r.attempts[0].outcome.map(|o| o.as_str()), Some("failed"));
    assert_eq!(r.attempts[0].exit_code, Some(1));
    let gap1 = ms(&r.attempts[1].started_at) - ms(&r.attempts[0].finished_at);
    let gap2 = ms(&r.attempts[2].started_at) - ms(&r.attempts[1].finished_at);
    assert!((300..1000).contains(&gap1), "first backoff ~300 ms: {gap1}");
    assert!(
        (600..1300).contains(&gap2),
        "second backoff ~600 ms: {gap2}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_job_cascades_but_any_child_and_sibling_run() {
    let d = Daemon::start(&[]);
    let mut c = d.client().await;
    let dag = r#"
[[job]]
id = "bad"
command = "exit 3"
retries = 1
backoff = { kind = "none" }
[[job]]
id = "good"
command = "true"
[[job]]
id = "after_bad"
command = "true"
deps = ["bad"]
[[job]]
id = "either"
command = "true"
deps = ["bad", "good"]
dep_mode = "any"
[[job]]
id = "sibling"
command = "true"
"#;
    let ids = submit(&mut c, json!({"toml": dag, "name": "cascade"})).await;
    let bad = wait_state(&mut c, ids[0], "failed", 20).await;
    assert_eq!(bad.attempts.len(), 2);
    let after = wait_state(&mut c, ids[2], "cancelled", 10).await;
    assert_eq!(after.reason.as_deref(), Some("upstream_failed: bad"));
    wait_state(&mut c, ids[3], "success", 10).await;
    wait_state(&mut c, ids[4], "success", 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_kills_grandchildren_and_term_ignorers_die_after_grace() {
    let d = Daemon::start(&[]);
    let mut c = d.client().await;
    let pidfile = d.path("grandchild.pid");
    let cmd = format!(
        "sh -c 'sleep 1000 & echo $! > {}; wait' ; sleep 1000",
        pidfile.display()
    );
    let ids = submit(
        &mut c,
        json!({"command": cmd, "timeout": "1s", "name": "tree"}),
    )
    .await;
    let grandchild = read_pid(&pidfile, 10);
    assert!(pid_alive(grandchild));
    let r = wait_state(&mut c, ids[0], "timed_out", 20).await;
    assert_eq!(r.attempts[0].outcome.map(|o| o.as_str()), Some("timed_out"));
    assert!(!pid_alive(grandchild), "the grandchild died with the job");

    // A job that ignores SIGTERM (and whose child does too) dies by SIGKILL after kill_grace.
    let pidfile2 = d.path("stubborn.pid");
    let job = format!(
        "command = \"trap '' TERM; sh -c 'trap \\\"\\\" TERM; echo $$ > {}; while true; do sleep 0.1; done' & wait\"\ntimeout = \"500ms\"\nkill_grace = \"1s\"\n",
        pidfile2.display()
    );
    let started = Instant::now();
    let ids = submit(&mut c, json!({"toml": job, "name": "stubborn"})).await;
    let child = read_pid(&pidfile2, 10);
    let r = wait_state(&mut c, ids[0], "timed_out", 20).await;
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1400),
        "waited for the grace period: {took:?}"
    );
    assert_eq!(r.attempts[0].signal, Some(9), "killed with SIGKILL: {r:?}");
    assert!(!pid_alive(child), "the TERM-ignoring child is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_slot_pool_runs_strictly_by_priority_and_two_slots_never_three() {
    let d = Daemon::start(&[]);
    let mut c = d.client().await;
    let blocker = submit(
        &mut c,
        json!({"command": "sleep 0.5", "pool": "one", "name": "blocker"}),
    )
    .await[0];
    wait_state(&mut c, blocker, "running", 10).await;
    let mut ids = Vec::new();
    for p in [10, 90, 40, 70] {
        ids.push((p, submit(&mut c, json!({"command": "sleep 0.05", "pool": "one", "priority": p, "name": format!("p{p}")})).await[0]));
    }
    let queued = get_run(&mut c, ids[0].1).await;
    assert_eq!(
        queued.why.as_deref(),
        Some("pool one full (1/1)"),
        "why names the wait"
    );
    let mut starts = Vec::new();
    for (p, id) in &ids {
        let r = wait_state(&mut c, *id, "success", 20).await;
        starts.push((ms(&r.started_at), *p));
    }
    starts.sort();
    let order: Vec<i32> = starts.iter().map(|s| s.1).collect();
    assert_eq!(order, vec![90, 70, 40, 10]);

    let mut two = Vec::new();
    for i in 0..6 {
        two.push(
            submit(
                &mut c,
                json!({"command": "sleep 0.2", "pool": "two", "name": format!("t{i}")}),
            )
            .await[0],
        );
    }
    let mut spans = Vec::new();
    for id in two {
        let r = wait_state(&mut c, id, "success", 20).await;
        spans.push((ms(&r.started_at), ms(&r.finished_at)));
    }
    for (s, _) in &spans {
        let overlapping = spans.iter().filter(|(a, b)| a <= s && s < b).count();
        assert!(
            overlapping <= 2,
            "a 2-slot pool ran {overlapping}: {spans:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_unique_heartbeat_and_why() {
    let d = Daemon::start(&[]);
    let mut c = d.client().await;
    // cancel of a running job
    let id = submit(&mut c, json!({"command": "sleep 1000", "name": "long"})).await[0];
    wait_state(&mut c, id, "running", 10).await;
    c.call("cancel", json!({"id": id})).await.unwrap();
    let r = wait_state(&mut c, id, "cancelled", 15).await;
    assert_eq!(r.attempts[0].outcome.map(|o| o.as_str()), Some("cancelled"));
    // unique submissions deduplicate
    let a = c
        .call("submit", json!({"command": "sleep 1000", "unique": "k1"}))
        .await
        .unwrap();
    let b = c
        .call("submit", json!({"command": "sleep 1000", "unique": "k1"}))
        .await
        .unwrap();
    assert_eq!(a["runs"], b["runs"]);
    assert_eq!(b["deduplicated"], true);
    // a queued run's why names what it waits for
    let after = c
        .call(
            "submit",
            json!({"command": "true", "after": a["runs"].clone()}),
        )
        .await
        .unwrap();
    let waiting = get_run(&mut c, after["runs"][0].as_u64().unwrap()).await;
    assert!(
        waiting
            .why
            .as_deref()
            .unwrap()
            .starts_with("waiting for run"),
        "{waiting:?}"
    );
    // a silent job is killed as stalled
    let hb = submit(
        &mut c,
        json!({"command": "echo started; sleep 1000", "heartbeat": "700ms", "name": "silent"}),
    )
    .await[0];
    let r = wait_state(&mut c, hb, "timed_out", 15).await;
    assert_eq!(r.attempts[0].outcome.map(|o| o.as_str()), Some("stalled"));
    // heartbeats from inside the job keep it alive and carry a message
    let beat = submit(
        &mut c,
        json!({"command": "for i in 1 2 3 4; do ax heartbeat --progress 0.$i step$i; sleep 0.3; done", "heartbeat": "700ms", "name": "beating"}),
    )
    .await[0];
    let r = wait_state(&mut c, beat, "success", 20).await;
    assert_eq!(r.attempts.len(), 1);
    assert_eq!(r.message.as_deref(), Some("step4"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_nothing_and_the_running_run_goes_on() {
    let mut d = Daemon::start(&[]);
    let mut c = d.client().await;
    let marker = d.path("attempts.log");
    let cmd = format!("echo $AX_ATTEMPT >> {}; sleep 1.5", marker.display());
    let running = submit(&mut c, json!({"command": cmd, "name": "victim"})).await[0];
    wait_state(&mut c, running, "running", 10).await;
    let mut acked = Vec::new();
    for i in 0..20 {
        acked.push(
            submit(
                &mut c,
                json!({"command": "true", "pool": "one", "name": format!("q{i}")}),
            )
            .await[0],
        );
    }
    drop(c);
    d.kill9();
    d.spawn();
    let mut c = d.client().await;
    let r = wait_state(&mut c, running, "success", 20).await;
    // The job outlived axd and was taken over: one attempt, never re-run.
    assert_eq!(r.attempts.len(), 1, "{r:#?}");
    let lines = std::fs::read_to_string(&marker).unwrap();
    assert_eq!(lines.lines().count(), 1, "run exactly once: {lines}");
    for id in acked {
        wait_state(&mut c, id, "success", 20).await;
    }
    drop(c);
    assert_eq!(d.term(), Some(0));
    let db = rusqlite::Connection::open(d.path("state/ax.db")).unwrap();
    let ok: String = db
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_0_and_leaves_the_job_to_the_next_axd() {
    let mut d = Daemon::start(&[]);
    let mut c = d.client().await;
    let pidfile = d.path("job.pid");
    let id = submit(
        &mut c,
        json!({"command": format!("echo $$ > {}; sleep 1000", pidfile.display())}),
    )
    .await[0];
    wait_state(&mut c, id, "running", 10).await;
    let pid = read_pid(&pidfile, 10);
    drop(c);
    assert_eq!(d.term(), Some(0));
    assert!(pid_alive(pid), "the job goes on without axd");
    assert!(!d.socket.exists(), "socket removed");
    // and the next start takes it over: still running, same process
    d.spawn();
    let mut c = d.client().await;
    let r = wait_state(&mut c, id, "running", 10).await;
    assert_eq!(r.attempts.len(), 1, "{r:#?}");
    assert!(pid_alive(pid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_are_captured_in_order_and_capped() {
    let config = format!("{BASE_CONFIG}\n[logs]\nmax_bytes = 2000\n");
    let d = Daemon::start_with(&config, &[]);
    let mut c = d.client().await;
    let id = submit(
        &mut c,
        json!({"command": "echo out1; echo err1 >&2; echo out2; yes line | head -n 1000"}),
    )
    .await[0];
    wait_state(&mut c, id, "success", 10).await;
    let chunk = c.call("logs", json!({"run": id})).await.unwrap();
    let data = chunk["data"].as_str().unwrap();
    assert!(data.starts_with("out1\nerr1\nout2\nline\n"), "{data:.60}");
    assert!(
        data.contains("[ax] log reached logs.max_bytes (2000 bytes)"),
        "{}",
        &data[data.len() - 200..]
    );
    assert!(data.len() < 2300);
    let env = submit(&mut c, json!({"command": "echo $AX_RUN_ID $AX_DAG $AX_JOB $AX_ATTEMPT $AX_SLOT; test -n \"$AX_SOCKET\"", "name": "envjob"})).await[0];
    wait_state(&mut c, env, "success", 10).await;
    let chunk = c.call("logs", json!({"run": env})).await.unwrap();
    assert_eq!(
        chunk["data"].as_str().unwrap(),
        format!("{env} envjob envjob 1 0\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawn_errors_are_recorded_and_follow_the_retry_policy() {
    let d = Daemon::start(&[]);
    let mut c = d.client().await;
    let missing = submit(
        &mut c,
        json!({"argv": ["/nonexistent/program", "x"], "retries": 1, "name": "missing"}),
    )
    .await[0];
    let r = wait_state(&mut c, missing, "failed", 15).await;
    assert_eq!(r.attempts.len(), 2, "retried once");
    assert_eq!(
        r.attempts[0].outcome.map(|o| o.as_str()),
        Some("spawn_error")
    );
    assert!(
        r.reason
            .as_deref()
            .unwrap_or_default()
            .contains("No such file"),
        "{r:?}"
    );
    let bad_cwd = submit(
        &mut c,
        json!({"command": "true", "cwd": "/nonexistent/dir", "name": "badcwd"}),
    )
    .await[0];
    let r = wait_state(&mut c, bad_cwd, "failed", 15).await;
    assert_eq!(
        r.attempts[0].outcome.map(|o| o.as_str()),
        Some("spawn_error")
    );
    // PATH lookup for argv programs, SIGPIPE back to default in jobs
    let path = submit(
        &mut c,
        json!({"argv": ["sh", "-c", "yes | head -n 1 >/dev/null; echo ok"], "name": "pathjob"}),
    )
    .await[0];
    wait_state(&mut c, path, "success", 15).await;
    assert_eq!(
        c.call("logs", json!({"run": path})).await.unwrap()["data"],
        "ok\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_failure_hook_runs_with_the_dag_in_its_environment() {
    let d = Daemon::start(&[(
        "flaky.toml",
        "on_failure = \"echo hook: $AX_DAG $AX_DAG_RUN $AX_STATE $AX_FAILED_JOBS $AX_FAILED_RUNS\"\ncommand = \"exit 1\"\n",
    )]);
    let mut c = d.client().await;
    let failed = trigger(&mut c, "flaky").await[0];
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let hook = loop {
        let runs: Vec<ax_protocol::api::RunView> = serde_json::from_value(
            c.call("list_runs", json!({"dag": "flaky:on_failure"}))
                .await
                .unwrap(),
        )
        .unwrap();
        if let Some(r) = runs.first() {
            break r.id;
        }
        assert!(std::time::Instant::now() < deadline, "no hook run");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let hook_run = wait_state(&mut c, hook, "success", 15).await;
    let dag_run = get_run(&mut c, failed).await.dag_run;
    let log = c.call("logs", json!({"run": hook})).await.unwrap();
    assert_eq!(
        log["data"],
        format!("hook: flaky {dag_run} failed flaky {failed}\n")
    );
    // `ax ls` (hooks: false) leaves the hook's run out, unless asked.
    let ids = |v: serde_json::Value| -> Vec<u64> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| r["id"].as_u64().unwrap())
            .collect()
    };
    let without = ids(c.call("list_runs", json!({"hooks": false})).await.unwrap());
    assert!(
        without.contains(&failed) && !without.contains(&hook),
        "{without:?}"
    );
    let all = ids(c.call("list_runs", json!({})).await.unwrap());
    assert!(all.contains(&hook), "{all:?}");
    let named = ids(c
        .call(
            "list_runs",
            json!({"hooks": false, "dag": "flaky:on_failure"}),
        )
        .await
        .unwrap());
    assert_eq!(named, vec![hook], "a hook named by --dag is listed");
    let by_dag_run = ids(c
        .call(
            "list_runs",
            json!({"hooks": false, "dag_run": hook_run.dag_run}),
        )
        .await
        .unwrap());
    assert_eq!(by_dag_run, vec![hook]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_from_an_earlier_life_can_be_retried() {
    let mut d = Daemon::start(&[]);
    let mut c = d.client().await;
    let marker = d.path("second-try");
    let cmd = format!(
        "test -e {m} || {{ touch {m}; exit 1; }}",
        m = marker.display()
    );
    let ids = submit(&mut c, json!({"toml": format!("[[job]]\nid = \"a\"\ncommand = \"{}\"\n[[job]]\nid = \"b\"\ncommand = \"true\"\ndeps = [\"a\"]\n", cmd.replace('"', "\\\"")), "name": "old"})).await;
    wait_state(&mut c, ids[0], "failed", 10).await;
    wait_state(&mut c, ids[1], "cancelled", 10).await;
    drop(c);
    assert_eq!(d.term(), Some(0));
    d.spawn();
    let mut c = d.client().await;
    c.call("retry", json!({"id": ids[0]})).await.unwrap();
    let a = wait_state(&mut c, ids[0], "success", 10).await;
    assert_eq!(a.attempts.len(), 2, "history kept across the restart");
    wait_state(&mut c, ids[1], "success", 10).await;
}

/// A job that exits by itself keeps its `setsid` child (by design); when
/// that orphan exits later, axd (the subreaper) reaps it: no zombie stays.
/// This goes through axd's SIGCHLD signalfd, not the job's supervisor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_that_exits_later_is_reaped_by_axd() {
    let d = Daemon::start(&[]);
    let mut c = d.client().await;
    let pidfile = d.path("orphan.pid");
    // The job waits for the pid file: until the child has left the group
    // with setsid, the group cleanup at the job's exit would kill it.
    let cmd = format!(
        "setsid sh -c 'echo $$ > {0}; sleep 0.3' < /dev/null > /dev/null 2>&1 & \
         while [ ! -s {0} ]; do sleep 0.01; done",
        pidfile.display()
    );
    let ids = submit(&mut c, json!({"command": cmd, "name": "leaves-an-orphan"})).await;
    wait_state(&mut c, ids[0], "success", 10).await;
    let orphan = read_pid(&pidfile, 10);
    // Gone entirely (reaped), not merely dead: a zombie still has /proc/PID.
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::path::Path::new(&format!("/proc/{orphan}")).exists() {
        assert!(
            Instant::now() < deadline,
            "orphan {orphan} not reaped: {:?}",
            std::fs::read_to_string(format!("/proc/{orphan}/stat"))
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `--unique-for` holds across a restart: the key is found in the store,
/// not only in the engine's memory (docs/protocol.md, "submit (write)").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_for_holds_across_a_restart() {
    let mut d = Daemon::start(&[]);
    let params = json!({"command": "true", "unique": "nightly-42", "unique_for": "1h"});
    let first = {
        let mut c = d.client().await;
        let first = submit(&mut c, params.clone()).await;
        wait_state(&mut c, first[0], "success", 10).await;
        first
    };
    assert_eq!(d.term(), Some(0));
    d.spawn();
    let mut c = d.client().await;
    let again = c.call("submit", params).await.unwrap();
    assert_eq!(again["deduplicated"], true, "{again}");
    assert_eq!(again["runs"], json!(first));
    // Without the window, a finished run does not hold the key.
    let fresh = c
        .call("submit", json!({"command": "true", "unique": "nightly-42"}))
        .await
        .unwrap();
    assert_eq!(fresh["deduplicated"], false, "{fresh}");
}

/// Waits (up to `secs`) for a pid written to `path`.
pub(crate) fn read_pid(path: &std::path::Path, secs: u64) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && let Ok(p) = s.trim().parse()
        {
            return p;
        }
        assert!(Instant::now() < deadline, "no pid in {}", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}
