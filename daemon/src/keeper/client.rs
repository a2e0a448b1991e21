//! axd's end of a keeper connection: requests answered in order, and the
//! exits of the attempts this connection supervises, each to whoever
//! waits for it.

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::net::UnixStream;
use tokio::sync::oneshot;

use super::wire::{self, Exit, Inbox, Reply, Request, WireError};

type Key = (u64, u32);
type Answer = (Reply, Vec<OwnedFd>);

#[derive(Default)]
struct Waiting {
    replies: VecDeque<oneshot::Sender<Answer>>,
    /// Spawns, answered by attempt (`Reply::Spawned`, `NotSpawned`).
    spawns: HashMap<Key, oneshot::Sender<Reply>>,
    exits: HashMap<Key, oneshot::Sender<Exit>>,
    /// The connection is gone: nothing more will be answered.
    closed: bool,
}

/// One connection to a keeper.
pub(crate) struct KeeperConn {
    stream: Arc<UnixStream>,
    /// Held while a request is queued and written, so answers come back
    /// in the order of `waiting.replies`.
    sending: tokio::sync::Mutex<()>,
    waiting: Arc<Mutex<Waiting>>,
    pub(crate) path: PathBuf,
    /// The keeper's pid: the prefix of its attempts' cookies.
    pub(crate) pid: u32,
    pub(crate) boot_id: Option<String>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for KeeperConn {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl KeeperConn {
    /// Connects and says hello. Needs a tokio runtime (its reader is a task
    /// of the current one).
    pub(crate) async fn connect(
        path: &Path,
        orphan_kill_ms: Option<u64>,
    ) -> Result<KeeperConn, WireError> {
        let stream = Arc::new(UnixStream::connect(path).await?);
        let waiting: Arc<Mutex<Waiting>> = Arc::default();
        let reader = tokio::spawn(read(stream.clone(), waiting.clone()));
        let mut conn = KeeperConn {
            stream,
            sending: tokio::sync::Mutex::new(()),
            waiting,
            path: path.to_owned(),
            pid: 0,
            boot_id: None,
            reader,
        };
        match conn
            .request(
                &Request::Hello {
                    protocol: wire::PROTOCOL,
                    orphan_kill_ms,
                },
                &[],
            )
            .await?
        {
            (
                Reply::Hello {
                    protocol,
                    pid,
                    boot_id,
                },
                _,
            ) if protocol == wire::PROTOCOL => {
                conn.pid = pid;
                conn.boot_id = boot_id;
                Ok(conn)
            }
            (Reply::Hello { protocol, .. }, _) => Err(WireError::Frame(format!(
                "the keeper speaks protocol {protocol}, this axd {}",
                wire::PROTOCOL
            ))),
            (other, _) => Err(WireError::Frame(format!("hello answered with {other:?}"))),
        }
    }

    /// Sends a request and waits for its answer.
    pub(crate) async fn request(
        &self,
        request: &Request,
        fds: &[&OwnedFd],
    ) -> Result<Answer, WireError> {
        let (tx, rx) = oneshot::channel();
        {
            let _turn = self.sending.lock().await;
            {
                let mut w = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
                if w.closed {
                    return Err(WireError::Closed);
                }
                w.replies.push_back(tx);
            }
            let raw: Vec<_> = fds.iter().map(|f| f.as_raw_fd()).collect();
            wire::send(&self.stream, request, &raw).await?;
        }
        rx.await.map_err(|_| WireError::Closed)
    }

    /// Asks for a spawn and waits for its answer (`Spawned` or
    /// `NotSpawned`), which comes by attempt, not in request order.
    pub(crate) async fn spawn(
        &self,
        request: Box<super::wire::SpawnRequest>,
        fds: &[&OwnedFd],
    ) -> Result<Reply, WireError> {
        let key = (request.run, request.attempt);
        let (tx, rx) = oneshot::channel();
        {
            let _turn = self.sending.lock().await;
            {
                let mut w = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
                if w.closed {
                    return Err(WireError::Closed);
                }
                w.spawns.insert(key, tx);
            }
            let raw: Vec<_> = fds.iter().map(|f| f.as_raw_fd()).collect();
            wire::send(&self.stream, &Request::Spawn(request), &raw).await?;
        }
        rx.await.map_err(|_| WireError::Closed)
    }

    /// Sends a request that is not answered (`Forget`).
    pub(crate) async fn tell(&self, request: &Request) -> Result<(), WireError> {
        let _turn = self.sending.lock().await;
        if self.is_closed() {
            return Err(WireError::Closed);
        }
        wire::send(&self.stream, request, &[]).await
    }

    /// The exit of an attempt this connection supervises (or is about to:
    /// call before the `Spawn` or `Take` that makes it so). Resolves with
    /// an error when the connection is lost.
    pub(crate) fn exit_of(&self, run: u64, attempt: u32) -> oneshot::Receiver<Exit> {
        let (tx, rx) = oneshot::channel();
        let mut w = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        if !w.closed {
            w.exits.insert((run, attempt), tx);
        }
        rx
    }

    /// No exit of the attempt is awaited any more.
    pub(crate) fn unwatch(&self, run: u64, attempt: u32) {
        let mut w = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
        w.exits.remove(&(run, attempt));
    }

    /// Whether the connection has closed.
    pub(crate) fn is_closed(&self) -> bool {
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .closed
    }
}

async fn read(stream: Arc<UnixStream>, waiting: Arc<Mutex<Waiting>>) {
    let mut inbox = Inbox::default();
    loop {
        let (reply, fds) = match inbox.recv::<Reply>(&stream).await {
            Ok(r) => r,
            Err(e) => {
                if !matches!(e, WireError::Closed) {
                    tracing::warn!("keeper connection: {e}");
                }
                break;
            }
        };
        let mut w = waiting.lock().unwrap_or_else(|e| e.into_inner());
        match reply {
            Reply::Exited { run, attempt, exit } => {
                if let Some(tx) = w.exits.remove(&(run, attempt)) {
                    let _ = tx.send(exit);
                }
            }
            Reply::Spawned { run, attempt, .. } | Reply::NotSpawned { run, attempt, .. } => {
                if let Some(tx) = w.spawns.remove(&(run, attempt)) {
                    let _ = tx.send(reply);
                }
            }
            other => {
                if let Some(tx) = w.replies.pop_front() {
                    let _ = tx.send((other, fds));
                }
            }
        }
    }
    let mut w = waiting.lock().unwrap_or_else(|e| e.into_inner());
    w.closed = true;
    w.replies.clear();
    w.spawns.clear();
    w.exits.clear();
}
