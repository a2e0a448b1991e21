//! The keeper process: `axd --keeper STATE_DIR`, started by axd
//! (`launch`), never by hand.
//!
//! It spawns attempts when axd asks, is their parent (and, as a child
//! subreaper, the reaper of their orphans), and keeps for each: its pid,
//! a copy of its output pipe's read end and, once it has ended, its exit
//! status, until an axd says it has recorded the end (`Forget`). While no
//! axd supervises an attempt, the keeper copies its output into its log
//! itself, so a job never blocks on a full pipe nor dies of SIGPIPE.
//!
//! It is single-purpose and small: no store, no config, no clock but the
//! monotonic one. It exits once it holds no attempt and no axd is
//! connected.

use std::collections::HashMap;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::wire::{
    self, Exit, HeldAttempt, Inbox, LogSpec, Reply, Request, SpawnRequest, WireError, monotonic_ms,
};
use crate::execution::spawn::{BaseEnv, CloseFds, Credentials, Plan, SpawnError};

/// Threads that serve connections, each on a single-threaded runtime of
/// its own, as axd's spawner threads (one connection each): a
/// connection's spawns and its jobs' exits stay on one thread, so a
/// message wakes no second thread (measured: a shared multi-threaded
/// runtime cost a no-op job more in such wake-ups), and the lanes clone in
/// parallel. A lane lives as long as the keeper: the jobs it cloned have
/// `PR_SET_PDEATHSIG` tied to it.
const LANES: usize = 4;

/// How long a keeper waits for its first axd before it gives up.
const FIRST_CONNECTION: Duration = Duration::from_secs(30);

type Key = (u64, u32);

/// The writing half of a connection: answers are written by the task that
/// makes them (no hand-off to a writer task: a wake-up less per spawn),
/// one whole frame at a time.
struct Writer {
    stream: Arc<UnixStream>,
    turn: tokio::sync::Mutex<()>,
}

impl Writer {
    async fn send(&self, reply: &Reply, fd: Option<&OwnedFd>) {
        let _turn = self.turn.lock().await;
        let fds: Vec<_> = fd.iter().map(|f| f.as_raw_fd()).collect();
        // A failure is the connection's end, which its reader sees.
        let _ = wire::send(&self.stream, reply, &fds).await;
    }
}

