//! Faults of the jobs folder through the real daemon (docs/operations.md,
//! "Jobs folder: loops, huge files, unreadable folders"): directory link
//! loops, reads that must not rescan, huge files, folders axd cannot read.

mod support;

use std::os::unix::fs::symlink;
use std::time::{Duration, Instant};

use ax_shared::api::{DagView, StatusView};
use ax_shared::client::Client;
use serde_json::Value;
use support::*;

async fn dags(c: &mut Client) -> Vec<DagView> {
    serde_json::from_value(c.call("list_dags", Value::Null).await.unwrap()).unwrap()
}

async fn names(c: &mut Client) -> Vec<String> {
    dags(c).await.into_iter().map(|d| d.name).collect()
}

async fn status(c: &mut Client) -> StatusView {
    serde_json::from_value(c.call("status", Value::Null).await.unwrap()).unwrap()
}

/// Polls `status` until `pred` holds; fails with the last one after `secs`.
async fn wait_status(
    c: &mut Client,
    secs: u64,
    what: &str,
    pred: impl Fn(&StatusView) -> bool,
) -> StatusView {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let s = status(c).await;
        if pred(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "never: {what}: {s:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A link to the folder itself, and two links that cross (`team/up` back
/// to the root, `loop` to the root): each DAG is loaded once, by its
/// physical path, and axd keeps answering. A link to a regular file still
/// loads; a link to a folder is not followed (docs/job-files.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_link_loops_load_each_dag_once() {
    let mut d = Daemon::prepare(
        BASE_CONFIG,
        &[
            ("a.toml", "command = \"true\"\n"),
            ("team/b.toml", "command = \"true\"\n"),
        ],
    );
    let jobs = d.path("jobs.d");
    std::fs::create_dir_all(d.path("elsewhere")).unwrap();
    std::fs::write(d.path("elsewhere/c.toml"), "command = \"true\"\n").unwrap();
    std::fs::write(d.path("outside.toml"), "command = \"true\"\n").unwrap();
    symlink(d.path("outside.toml"), jobs.join("linked.toml")).unwrap();
    symlink(d.path("elsewhere"), jobs.join("linkdir")).unwrap();
    symlink(".", jobs.join("loop")).unwrap();
    d.spawn();
    let mut c = d.client().await;
    let expected = ["a", "linked", "team/b"];
    assert_eq!(names(&mut c).await, expected);

    // A second loop, crossing the first, and a change that rescans.
    symlink("..", jobs.join("team/up")).unwrap();
    std::fs::write(jobs.join("team/b.toml"), "command = \"echo b\"\n").unwrap();
    let t = Instant::now();
    wait_status(&mut c, 10, "the rescan after the second loop", |s| {
        s.jobs_folder.scans >= 2 && !s.jobs_folder.scanning
    })
    .await;
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "rescan took {:?}",
        t.elapsed()
    );
    assert_eq!(names(&mut c).await, expected);
    assert!(status(&mut c).await.errors.is_empty());
    let loads = d.log().matches("DAG loaded dag=team/b ").count();
    assert_eq!(loads, 2, "team/b loaded at start and after its change");
}
