//! Starting keepers, and finding those an earlier axd left.
//!
//! Keepers live in `state_dir/keepers/` (0700), each as `<pid>.sock`. Each
//! life of axd starts a keeper of its own for the attempts it spawns, so a
//! new version's spawns never go through an old version's code; a keeper
//! from an earlier life is only asked for its attempts, told to retire,
//! and exits once it holds none.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use super::client::KeeperConn;
use super::wire::{HeldAttempt, Reply, Request};

/// How long a new keeper may take to accept connections.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// The folder of the keepers' sockets.
pub(crate) fn keepers_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("keepers")
}

/// The keepers of one axd: where they live, and the one it spawns through.
#[derive(Debug)]
pub(crate) struct Keepers {
    dir: PathBuf,
    current: Mutex<Option<PathBuf>>,
    /// A connection to the current keeper for as long as this axd lives:
    /// the keeper counts it, so a keeper that never spawned anything still
    /// exits when this axd does.
    held: Mutex<Option<std::os::unix::net::UnixStream>>,
    /// In a cluster, how long a keeper keeps attempts with no axd
    /// connected (see `Request::Hello`).
    pub(crate) orphan_kill_ms: Option<u64>,
}

impl Keepers {
    pub(crate) fn new(dir: PathBuf, orphan_kill_ms: Option<u64>) -> Keepers {
        Keepers {
            dir,
            current: Mutex::new(None),
            held: Mutex::new(None),
            orphan_kill_ms,
        }
    }

    /// The socket of the keeper new attempts are spawned through; a new
    /// keeper is started when there is none (or `lost` said it died).
    /// Blocks while a keeper starts.
    pub(crate) fn current(&self) -> std::io::Result<PathBuf> {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = current.as_ref() {
            return Ok(p.clone());
        }
        let path = start(&self.dir)?;
        *self.held.lock().unwrap_or_else(|e| e.into_inner()) =
            std::os::unix::net::UnixStream::connect(&path).ok();
        *current = Some(path.clone());
        Ok(path)
    }

    /// The socket of the keeper new attempts are spawned through, when one
    /// was started (never starts one).
    pub(crate) fn known(&self) -> Option<PathBuf> {
        self.current
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The keeper at `path` could not be reached: if its process is gone,
    /// the next `current` starts another. One that lives is kept (axd may
    /// only be short of descriptors itself): its jobs are never orphaned
    /// by a second keeper.
    pub(crate) fn lost(&self, path: &Path) {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.as_deref() == Some(path) && !alive(path) {
            *current = None;
        }
    }
}

/// Whether the keeper whose socket is `path` (`<pid>.sock`) still runs.
fn alive(path: &Path) -> bool {
    let Some(pid) = path
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse::<u32>().ok())
    else {
        return false;
    };
    // A process of that pid that is a keeper (pids are reused); a zombie
    // has an empty command line.
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == b"--keeper"))
}

/// A keeper whose jobs cannot be taken over (it does not answer, or speaks
/// another protocol) is killed, and its jobs with it: their runs are
/// `interrupted` and run again, never run beside a process nobody
/// supervises.
fn give_up(path: &Path, why: &str) {
    let pid = path
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse::<i32>().ok())
        .filter(|pid| *pid > 1);
    match pid {
        Some(pid) if alive(path) => {
            tracing::error!(
                "keeper {} (pid {pid}): {why}; killing it and its jobs, whose runs are interrupted",
                path.display()
            );
            // SAFETY: kill takes integers only.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        _ => tracing::warn!("keeper {}: {why}", path.display()),
    }
    let _ = std::fs::remove_file(path);
}

/// Starts a keeper (`axd --keeper DIR`) in a session of its own, and
/// returns its socket once it accepts connections. Its stderr goes to
/// `keeper.log` in the folder.
pub(crate) fn start(dir: &Path) -> std::io::Result<PathBuf> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let log = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(dir.join("keeper.log"))?;
    let nofile = crate::execution::spawn::original_nofile();
    let mut command = std::process::Command::new("/proc/self/exe");
    command
        .arg0("axd-keeper")
        .arg("--keeper")
        .arg(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(log);
    // SAFETY: the hook runs in the forked child before exec and calls only
    // async-signal-safe functions (setsid, getrlimit, setrlimit).
    unsafe {
        command.pre_exec(move || {
            // Its own session: a signal to axd's group is not the keeper's.
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The limit axd started with, so jobs get it (the keeper
            // raises its own again and remembers this one).
            if nofile != 0 {
                let mut lim = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
                    lim.rlim_cur = nofile;
                    libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
                }
            }
            Ok(())
        });
    }
    let mut child = command.spawn()?;
    let pid = child.id();
    let mut stdout = child.stdout.take().expect("piped");
    let mut poll = libc::pollfd {
        fd: stdout.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll reads and writes the one local pollfd it is given.
    let ready = unsafe { libc::poll(&mut poll, 1, READY_WITHIN.as_millis() as libc::c_int) };
    let mut line = [0u8; 6];
    let said = if ready == 1 {
        stdout.read(&mut line).unwrap_or(0)
    } else {
        0
    };
    if &line[..said] != b"ready\n" {
        // SAFETY: kill takes integers only; the child is ours, not reaped.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        let _ = child.wait();
        return Err(std::io::Error::other(format!(
            "the keeper (pid {pid}) did not start; see {}",
            dir.join("keeper.log").display()
        )));
    }
    // The keeper outlives this `Child`; axd's orphan reaper reaps it if it
    // exits first.
    drop(child);
    Ok(super::serve::socket_path(dir, pid))
}

/// A keeper an earlier axd left, with the attempts it holds.
pub(crate) struct Found {
    pub(crate) conn: KeeperConn,
    pub(crate) attempts: Vec<HeldAttempt>,
}

/// Every keeper in `dir` that answers, with its attempts. A socket no
/// keeper answers on is removed; a keeper that speaks another protocol is
/// left alone (its attempts cannot be taken over).
pub(crate) async fn inventory(dir: &Path, orphan_kill_ms: Option<u64>) -> Vec<Found> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "sock") {
            continue;
        }
        let conn = match tokio::time::timeout(
            Duration::from_secs(2),
            KeeperConn::connect(&path, orphan_kill_ms),
        )
        .await
        {
            Ok(Ok(conn)) => conn,
            Ok(Err(super::wire::WireError::Io(e)))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
                ) =>
            {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            Ok(Err(e)) => {
                give_up(&path, &e.to_string());
                continue;
            }
            Err(_) => {
                give_up(&path, "it did not answer within 2 s");
                continue;
            }
        };
        let listed =
            tokio::time::timeout(Duration::from_secs(2), conn.request(&Request::List, &[])).await;
        match listed {
            Ok(Ok((Reply::Held { attempts }, _))) => found.push(Found { conn, attempts }),
            Ok(Ok((other, _))) => give_up(&path, &format!("it answered {other:?}")),
            Ok(Err(e)) => give_up(&path, &e.to_string()),
            Err(_) => give_up(&path, "it did not list its jobs within 2 s"),
        }
    }
    found
}
