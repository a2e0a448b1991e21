//! A real `axd` in a temp dir: its config, jobs folder and state dir, the
//! process, and its log.
//!
//! Where the binary is, the caller says: cargo names it (in
//! `CARGO_BIN_EXE_axd`) only to the daemon crate's own tests, so those pass
//! that path, other test crates use [`axd_beside`] with their own binary
//! (building it when missing), and ax-bench finds it next to itself.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use thiserror::Error;

use crate::conn::Conn;

/// Where every harness daemon keeps its files, relative to its temp dir;
/// written ahead of the caller's config (top-level keys precede tables).
const LOCATIONS: &str = "jobs_dir = \"jobs.d\"\nstate_dir = \"state\"\nsocket = \"run/axd.sock\"\n";

/// How long a start may take to serve: a restart on a store of a million
/// runs, on a loaded machine, stays well inside it.
const START_LIMIT: Duration = Duration::from_secs(120);

/// How long [`Daemon::stop`] waits after SIGTERM before SIGKILL.
const STOP_LIMIT: Duration = Duration::from_secs(60);

#[derive(Debug, Error)]
pub enum HarnessError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{path} not found: {hint}")]
    NoBinary { path: PathBuf, hint: &'static str },
    #[error("`cargo build` of axd failed ({0})")]
    Build(ExitStatus),
    #[error("axd exited ({status}) before serving:\n{log}\nlock holders: {lock_holders}")]
    ExitedEarly {
        status: ExitStatus,
        log: String,
        lock_holders: String,
    },
    #[error("axd did not serve within {} s:\n{log}", START_LIMIT.as_secs())]
    NotServing { log: String },
    #[error("axd did not exit within {limit:?} of SIGTERM (killed):\n{log}")]
    NoExit { limit: Duration, log: String },
}

/// `axd` next to `exe` (test binaries live one level down, in `deps/`),
/// built with cargo when it is not there yet.
pub fn axd_beside(exe: &Path) -> Result<PathBuf, HarnessError> {
    let dir = exe.parent().unwrap_or(Path::new("."));
    let candidates = [Some(dir), dir.parent()];
    if let Some(found) = candidates
        .into_iter()
        .flatten()
        .map(|d| d.join("axd"))
        .find(|p| p.exists())
    {
        return Ok(found);
    }
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let status = Command::new(cargo)
        .args(["build", "-p", "ax-daemon", "--bin", "axd"])
        .status()?;
    if !status.success() {
        return Err(HarnessError::Build(status));
    }
    candidates
        .into_iter()
        .flatten()
        .map(|d| d.join("axd"))
        .find(|p| p.exists())
        .ok_or_else(|| HarnessError::NoBinary {
            path: dir.join("axd"),
            hint: "cargo built axd elsewhere (another target dir?)",
        })
}

/// A wrapper for [`Daemon::set_wrapper`] that starts axd as root without
/// `CAP_DAC_OVERRIDE` and `CAP_DAC_READ_SEARCH` (util-linux `setpriv`):
/// file modes then bind it as they bind any user, so a folder made mode
/// 000 really is unreadable to it, as to an axd of another user. `None`
/// when this process is not root or has no `setpriv`.
pub fn without_file_override() -> Option<Vec<OsString>> {
    let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"]
        .into_iter()
        .find(|p| Path::new(p).exists())?;
    if !nix::unistd::geteuid().is_root() {
        return None;
    }
    let drop = "-dac_override,-dac_read_search";
    Some(vec![
        setpriv.into(),
        format!("--inh-caps={drop}").into(),
        format!("--bounding-set={drop}").into(),
    ])
}

/// One axd and its temp dir. The files live as long as this value; the
/// process is killed (SIGKILL) when it is dropped, so a test that wants a
/// clean exit calls [`Daemon::terminate`].
pub struct Daemon {
    /// The temp dir: `axd.toml`, `jobs.d/`, `state/`, `run/axd.sock`, `axd.log`.
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub config: PathBuf,
    axd: PathBuf,
    child: Option<Child>,
    env: Vec<(OsString, OsString)>,
    /// A program (and its arguments) axd is started through.
    wrapper: Vec<OsString>,
    log_level: String,
    /// The umask axd starts with (the test's own when `None`).
    umask: Option<u32>,
    /// Who axd runs as: uid, gid, supplementary groups (the test's
    /// user when `None`).
    user: Option<(u32, u32, Vec<u32>)>,
    /// RLIMIT_NOFILE (soft and hard) axd starts with, as `ulimit -n` would.
    nofile: Option<u64>,
}