/// One attempt the keeper holds.
struct Entry {
    held: HeldAttempt,
    /// The keeper's copy of the output's read end, until its end of file.
    output: Option<Arc<OwnedFd>>,
    log: LogSpec,
    /// The connection that supervises it.
    supervisor: Option<u64>,
    /// The copy of its output into its log while no axd supervises it.
    drain: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct Registry {
    entries: HashMap<Key, Entry>,
    conns: HashMap<u64, Arc<Writer>>,
    next_conn: u64,
    /// Connections ever accepted (the keeper does not exit before its
    /// first).
    served: bool,
    /// In a cluster: kill every attempt this long after the last axd left.
    orphan_kill_ms: Option<u64>,
    /// Bumped at each connection, so a kill timer armed earlier stands down.
    epoch: u64,
    /// No more spawns will come (`Request::Retire`).
    retired: bool,
    /// Connections accepted and not yet taken by their lane.
    arriving: usize,
}

impl Registry {
    /// Nothing left to keep: no attempt, and no axd that may spawn one.
    fn idle(&self) -> bool {
        self.served
            && self.arriving == 0
            && self.entries.is_empty()
            && (self.conns.is_empty() || self.retired)
    }
}

struct Keeper {
    registry: Mutex<Registry>,
    /// Woken when the keeper may have become idle.
    idle: Notify,
    pid: u32,
    boot_id: Option<String>,
}

impl Keeper {
    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The socket of the keeper with this pid.
pub(crate) fn socket_path(keepers_dir: &Path, pid: u32) -> PathBuf {
    keepers_dir.join(format!("{pid}.sock"))
}

/// The keeper's `main`: serves until idle. Writes `ready` to its stdout
/// once its socket accepts connections.
pub fn main(keepers_dir: PathBuf) -> std::process::ExitCode {
    crate::execution::reaper::block_sigchld();
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    crate::execution::spawn::raise_nofile();
    // The main thread accepts connections and reaps orphans; the
    // connections are served by `LANES`.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ax keeper: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(keepers_dir)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ax keeper: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn serve(keepers_dir: PathBuf) -> std::io::Result<()> {
    if !crate::execution::reaper::become_subreaper() {
        tracing::warn!("cannot become a child subreaper; orphans of jobs go to PID 1");
    }
    tokio::spawn(crate::execution::reaper::run());
    let pid = std::process::id();
    let path = socket_path(&keepers_dir, pid);
    let _ = std::fs::remove_file(&path);
    // SAFETY: umask takes and returns integers only.
    let old = unsafe { libc::umask(0o077) };
    let listener = UnixListener::bind(&path);
    // SAFETY: as above.
    unsafe { libc::umask(old) };
    let listener = listener?;
    let keeper = Arc::new(Keeper {
        registry: Mutex::new(Registry::default()),
        idle: Notify::new(),
        pid,
        boot_id: crate::runtime::boot::current_boot_id()
            .ok()
            .map(|b| b.as_str().to_owned()),
    });
    let lanes = start_lanes(&keeper)?;
    let mut next_lane = 0;
    println!("ready");
    let _ = std::io::stdout().flush();
    let first = tokio::time::sleep(FIRST_CONNECTION);
    tokio::pin!(first);
    let bound = socket_identity(&path);
    let mut check = tokio::time::interval(UNREACHABLE_CHECK);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!("accept: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if !same_user(&stream) {
                    continue;
                }
                // Counted at once, before its lane takes it: the keeper is
                // not idle while a connection is on its way.
                {
                    let mut reg = keeper.lock();
                    reg.served = true;
                    reg.arriving += 1;
                }
                let handed = stream
                    .into_std()
                    .is_ok_and(|stream| lanes[next_lane].send(stream).is_ok());
                if handed {
                    next_lane = (next_lane + 1) % LANES;
                } else {
                    keeper.lock().arriving -= 1;
                }
            }
            _ = keeper.idle.notified() => {
                if keeper.lock().idle() {
                    break;
                }
            }
            _ = &mut first, if !keeper.lock().served => break,
            _ = check.tick() => {
                if bound.is_some() && socket_identity(&path) != bound && keeper.lock().conns.is_empty() {
                    // No axd can reach it again: nothing it holds could be
                    // taken over, so nothing of it may go on unsupervised.
                    tracing::error!(
                        "{} is gone (the state dir was removed or replaced): killing the jobs held here and exiting",
                        path.display()
                    );
                    let epoch = keeper.lock().epoch;
                    kill_orphans(&keeper, epoch);
                    return Ok(());
                }
            }
        }
    }
    let _ = std::fs::remove_file(&path);
    Ok(())
}

/// How often the keeper checks that its socket is still where axd looks
/// for it. No event tells a process that the path it bound was unlinked
/// (the state dir deleted, or replaced by a restore), and a keeper no axd
/// can reach would hold its jobs for ever.
const UNREACHABLE_CHECK: Duration = Duration::from_secs(10);

/// The socket file's device and inode, when it exists.
fn socket_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// Starts the lanes; each takes the connections it is handed.
fn start_lanes(
    keeper: &Arc<Keeper>,
) -> std::io::Result<Vec<tokio::sync::mpsc::UnboundedSender<std::os::unix::net::UnixStream>>> {
    let mut lanes = Vec::with_capacity(LANES);
    for i in 0..LANES {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<std::os::unix::net::UnixStream>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let keeper = keeper.clone();
        std::thread::Builder::new()
            .name(format!("ax-keeper-{i}"))
            .spawn(move || {
                runtime.block_on(async move {
                    while let Some(stream) = rx.recv().await {
                        match UnixStream::from_std(stream) {
                            Ok(stream) => {
                                tokio::spawn(connection(keeper.clone(), stream));
                            }
                            Err(e) => {
                                keeper.lock().arriving -= 1;
                                keeper.idle.notify_one();
                                tracing::warn!("a connection could not be served: {e}");
                            }
                        }
                    }
                    // The keeper is exiting: the jobs stay tied to this
                    // thread until the process ends.
                    std::future::pending::<()>().await
                })
            })?;
        lanes.push(tx);
    }
    Ok(lanes)
}

/// Only axd's own user (the keeper's) may talk to it.
fn same_user(stream: &UnixStream) -> bool {
    stream
        .peer_cred()
        .is_ok_and(|c| c.uid() == nix::unistd::geteuid().as_raw())
}

