//! The socket protocol against the real daemon: bad frames, big frames,
//! clients that never read, and peers without the right to connect.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use crate::support::*;
use ax_testkit::{Conn, foreign_hello, runtime};
use serde_json::{Value, json};

fn raw(d: &Daemon) -> Conn {
    let conn = Conn::connect(&d.socket).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    conn
}

#[test]
fn malformed_requests_get_error_replies_with_stable_codes() {
    let d = Daemon::start(&[]);
    let mut conn = raw(&d);
    for (frame, code) in [
        ("{not json", "parse_error"),
        ("[1,2,3]", "invalid_request"),
        (
            r#"{"jsonrpc":"1.0","id":1,"method":"status"}"#,
            "invalid_request",
        ),
        (
            r#"{"jsonrpc":"2.0","id":2,"method":"status"}"#,
            "hello_required",
        ),
        (
            r#"{"jsonrpc":"2.0","id":3,"method":"hello","params":{"protocol":99,"client":"t"}}"#,
            "version_mismatch",
        ),
    ] {
        writeln!(conn, "{frame}").unwrap();
        let reply = conn.read_frame().unwrap();
        assert_eq!(reply["error"]["data"]["code"], code, "{frame}: {reply}");
    }
    writeln!(
        conn,
        r#"{{"jsonrpc":"2.0","id":4,"method":"hello","params":{{"protocol":1,"client":"t"}}}}"#
    )
    .unwrap();
    let hello = conn.read_frame().unwrap();
    assert!(hello["error"].is_null(), "{hello}");
    assert!(hello["result"]["version"].is_string());
    for (frame, code) in [
        (
            r#"{"jsonrpc":"2.0","id":5,"method":"no_such_method"}"#,
            "method_not_found",
        ),
        (
            r#"{"jsonrpc":"2.0","id":6,"method":"get_run","params":{"id":424242}}"#,
            "not_found",
        ),
        (
            r#"{"jsonrpc":"2.0","id":7,"method":"get_run","params":{"id":"x"}}"#,
            "invalid_params",
        ),
        (
            r#"{"jsonrpc":"2.0","id":8,"method":"submit","params":{"command":"true","pool":"nope"}}"#,
            "invalid_params",
        ),
        (
            r#"{"jsonrpc":"2.0","id":9,"method":"submit","params":{"toml":"[[job]]\nid = 1"}}"#,
            "invalid_params",
        ),
        (
            r#"{"jsonrpc":"2.0","id":10,"method":"cancel","params":{"id":424242}}"#,
            "not_found",
        ),
        (
            r#"{"jsonrpc":"2.0","id":11,"method":"list_runs","params":{"state":"sleeping"}}"#,
            "invalid_params",
        ),
        (
            r#"{"jsonrpc":"2.0","id":12,"method":"trigger","params":{"dag":"ghost"}}"#,
            "not_found",
        ),
    ] {
        writeln!(conn, "{frame}").unwrap();
        let reply = conn.read_frame().unwrap();
        assert_eq!(reply["error"]["data"]["code"], code, "{frame}: {reply}");
    }
    // the job-file error names line and column
    writeln!(conn, r#"{{"jsonrpc":"2.0","id":13,"method":"submit","params":{{"toml":"[[job]]\nid = \"a\"\ncommand = \"x\"\npriority = 500\n","name":"f"}}}}"#).unwrap();
    let reply = conn.read_frame().unwrap();
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("f:4:12: priority 500 out of range"),
        "{reply}"
    );
}

#[test]
fn oversized_frame_closes_that_connection_only() {
    let d = Daemon::start(&[]);
    let mut conn = raw(&d);
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"hello\",\"params\":{{\"pad\":\"{}\"}}}}\n",
        "x".repeat(2 << 20)
    );
    let _ = conn.write_all(big.as_bytes());
    let reply = conn.read_frame().unwrap();
    assert_eq!(reply["error"]["data"]["code"], "frame_too_large");
    assert!(conn.read_line().ok().flatten().is_none(), "closed");
    // others are still served
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = d.client().await;
        c.call("status", Value::Null).await.unwrap();
    });
}

