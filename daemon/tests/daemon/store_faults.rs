//! Disk full under the real daemon (docs/operations.md, "Full disk"): the
//! state dir is a small tmpfs, filled to the last byte while a job runs.
//!
//! Needs root (to mount the tmpfs); without it the test says so and passes
//! vacuously, as `.ci/run` runs as root here.

use std::time::{Duration, Instant};

use crate::support::*;
use ax_protocol::client::Client;
use serde_json::{Value, json};

/// axd on a tmpfs state dir: killed first, then the tmpfs unmounted,
/// then the temp dir removed (fields drop in order).
struct Mounted {
    tmpfs: ax_testkit::Tmpfs,
    daemon: Daemon,
}

impl Drop for Mounted {
    fn drop(&mut self) {
        self.daemon.kill9();
    }
}

fn start_on_tmpfs(size: &str) -> Option<Mounted> {
    let mut daemon = Daemon::prepare(BASE_CONFIG, &[]);
    let tmpfs = ax_testkit::Tmpfs::mount(&daemon.path("state"), size, "disk-full test")?;
    daemon.spawn();
    Some(Mounted { tmpfs, daemon })
}

fn code(r: &Result<Value, ax_protocol::client::ClientError>) -> Option<String> {
    r.as_ref().err().and_then(|e| e.kind().map(str::to_string))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_full_refuses_new_writes_keeps_jobs_running_and_recovers() {
    let Some(mut m) = start_on_tmpfs("3m") else {
        return;
    };
    let go = m.daemon.path("go");
    let mut c = m.daemon.client().await;
    let waiting = format!(
        "while [ ! -e {} ]; do sleep 0.02; done; echo done",
        go.display()
    );
    let long = submit(&mut c, json!({"command": waiting, "name": "long"})).await[0];
    wait_state(&mut c, long, "running", 10).await;
    let mut acked: Vec<u64> = vec![long];

    let filler = m.tmpfs.fill().unwrap();

    // Submit until the store fails. SQLite may still have free pages in its
    // WAL, so the first few batches can succeed; the first that fails is
    // held (the engine has it, it is answered once written), later ones
    // are refused.
    let held: tokio::task::JoinHandle<Result<Value, _>>;
    let socket = m.daemon.socket.clone();
    let mut tries = 0;
    loop {
        tries += 1;
        assert!(tries < 500, "the store never ran out of space");
        let socket = socket.clone();
        let mut h = tokio::spawn(async move {
            let mut c = Client::connect(&socket, "filler").await.unwrap();
            let cmd = format!("echo {}", "x".repeat(2000));
            c.call("submit", json!({"command": cmd, "name": "big"}))
                .await
        });
        match tokio::time::timeout(Duration::from_secs(3), &mut h).await {
            Ok(r) => {
                let r = r.unwrap();
                match code(&r) {
                    None => acked.extend(
                        r.unwrap()["runs"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|x| x.as_u64().unwrap()),
                    ),
                    Some(k) if k == "store_error" => {
                        // Refused outright: the fault was already known.
                        held =
                            tokio::spawn(async { Err(ax_protocol::client::ClientError::Closed) });
                        break;
                    }
                    Some(k) => panic!("unexpected error {k}: {r:?}"),
                }
            }
            Err(_) => {
                held = h;
                break;
            }
        }
    }

    // While the store cannot write: status says so, reads work, new writes
    // are refused at once with a clear error, the running job runs on.
    let status = c.call("status", Value::Null).await.unwrap();
    let err = status["store_error"]
        .as_str()
        .expect("status names the fault");
    assert!(!err.is_empty(), "{status}");
    let t = Instant::now();
    let refused = c
        .call("submit", json!({"command": "true", "name": "refused"}))
        .await;
    assert_eq!(
        code(&refused).as_deref(),
        Some("store_error"),
        "{refused:?}"
    );
    assert!(
        refused.unwrap_err().to_string().contains("not accepted"),
        "the refusal says what happened"
    );
    assert!(t.elapsed() < Duration::from_secs(2), "refused promptly");
    assert_eq!(get_run(&mut c, long).await.state.as_str(), "running");

    // The job finishes while the disk is still full: its end is kept in
    // memory and written on recovery.
    std::fs::write(&go, b"").unwrap();
    // The engine has its end at once (the store gets it on recovery).
    wait_state(&mut c, long, "success", 10).await;

    // Space returns: the held answer arrives, writes are accepted again.
    filler.free().unwrap();
    let answered = tokio::time::timeout(Duration::from_secs(10), held)
        .await
        .expect("the held submission is answered after recovery")
        .unwrap();
    if let Ok(v) = &answered {
        acked.extend(
            v["runs"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap()),
        );
    }
    wait_state(&mut c, long, "success", 10).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = c.call("status", Value::Null).await.unwrap();
        if s.get("store_error").is_none() {
            break;
        }
        assert!(Instant::now() < deadline, "store never recovered: {s}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = submit(&mut c, json!({"command": "true", "name": "after"})).await[0];
    acked.push(after);
    wait_state(&mut c, after, "success", 10).await;

    // Nothing acknowledged is lost, even across a kill -9.
    drop(c);
    m.daemon.kill9();
    m.daemon.spawn();
    let mut c = m.daemon.client().await;
    for id in &acked {
        let r = c.call("get_run", json!({"id": id})).await;
        assert!(
            r.is_ok(),
            "acknowledged run {id} lost after recovery: {r:?}"
        );
    }
    assert_eq!(get_run(&mut c, long).await.state.as_str(), "success");
    assert!(
        m.daemon.log().contains("store writable again"),
        "recovery is logged"
    );
}
