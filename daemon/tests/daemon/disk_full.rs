//! A full disk under a real axd (docs/operations.md, "Full disk" and
//! "Shutdown while the store cannot write"): the state dir is a small
//! tmpfs (`ax_testkit::Tmpfs`), filled to the last byte.
//!
//! Needs root (to mount the tmpfs); without it each test says so and
//! passes vacuously, as `.ci/run` runs as root.

use std::time::{Duration, Instant};

use crate::support::*;
use ax_protocol::client::Client;
use ax_testkit::Tmpfs;
use serde_json::{Value, json};

/// `BASE_CONFIG` with a short `shutdown_grace`.
const GRACE_S: u64 = 2;

fn config() -> String {
    BASE_CONFIG.replace(
        "shutdown_grace = \"5s\"",
        &format!("shutdown_grace = \"{GRACE_S}s\""),
    )
}

/// A daemon whose state dir is a tmpfs of `size`, not started. axd is
/// killed first (`drop`), then the tmpfs unmounted, then the temp dir
/// removed (fields drop in order).
struct OnTmpfs {
    tmpfs: Tmpfs,
    daemon: Daemon,
}

impl Drop for OnTmpfs {
    fn drop(&mut self) {
        self.daemon.kill9();
    }
}

fn on_tmpfs(size: &str, what: &str) -> Option<OnTmpfs> {
    let daemon = Daemon::prepare(&config(), &[]);
    let tmpfs = Tmpfs::mount(&daemon.path("state"), size, what)?;
    Some(OnTmpfs { daemon, tmpfs })
}

fn code(r: &Result<Value, ax_protocol::client::ClientError>) -> Option<String> {
    r.as_ref().err().and_then(|e| e.kind().map(str::to_string))
}