#[test]
fn a_subscriber_that_never_reads_does_not_slow_others() {
    let d = Daemon::start(&[]);
    let rt = runtime().unwrap();
    // A subscriber that never reads its socket.
    let mut sleepy = raw(&d);
    writeln!(
        sleepy,
        r#"{{"jsonrpc":"2.0","id":1,"method":"hello","params":{{"protocol":1,"client":"sleepy"}}}}"#
    )
    .unwrap();
    writeln!(sleepy, r#"{{"jsonrpc":"2.0","id":2,"method":"subscribe"}}"#).unwrap();
    rt.block_on(async {
        let mut c = d.client().await;
        // Idle latency first.
        let mut idle = Vec::new();
        for _ in 0..50 {
            let t = Instant::now();
            c.call("status", Value::Null).await.unwrap();
            idle.push(t.elapsed());
        }
        // Flood notifications: many runs changing state.
        let mut ids = Vec::new();
        for i in 0..300 {
            let v = c
                .call(
                    "submit",
                    json!({"command": "true", "name": format!("n{i}")}),
                )
                .await
                .unwrap();
            ids.push(v["runs"][0].as_u64().unwrap());
        }
        let mut busy = Vec::new();
        for _ in 0..50 {
            let t = Instant::now();
            c.call("status", Value::Null).await.unwrap();
            busy.push(t.elapsed());
        }
        for id in ids {
            wait_state(&mut c, id, "success", 30).await;
        }
        idle.sort();
        busy.sort();
        // Generous bound: the point is that nothing blocks on the sleepy client.
        assert!(
            busy[49] < Duration::from_millis(500),
            "p100 under load {:?} (idle {:?})",
            busy[49],
            idle[49]
        );
    });
}

#[test]
fn lagging_subscriber_gets_a_lagged_notice() {
    let d = Daemon::start(&[]);
    let rt = runtime().unwrap();
    rt.block_on(async {
        let mut sub = d.client().await;
        sub.call("subscribe", Value::Null).await.unwrap();
        let mut c = d.client().await;
        for i in 0..3000 {
            c.call(
                "submit",
                json!({"command": "true", "name": format!("l{i}"), "pool": "one"}),
            )
            .await
            .unwrap();
        }
        // The subscriber read nothing so far: it is told `lagged`, or, if
        // axd's write to it stayed blocked for 10 s (a slow machine), it
        // was disconnected. Either way it was not fed silently for ever.
        let deadline = Instant::now() + Duration::from_secs(30);
        let (mut lagged, mut disconnected) = (false, false);
        while Instant::now() < deadline {
            match tokio::time::timeout(Duration::from_secs(5), sub.next_notification()).await {
                Ok(Ok(ax_protocol::Notification::Lagged(_))) => {
                    lagged = true;
                    break;
                }
                Ok(Ok(_)) => continue,
                Ok(Err(_)) => {
                    disconnected = true;
                    break;
                }
                Err(_) => break,
            }
        }
        assert!(
            lagged || disconnected,
            "a client that does not read is told it lagged or disconnected"
        );
    });
}

#[test]
fn foreign_uid_is_refused_at_hello() {
    if !nix::unistd::getuid().is_root()
        || std::process::Command::new("setpriv")
            .arg("--version")
            .output()
            .is_err()
    {
        eprintln!("skipped: needs root and setpriv to act as another uid");
        return;
    }
    let d = Daemon::start(&[]);
    // Open the path up so the connection reaches hello (the default modes
    // would stop it at connect, which is the first line of defence).
    for p in [d.dir.path().to_path_buf(), d.path("run"), d.socket.clone()] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let out = foreign_hello(&d.socket).unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("\"forbidden\""),
        "stdout {stdout} stderr {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("uid 65534"), "{stdout}");
}

#[test]
fn socket_and_directory_modes_and_no_stealing() {
    let d = Daemon::start(&[]);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&d.socket), 0o600);
    assert_eq!(mode(&d.path("run")), 0o700);
    // A second axd on the same state dir refuses to start, clearly.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_axd"))
        .arg("--config")
        .arg(&d.config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("another axd"), "{err}");
    // the live socket still works
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        d.client().await.call("status", Value::Null).await.unwrap();
    });
}

#[test]
fn bad_config_names_key_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("axd.toml");
    std::fs::write(&cfg, "max_concurrency = 4\n[retry]\nrate = \"fast\"\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_axd"))
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 3") && err.contains("rate"), "{err}");
}

#[test]
fn systemd_unit_verifies_where_systemd_analyze_exists() {
    let Ok(out) = std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
    else {
        eprintln!("skipped: systemd-analyze is not installed");
        return;
    };
    if !out.status.success() {
        return;
    }
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../config/axd.service"
    ))
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("axd.service");
    std::fs::write(
        &path,
        unit.replace("/usr/local/bin/axd", env!("CARGO_BIN_EXE_axd")),
    )
    .unwrap();
    let out = std::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("axd.service:"), "{err}");
}

/// A request with a bad part is refused whole with `invalid_params` naming
/// the part, and nothing of it is applied: a `cancel` list with an unknown
/// id cancels none of the others, an `env` with a number submits nothing, a
/// progress out of range changes no message.
#[test]
fn requests_with_a_bad_part_are_refused_whole() {
    let d = Daemon::start(&[]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = d.client().await;
        let long = submit(&mut c, json!({"argv": ["sleep", "30"]})).await[0];
        wait_state(&mut c, long, "running", 10).await;
        let queued = submit(&mut c, json!({"argv": ["true"], "after": [long]})).await[0];

        let e = c
            .call("cancel", json!({"ids": [long, 999_999, queued]}))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), Some("invalid_params"), "{e}");
        assert!(e.to_string().contains("ids[1]"), "names the part: {e}");
        assert_eq!(get_run(&mut c, long).await.state.as_str(), "running");
        assert_eq!(get_run(&mut c, queued).await.state.as_str(), "waiting");

        let before: Vec<Value> =
            serde_json::from_value(c.call("list_runs", json!({"limit": 100})).await.unwrap())
                .unwrap();
        let e = c
            .call(
                "submit",
                json!({"command": "true", "env": {"GOOD": "x", "BAD": 1}}),
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind(), Some("invalid_params"), "{e}");
        assert!(e.to_string().contains("env.BAD"), "names the part: {e}");
        let after: Vec<Value> =
            serde_json::from_value(c.call("list_runs", json!({"limit": 100})).await.unwrap())
                .unwrap();
        assert_eq!(after.len(), before.len(), "nothing was submitted");

        let e = c
            .call(
                "heartbeat",
                json!({"run": long, "message": "never seen", "progress": 1.5}),
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind(), Some("invalid_params"), "{e}");
        assert_eq!(get_run(&mut c, long).await.message, None);

        // The whole list, when every part is good, is applied.
        c.call("cancel", json!({"ids": [queued, long]}))
            .await
            .unwrap();
        wait_state(&mut c, long, "cancelled", 10).await;
        assert_eq!(get_run(&mut c, queued).await.state.as_str(), "cancelled");
    });
}
