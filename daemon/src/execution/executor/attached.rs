//! The executor's side of the keeper (`crate::keeper`): a spawner
//! thread's connections, a spawn as a request, and the process of an
//! attempt as the keeper reports it.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::oneshot;

use crate::execution::spawn::Plan;
use crate::keeper::client::KeeperConn;
use crate::keeper::launch::Keepers;
use crate::keeper::wire::{
    Bytes, Exit, HeldAttempt, LogSpec, Reply, Request, SpawnRequest, WireCredentials, monotonic_ms,
};
use ax_engine::{Millis, SpawnOrder};

/// How long ended attempts wait for a spawn to carry them to their
/// keeper before they are sent on their own.
pub(super) const FORGET_FLUSH: std::time::Duration = std::time::Duration::from_millis(100);

/// Ended attempts whose ends are committed, by keeper, until a message
/// carries them to it: the next spawn through that keeper (`Spawn`'s
/// `forget`), or a `Forget` of their own after `FORGET_FLUSH` when no
/// spawn comes. Under load, telling a keeper of ends costs no message.
#[derive(Debug, Default)]
pub(crate) struct Forgets(std::sync::Mutex<HashMap<PathBuf, Vec<(u64, u32)>>>);

impl Forgets {
    /// Adds ended attempts; true when the box was empty (a flush is due).
    pub(super) fn add(&self, ended: Vec<(PathBuf, u64, u32)>) -> bool {
        let mut by_keeper = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let was_empty = by_keeper.is_empty();
        for (keeper, run, attempt) in ended {
            by_keeper.entry(keeper).or_default().push((run, attempt));
        }
        was_empty
    }

    /// The ended attempts of one keeper, taken out.
    pub(super) fn take(&self, keeper: &Path) -> Vec<(u64, u32)> {
        let mut by_keeper = self.0.lock().unwrap_or_else(|e| e.into_inner());
        by_keeper.remove(keeper).unwrap_or_default()
    }

    /// Every keeper's, taken out.
    pub(super) fn take_all(&self) -> HashMap<PathBuf, Vec<(u64, u32)>> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Tells every keeper of its ended attempts now, blocking: at axd's
    /// exit, once the writer has committed its last step, so that a keeper
    /// left holding nothing exits too.
    pub(crate) fn tell_all_now(&self) {
        for (keeper, attempts) in self.take_all() {
            if let Ok(mut stream) = std::os::unix::net::UnixStream::connect(&keeper) {
                let _ = stream.set_write_timeout(Some(std::time::Duration::from_secs(1)));
                let _ =
                    crate::keeper::wire::send_blocking(&mut stream, &Request::Forget { attempts });
            }
        }
    }
}

/// How long a keeper may take to answer a connection or a `Take`.
pub(super) const KEEPER_ANSWER: std::time::Duration = std::time::Duration::from_secs(5);

/// A spawner thread's connections to keepers, by socket.
#[derive(Clone)]
pub(super) struct Conns {
    pub(super) keepers: Arc<Keepers>,
    open: Arc<tokio::sync::Mutex<HashMap<PathBuf, Arc<KeeperConn>>>>,
}

impl Conns {
    pub(super) fn new(keepers: Arc<Keepers>) -> Conns {
        Conns {
            keepers,
            open: Arc::default(),
        }
    }

    /// The connection to the keeper at `path`, made when there is none.
    pub(super) async fn to(&self, path: &Path) -> Result<Arc<KeeperConn>, String> {
        let mut open = self.open.lock().await;
        if let Some(c) = open.get(path).filter(|c| !c.is_closed()) {
            return Ok(c.clone());
        }
        let conn = tokio::time::timeout(
            KEEPER_ANSWER,
            KeeperConn::connect(path, self.keepers.orphan_kill_ms),
        )
        .await
        .map_err(|_| "the keeper did not answer".to_string())?
        .map_err(|e| e.to_string())?;
        let conn = Arc::new(conn);
        open.insert(path.to_owned(), conn.clone());
        Ok(conn)
    }

    /// The connection to the keeper new attempts are spawned through.
    pub(super) async fn current(&self) -> Result<Arc<KeeperConn>, String> {
        let path = self
            .keepers
            .current()
            .map_err(|e| format!("cannot start the keeper: {e}"))?;
        match self.to(&path).await {
            Ok(c) => Ok(c),
            Err(e) => {
                self.keepers.lost(&path);
                Err(e)
            }
        }
    }
}

/// The attempt as its keeper holds it, taken (again) over a new
/// connection to the keeper at `path`: after a connection was lost with
/// the keeper still alive, so that an attempt it spawned is never spawned
/// twice nor left unsupervised. `None`: the keeper is gone or holds no
/// such attempt.
pub(super) async fn retake(
    conns: &Conns,
    path: &Path,
    run: u64,
    attempt: u32,
) -> Option<(Arc<KeeperConn>, oneshot::Receiver<Exit>, HeldAttempt)> {
    let conn = conns.to(path).await.ok()?;
    let exit = conn.exit_of(run, attempt);
    let taken = tokio::time::timeout(
        KEEPER_ANSWER,
        conn.request(&Request::Take { run, attempt }, &[]),
    )
    .await
    .unwrap_or(Err(crate::keeper::wire::WireError::Closed));
    match taken {
        Ok((
            Reply::Taken {
                attempt: Some(held),
                ..
            },
            _,
        )) => {
            tracing::warn!(run, attempt, "keeper connection lost and made again");
            Some((conn, exit, held))
        }
        _ => {
            conn.unwatch(run, attempt);
            None
        }
    }
}

/// An attempt's process, spawned (or held) by a keeper.
pub(super) struct Attached {
    pub(super) pid: u32,
    pub(super) pid_start: Option<u64>,
    /// Its exit, told by the keeper; an error when the keeper is lost.
    pub(super) exit: oneshot::Receiver<Exit>,
    pub(super) conn: Arc<KeeperConn>,
    /// When it was spawned, on the engine's clock.
    pub(super) spawned_at: Millis,
}

/// A `CLOCK_MONOTONIC` time (ms) of the keeper's on the engine's clock.
pub(super) fn engine_time(mono_ms: i64) -> Millis {
    crate::runtime::time::steady_ms() - (monotonic_ms() - mono_ms).max(0)
}

/// The keeper's request for `plan`, with the pipe's ends to send beside
/// it (write end first).
pub(super) fn spawn_request(
    plan: Plan,
    order: &SpawnOrder,
    log: LogSpec,
) -> (SpawnRequest, OwnedFd) {
    let pair = |(k, v): &(std::ffi::OsString, std::ffi::OsString)| {
        (Bytes::from(k.as_os_str()), Bytes::from(v.as_os_str()))
    };
    let request = SpawnRequest {
        run: order.run.0,
        attempt: order.attempt,
        slot: order.slot,
        program: Bytes::from(plan.program.as_os_str()),
        args: plan
            .args
            .iter()
            .map(|a| Bytes::from(a.as_os_str()))
            .collect(),
        defaults: plan.defaults.iter().map(pair).collect(),
        base_env: plan.base_env.entries().map(Bytes::of).collect(),
        env: plan.env.iter().map(pair).collect(),
        cwd: plan.cwd.as_ref().map(|c| Bytes::from(c.as_os_str())),
        credentials: plan.credentials.as_ref().map(|c| WireCredentials {
            user: c.user.clone(),
            uid: c.uid,
            gid: c.gid,
            groups: c.groups.clone(),
        }),
        umask: plan.umask,
        log,
        forget: Vec::new(),
    };
    (request, plan.output)
}
