//! Faults of time against the real `axd` (docs/operations.md, "Clock steps
//! and suspend" and "axd paused"): the wall clock stepped under a running
//! daemon (libfaketime, `ax_testkit::clock::SteppedClock`), and the daemon
//! stopped with SIGSTOP while its jobs go on.

use std::time::{Duration, Instant};

use crate::ms;
use crate::support::*;
use ax_testkit::clock::{SteppedClock, Stopped};
use serde_json::json;

/// A daemon on a wall clock the test steps.
fn stepped(jobs: &[(&str, &str)]) -> (Daemon, SteppedClock) {
    let mut d = Daemon::prepare(BASE_CONFIG, jobs);
    let clock = SteppedClock::install(&mut d).expect("libfaketime (apt-get install faketime)");
    d.spawn();
    (d, clock)
}

/// Waits (real time) until the run has finished; returns it and how long
/// after `since` that was seen.
async fn finished(
    c: &mut ax_protocol::client::Client,
    id: u64,
    secs: u64,
    since: Instant,
) -> (ax_protocol::api::RunView, Duration) {
    let r = wait_run(c, id, secs, |r| r.finished_at.is_some()).await;
    (r, since.elapsed())
}

/// An NTP step of +2 h does not kill a job with a 30 s timeout, and a
/// step of -2 h does not disable a 3 s timeout: timeouts run on the
/// monotonic clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_clock_step_neither_kills_a_job_nor_disables_its_timeout() {
    let (d, mut clock) = stepped(&[]);
    let mut c = d.client().await;

    let healthy = submit(
        &mut c,
        json!({"command": "sleep 4; exit 0", "timeout": "30s", "name": "healthy"}),
    )
    .await[0];
    wait_state(&mut c, healthy, "running", 10).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    clock.step(2 * 3600).unwrap();
    let (r, _) = finished(&mut c, healthy, 30, Instant::now()).await;
    assert_eq!(r.state.as_str(), "success", "{r:#?}");
    assert_eq!(r.attempts.len(), 1, "{r:#?}");
    assert_eq!(r.attempts[0].exit_code, Some(0), "{r:#?}");
    // Displayed times follow the wall clock: the job ended after the step.
    let wall_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        + 2 * 3_600_000;
    let ended = ms(&r.attempts[0].finished_at);
    assert!(
        (wall_now - ended).abs() < 60_000,
        "finished_at {ended} is not on the stepped wall clock ({wall_now})"
    );

    let bounded = submit(
        &mut c,
        json!({"command": "sleep 60", "timeout": "3s", "kill_grace": "1s", "name": "bounded"}),
    )
    .await[0];
    wait_state(&mut c, bounded, "running", 10).await;
    let since = Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;
    clock.step(-2 * 3600).unwrap();
    let (r, took) = finished(&mut c, bounded, 30, since).await;
    assert_eq!(
        r.attempts[0].outcome.map(|o| o.as_str()),
        Some("timed_out"),
        "{r:#?}"
    );
    assert!(
        took < Duration::from_secs(8),
        "killed {took:?} after the start, timeout 3 s"
    );
}

/// How many runs the DAG has.
async fn count(c: &mut ax_protocol::client::Client, dag: &str) -> usize {
    let v = c
        .call("list_runs", json!({"dag": dag, "limit": 10000}))
        .await
        .unwrap();
    v.as_array().map_or(0, Vec::len)
}

/// A cron DAG across steps follows `catchup`: forward, the missed slots
/// give one DAG run (`latest`), not one per slot and not none; back, no
/// slot fires a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_across_wall_clock_steps_follows_catchup() {
    let (d, mut clock) = stepped(&[(
        "tick.toml",
        "schedule = \"*/3 * * * * *\"\ncatchup = \"latest\"\noverlap = \"allow\"\n\
         [[job]]\nid = \"t\"\ncommand = \"true\"\n",
    )]);
    let mut c = d.client().await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while count(&mut c, "tick").await < 1 {
        assert!(Instant::now() < deadline, "the first slot never fired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = count(&mut c, "tick").await;
    // Forward 1 h: 1,200 slots missed at once; `latest` runs one of them.
    // (libfaketime moves the clock inside axd only, so axd sees the step
    // at its next wake-up, the next slot at the latest.)
    clock.step(3600).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after_forward = before;
    while after_forward == before {
        assert!(Instant::now() < deadline, "no run after the forward step");
        tokio::time::sleep(Duration::from_millis(100)).await;
        after_forward = count(&mut c, "tick").await;
    }
    assert!(
        after_forward <= before + 2,
        "forward step: {before} -> {after_forward} DAG runs"
    );
    // Slots go on firing every 3 s on the new wall clock.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let going = count(&mut c, "tick").await;
    assert!(going > after_forward, "no slot fired after the step");
    // Back 1 h: the slots of the hour already fired are not fired again;
    // the next one is the first after the last fired, in an hour.
    clock.step(-3600).unwrap();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let at_back = count(&mut c, "tick").await;
    for _ in 0..25 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            count(&mut c, "tick").await,
            at_back,
            "a slot fired after the step back"
        );
    }
    let log = d.log();
    assert!(!log.contains("panicked"), "{log}");
}

/// axd stopped from 1 s to 9 s while its job, which has a 6 s timeout,
/// exits 0 at 2 s: the exit is applied before the deadline that fell due
/// in the pause, so the run succeeds with exit 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exit_during_a_pause_of_axd_is_not_a_timeout() {
    let d = Daemon::start(&[]);
    let mut c = d.client().await;
    let id = submit(
        &mut c,
        json!({"command": "sleep 2; exit 0", "timeout": "6s", "name": "short"}),
    )
    .await[0];
    wait_state(&mut c, id, "running", 10).await;
    let since = Instant::now();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let stopped = Stopped::stop(d.pid()).unwrap();
    tokio::time::sleep(Duration::from_secs(8)).await;
    stopped.resume().unwrap();
    let (r, took) = finished(&mut c, id, 30, since).await;
    assert!(took >= Duration::from_secs(9), "seen before the resume?");
    assert_eq!(r.state.as_str(), "success", "{r:#?}");
    assert_eq!(r.attempts[0].exit_code, Some(0), "{r:#?}");
}

/// Jobs that beat every 0.5 s (heartbeat 2 s), by `ax heartbeat` or by
/// output, are not killed as stalled by a 5 s SIGSTOP of axd: the beats
/// that waited in the socket and the pipe are applied first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_survive_a_pause_of_axd() {
    let d = Daemon::start(&[]);
    let mut c = d.client().await;
    let by_call = submit(
        &mut c,
        json!({"command": "for i in $(seq 24); do ax heartbeat; sleep 0.5; done",
               "heartbeat": "2s", "name": "calls"}),
    )
    .await[0];
    let by_output = submit(
        &mut c,
        json!({"command": "for i in $(seq 24); do echo beat $i; sleep 0.5; done",
               "heartbeat": "2s", "name": "prints"}),
    )
    .await[0];
    wait_state(&mut c, by_call, "running", 10).await;
    wait_state(&mut c, by_output, "running", 10).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stopped = Stopped::stop(d.pid()).unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    stopped.resume().unwrap();
    for id in [by_call, by_output] {
        let r = wait_run(&mut c, id, 40, |r| r.finished_at.is_some()).await;
        assert_eq!(r.state.as_str(), "success", "{r:#?}");
        assert_eq!(r.attempts.len(), 1, "{r:#?}");
    }
}