/// Serves one axd connection until it closes.
async fn connection(keeper: Arc<Keeper>, stream: UnixStream) {
    let stream = Arc::new(stream);
    let writer = Arc::new(Writer {
        stream: stream.clone(),
        turn: tokio::sync::Mutex::new(()),
    });
    let conn = {
        let mut reg = keeper.lock();
        reg.next_conn += 1;
        reg.served = true;
        reg.epoch += 1;
        let id = reg.next_conn;
        reg.conns.insert(id, writer.clone());
        reg.arriving = reg.arriving.saturating_sub(1);
        id
    };
    let mut inbox = Inbox::default();
    loop {
        let (request, fds) = match inbox.recv::<Request>(&stream).await {
            Ok(r) => r,
            Err(WireError::Closed) => break,
            Err(e) => {
                tracing::warn!("connection {conn}: {e}");
                break;
            }
        };
        match request {
            Request::Hello {
                protocol: _,
                orphan_kill_ms,
            } => {
                keeper.lock().orphan_kill_ms = orphan_kill_ms;
                let hello = Reply::Hello {
                    protocol: wire::PROTOCOL,
                    pid: keeper.pid,
                    boot_id: keeper.boot_id.clone(),
                };
                writer.send(&hello, None).await;
            }
            Request::Spawn(req) => spawn(&keeper, conn, &writer, *req, fds),
            Request::List => {
                let attempts = keeper
                    .lock()
                    .entries
                    .values()
                    .map(|e| e.held.clone())
                    .collect();
                writer.send(&Reply::Held { attempts }, None).await;
            }
            Request::Take { run, attempt } => take(&keeper, conn, &writer, (run, attempt)).await,
            // Not answered: axd does not wait for it.
            Request::Forget { attempts } => forget(&keeper, attempts),
            Request::Retire => {
                keeper.lock().retired = true;
                writer.send(&Reply::Retiring, None).await;
                keeper.idle.notify_one();
            }
        }
    }
    // axd has gone: drain the output of what it supervised.
    let (orphan_kill, epoch) = {
        let mut reg = keeper.lock();
        reg.conns.remove(&conn);
        let keys: Vec<Key> = reg
            .entries
            .iter()
            .filter(|(_, e)| e.supervisor == Some(conn))
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            start_drain(&keeper, &mut reg, key);
        }
        (
            reg.conns.is_empty().then_some(reg.orphan_kill_ms).flatten(),
            reg.epoch,
        )
    };
    if let Some(ms) = orphan_kill {
        let keeper = keeper.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            kill_orphans(&keeper, epoch);
        });
    }
    keeper.idle.notify_one();
}

/// In a cluster, no axd came back before the node's lease could end: the
/// attempts are killed before other nodes may run them again.
fn kill_orphans(keeper: &Keeper, epoch: u64) {
    let reg = keeper.lock();
    if reg.epoch != epoch || !reg.conns.is_empty() {
        return;
    }
    for e in reg
        .entries
        .values()
        .filter(|e| e.held.exit.is_none() && e.held.pid > 1)
    {
        tracing::warn!(
            "no axd came back within the node's lease: killing run {} attempt {}",
            e.held.run,
            e.held.attempt
        );
        // SAFETY: kill takes integers only. The leader is not reaped
        // (no exit recorded), so its pid is still its group's.
        unsafe { libc::kill(-(e.held.pid as i32), libc::SIGKILL) };
    }
}

/// axd has recorded the ends of these attempts: they are dropped.
fn forget(keeper: &Keeper, attempts: Vec<(u64, u32)>) {
    if attempts.is_empty() {
        return;
    }
    let mut reg = keeper.lock();
    for key in attempts {
        if let Some(Entry { drain: Some(d), .. }) = reg.entries.remove(&key) {
            d.abort();
        }
    }
    drop(reg);
    keeper.idle.notify_one();
}

/// How long the answer to a spawn waits for the job's exit (see
/// `Reply::Spawned`); a kill order for the attempt waits as long at most.
const SPAWNED_COALESCE: Duration = Duration::from_millis(5);