impl Daemon {
    /// A temp dir with `config` (after the harness's file locations) and
    /// the job files `(path in jobs.d, text)`; axd is not started.
    pub fn prepare(
        axd: impl Into<PathBuf>,
        config: &str,
        jobs: &[(&str, &str)],
    ) -> Result<Daemon, HarnessError> {
        let dir = tempfile::tempdir()?;
        std::fs::create_dir_all(dir.path().join("jobs.d"))?;
        // Modes set whatever the test's umask: axd loads only files and
        // folders no group or other user may write (docs/users.md).
        use std::os::unix::fs::PermissionsExt;
        let mode = |m| std::fs::Permissions::from_mode(m);
        std::fs::set_permissions(dir.path().join("jobs.d"), mode(0o755))?;
        for (name, text) in jobs {
            let path = dir.path().join("jobs.d").join(name);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
                std::fs::set_permissions(parent, mode(0o755))?;
            }
            std::fs::write(&path, text)?;
            std::fs::set_permissions(&path, mode(0o644))?;
        }
        let config_path = dir.path().join("axd.toml");
        std::fs::write(&config_path, format!("{LOCATIONS}{config}"))?;
        Ok(Daemon {
            socket: dir.path().join("run/axd.sock"),
            config: config_path,
            dir,
            axd: axd.into(),
            child: None,
            env: Vec::new(),
            wrapper: Vec::new(),
            log_level: "info".into(),
            umask: None,
            user: None,
            nofile: None,
        })
    }

    /// [`Daemon::prepare`], then [`Daemon::spawn`].
    pub fn start(
        axd: impl Into<PathBuf>,
        config: &str,
        jobs: &[(&str, &str)],
    ) -> Result<Daemon, HarnessError> {
        let mut daemon = Daemon::prepare(axd, config, jobs)?;
        daemon.spawn()?;
        Ok(daemon)
    }

    /// Sets `RUST_LOG` for the starts that follow (`info` until set).
    pub fn set_log_level(&mut self, level: &str) {
        self.log_level = level.into();
    }

    /// Sets the umask axd starts with, for the starts that follow.
    pub fn set_umask(&mut self, umask: u32) {
        self.umask = Some(umask);
    }

    /// Runs axd as `user` (with its groups) for the starts that follow,
    /// and gives the temp dir and everything in it to that user.
    pub fn run_as(&mut self, user: &crate::users::User) -> Result<(), HarnessError> {
        chown_tree(self.dir.path(), user.uid, user.gid)?;
        self.user = Some((user.uid, user.gid, user.groups()));
        Ok(())
    }

    /// Starts that follow run with an open-files limit of `n`, soft and
    /// hard (axd cannot raise it): descriptor exhaustion, for real.
    pub fn set_nofile(&mut self, n: u64) {
        self.nofile = Some(n);
    }

    /// Sets an environment variable for the starts that follow.
    pub fn set_env(&mut self, key: &str, value: impl Into<OsString>) {
        self.env.push((key.into(), value.into()));
    }

    /// Starts axd through `argv` (a program and its arguments; axd's own
    /// command line is appended) for the starts that follow, e.g.
    /// [`without_file_override`].
    pub fn set_wrapper(&mut self, argv: Vec<OsString>) {
        self.wrapper = argv;
    }

    /// Starts axd on this dir's state and waits until it answers a
    /// request; returns the time from launch to that answer.
    pub fn spawn(&mut self) -> Result<Duration, HarnessError> {
        let launched = Instant::now();
        self.launch()?;
        self.wait_serving(launched)
    }

    /// Starts axd without waiting for it. Its stderr is appended to
    /// `axd.log`, so the log holds every life of this state dir.
    pub fn launch(&mut self) -> Result<(), HarnessError> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("axd.log"))?;
        let mut command = match self.wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(&self.axd);
                c
            }
            None => Command::new(&self.axd),
        };
        command
            .arg("--config")
            .arg(&self.config)
            .env("RUST_LOG", &self.log_level)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log);
        if self.umask.is_some() || self.user.is_some() {
            let umask = self.umask;
            let user = self.user.clone().map(|(uid, gid, groups)| {
                let groups: Vec<nix::unistd::Gid> =
                    groups.into_iter().map(nix::unistd::Gid::from_raw).collect();
                (uid, gid, groups)
            });
            use std::os::unix::process::CommandExt;
            // SAFETY: between fork and exec only async-signal-safe calls
            // are made (umask, setgroups, setgid, setuid) on values built
            // before the fork.
            unsafe {
                command.pre_exec(move || {
                    if let Some(mask) = umask {
                        nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(mask));
                    }
                    if let Some((uid, gid, groups)) = &user {
                        nix::unistd::setgroups(groups)?;
                        nix::unistd::setgid(nix::unistd::Gid::from_raw(*gid))?;
                        nix::unistd::setuid(nix::unistd::Uid::from_raw(*uid))?;
                    }
                    Ok(())
                });
            }
        }
        if let Some(n) = self.nofile {
            use std::os::unix::process::CommandExt;
            let lim = libc::rlimit {
                rlim_cur: n,
                rlim_max: n,
            };
            // SAFETY: setrlimit is async-signal-safe and reads only `lim`,
            // a copy owned by the closure.
            unsafe {
                command.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        let child = command.spawn()?;
        self.child = Some(child);
        Ok(())
    }

    /// Waits until axd answers `hello` and `status`; returns the time
    /// since `since`. An axd that exits first is reported at once, with
    /// its log and whoever holds its state dir's lock.
    pub fn wait_serving(&mut self, since: Instant) -> Result<Duration, HarnessError> {
        while since.elapsed() < START_LIMIT {
            if let Ok(mut conn) = Conn::open(&self.socket, "ax-testkit")
                && conn.call("status", json!({})).is_ok()
            {
                return Ok(since.elapsed());
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                return Err(HarnessError::ExitedEarly {
                    status,
                    log: self.log(),
                    lock_holders: self.lock_holders(),
                });
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        Err(HarnessError::NotServing { log: self.log() })
    }

    fn lock_holders(&self) -> String {
        Command::new("fuser")
            .arg("-v")
            .arg(self.dir.path().join("state/axd.lock"))
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stderr).into_owned()
                    + &String::from_utf8_lossy(&o.stdout)
            })
            .unwrap_or_default()
    }

    /// SIGKILL and reap, as a crash would end it; nothing if not running.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then waits up to `limit` for the exit; past it, SIGKILL and
    /// an error. `None` if axd was not running.
    pub fn terminate(&mut self, limit: Duration) -> Result<Option<ExitStatus>, HarnessError> {
        let Some(mut child) = self.child.take() else {
            return Ok(None);
        };
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        // ESRCH only: the child is ours and not reaped yet.
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let sent = Instant::now();
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(Some(status));
            }
            if sent.elapsed() > limit {
                let _ = child.kill();
                let _ = child.wait();
                return Err(HarnessError::NoExit {
                    limit,
                    log: self.log(),
                });
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Waits up to `limit` for axd to exit by itself; `None` if it still
    /// runs then (or was not running).
    pub fn wait_exit(&mut self, limit: Duration) -> std::io::Result<Option<ExitStatus>> {
        let since = Instant::now();
        while since.elapsed() < limit {
            let Some(child) = self.child.as_mut() else {
                return Ok(None);
            };
            if let Some(status) = child.try_wait()? {
                self.child = None;
                return Ok(Some(status));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(None)
    }

    /// SIGTERM and wait for the exit, whatever it is.
    pub fn stop(&mut self) {
        let _ = self.terminate(STOP_LIMIT);
    }

    /// How axd exited, once it has (reaped here); `None` while it runs
    /// or when it was not started.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok()??;
        self.child = None;
        Some(status)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `axd.log`: the stderr of every life of this state dir.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("axd.log")).unwrap_or_default()
    }

    /// A path in the temp dir.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
}

