//! `ax logs -f` and `ax events` against a real axd, through the real `ax`
//! binary: a followed run across its attempts and its exit code, the
//! event filters, and `events -f` catching up after a `lagged` notice.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use ax_testkit::{Conn, Daemon, axd_beside, run_ids};
use serde_json::{Value, json};

use crate::support::{text, wait_output};

fn daemon(config: &str, jobs: &[(&str, &str)]) -> Daemon {
    let axd = axd_beside(Path::new(env!("CARGO_BIN_EXE_ax"))).unwrap();
    Daemon::start(axd, config, jobs).unwrap()
}

fn ax_command(socket: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ax"));
    cmd.arg("--socket").arg(socket).args(args);
    cmd
}

fn ax(socket: &Path, args: &[&str]) -> Output {
    ax_command(socket, args).output().unwrap()
}

/// `ax --json ARGS`: one JSON document per stdout line.
/// Waits until axd counts `n` connected clients (this call's own among
/// them), i.e. the follower is attached before the test goes on.
fn wait_for_clients(socket: &Path, n: u32) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = ax_command(socket, &["metrics"]).output().unwrap();
        let connected = text(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("ax_clients_connected "))
            .and_then(|v| v.trim().parse::<u32>().ok())
            .unwrap_or(0);
        if connected >= n {
            return;
        }
        assert!(Instant::now() < deadline, "the follower never connected");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn ax_lines(socket: &Path, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = ax(socket, &all);
    assert_eq!(out.status.code(), Some(0), "ax {args:?}: {out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn logs_follow_streams_every_attempt_of_a_queued_run_and_exits_with_its_end() {
    let work = tempfile::tempdir().unwrap();
    let gate = work.path().join("gate");
    let count = work.path().join("count");
    let jobs = format!(
        "[[job]]\nid = \"gate\"\ncommand = \"while [ ! -e {gate} ]; do sleep 0.05; done\"\n\
         [[job]]\nid = \"flaky\"\ndeps = [\"gate\"]\nretries = 2\n\
         backoff = {{ kind = \"fixed\", base = \"300ms\", jitter = \"0s\" }}\n\
         command = \"n=$(cat {count} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {count}; echo \\\"line of attempt $n\\\"; [ $n -ge 3 ]\"\n",
        gate = gate.display(),
        count = count.display(),
    );
    let d = daemon("", &[("flaky.toml", &jobs)]);
    let runs = run_ids(&ax_lines(&d.socket, &["trigger", "flaky"])[0]);
    let flaky = runs[1].to_string();

    // Followed while it waits on `gate`: today's one-attempt read ends at once.
    let follower = ax_command(&d.socket, &["logs", "-f", &flaky])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_clients(&d.socket, 2);
    std::fs::write(&gate, "").unwrap();
    let out = wait_output(follower, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        "line of attempt 1\nline of attempt 2\nline of attempt 3\n",
        "stdout is the job's output only"
    );
    let headers: Vec<String> = text(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("── attempt"))
        .map(|l| l.split(" (").next().unwrap().to_string())
        .collect();
    assert_eq!(
        headers,
        ["── attempt 1", "── attempt 2", "── attempt 3"],
        "{}",
        text(&out.stderr)
    );

    // A run that ends failed: exit 1, its output printed.
    let failing = ax(&d.socket, &["submit", "--", "echo bye; exit 3"]);
    let failing = text(&failing.stdout).trim().to_string();
    let out = wait_output(
        ax_command(&d.socket, &["logs", "-f", &failing])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
        Duration::from_secs(30),
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(text(&out.stdout), "bye\n");

    // An unknown run: exit 4.
    assert_eq!(
        ax(&d.socket, &["logs", "-f", "99999"]).status.code(),
        Some(4)
    );
}

#[test]
fn logs_follow_of_an_unreachable_daemon_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    let out = ax(&dir.path().join("none.sock"), &["logs", "-f", "1"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
}

fn seqs(events: &[Value]) -> Vec<i64> {
    events.iter().map(|e| e["seq"].as_i64().unwrap()).collect()
}

#[test]
fn events_limit_and_filters_are_answered_by_the_store() {
    let many: String = (0..30)
        .map(|i| format!("[[job]]\nid = \"j{i}\"\ncommand = \"true\"\n"))
        .collect();
    let d = daemon(
        "",
        &[
            ("many.toml", &many),
            ("other.toml", "[[job]]\nid = \"one\"\ncommand = \"true\"\n"),
        ],
    );
    ax_lines(&d.socket, &["trigger", "many"]);
    // The first is still active: a second manual trigger follows the
    // DAG's overlap (skip) unless forced.
    ax_lines(&d.socket, &["trigger", "--force", "many"]);
    let other = ax_lines(&d.socket, &["trigger", "other"]);
    let other_run = run_ids(&other[0])[0];
    let other_dag_run = other[0]["dag_run"].as_u64().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while ax_lines(&d.socket, &["ls", "--state", "success", "--limit", "1000"])[0]
        .as_array()
        .unwrap()
        .len()
        < 61
    {
        assert!(Instant::now() < deadline, "runs did not finish");
        std::thread::sleep(Duration::from_millis(100));
    }

    let all = ax_lines(&d.socket, &["events", "--limit", "10000"]);
    assert!(all.len() > 200, "{} events", all.len());
    let all_seqs = seqs(&all);
    assert!(all_seqs.windows(2).all(|w| w[0] < w[1]));

    // Default: the newest 100, oldest first.
    let newest = ax_lines(&d.socket, &["events"]);
    assert_eq!(seqs(&newest), all_seqs[all_seqs.len() - 100..]);
    assert_eq!(
        seqs(&ax_lines(&d.socket, &["events", "--limit", "5"])),
        all_seqs[all_seqs.len() - 5..]
    );

    let of_run = ax_lines(&d.socket, &["events", "--run", &other_run.to_string()]);
    let expected: Vec<&Value> = all
        .iter()
        .filter(|e| e["run"] == json!(other_run))
        .collect();
    assert!(expected.len() >= 3, "created, started, ended");
    assert_eq!(of_run.iter().collect::<Vec<_>>(), expected);

    let of_dag = ax_lines(&d.socket, &["events", "--dag", "other"]);
    let expected: Vec<&Value> = all
        .iter()
        .filter(|e| e["dag_run"] == json!(other_dag_run))
        .collect();
    assert_eq!(of_dag.iter().collect::<Vec<_>>(), expected);
    let of_many = ax_lines(&d.socket, &["events", "--dag", "many", "--limit", "10000"]);
    assert_eq!(of_many.len(), all.len() - expected.len());

    let by_scheduler = ax_lines(
        &d.socket,
        &["events", "--actor", "scheduler", "--limit", "10000"],
    );
    let expected: Vec<&Value> = all
        .iter()
        .filter(|e| e["actor"].as_str().unwrap().contains("scheduler"))
        .collect();
    assert!(!expected.is_empty() && expected.len() < all.len());
    assert_eq!(by_scheduler.iter().collect::<Vec<_>>(), expected);

    let recent = ax_lines(&d.socket, &["events", "--since", "1h", "--limit", "10000"]);
    assert_eq!(recent, all);
    let future = ax_lines(&d.socket, &["events", "--since", "2099-01-01T00:00:00Z"]);
    assert!(future.is_empty());

    for bad in [
        &["events", "--since", "ten"][..],
        &["events", "--limit", "0"],
        &["events", "--run", "x"],
    ] {
        assert_eq!(ax(&d.socket, bad).status.code(), Some(2), "{bad:?}");
    }
}

/// Forces a `lagged` notice for real: the follower is stopped (SIGSTOP)
/// while axd sends it over 1024 notifications (heartbeats, cheap and
/// quick) and over 5000 events (pipelined submits), so its notification
/// buffer overflows well inside axd's 10 s write timeout. Once it runs
/// again, its output must hold every event, in order, without a gap.
#[test]
fn events_follow_catches_up_from_the_store_after_lagging() {
    let d = daemon("", &[]);
    let mut conn = Conn::open(&d.socket, "lag-test").unwrap();
    let blocker = run_ids(
        &conn
            .call("submit", json!({"command": "sleep 600", "name": "blocker"}))
            .unwrap(),
    )[0];
    let out_path = d.dir.path().join("events.out");
    let err_path = d.dir.path().join("events.err");
    let mut follower = ax_command(&d.socket, &["--json", "events", "-f"])
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let printed = |path: &Path| -> Vec<i64> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter_map(|e| e["seq"].as_i64())
            .collect()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while printed(&out_path).is_empty() {
        assert!(Instant::now() < deadline, "the follower printed nothing");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = follower.id().to_string();
    let signal = |sig: &str| {
        assert!(
            Command::new("kill")
                .args([sig, &pid])
                .status()
                .unwrap()
                .success()
        )
    };
    signal("-STOP");
    let stopped = Instant::now();
    for i in 0..1500 {
        conn.call(
            "heartbeat",
            json!({"run": blocker, "message": format!("beat {i}")}),
        )
        .unwrap();
    }
    // 26 commits of 200 events: one page of catch-up (5000) is not enough.
    conn.pipeline(2600, 100, &|_| {
        (
            "submit".into(),
            json!({"command": "true", "after": [blocker]}),
        )
    })
    .unwrap();
    let last = conn
        .call("events", json!({"limit": 1, "newest": true}))
        .unwrap()[0]["seq"]
        .as_i64()
        .unwrap();
    eprintln!("stopped for {:?}", stopped.elapsed());
    signal("-CONT");
    let deadline = Instant::now() + Duration::from_secs(60);
    while printed(&out_path).last() != Some(&last) {
        assert!(
            Instant::now() < deadline,
            "caught up to {:?}, not {last}; follower {:?}, stderr {:?}",
            printed(&out_path).last(),
            follower.try_wait(),
            std::fs::read_to_string(&err_path)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = follower.kill();
    let _ = follower.wait();
    let seen = printed(&out_path);
    let first = seen[0];
    assert_eq!(
        seen,
        (first..=last).collect::<Vec<_>>(),
        "a gap or a repeat"
    );
    let stderr = std::fs::read_to_string(&err_path).unwrap();
    assert!(stderr.contains("lagged"), "no lag happened: {stderr:?}");
    conn.call("cancel", json!({"id": blocker})).unwrap();
}