/// Starts the attempt; its answer is sent by the task that waits for it.
fn spawn(
    keeper: &Arc<Keeper>,
    conn: u64,
    writer: &Arc<Writer>,
    mut req: SpawnRequest,
    fds: Vec<OwnedFd>,
) {
    forget(keeper, std::mem::take(&mut req.forget));
    let (run, attempt) = (req.run, req.attempt);
    let not_spawned = |error: String, shortage: bool, killed_pid: Option<u32>| {
        let writer = writer.clone();
        let reply = Reply::NotSpawned {
            run,
            attempt,
            error,
            shortage,
            killed_pid,
        };
        tokio::spawn(async move { writer.send(&reply, None).await });
    };
    // Asked again for an attempt it holds (axd lost the answer and could
    // not learn it otherwise): never a second process; the asker
    // supervises the one there is.
    let held = {
        let mut reg = keeper.lock();
        reg.entries.get_mut(&(run, attempt)).map(|e| {
            e.supervisor = Some(conn);
            e.held.clone()
        })
    };
    if let Some(held) = held {
        let writer = writer.clone();
        let reply = Reply::Spawned {
            run,
            attempt,
            pid: held.pid,
            pid_start: held.pid_start,
            spawned_mono_ms: held.spawned_mono_ms,
            exit: held.exit,
        };
        tokio::spawn(async move { writer.send(&reply, None).await });
        return;
    }
    let mut fds = fds.into_iter();
    let (Some(write_end), Some(read_end)) = (fds.next(), fds.next()) else {
        // Nothing was started; axd tries again as descriptors free up.
        let error = "the keeper could not receive the job's output pipe: out of descriptors";
        return not_spawned(error.into(), true, None);
    };
    let key = (run, attempt);
    let plan = Plan {
        program: req.program.to_os().into(),
        args: req.args.iter().map(|a| a.to_os()).collect(),
        defaults: req
            .defaults
            .iter()
            .map(|(k, v)| (k.to_os(), v.to_os()))
            .collect(),
        base_env: Arc::new(BaseEnv::from_entries(
            req.base_env.iter().map(|e| e.as_bytes().to_vec()),
        )),
        env: req
            .env
            .iter()
            .map(|(k, v)| (k.to_os(), v.to_os()))
            .collect(),
        cwd: req.cwd.as_ref().map(|c| c.to_os().into()),
        credentials: req.credentials.map(|c| Credentials {
            user: c.user,
            uid: c.uid,
            gid: c.gid,
            groups: c.groups,
        }),
        umask: req.umask as libc::mode_t,
        output: write_end,
        close_fds: CloseFds::Range,
    };
    let process = match crate::execution::spawn::spawn(plan) {
        Ok(p) => p,
        Err(e) => {
            let killed_pid = match &e {
                SpawnError::Killed { pid, .. } => Some(*pid),
                SpawnError::NotStarted(_) => None,
            };
            return not_spawned(e.to_string(), e.is_shortage(), killed_pid);
        }
    };
    let spawned_mono_ms = monotonic_ms();
    let held = HeldAttempt {
        run,
        attempt,
        pid: process.pid,
        pid_start: process.start_time,
        slot: req.slot,
        spawned_mono_ms,
        last_output_mono_ms: None,
        exit: None,
    };
    keeper.lock().entries.insert(
        key,
        Entry {
            held,
            output: Some(Arc::new(read_end)),
            log: req.log,
            supervisor: Some(conn),
            drain: None,
        },
    );
    let (keeper, writer) = (keeper.clone(), writer.clone());
    tokio::spawn(async move {
        let early = tokio::select! {
            status = process.wait() => Some(status.unwrap_or((None, None))),
            _ = tokio::time::sleep(SPAWNED_COALESCE) => None,
        };
        let exit = early.map(|status| record_exit(&keeper, key, status));
        let spawned = Reply::Spawned {
            run,
            attempt,
            pid: process.pid,
            pid_start: process.start_time,
            spawned_mono_ms,
            exit,
        };
        writer.send(&spawned, None).await;
        if early.is_none() {
            let status = process.wait().await.unwrap_or((None, None));
            exited(&keeper, key, status).await;
        }
    });
}

/// Keeps the attempt's end; returns it.
fn record_exit(keeper: &Keeper, key: Key, (code, signal): (Option<i32>, Option<i32>)) -> Exit {
    let exit = Exit {
        code,
        signal,
        at_mono_ms: monotonic_ms(),
    };
    if let Some(entry) = keeper.lock().entries.get_mut(&key) {
        entry.held.exit = Some(exit);
    }
    exit
}

/// The attempt's leader is reaped: its end is kept, and told to its
/// supervisor if one is connected.
async fn exited(keeper: &Keeper, key: Key, (code, signal): (Option<i32>, Option<i32>)) {
    let exit = Exit {
        code,
        signal,
        at_mono_ms: monotonic_ms(),
    };
    let writer = {
        let mut reg = keeper.lock();
        let Some(entry) = reg.entries.get_mut(&key) else {
            return;
        };
        entry.held.exit = Some(exit);
        // The keeper's copy of the output stays until `Forget`: should axd
        // go before it has read the rest, the drain takes over.
        let Some(conn) = entry.supervisor else {
            return;
        };
        reg.conns.get(&conn).cloned()
    };
    if let Some(w) = writer {
        let exited = Reply::Exited {
            run: key.0,
            attempt: key.1,
            exit,
        };
        w.send(&exited, None).await;
    }
}

