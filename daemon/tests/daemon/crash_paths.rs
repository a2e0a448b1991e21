//! Crash paths against the real `axd`: output as heartbeats, the grace jobs
//! get at shutdown, and dangling links in the jobs folder.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::ms;
use crate::support::*;
use serde_json::json;

/// Output counts as a heartbeat on every read (docs/job-files.md, "Job
/// fields", `heartbeat`). A job that prints every 0.7 s never goes 1 s
/// without output, so `heartbeat = "1s"` must not kill it (one beat per
/// second at most would miss the print at 0.7 s and kill it at 1 s); a job
/// that then goes silent is killed as stalled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_every_read_keeps_a_job_alive_and_silence_stalls_it() {
    let d = Daemon::start(&[]);
    let mut c = d.client().await;
    let talking = submit(
        &mut c,
        json!({"command": "for i in 1 2 3 4 5 6; do echo tick $i; sleep 0.7; done",
               "heartbeat": "1s", "name": "talking"}),
    )
    .await[0];
    let silent = submit(
        &mut c,
        json!({"command": "echo once; sleep 0.7; echo twice; sleep 30",
               "heartbeat": "1s", "name": "silent"}),
    )
    .await[0];
    let r = wait_run(&mut c, talking, 20, |r| r.finished_at.is_some()).await;
    assert_eq!(r.state.as_str(), "success", "{r:#?}");
    assert_eq!(r.attempts.len(), 1);
    let r = wait_run(&mut c, silent, 20, |r| r.finished_at.is_some()).await;
    assert_eq!(
        r.attempts[0].outcome.map(|o| o.as_str()),
        Some("stalled"),
        "{r:#?}"
    );
    // Killed about 1 s after its last output (at 0.7 s), not 30 s later.
    let lived = ms(&r.attempts[0].finished_at) - ms(&r.attempts[0].started_at);
    assert!((1_500..6_000).contains(&lived), "stalled after {lived} ms");
}

/// At a shutdown that stops the jobs (SIGUSR2, `ax shutdown --stop-jobs`)
/// each job gets up to `shutdown_grace` before SIGKILL, not its
/// (shorter) `kill_grace`. The job traps TERM, cleans up for 2 s and leaves
/// a marker: with kill_grace 1 s and shutdown_grace 5 s the marker is
/// written, and the attempt is recorded as interrupted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_gives_each_job_the_whole_shutdown_grace() {
    let mut d = Daemon::start(&[]);
    let mut c = d.client().await;
    let ready = d.path("trap-ready");
    let done = d.path("cleanup-done");
    let script = format!(
        "trap 'sleep 2; echo cleaned > {done}; exit 0' TERM; touch {ready}; \
         while :; do sleep 0.1; done",
        done = done.display(),
        ready = ready.display()
    );
    let id = submit(
        &mut c,
        json!({"command": script, "kill_grace": "1s", "name": "trapper"}),
    )
    .await[0];
    wait_state(&mut c, id, "running", 10).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !ready.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the trap was never set"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(c);
    let stopping = std::time::Instant::now();
    assert_eq!(d.stop_with_jobs(), Some(0));
    assert_eq!(
        std::fs::read_to_string(&done).ok().as_deref(),
        Some("cleaned\n"),
        "the job was killed before its cleanup ended ({:?} after SIGTERM)\n{}",
        stopping.elapsed(),
        d.log()
    );
    // Reopened: the attempt that was stopped by the shutdown is interrupted.
    d.spawn();
    let mut c = d.client().await;
    let r = wait_run(&mut c, id, 10, |r| !r.attempts.is_empty()).await;
    assert_eq!(
        r.attempts[0].outcome.map(|o| o.as_str()),
        Some("interrupted"),
        "{r:#?}"
    );
}

/// Anything in the jobs folder that is not a regular file or a link to one
/// is ignored (docs/job-files.md, "Names and which files are read"); a
/// dangling link is not a broken job file.
#[test]
fn a_dangling_symlink_in_the_jobs_folder_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let jobs = dir.path().join("jobs.d");
    std::fs::create_dir_all(jobs.join("team")).unwrap();
    std::fs::write(jobs.join("good.toml"), "command = \"true\"\n").unwrap();
    let outside = dir.path().join("outside.toml");
    std::fs::write(&outside, "command = \"true\"\n").unwrap();
    std::os::unix::fs::symlink(&outside, jobs.join("linked.toml")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("nowhere.toml"), jobs.join("dangling.toml"))
        .unwrap();
    std::os::unix::fs::symlink(jobs.join("team/loop.toml"), jobs.join("team/loop.toml")).unwrap();
    let pools = vec!["default".to_string()];
    let mut dags = BTreeMap::new();
    let removed = ax_daemon::jobs_folder::scan::rescan(&jobs, &pools, &mut dags);
    assert!(removed.is_empty());
    let names: Vec<&str> = dags.keys().map(String::as_str).collect();
    assert_eq!(names, ["good", "linked"], "{dags:#?}");
    assert!(dags.values().all(|e| e.error.is_none()), "{dags:#?}");
    // A link that goes dangling later removes its DAG, without an error.
    std::fs::remove_file(&outside).unwrap();
    let removed = ax_daemon::jobs_folder::scan::rescan(&jobs, &pools, &mut dags);
    assert_eq!(removed, ["linked"]);
    assert!(dags.values().all(|e| e.error.is_none()), "{dags:#?}");
}
