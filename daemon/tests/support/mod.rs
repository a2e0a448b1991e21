//! The real `axd` of this crate for its tests: the testkit harness on the
//! binary cargo built for them and on [`BASE_CONFIG`], failing the test
//! (with axd's log) on any harness error; and typed-client helpers.

use std::ops::{Deref, DerefMut};
use std::sync::{PoisonError, RwLock};
use std::time::{Duration, Instant};

use ax_protocol::api::RunView;
use ax_protocol::client::Client;
use serde_json::{Value, json};

pub(crate) use ax_testkit::run_ids;

/// The config every test starts from (the harness puts the jobs folder,
/// state dir and socket ahead of it).
pub(crate) const BASE_CONFIG: &str = r#"
max_concurrency = 8
shutdown_grace = "5s"
timezone = "UTC"
[pools.default]
slots = 8
[pools.one]
slots = 1
[pools.two]
slots = 2
"#;

/// Polls `check` until it holds; fails naming `what` after `secs`.
pub(crate) fn wait_until(secs: u64, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !check() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(25));
    }
}

const AXD: &str = env!("CARGO_BIN_EXE_axd");

/// Every axd start of this test process holds this shared; a test that
/// shrinks a machine-wide limit axd takes at start (the inotify queue)
/// holds it alone, so no other test's axd starts under that limit.
pub(crate) static STARTS: RwLock<()> = RwLock::new(());

pub(crate) struct Daemon(ax_testkit::Daemon);

impl Deref for Daemon {
    type Target = ax_testkit::Daemon;
    fn deref(&self) -> &ax_testkit::Daemon {
        &self.0
    }
}

impl DerefMut for Daemon {
    fn deref_mut(&mut self) -> &mut ax_testkit::Daemon {
        &mut self.0
    }
}

impl Daemon {
    pub(crate) fn start(jobs: &[(&str, &str)]) -> Daemon {
        Daemon::start_with(BASE_CONFIG, jobs)
    }

    pub(crate) fn start_with(config: &str, jobs: &[(&str, &str)]) -> Daemon {
        let mut d = Daemon::prepare(config, jobs);
        d.spawn();
        d
    }

    /// The temp dir, config and job files, axd not started.
    pub(crate) fn prepare(config: &str, jobs: &[(&str, &str)]) -> Daemon {
        Daemon(ax_testkit::Daemon::prepare(AXD, config, jobs).unwrap_or_else(|e| panic!("{e}")))
    }

    /// Starts axd on this state dir and waits until it serves.
    pub(crate) fn spawn(&mut self) {
        let _shared = STARTS.read().unwrap_or_else(PoisonError::into_inner);
        if let Err(e) = self.0.spawn() {
            panic!("{e}");
        }
    }

    /// SIGTERM and wait; returns the exit code.
    pub(crate) fn term(&mut self) -> Option<i32> {
        self.0
            .terminate(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{e}"))
            .and_then(|status| status.code())
    }

    /// SIGUSR2 (`ax shutdown --stop-jobs`: running jobs are stopped, not
    /// left to the next axd) and wait; returns the exit code. (The cluster
    /// tests, which share this file, use none.)
    #[allow(dead_code)]
    pub(crate) fn stop_with_jobs(&mut self) -> Option<i32> {
        let pid = nix::unistd::Pid::from_raw(self.pid() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGUSR2).unwrap();
        self.0
            .wait_exit(Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("{e}"))
            .and_then(|status| status.code())
    }

    pub(crate) fn pid(&self) -> u32 {
        self.0.pid().expect("axd is running")
    }

    pub(crate) async fn client(&self) -> Client {
        Client::connect(&self.socket, "test").await.unwrap()
    }
}

pub(crate) async fn get_run(c: &mut Client, id: u64) -> RunView {
    serde_json::from_value(c.call("get_run", json!({"id": id})).await.unwrap()).unwrap()
}

/// Waits (up to `secs`) until the run satisfies `pred`; returns it.
pub(crate) async fn wait_run(
    c: &mut Client,
    id: u64,
    secs: u64,
    pred: impl Fn(&RunView) -> bool,
) -> RunView {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let r = get_run(c, id).await;
        if pred(&r) {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "run {id} never reached the condition; last: {r:#?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

pub(crate) async fn wait_state(c: &mut Client, id: u64, state: &str, secs: u64) -> RunView {
    wait_run(c, id, secs, |r| r.state.as_str() == state).await
}

pub(crate) async fn submit(c: &mut Client, params: Value) -> Vec<u64> {
    run_ids(&c.call("submit", params).await.unwrap())
}

pub(crate) async fn trigger(c: &mut Client, dag: &str) -> Vec<u64> {
    run_ids(&c.call("trigger", json!({"dag": dag})).await.unwrap())
}

pub(crate) fn pid_alive(pid: i32) -> bool {
    // A zombie is dead for our purposes.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s[s.rfind(')').unwrap() + 2..].starts_with('Z'),
        Err(_) => false,
    }
}