/// Submits big commands until the store refuses one (or holds it); the
/// store's fault is then known to axd. Returns the held submission.
async fn until_the_store_refuses(socket: &std::path::Path) -> tokio::task::JoinHandle<()> {
    for _ in 0..500 {
        let path = socket.to_path_buf();
        let mut h = tokio::spawn(async move {
            let mut c = Client::connect(&path, "filler").await.unwrap();
            let cmd = format!("echo {}", "x".repeat(2000));
            let r = c
                .call("submit", json!({"command": cmd, "name": "big"}))
                .await;
            if let Some(k) = code(&r) {
                assert!(k == "store_error" || k == "shutting_down", "{r:?}");
            }
        });
        if tokio::time::timeout(Duration::from_secs(3), &mut h)
            .await
            .is_err()
        {
            return h;
        }
        let mut c = Client::connect(socket, "probe").await.unwrap();
        let s = c.call("status", Value::Null).await.unwrap();
        if s.get("store_error").is_some() {
            return tokio::spawn(async {});
        }
    }
    panic!("the store never ran out of space");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_a_full_disk_ends_in_its_bound_and_keeps_the_ends_of_jobs() {
    let Some(mut m) = on_tmpfs("4m", "shutdown with a full disk") else {
        return;
    };
    m.daemon.spawn();
    let mut c = m.daemon.client().await;
    let (go, ran) = (m.daemon.path("go"), m.daemon.path("ran"));
    let cmd = format!(
        "while [ ! -e {} ]; do sleep 0.02; done; echo once >> {}; exit 3",
        go.display(),
        ran.display()
    );
    let job = submit(&mut c, json!({"command": cmd, "name": "ends-in-the-fault"})).await[0];
    wait_state(&mut c, job, "running", 10).await;

    let filler = m.tmpfs.fill().unwrap();
    let held = until_the_store_refuses(&m.daemon.socket).await;
    // The job ends while the store cannot write: axd knows its end, the
    // store does not.
    std::fs::write(&go, b"").unwrap();
    wait_state(&mut c, job, "failed", 10).await;
    drop(c);

    let bound = Duration::from_secs(GRACE_S) + Duration::from_secs(12);
    let t = Instant::now();
    let status = m
        .daemon
        .terminate(bound + Duration::from_secs(3))
        .unwrap_or_else(|e| panic!("shutdown did not end within its bound: {e}"))
        .expect("axd was running");
    let took = t.elapsed();
    eprintln!("shutdown with a full disk took {took:?} (bound {bound:?})");
    assert!(
        took <= bound + Duration::from_secs(1),
        "shutdown took {took:?}"
    );
    assert_eq!(
        status.code(),
        Some(1),
        "a shutdown that left writes undone exits 1"
    );
    let log = m.daemon.log();
    assert!(
        log.contains("not committed"),
        "the log says what was not committed:\n{log}"
    );
    let _ = tokio::time::timeout(Duration::from_secs(5), held).await;

    // Space returns; the next start records the end the store missed, and
    // does not run the job again.
    filler.free().unwrap();
    m.daemon.spawn();
    let mut c = m.daemon.client().await;
    assert!(
        m.daemon
            .log()
            .contains("1 run(s) whose end the store could not take"),
        "the start says what it recorded from the journal:\n{}",
        m.daemon.log()
    );
    let r = get_run(&mut c, job).await;
    assert_eq!(r.state.as_str(), "failed", "{r:#?}");
    assert_eq!(r.attempts.len(), 1, "{r:#?}");
    assert_eq!(r.attempts[0].exit_code, Some(3), "{r:#?}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        std::fs::read_to_string(&ran).unwrap(),
        "once\n",
        "the job ran again"
    );
    assert_eq!(get_run(&mut c, job).await.state.as_str(), "failed");
    drop(c);
    assert_eq!(m.daemon.term(), Some(0), "{}", m.daemon.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_lost_to_a_full_disk_is_counted_marked_and_shown() {
    let Some(m) = on_tmpfs("4m", "output lost to a full disk") else {
        return;
    };
    let mut m = m;
    m.daemon.spawn();
    let mut c = m.daemon.client().await;
    let (go1, wrote, go2) = (
        m.daemon.path("go1"),
        m.daemon.path("wrote"),
        m.daemon.path("go2"),
    );
    const DURING: usize = 20_000;
    let cmd = format!(
        "echo before; while [ ! -e {go1} ]; do sleep 0.02; done; \
         head -c {DURING} /dev/zero | tr '\\0' x; touch {wrote}; \
         while [ ! -e {go2} ]; do sleep 0.02; done; echo after",
        go1 = go1.display(),
        wrote = wrote.display(),
        go2 = go2.display()
    );
    let job = submit(&mut c, json!({"command": cmd, "name": "chatty"})).await[0];
    let log_path = m.daemon.path(&format!("state/logs/{job}.1.log"));
    wait_until(10, "the job's first line is in its log", || {
        std::fs::read_to_string(&log_path).is_ok_and(|s| s == "before\n")
    });

    // The disk fills; the job writes 20,000 bytes meanwhile.
    let filler = m.tmpfs.fill().unwrap();
    std::fs::write(&go1, b"").unwrap();
    wait_until(10, "the job wrote its output", || wrote.exists());
    // axd has read it all before space returns (the job's write returned).
    tokio::time::sleep(Duration::from_millis(300)).await;
    filler.free().unwrap();
    std::fs::write(&go2, b"").unwrap();
    let r = wait_state(&mut c, job, "success", 20).await;

    let log = std::fs::read_to_string(&log_path).unwrap();
    let tail = &log[log.len().saturating_sub(300)..];
    let marker = regex_lite_marker(&log).unwrap_or_else(|| {
        panic!(
            "no marker in the log of {} bytes, ending:\n{tail}",
            log.len()
        )
    });
    let (lost, line) = marker;
    assert!(lost > 0, "{tail}");
    let kept = log
        .replace(&line, "")
        .bytes()
        .filter(|b| *b == b'x')
        .count();
    assert_eq!(kept + lost as usize, DURING, "written and lost add up");
    assert!(log.starts_with("before\n"));
    assert!(
        log.ends_with(&format!("{line}after\n")),
        "the marker comes when space returns:\n{tail}"
    );
    assert_eq!(r.attempts[0].log_lost, lost, "{r:#?}");
    let raw = c.call("get_run", json!({"id": job})).await.unwrap();
    assert_eq!(raw["attempts"][0]["log_lost"], json!(lost), "{raw}");
    drop(c);

    // Kept across a restart.
    assert_eq!(m.daemon.term(), Some(0));
    m.daemon.spawn();
    let mut c = m.daemon.client().await;
    assert_eq!(get_run(&mut c, job).await.attempts[0].log_lost, lost);
}

/// The `[ax: N bytes of output lost: No space left on device]` line of
/// `log`: N and the line (with its newline).
fn regex_lite_marker(log: &str) -> Option<(u64, String)> {
    const HEAD: &str = "[ax: ";
    const TAIL: &str = " bytes of output lost: No space left on device]\n";
    let at = log.find(HEAD)?;
    let rest = &log[at + HEAD.len()..];
    let digits = rest.find(' ')?;
    let n: u64 = rest[..digits].parse().ok()?;
    rest[digits..]
        .starts_with(TAIL)
        .then(|| (n, format!("{HEAD}{n}{TAIL}")))
}
