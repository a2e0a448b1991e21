//! Under systemd (docs/operations.md, "Monitoring"): axd says READY=1 when
//! it serves, and keeps `STATUS=` current with the runs running, queued and
//! failed in the last hour. systemd's notify socket is a datagram socket of
//! the test's.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use crate::support::*;
use serde_json::json;

/// The datagrams received until one has a line for which `want` holds,
/// or the deadline passes (then the test fails with all that came).
fn wait_for_line(sock: &UnixDatagram, secs: u64, want: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        if let Ok(n) = sock.recv(&mut buf) {
            let text = String::from_utf8_lossy(&buf[..n]).to_string();
            if let Some(line) = text.lines().find(|l| want(l)) {
                return line.to_string();
            }
            seen.push(text);
        }
    }
    panic!("no matching notification in {secs} s; got {seen:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_counts_running_queued_and_failed_in_the_last_hour() {
    let mut d = Daemon::prepare("max_concurrency = 1\n[pools.default]\nslots = 1\n", &[]);
    let path = d.path("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    d.set_env("NOTIFY_SOCKET", &path);
    d.spawn();
    wait_for_line(&sock, 30, |l| l == "READY=1");
    let mut c = d.client().await;
    for _ in 0..2 {
        submit(&mut c, json!({"command": "exit 3", "name": "broken"})).await;
    }
    // One slot: the first sleeper runs, the second waits for the slot.
    submit(&mut c, json!({"command": "sleep 60", "name": "sleeper"})).await;
    submit(&mut c, json!({"command": "sleep 60", "name": "sleeper"})).await;
    let line = wait_for_line(&sock, 30, |l| {
        l == "STATUS=1 running, 1 queued, 2 failed in the last hour"
    });
    assert!(line.starts_with("STATUS="));
    assert_eq!(d.term(), Some(0));
}
