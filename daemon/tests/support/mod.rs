//! Starts the real `axd` binary in a temp dir and talks to it over its socket.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ax_shared::api::RunView;
use ax_shared::client::Client;
use serde_json::{Value, json};

pub struct Daemon {
    pub dir: tempfile::TempDir,
    pub child: Option<Child>,
    pub socket: PathBuf,
    pub config: PathBuf,
}

pub const BASE_CONFIG: &str = r#"
jobs_dir = "jobs.d"
state_dir = "state"
socket = "run/axd.sock"
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

impl Daemon {
    pub fn start(jobs: &[(&str, &str)]) -> Daemon {
        Daemon::start_with(BASE_CONFIG, jobs)
    }

    pub fn start_with(config: &str, jobs: &[(&str, &str)]) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("jobs.d")).unwrap();
        for (name, text) in jobs {
            let path = dir.path().join("jobs.d").join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let config_path = dir.path().join("axd.toml");
        std::fs::write(&config_path, config).unwrap();
        let socket = dir.path().join("run/axd.sock");
        let mut d = Daemon {
            dir,
            child: None,
            socket,
            config: config_path,
        };
        d.spawn();
        d
    }

    pub fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("axd.log"))
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_axd"))
            .arg("--config")
            .arg(&self.config)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("axd did not start: {}", self.log());
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("axd.log")).unwrap_or_default()
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub async fn client(&self) -> Client {
        Client::connect(&self.socket, "test").await.unwrap()
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait; returns the exit code.
    pub fn term(&mut self) -> Option<i32> {
        let mut c = self.child.take()?;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(c.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = c.try_wait().unwrap() {
                return status.code();
            }
            assert!(Instant::now() < deadline, "axd did not exit after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill9();
    }
}

pub async fn get_run(c: &mut Client, id: u64) -> RunView {
    serde_json::from_value(c.call("get_run", json!({"id": id})).await.unwrap()).unwrap()
}

/// Waits (up to `secs`) until the run satisfies `pred`; returns it.
pub async fn wait_run(
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

pub async fn wait_state(c: &mut Client, id: u64, state: &str, secs: u64) -> RunView {
    wait_run(c, id, secs, |r| r.state.as_str() == state).await
}

pub async fn submit(c: &mut Client, params: Value) -> Vec<u64> {
    let v = c.call("submit", params).await.unwrap();
    v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

pub async fn trigger(c: &mut Client, dag: &str) -> Vec<u64> {
    let v = c.call("trigger", json!({"dag": dag})).await.unwrap();
    v["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

pub fn ms(t: &Option<ax_shared::time::Timestamp>) -> i64 {
    t.expect("time set").millis()
}

pub fn pid_alive(pid: i32) -> bool {
    // A zombie is dead for our purposes.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s[s.rfind(')').unwrap() + 2..].starts_with('Z'),
        Err(_) => false,
    }
}

pub fn read_pid(path: &Path, secs: u64) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && let Ok(p) = s.trim().parse()
        {
            return p;
        }
        assert!(Instant::now() < deadline, "no pid in {}", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}