/// `Take`: the connection supervises the attempt from now on. An
/// `Exited` of it may reach axd before this answer: axd watches for it
/// before it asks.
async fn take(keeper: &Keeper, conn: u64, writer: &Writer, key: Key) {
    let drain = keeper
        .lock()
        .entries
        .get_mut(&key)
        .and_then(|e| e.drain.take());
    if let Some(d) = drain {
        // Cancelled between a read and the next: what it read is written.
        d.abort();
        let _ = d.await;
    }
    let (reply, output) = {
        let mut reg = keeper.lock();
        match reg.entries.get_mut(&key) {
            Some(entry) => {
                entry.supervisor = Some(conn);
                let output = entry.output.clone();
                let reply = Reply::Taken {
                    attempt: Some(entry.held.clone()),
                    output: output.is_some(),
                    secrets: entry.log.secrets.clone(),
                };
                (reply, output)
            }
            None => (
                Reply::Taken {
                    attempt: None,
                    output: false,
                    secrets: Vec::new(),
                },
                None,
            ),
        }
    };
    writer.send(&reply, output.as_deref()).await;
}

/// Copies the attempt's output into its log while no axd supervises it.
fn start_drain(keeper: &Arc<Keeper>, reg: &mut Registry, key: Key) {
    let Some(entry) = reg.entries.get_mut(&key) else {
        return;
    };
    entry.supervisor = None;
    let Some(output) = entry.output.clone() else {
        return;
    };
    if entry.drain.is_some() {
        return;
    }
    let path = PathBuf::from(entry.log.path.to_os());
    let max_bytes = entry.log.max_bytes;
    let redactor = crate::execution::secrets::OutputRedactor::new(
        entry.log.secrets.iter().map(String::as_str),
    );
    let keeper2 = keeper.clone();
    entry.drain = Some(tokio::spawn(async move {
        drain(&keeper2, key, output, &path, max_bytes, redactor).await;
        let mut reg = keeper2.lock();
        if let Some(e) = reg.entries.get_mut(&key) {
            e.output = None;
            e.drain = None;
        }
    }));
}

async fn drain(
    keeper: &Keeper,
    key: Key,
    output: Arc<OwnedFd>,
    path: &Path,
    max_bytes: u64,
    mut redactor: Option<crate::execution::secrets::OutputRedactor>,
) {
    // SAFETY: the descriptor is the keeper's own copy of the pipe's read
    // end, open for as long as `output` (moved into the AsyncFd) lives.
    let Ok(fd) = (unsafe {
        tokio::io::unix::AsyncFd::register_with_interest(output, tokio::io::Interest::READABLE)
    }) else {
        return;
    };
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(crate::runtime::private::FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .ok();
    let mut written = file
        .as_ref()
        .and_then(|f| f.metadata().ok())
        .map_or(0, |m| m.len());
    let mut buf = vec![0u8; 64 * 1024];
    let mut redacted = Vec::new();
    loop {
        let Ok(mut ready) = fd.readable().await else {
            return;
        };
        let n = match nix::unistd::read(fd.get_ref(), &mut buf) {
            Ok(0) => {
                // The end: what the redactor held back goes too.
                if let Some(r) = redactor.as_mut() {
                    redacted.clear();
                    r.finish(&mut redacted);
                    let keep = redacted
                        .len()
                        .min(max_bytes.saturating_sub(written) as usize);
                    if let Some(f) = file.as_mut() {
                        let _ = f.write_all(&redacted[..keep]);
                    }
                }
                return;
            }
            Ok(n) => n,
            Err(nix::errno::Errno::EAGAIN) => {
                ready.clear_ready();
                continue;
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return,
        };
        // From the read to the write there is no await: a `Take` that
        // cancels this task never loses what was read.
        let bytes: &[u8] = match redactor.as_mut() {
            Some(r) => {
                redacted.clear();
                r.feed(&buf[..n], &mut redacted);
                &redacted
            }
            None => &buf[..n],
        };
        let room = max_bytes.saturating_sub(written) as usize;
        let keep = bytes.len().min(room);
        if keep > 0
            && let Some(f) = file.as_mut()
            && f.write_all(&bytes[..keep]).is_ok()
        {
            written += keep as u64;
        }
        if let Some(e) = keeper.lock().entries.get_mut(&key) {
            e.held.last_output_mono_ms = Some(monotonic_ms());
        }
    }
}
