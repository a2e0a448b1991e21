//! Jobs outlive axd (docs/operations.md, "Upgrade"): a restart (SIGTERM)
//! or a crash (SIGKILL) of axd leaves running jobs running, and the next
//! axd reattaches to them: same attempt, same process, the whole log, the
//! real exit, timeouts and cancel still enforced. A reboot, and only a
//! reboot, makes them `interrupted`; `ax shutdown --stop-jobs` (or
//! SIGUSR2) stops them.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::daemon_e2e::read_pid;
use crate::support::{Daemon, pid_alive, submit, wait_run, wait_state, wait_until};

/// A job that writes its pid, then `lines` numbered lines a quarter
/// second apart, then exits with `code`.
fn counting_job(pidfile: &std::path::Path, lines: u32, code: i32) -> String {
    format!(
        "echo $$ > {}; i=1; while [ $i -le {lines} ]; do echo line $i; i=$((i+1)); sleep 0.25; done; exit {code}",
        pidfile.display()
    )
}

fn expected_log(lines: u32) -> String {
    (1..=lines).map(|i| format!("line {i}\n")).collect()
}

/// Submits a job that writes its pid and sleeps (with `extra` params),
/// and waits until it runs: its run id and pid.
async fn sleeping_job(
    d: &Daemon,
    c: &mut ax_protocol::client::Client,
    mut extra: serde_json::Value,
) -> (u64, i32) {
    let pidfile = d.path("job.pid");
    extra["command"] = format!("echo $$ > {}; sleep 1000", pidfile.display()).into();
    let id = submit(c, extra).await[0];
    wait_state(c, id, "running", 10).await;
    (id, read_pid(&pidfile, 10))
}

async fn log_of(c: &mut ax_protocol::client::Client, id: u64) -> String {
    let chunk = c.call("logs", json!({"run": id})).await.unwrap();
    chunk["data"].as_str().unwrap_or_default().to_string()
}