/// `chown -R uid:gid dir`.
fn chown_tree(dir: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    std::os::unix::fs::lchown(dir, Some(uid), Some(gid))?;
    if std::fs::symlink_metadata(dir)?.is_dir() {
        for entry in std::fs::read_dir(dir)? {
            chown_tree(&entry?.path(), uid, gid)?;
        }
    }
    Ok(())
}

impl Drop for Daemon {
    /// axd is killed, and so are its keepers: the jobs they hold die with
    /// them (SIGKILL by the kernel, `PR_SET_PDEATHSIG`), so no test leaves
    /// a job running after its temp dir is gone.
    fn drop(&mut self) {
        self.kill9();
        self.kill_keepers();
    }
}

impl Daemon {
    /// The pids of the keepers of this state dir that still run
    /// (`state/keepers/<pid>.sock`, checked against the process's
    /// command line: pids are reused).
    pub fn keepers(&self) -> Vec<i32> {
        let dir = self.dir.path().join("state/keepers");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name();
                let pid: i32 = name.to_str()?.strip_suffix(".sock")?.parse().ok()?;
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
                let ours = String::from_utf8_lossy(&cmdline).contains(&*dir.to_string_lossy());
                ours.then_some(pid)
            })
            .collect()
    }

    /// SIGKILL to every keeper of this state dir (their jobs die with them).
    pub fn kill_keepers(&self) {
        for pid in self.keepers() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}
