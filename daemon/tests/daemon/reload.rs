//! `reload` against the real axd (docs/config.md, "Reload"): a broken
//! `axd.toml` is refused with its key and line and the running config
//! stays; a good one takes effect live — new pools (and the files that use
//! them), smaller pools that never stop running runs, timeouts — and
//! restart-only keys are named, not silently ignored.

use crate::support::*;
use ax_protocol::client::ClientError;
use ax_protocol::codes;
use ax_protocol::request::{Reload, Status};
use serde_json::json;

const CONFIG: &str = r#"
max_concurrency = 8
timezone = "UTC"
default_timeout = "1h"
[pools.default]
slots = 8
[pools.io]
slots = 2
"#;

const GPU_JOB: &str = r#"
command = "true"
pool = "gpu"
"#;

/// Rewrites the part of `axd.toml` after the harness's file locations.
fn rewrite(d: &Daemon, from: &str, to: &str) {
    let text = std::fs::read_to_string(&d.config).unwrap();
    assert!(text.contains(from), "{from:?} not in {text}");
    std::fs::write(&d.config, text.replace(from, to)).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_config_is_refused_with_key_and_line_and_the_old_one_stays() {
    let d = Daemon::start_with(CONFIG, &[]);
    let mut c = d.client().await;
    rewrite(
        &d,
        "timezone = \"UTC\"\n",
        "timezone = \"UTC\"\ncolour = 1\n",
    );
    let err = c.request(Reload).await.unwrap_err();
    let ClientError::Rpc(e) = &err else {
        panic!("{err}")
    };
    assert_eq!(e.kind(), codes::INVALID_CONFIG);
    assert!(e.message.contains("(key `colour`)"), "{}", e.message);
    assert!(e.message.contains("line "), "{}", e.message);
    // Still serving on the old config.
    let s = c.request(Status).await.unwrap();
    assert_eq!(s.max_concurrency, 8);
    assert_eq!(s.config.unwrap().default_timeout.as_deref(), Some("1h"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_and_limits_change_live_and_running_runs_finish() {
    let d = Daemon::start_with(CONFIG, &[("gpu-work.toml", GPU_JOB)]);
    let mut c = d.client().await;
    // The file naming a pool the config lacks is an error until reload.
    let s = c.request(Status).await.unwrap();
    assert_eq!(s.errors.len(), 1, "{:?}", s.errors);

    let running: Vec<u64> = [
        submit(&mut c, json!({"command": "sleep 2", "pool": "io"})).await[0],
        submit(&mut c, json!({"command": "sleep 2", "pool": "io"})).await[0],
    ]
    .to_vec();
    for id in &running {
        wait_state(&mut c, *id, "running", 10).await;
    }
    let queued = submit(&mut c, json!({"command": "true", "pool": "io"})).await[0];

    rewrite(
        &d,
        "[pools.io]\nslots = 2\n",
        "[pools.io]\nslots = 1\n[pools.gpu]\nslots = 1\n",
    );
    rewrite(&d, "default_timeout = \"1h\"", "default_timeout = \"5m\"");
    let answer = c.request(Reload).await.unwrap();
    assert!(answer.not_applied.is_empty(), "{answer:?}");
    assert_eq!(answer.errors, 0, "the gpu file loads with the new pool");

    let s = c.request(Status).await.unwrap();
    let io = s.pools.iter().find(|p| p.name == "io").unwrap();
    assert_eq!((io.slots, io.running), (1, 2), "shrinking kills nothing");
    assert!(s.pools.iter().any(|p| p.name == "gpu"));
    assert_eq!(s.config.unwrap().default_timeout.as_deref(), Some("5m"));
    assert_eq!(
        get_run(&mut c, queued).await.why.as_deref(),
        Some("pool io full (2/1)")
    );

    let gpu = trigger(&mut c, "gpu-work").await[0];
    wait_state(&mut c, gpu, "success", 10).await;
    for id in &running {
        let r = wait_state(&mut c, *id, "success", 10).await;
        assert_eq!(r.attempts.len(), 1);
    }
    wait_state(&mut c, queued, "success", 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_only_keys_are_named_in_the_answer() {
    let d = Daemon::start_with(CONFIG, &[]);
    let mut c = d.client().await;
    let text = std::fs::read_to_string(&d.config).unwrap();
    let moved = d.path("elsewhere");
    let line = text
        .lines()
        .find(|l| l.starts_with("state_dir"))
        .expect("the harness sets state_dir")
        .to_string();
    std::fs::write(
        &d.config,
        text.replace(
            &line,
            &format!("state_dir = {:?}", moved.display().to_string()),
        ),
    )
    .unwrap();
    let answer = c.request(Reload).await.unwrap();
    assert_eq!(answer.not_applied, vec!["state_dir".to_string()]);
    let s = c.request(Status).await.unwrap();
    assert_ne!(s.config.unwrap().state_dir, moved.display().to_string());
}