/// Restarts axd the way `stop` ends it, while the job runs; the job goes
/// on and ends as if axd had never left.
async fn survives(stop: impl FnOnce(&mut Daemon)) {
    let mut d = Daemon::start(&[]);
    let mut c = d.client().await;
    let pidfile = d.path("job.pid");
    let id = submit(
        &mut c,
        json!({"command": counting_job(&pidfile, 12, 3), "name": "long"}),
    )
    .await[0];
    wait_state(&mut c, id, "running", 10).await;
    let pid = read_pid(&pidfile, 10);
    drop(c);
    std::thread::sleep(Duration::from_millis(600));
    stop(&mut d);
    assert!(pid_alive(pid), "the job outlived axd");
    // Output written while no axd ran is kept too.
    std::thread::sleep(Duration::from_millis(600));
    d.spawn();
    let mut c = d.client().await;
    let r = wait_state(&mut c, id, "failed", 20).await;
    assert_eq!(r.attempts.len(), 1, "one attempt, never a second: {r:#?}");
    let a = &r.attempts[0];
    assert_eq!(a.exit_code, Some(3), "{r:#?}");
    assert_eq!(a.outcome.map(|o| o.as_str()), Some("failed"));
    assert_eq!(
        log_of(&mut c, id).await,
        expected_log(12),
        "no gap, no duplicate"
    );
    assert!(!pid_alive(pid));
    assert!(
        d.log()
            .contains("1 still running (reattached), 0 interrupted"),
        "{}",
        d.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_survives_sigterm_of_axd() {
    survives(|d| assert_eq!(d.term(), Some(0))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_survives_kill_9_of_axd() {
    survives(|d| d.kill9()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_while_no_axd_runs_is_recorded_with_its_real_exit() {
    let mut d = Daemon::start(&[]);
    let mut c = d.client().await;
    let pidfile = d.path("job.pid");
    let id = submit(
        &mut c,
        json!({"command": format!("echo $$ > {}; echo bye; sleep 0.5; exit 5", pidfile.display())}),
    )
    .await[0];
    wait_state(&mut c, id, "running", 10).await;
    let pid = read_pid(&pidfile, 10);
    drop(c);
    d.kill9();
    wait_until(10, "the job ended", || !pid_alive(pid));
    std::thread::sleep(Duration::from_millis(300));
    let restarted_at = std::time::SystemTime::now();
    d.spawn();
    let mut c = d.client().await;
    let r = wait_state(&mut c, id, "failed", 10).await;
    assert_eq!(r.attempts.len(), 1, "{r:#?}");
    assert_eq!(r.attempts[0].exit_code, Some(5));
    let finished = crate::ms(&r.attempts[0].finished_at);
    let restarted_at = restarted_at
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    // It ended (and its keeper reaped it) at least 300 ms before the
    // restart; the margin is for the reap, which follows the exit.
    assert!(
        finished <= restarted_at - 200,
        "the end is recorded when it happened ({finished}), not at the restart ({restarted_at})"
    );
    assert_eq!(log_of(&mut c, id).await, "bye\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_is_enforced_on_a_reattached_attempt() {
    let mut d = Daemon::start(&[]);
    let mut c = d.client().await;
    let (id, pid) = sleeping_job(&d, &mut c, json!({"timeout": "3s"})).await;
    let started = Instant::now();
    drop(c);
    d.kill9();
    d.spawn();
    let mut c = d.client().await;
    let r = wait_state(&mut c, id, "timed_out", 20).await;
    assert!(
        started.elapsed() >= Duration::from_millis(2500),
        "the timeout counts from the spawn, not the restart"
    );
    assert_eq!(r.attempts.len(), 1);
    assert_eq!(r.attempts[0].outcome.map(|o| o.as_str()), Some("timed_out"));
    assert!(!pid_alive(pid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_reaches_a_reattached_attempt() {
    let mut d = Daemon::start(&[]);
    let mut c = d.client().await;
    let (id, pid) = sleeping_job(&d, &mut c, json!({})).await;
    drop(c);
    assert_eq!(d.term(), Some(0));
    d.spawn();
    let mut c = d.client().await;
    c.call("cancel", json!({"id": id})).await.unwrap();
    let r = wait_state(&mut c, id, "cancelled", 20).await;
    assert_eq!(r.attempts.len(), 1);
    assert!(!pid_alive(pid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reboot_marks_attempts_interrupted_and_kills_what_is_left() {
    let mut d = Daemon::prepare(crate::support::BASE_CONFIG, &[]);
    let boot_file = d.path("boot_id");
    std::fs::write(&boot_file, "boot-a\n").unwrap();
    d.set_env("AX_BOOT_ID_FILE", boot_file.as_os_str());
    d.spawn();
    let mut c = d.client().await;
    let pidfile = d.path("job.pid");
    let id = submit(
        &mut c,
        json!({"command": format!("echo $$ >> {}; sleep 1000", pidfile.display())}),
    )
    .await[0];
    wait_state(&mut c, id, "running", 10).await;
    let pid = read_pid(&pidfile, 10);
    drop(c);
    d.kill9();
    // What a reboot changes: the boot id. Nothing of the earlier boot is
    // believed to run, and what does is killed, never run twice.
    std::fs::write(&boot_file, "boot-b\n").unwrap();
    d.spawn();
    let mut c = d.client().await;
    let r = wait_run(&mut c, id, 10, |r| r.attempts.len() == 2).await;
    assert_eq!(
        r.attempts[0].outcome.map(|o| o.as_str()),
        Some("interrupted"),
        "{r:#?}"
    );
    wait_until(10, "the earlier boot's process is gone", || !pid_alive(pid));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_with_stop_jobs_stops_them() {
    let mut d = Daemon::start(&[]);
    let mut c = d.client().await;
    let (id, pid) = sleeping_job(&d, &mut c, json!({})).await;
    let answer = c
        .call("shutdown", json!({"stop_jobs": true}))
        .await
        .unwrap();
    assert_eq!(answer["stop_jobs"], true);
    assert_eq!(answer["running"], 1);
    drop(c);
    let status = d.wait_exit(Duration::from_secs(20)).unwrap();
    assert_eq!(status.and_then(|s| s.code()), Some(0));
    assert!(!pid_alive(pid), "the job was stopped with axd");
    d.spawn();
    let mut c = d.client().await;
    let r = wait_run(&mut c, id, 10, |r| r.attempts.len() == 2).await;
    assert_eq!(
        r.attempts[0].outcome.map(|o| o.as_str()),
        Some("interrupted")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigusr2_stops_axd_with_its_jobs() {
    let mut d = Daemon::start(&[]);
    let mut c = d.client().await;
    let (_, pid) = sleeping_job(&d, &mut c, json!({})).await;
    drop(c);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(d.pid() as i32),
        nix::sys::signal::Signal::SIGUSR2,
    )
    .unwrap();
    let status = d.wait_exit(Duration::from_secs(20)).unwrap();
    assert_eq!(status.and_then(|s| s.code()), Some(0));
    assert!(!pid_alive(pid));
    wait_until(10, "its keeper exits, holding nothing", || {
        d.keepers().is_empty()
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keeper_holding_nothing_exits_with_axd_and_an_old_one_retires() {
    let mut d = Daemon::start(&[]);
    let mut c = d.client().await;
    let id = submit(&mut c, json!({"command": "sleep 1.5"})).await[0];
    wait_state(&mut c, id, "running", 10).await;
    drop(c);
    let first = d.keepers();
    assert_eq!(first.len(), 1, "one keeper");
    assert_eq!(d.term(), Some(0));
    d.spawn();
    let mut c = d.client().await;
    wait_state(&mut c, id, "success", 10).await;
    // The earlier life's keeper exits once its job is recorded; this
    // life's keeps serving.
    wait_until(10, "the old keeper retired", || {
        !d.keepers().contains(&first[0])
    });
    assert_eq!(d.keepers().len(), 1);
    drop(c);
    assert_eq!(d.term(), Some(0));
    wait_until(10, "the keeper holding nothing exits", || {
        d.keepers().is_empty()
    });
}

/// A secret printed while no axd runs (the keeper writes the log) and
/// after the restart (the new axd does) is redacted in both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_stay_redacted_across_a_restart() {
    const SECRET: &str = "s3cr3t-across-lives";
    let mut d = Daemon::start(&[]);
    let mut c = d.client().await;
    let go = d.path("go");
    let id = submit(
        &mut c,
        json!({
            "command": format!(
                "echo before=$S; while [ ! -e {go} ]; do sleep 0.05; done; echo after=$S",
                go = go.display()
            ),
            "env": {"S": SECRET},
            "secret_env": ["S"],
        }),
    )
    .await[0];
    wait_state(&mut c, id, "running", 10).await;
    drop(c);
    d.kill9();
    std::fs::write(&go, "").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    d.spawn();
    let mut c = d.client().await;
    wait_state(&mut c, id, "success", 10).await;
    let log = log_of(&mut c, id).await;
    assert_eq!(log, "before=***\nafter=***\n");
    let file = std::fs::read_to_string(d.path(&format!("state/logs/{id}.1.log"))).unwrap();
    assert!(!file.contains(SECRET), "{file}");
}

/// A cancel in its grace when axd is asked to stop is finished before axd
/// exits (the next axd would not know of it), and the job is cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_in_its_grace_is_finished_before_a_restart() {
    let mut d = Daemon::start(&[]);
    let mut c = d.client().await;
    let ready = d.path("trap-ready");
    let id = submit(
        &mut c,
        json!({
            "command": format!(
                "trap 'sleep 1; exit 0' TERM; touch {}; while :; do sleep 0.1; done",
                ready.display()
            ),
            "kill_grace": "5s",
        }),
    )
    .await[0];
    wait_state(&mut c, id, "running", 10).await;
    wait_until(10, "the trap is set", || ready.exists());
    c.call("cancel", json!({"id": id})).await.unwrap();
    drop(c);
    assert_eq!(d.term(), Some(0));
    d.spawn();
    let mut c = d.client().await;
    let r = wait_state(&mut c, id, "cancelled", 10).await;
    assert_eq!(r.attempts.len(), 1, "{r:#?}");
    assert_eq!(r.attempts[0].outcome.map(|o| o.as_str()), Some("cancelled"));
}

/// A keeper no axd can reach again (its state dir was removed) kills the
/// jobs it holds and exits, rather than keep them unsupervised for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keeper_whose_state_dir_is_gone_kills_its_jobs_and_exits() {
    let mut d = Daemon::start(&[]);
    let mut c = d.client().await;
    let (_, pid) = sleeping_job(&d, &mut c, json!({})).await;
    let keeper = d.keepers()[0];
    drop(c);
    d.kill9();
    std::fs::rename(d.path("state"), d.path("state.moved")).unwrap();
    wait_until(30, "the job is killed", || !pid_alive(pid));
    wait_until(10, "the keeper exits", || !pid_alive(keeper));
}
