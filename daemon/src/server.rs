//! The Unix socket (docs/protocol.md): JSON-RPC 2.0 over NDJSON.
//!
//! Each connection is one task: it reads frames (at most `MAX_FRAME` bytes,
//! bigger ones get an error and the connection is closed), requires `hello`
//! first, answers each request through the scheduler, and, once subscribed,
//! forwards change notifications. Notifications come from a bounded
//! broadcast channel: a client that does not read falls behind, gets a
//! `lagged` notice and must resubscribe; it never slows the scheduler or
//! other clients.

use std::collections::{HashMap, VecDeque};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use ax_protocol::api::{HelloAnswer, LogChunk, Role};
use ax_protocol::request::{Hello, LogInfo, Logs};
use ax_protocol::{
    Lagged, MAX_FRAME, Message, Method, Notification, PROTOCOL_VERSION, Request, RpcError, codes,
    decode_request, encode_answer,
};
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesOrdered;
use futures_util::{FutureExt, SinkExt, StreamExt};
use serde_json::Value;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::broadcast;
use tokio_util::bytes::BytesMut;
use tokio_util::codec::{Decoder, Encoder, Framed, LinesCodec, LinesCodecError};

use crate::config::Limits;
use crate::executor::log_path;
use crate::ratelog::{RateLog, held_back};
use crate::scheduler::{Handle, Peer};
use crate::shutdown::Shutdown;
use ax_engine::RunId;

/// Requests of one connection in flight at once.
const MAX_INFLIGHT: usize = 4096;

/// How long a follow that found no new output waits before looking again.
pub(crate) const FOLLOW_PAUSE: Duration = Duration::from_millis(100);

#[derive(Clone, Debug, Default)]
pub struct Access {
    pub owner_uid: u32,
    pub admin_gid: Option<u32>,
    pub socket_gid: Option<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("another axd is already serving {0}")]
    Live(String),
    #[error("cannot create socket {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    /// `chown` to the socket's group failed: without it the group's
    /// members would get "Permission denied".
    #[error(
        "cannot give {path} to group {group} (gid {gid}): {errno}: axd runs as {user}, which may \
         only give files to groups it is in. Add {user} to {group} (`usermod -aG {group} {user}`, \
         then restart axd), run axd as root, or remove socket_group/admin_group from axd.toml"
    )]
    Group {
        path: String,
        group: String,
        gid: u32,
        /// axd's user: its name, else `uid N`.
        user: String,
        errno: nix::Error,
    },
}

/// Gives `path` to group `gid`; the error names the group, axd's user and
/// what to do.
fn give_to_group(path: &Path, gid: u32) -> Result<(), BindError> {
    let raw = gid;
    let gid = nix::unistd::Gid::from_raw(gid);
    nix::unistd::chown(path, None, Some(gid)).map_err(|errno| {
        let group = match nix::unistd::Group::from_gid(gid) {
            Ok(Some(g)) => g.name,
            _ => format!("gid {gid}"),
        };
        let uid = nix::unistd::geteuid();
        let user = match nix::unistd::User::from_uid(uid) {
            Ok(Some(u)) => u.name,
            _ => format!("uid {uid}"),
        };
        BindError::Group {
            path: path.display().to_string(),
            group,
            gid: raw,
            user,
            errno,
        }
    })
}

/// Creates the socket's directory (0750 with groups, else 0700) and binds
/// the socket under a restrictive umask so it is never briefly wider than
/// its final mode (0660 with groups, else 0600). A stale socket is replaced;
/// a live daemon's is never touched.
///
/// `groups` are the gids that may open the socket (`socket_group`, then
/// `admin_group`). The first owns the file (and the directory, when axd
/// creates it); each other one gets the group permissions through a POSIX
/// ACL entry, since a file has one owning group and members of either
/// group must be able to connect. Where the filesystem refuses ACLs, the
/// log says which group's members cannot connect (unless also members of
/// the first).
pub fn bind(path: &Path, groups: &[u32]) -> Result<UnixListener, BindError> {
    let io = |source| BindError::Io {
        path: path.display().to_string(),
        source,
    };
    let owner_group = groups.first().copied();
    let extra_groups: Vec<u32> = groups
        .iter()
        .copied()
        .filter(|&g| Some(g) != owner_group)
        .collect();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::create_dir_all(dir).map_err(io)?;
            let mode = if owner_group.is_some() { 0o750 } else { 0o700 };
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).map_err(io)?;
            if let Some(gid) = owner_group {
                give_to_group(dir, gid)?;
                grant_groups(dir, &extra_groups, AclPerm::DIR);
            }
        }
    }
    if path.exists() {
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => return Err(BindError::Live(path.display().to_string())),
            Err(_) => {
                tracing::info!("replacing stale socket {}", path.display());
                std::fs::remove_file(path).map_err(io)?;
            }
        }
    }
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let listener = UnixListener::bind(path);
    nix::sys::stat::umask(old);
    let listener = listener.map_err(io)?;
    if let Some(gid) = owner_group {
        if let Err(e) = give_to_group(path, gid) {
            let _ = std::fs::remove_file(path);
            return Err(e);
        }
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660)).map_err(io)?;
        grant_groups(path, &extra_groups, AclPerm::SOCKET);
    }
    Ok(listener)
}

/// Permission bits of a POSIX ACL entry (r = 4, w = 2, x = 1), for the
/// owner, the owning group and the named groups; others get none.
struct AclPerm {
    owner: u16,
    group: u16,
}

impl AclPerm {
    /// 0750: the owner all, the groups may pass and list.
    const DIR: AclPerm = AclPerm { owner: 7, group: 5 };
    /// 0660: connecting to a socket needs write permission.
    const SOCKET: AclPerm = AclPerm { owner: 6, group: 6 };
}

/// Gives each of `gids` the group permissions of `perm` on `path` with an
/// access ACL; the mode bits shown stay those of `perm` (the ACL mask is
/// the group's permission).
fn grant_groups(path: &Path, gids: &[u32], perm: AclPerm) {
    if gids.is_empty() {
        return;
    }
    if let Err(e) = set_access_acl(path, gids, &perm) {
        tracing::warn!(
            "cannot give groups {gids:?} access to {} with an ACL ({e}): \
             their members cannot connect unless also in the socket's group",
            path.display()
        );
    }
}

/// Writes `system.posix_acl_access` in the kernel's format: a version
/// (2), then entries of tag (u16), permissions (u16) and id (u32), all
/// little-endian, ordered by tag and then id.
fn set_access_acl(path: &Path, gids: &[u32], perm: &AclPerm) -> std::io::Result<()> {
    const VERSION: u32 = 2;
    const USER_OBJ: u16 = 0x01;
    const GROUP_OBJ: u16 = 0x04;
    const GROUP: u16 = 0x08;
    const MASK: u16 = 0x10;
    const OTHER: u16 = 0x20;
    const NO_ID: u32 = u32::MAX;
    let mut named: Vec<u32> = gids.to_vec();
    named.sort_unstable();
    named.dedup();
    let mut entries = vec![
        (USER_OBJ, perm.owner, NO_ID),
        (GROUP_OBJ, perm.group, NO_ID),
    ];
    entries.extend(named.iter().map(|&gid| (GROUP, perm.group, gid)));
    entries.extend([(MASK, perm.group, NO_ID), (OTHER, 0, NO_ID)]);
    let mut acl = VERSION.to_le_bytes().to_vec();
    for (tag, bits, id) in entries {
        acl.extend_from_slice(&tag.to_le_bytes());
        acl.extend_from_slice(&bits.to_le_bytes());
        acl.extend_from_slice(&id.to_le_bytes());
    }
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: both names are NUL-terminated strings and `acl` a buffer of
    // the length passed, all alive for the call; setxattr only reads them.
    let r = unsafe {
        libc::setxattr(
            c_path.as_ptr(),
            c"system.posix_acl_access".as_ptr(),
            acl.as_ptr().cast(),
            acl.len(),
            0,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Accepts clients until the shutdown value says `Stopped`. A peer whose
/// uid already holds `limits.connections_per_uid` connections gets a
/// `too_many_connections` error and is closed; a failing `accept` (no
/// descriptors left) is retried after a pause that doubles up to 1 s. Both
/// are logged at most once per 10 s.
pub async fn serve(
    listener: UnixListener,
    handle: Handle,
    access: Access,
    limits: Limits,
    shutdown: Shutdown,
) {
    let stopped = shutdown.stopped();
    tokio::pin!(stopped);
    let per_uid: PerUid = Arc::default();
    let mut pause = ACCEPT_PAUSE;
    let (mut accept_log, mut full_log) = (RateLog::default(), RateLog::default());
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    if let Some(n) = accept_log.allow(std::time::Instant::now()) {
                        tracing::warn!("accept: {e}; retrying in up to {ACCEPT_PAUSE_MAX:?}{}", held_back(n));
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(ACCEPT_PAUSE_MAX);
                    continue;
                }
            },
            _ = &mut stopped => return,
        };
        pause = ACCEPT_PAUSE;
        // Identity as the kernel recorded it at connect: the peer cannot
        // change it afterwards, and no pid is looked up (pids are reused).
        let (role, uid) = role_of(&stream, &access);
        let Some(slot) = UidSlot::take(&per_uid, uid, limits.connections_per_uid) else {
            if let Some(n) = full_log.allow(std::time::Instant::now()) {
                tracing::warn!(
                    "refused a connection of uid {uid}: it holds {} (limits.connections_per_uid){}",
                    limits.connections_per_uid,
                    held_back(n)
                );
            }
            tokio::spawn(refuse(stream, uid, limits.connections_per_uid));
            continue;
        };
        let handle = handle.clone();
        let limits = limits.clone();
        tokio::spawn(async move {
            connection(stream, handle, role, uid, &limits).await;
            drop(slot);
        });
    }
}

/// The first pause after a failed `accept`, and the longest.
const ACCEPT_PAUSE: Duration = Duration::from_millis(10);
const ACCEPT_PAUSE_MAX: Duration = Duration::from_secs(1);

/// Connections held per peer uid.
type PerUid = Arc<std::sync::Mutex<HashMap<u32, usize>>>;

/// One of a uid's connections, counted while it lives.
struct UidSlot {
    per_uid: PerUid,
    uid: u32,
}

impl UidSlot {
    /// Counts one more connection of `uid`, unless it holds `cap`.
    fn take(per_uid: &PerUid, uid: u32, cap: usize) -> Option<UidSlot> {
        let mut held = per_uid.lock().unwrap_or_else(|e| e.into_inner());
        let n = held.entry(uid).or_default();
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(UidSlot {
            per_uid: per_uid.clone(),
            uid,
        })
    }
}

impl Drop for UidSlot {
    fn drop(&mut self) {
        let mut held = self.per_uid.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.uid);
            }
        }
    }
}

/// Tells a refused peer why, then closes (within 1 s whatever it reads).
async fn refuse(mut stream: UnixStream, uid: u32, cap: usize) {
    use tokio::io::AsyncWriteExt;
    let err = RpcError::new(
        codes::TOO_MANY_CONNECTIONS,
        format!(
            "uid {uid} already holds {cap} connections to axd (limits.connections_per_uid): close some and try again"
        ),
    );
    let line = serde_json::to_string(&Message::error(None, err)).unwrap_or_default() + "\n";
    let _ = tokio::time::timeout(Duration::from_secs(1), stream.write_all(line.as_bytes())).await;
}

/// The peer's role and uid from the credentials the kernel recorded at
/// connect: `SO_PEERCRED` (uid, primary gid) and `SO_PEERGROUPS`
/// (supplementary groups).
fn role_of(stream: &UnixStream, access: &Access) -> (Option<Role>, u32) {
    let Ok(cred) = stream.peer_cred() else {
        return (None, u32::MAX);
    };
    let uid = cred.uid();
    if uid == 0 || uid == access.owner_uid {
        return (Some(Role::Owner), uid);
    }
    let mut gids = vec![cred.gid()];
    match peer_groups(stream.as_raw_fd()) {
        Ok(groups) => gids.extend(groups),
        Err(e) => tracing::warn!("uid {uid}: cannot read its groups (SO_PEERGROUPS): {e}"),
    }
    if access.admin_gid.is_some_and(|g| gids.contains(&g)) {
        return (Some(Role::Admin), uid);
    }
    if access.socket_gid.is_some_and(|g| gids.contains(&g)) {
        return (Some(Role::Viewer), uid);
    }
    (None, uid)
}

/// The supplementary groups of the process that connected to `fd`, as
/// they were at its `connect` (`SO_PEERGROUPS`, Linux 4.13).
fn peer_groups(fd: std::os::fd::RawFd) -> std::io::Result<Vec<u32>> {
    let size = std::mem::size_of::<libc::gid_t>();
    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut len = (groups.len() * size) as libc::socklen_t;
        // SAFETY: `groups` is a buffer of `len` bytes, alive for the call;
        // the kernel writes at most `len` bytes and sets `len` to what it
        // wrote (or, with ERANGE, to what it needs).
        let r = unsafe {
            libc::getsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_PEERGROUPS,
                groups.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if r == 0 {
            groups.truncate(len as usize / size);
            return Ok(groups);
        }
        let e = std::io::Error::last_os_error();
        let needed = len as usize / size;
        if e.raw_os_error() == Some(libc::ERANGE) && needed > groups.len() {
            groups.resize(needed, 0);
            continue;
        }
        return Err(e);
    }
}

/// How long one write to a client may block. A client that reads neither
/// its answers nor its notifications for this long is disconnected, so it
/// holds no task, buffer or slot of the broadcast ring for ever.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Bytes of answers one connection may have coming at once: a request
/// that may answer up to a whole frame (`scheduler::answers_big`) counts
/// as `MAX_FRAME`, any other as `SMALL_ANSWER`. Past it, axd reads no more
/// of the connection's requests until answers have been written, so a
/// client that pipelines big reads and never reads its answers holds at
/// most this much (and its few requests wait their turn at the scheduler).
const CONN_BUDGET: usize = 4 * MAX_FRAME;
const SMALL_ANSWER: usize = 1024;

fn answer_cost(request: &Request) -> usize {
    if crate::scheduler::answers_big(request) {
        MAX_FRAME
    } else {
        SMALL_ANSWER
    }
}

/// Queues every line and flushes once.
async fn send_all(framed: &mut Framed<UnixStream, Frames>, lines: Vec<String>) -> bool {
    let write = async {
        for line in lines {
            framed.feed(line).await?;
        }
        SinkExt::<String>::flush(framed).await
    };
    match tokio::time::timeout(WRITE_TIMEOUT, write).await {
        Ok(r) => r.is_ok(),
        Err(_) => {
            tracing::info!("client not reading for {WRITE_TIMEOUT:?}: disconnected");
            false
        }
    }
}

async fn send_line(framed: &mut Framed<UnixStream, Frames>, line: String) -> bool {
    send_all(framed, vec![line]).await
}

async fn send(framed: &mut Framed<UnixStream, Frames>, msg: &Message) -> bool {
    send_line(framed, serde_json::to_string(msg).unwrap_or_default()).await
}

/// The line that answers request `id`. `listed`: the answer of a list the
/// scheduler encoded itself (`scheduler::Encoded`). An answer longer than
/// a frame becomes an `answer_too_large` error.
fn answer_line(id: Value, answer: Result<Value, RpcError>, listed: bool) -> String {
    let line = match answer {
        Ok(v) if listed => match crate::scheduler::Encoded::from_value(v) {
            Ok(enc) => enc.line(&id),
            Err(v) => serde_json::to_string(&Message::result(id.clone(), v)).unwrap_or_default(),
        },
        other => serde_json::to_string(&Message::response(id.clone(), other)).unwrap_or_default(),
    };
    if line.len() <= MAX_FRAME {
        return line;
    }
    let err = RpcError::new(
        codes::ANSWER_TOO_LARGE,
        format!(
            "the answer would be {} bytes, more than a frame ({MAX_FRAME}); ask for less (a smaller `limit`, `max`, or one item)",
            line.len()
        ),
    );
    serde_json::to_string(&Message::error(Some(id), err)).unwrap_or_default()
}

/// Counts a connection in `clients_connected` while it lives.
struct Connected(prometheus_client::metrics::gauge::Gauge);

impl Drop for Connected {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// NDJSON frames, remembering since when a frame has been partly read: a
/// whole frame must arrive within `limits.frame_timeout` of its first
/// byte, so a client sending a byte a second is cut off.
struct Frames {
    lines: LinesCodec,
    partial_since: Option<tokio::time::Instant>,
}

impl Frames {
    fn new() -> Frames {
        Frames {
            lines: LinesCodec::new_with_max_length(MAX_FRAME),
            partial_since: None,
        }
    }
}

impl Decoder for Frames {
    type Item = String;
    type Error = LinesCodecError;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<String>, LinesCodecError> {
        let frame = self.lines.decode(buf)?;
        if frame.is_some() || buf.is_empty() {
            self.partial_since = None;
        } else if self.partial_since.is_none() {
            self.partial_since = Some(tokio::time::Instant::now());
        }
        Ok(frame)
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<String>, LinesCodecError> {
        self.lines.decode_eof(buf)
    }
}

impl Encoder<String> for Frames {
    type Error = LinesCodecError;

    fn encode(&mut self, line: String, buf: &mut BytesMut) -> Result<(), LinesCodecError> {
        self.lines.encode(line, buf)
    }
}

/// Why a connection's deadline closes it, if it has passed.
fn overdue(
    framed: &Framed<UnixStream, Frames>,
    hello_by: Option<tokio::time::Instant>,
    limits: &Limits,
) -> Option<String> {
    let now = tokio::time::Instant::now();
    if hello_by.is_some_and(|t| now >= t) {
        return Some(format!(
            "no hello within {:?} (limits.hello_timeout); closing the connection",
            limits.hello_timeout
        ));
    }
    match framed.codec().partial_since {
        Some(t) if now >= t + limits.frame_timeout => Some(format!(
            "a request frame took longer than {:?} to arrive (limits.frame_timeout); closing the connection",
            limits.frame_timeout
        )),
        _ => None,
    }
}

async fn connection(
    stream: UnixStream,
    handle: Handle,
    role: Option<Role>,
    uid: u32,
    limits: &Limits,
) {
    handle.metrics.clients_connected.inc();
    let _connected = Connected(handle.metrics.clients_connected.clone());
    let mut framed = Framed::new(stream, Frames::new());
    let mut peer: Option<Peer> = None;
    let mut hello_by = Some(tokio::time::Instant::now() + limits.hello_timeout);
    let mut subscription: Option<broadcast::Receiver<Arc<str>>> = None;
    // Requests of one connection are pipelined: they go to the scheduler
    // without waiting for each other (so one client's batch shares one
    // commit), and their answers are written back in request order.
    // `costs` holds each one's share of `CONN_BUDGET`, in the same order.
    let mut inflight: FuturesOrdered<BoxFuture<'static, Option<String>>> = FuturesOrdered::new();
    let mut costs: VecDeque<usize> = VecDeque::new();
    let mut reserved = 0usize;
    // Deadlines are looked at on this tick: a partial frame starts its
    // clock inside the codec, where no timer can be set.
    let every = (limits.hello_timeout.min(limits.frame_timeout) / 5)
        .clamp(Duration::from_millis(50), Duration::from_secs(2));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let reading = inflight.len() < MAX_INFLIGHT && reserved < CONN_BUDGET;
        let frame = tokio::select! {
            frame = framed.next(), if reading => frame,
            Some(done) = inflight.next(), if !inflight.is_empty() => {
                // Answers that are ready together go out in one write (a
                // pipelining client gets a step's answers at once).
                let mut batch: Vec<String> = done.into_iter().collect();
                let mut answered = 1;
                while answered < 1024 {
                    match inflight.next().now_or_never() {
                        Some(Some(more)) => {
                            batch.extend(more);
                            answered += 1;
                        }
                        _ => break,
                    }
                }
                for _ in 0..answered {
                    reserved -= costs.pop_front().unwrap_or(0);
                }
                if !send_all(&mut framed, batch).await {
                    return;
                }
                if !reading && framed.codec().partial_since.is_some() {
                    // The frame's clock stood still while axd was not reading.
                    framed.codec_mut().partial_since = Some(tokio::time::Instant::now());
                }
                continue;
            }
            note = recv_opt(&mut subscription) => {
                match note {
                    Ok(line) => {
                        if !send_line(&mut framed, line.to_string()).await {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        subscription = None;
                        handle.metrics.subscribers_lagged.inc();
                        let note = Notification::Lagged(Lagged {
                            missed,
                            message: "too slow: notifications were dropped; subscribe again".into(),
                        });
                        if !send_line(&mut framed, note.to_line()).await {
                            return;
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
                continue;
            }
            _ = tick.tick() => {
                if let Some(why) = overdue(&framed, hello_by, limits).filter(|_| reading) {
                    tracing::info!("uid {uid}: {why}");
                    let _ = send(&mut framed, &Message::error(None, RpcError::new(codes::TIMEOUT, why))).await;
                    return;
                }
                continue;
            }
        };
        let line = match frame {
            None => return,
            Some(Ok(line)) => line,
            Some(Err(LinesCodecError::MaxLineLengthExceeded)) => {
                let err = RpcError::new(
                    codes::FRAME_TOO_LARGE,
                    format!("frame larger than {MAX_FRAME} bytes; closing the connection"),
                );
                let _ = send(&mut framed, &Message::error(None, err)).await;
                return;
            }
            Some(Err(LinesCodecError::Io(_))) => return,
        };
        if line.trim().is_empty() {
            continue;
        }
        let frame = match decode_request(&line) {
            Ok(f) => f,
            Err((id, err)) => {
                if !send(&mut framed, &Message::error(id, err)).await {
                    return;
                }
                continue;
            }
        };
        let id = frame.id.clone().unwrap_or(Value::Null);
        let wants_answer = frame.id.is_some();
        let decoded = match &peer {
            Some(_) if frame.method != Hello::NAME => {
                Some(Request::decode(&frame.method, frame.params.clone()))
            }
            _ => None,
        };
        if let (Some(p), Some(Ok(request))) = (&peer, &decoded)
            && !matches!(request, Request::Subscribe(_) | Request::Logs(_))
        {
            // Pipelined: answered in order once the scheduler has.
            let (handle, p, request) = (handle.clone(), p.clone(), request.clone());
            let cost = answer_cost(&request);
            reserved += cost;
            costs.push_back(cost);
            inflight.push_back(Box::pin(async move {
                let listed = crate::scheduler::Encoded::answers(&request);
                let answer = handle.call_raw(&p, request).await;
                wants_answer.then(|| answer_line(id, answer, listed))
            }));
            continue;
        }
        // Everything else is answered in order after what is in flight.
        while let Some(done) = inflight.next().await {
            reserved -= costs.pop_front().unwrap_or(0);
            if let Some(line) = done
                && !send_line(&mut framed, line).await
            {
                return;
            }
        }
        let answer = match (&peer, decoded) {
            (_, None) if frame.method == Hello::NAME => {
                decode_hello(frame.params, role, uid).map(|(p, v)| {
                    peer = Some(p);
                    hello_by = None;
                    v
                })
            }
            (None, _) | (_, None) => Err(RpcError::new(
                codes::HELLO_REQUIRED,
                "say hello first: {\"method\": \"hello\", \"params\": {\"protocol\": 1, \"client\": \"name\"}}",
            )),
            (Some(_), Some(Err(e))) => Err(e),
            (Some(p), Some(Ok(Request::Subscribe(s)))) => {
                // Subscribe before the snapshot so nothing falls between.
                let rx = handle.notify.subscribe();
                let snapshot = handle.call(p, Request::Subscribe(s)).await;
                if snapshot.is_ok() {
                    subscription = Some(rx);
                }
                snapshot
            }
            (Some(p), Some(Ok(Request::Logs(params)))) => {
                logs(&handle, p, *params).await.and_then(encode_answer)
            }
            (Some(_), Some(Ok(_))) => unreachable!("pipelined above"),
        };
        if !wants_answer {
            continue; // a notification from the client: no answer
        }
        if !send_line(&mut framed, answer_line(id, answer, false)).await {
            return;
        }
    }
}

async fn recv_opt(
    sub: &mut Option<broadcast::Receiver<Arc<str>>>,
) -> Result<Arc<str>, broadcast::error::RecvError> {
    match sub {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// `hello`: the protocol version must match and the peer must have a role.
fn decode_hello(params: Value, role: Option<Role>, uid: u32) -> Result<(Peer, Value), RpcError> {
    let hello = match Request::decode(Hello::NAME, params)? {
        Request::Hello(h) => h,
        _ => unreachable!("decoded as hello"),
    };
    if hello.protocol != Some(u64::from(PROTOCOL_VERSION)) {
        return Err(RpcError::new(
            codes::VERSION_MISMATCH,
            format!(
                "protocol version mismatch: client speaks {}, axd speaks {PROTOCOL_VERSION}",
                hello
                    .protocol
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "none".into())
            ),
        ));
    }
    let Some(role) = role else {
        return Err(RpcError::new(
            codes::FORBIDDEN,
            format!(
                "uid {uid} may not use this socket (not the owner, root, or a member of socket_group/admin_group)"
            ),
        ));
    };
    let client: String = hello
        .client
        .as_deref()
        .unwrap_or("unknown")
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(32)
        .collect();
    let peer = Peer {
        role,
        actor: Arc::from(format!("uid {uid} via {client}")),
    };
    let answer = HelloAnswer {
        protocol: PROTOCOL_VERSION,
        server: "axd".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        role,
    };
    Ok((peer, encode_answer(answer)?))
}

/// `logs`: a range of an attempt's log. With `follow`, waits (up to
/// `wait_ms`, default 10 s) for new output before answering, so a client
/// follows a log by calling again with the returned offset.
async fn logs(handle: &Handle, peer: &Peer, p: Logs) -> Result<LogChunk, RpcError> {
    let run = p.run;
    let info = handle
        .ask(
            peer,
            LogInfo {
                run,
                attempt: p.attempt,
            },
        )
        .await?;
    let attempts = info.attempts;
    let attempt = match p.attempt {
        Some(a) if a == 0 || a > u64::from(u32::MAX) => {
            return Err(RpcError::new(
                codes::INVALID_PARAMS,
                format!("logs: `attempt` must be 1-{} (got {a})", u32::MAX),
            ));
        }
        Some(a) if a > u64::from(attempts) => {
            return Err(RpcError::new(
                codes::NOT_FOUND,
                format!("run {run} has {attempts} attempt(s); no attempt {a}"),
            ));
        }
        Some(a) => a as u32,
        None if attempts == 0 => return Ok(log_chunk(run, 0, 0, b"", true)),
        None => attempts,
    };
    // An attempt another node of the cluster ran: its log is in the store.
    if let Some(remote) = &handle.remote_logs
        && let Some(node) = &info.node
        && **node != *remote.node
    {
        return crate::server_logs::from_store(&remote.logs, run, attempt, &p).await;
    }
    let mut offset = p.offset.unwrap_or(0);
    // `tail: N`: the last N bytes (the console's log tail).
    if let Some(tail) = p.tail {
        let len = std::fs::metadata(log_path(&handle.log_dir, RunId(run), attempt))
            .map(|m| m.len())
            .unwrap_or(0);
        offset = len.saturating_sub(tail);
    }
    let (max, follow, deadline) = read_limits(&p);
    loop {
        let running_now = attempt == attempts
            && handle
                .ask(peer, LogInfo { run, attempt: None })
                .await?
                .running;
        let (data, next) = read_log(&handle.log_dir, run, attempt, offset, max)
            .map_err(|e| RpcError::new(codes::INTERNAL, format!("reading the log: {e}")))?;
        let eof = data.is_empty() && !running_now;
        if !data.is_empty() || eof || !follow || tokio::time::Instant::now() >= deadline {
            return Ok(log_chunk(run, attempt, next, &data, eof));
        }
        tokio::time::sleep(FOLLOW_PAUSE).await;
    }
}

/// What a `logs` request asks at most: bytes per answer, whether it
/// follows, and until when a follow waits for output.
pub(crate) fn read_limits(p: &Logs) -> (usize, bool, tokio::time::Instant) {
    let max = p.max.unwrap_or(256 * 1024).min(MAX_FRAME as u64 / 2) as usize;
    let follow = p.follow.unwrap_or(false);
    let wait = Duration::from_millis(p.wait_ms.unwrap_or(10_000).min(60_000));
    (max, follow, tokio::time::Instant::now() + wait)
}

/// Reads a range of an attempt's log: the bytes and the offset after them.
/// A log not written yet reads as empty.
pub fn read_log(
    log_dir: &Path,
    run: u64,
    attempt: u32,
    offset: u64,
    max: usize,
) -> std::io::Result<(Vec<u8>, u64)> {
    use std::io::{Read, Seek, SeekFrom};
    let path = log_path(log_dir, RunId(run), attempt);
    let mut f = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), offset)),
        Err(e) => return Err(e),
    };
    f.seek(SeekFrom::Start(offset))?;
    let mut buf = Vec::new();
    f.take(max as u64).read_to_end(&mut buf)?;
    let next = offset + buf.len() as u64;
    Ok((buf, next))
}

/// `offset` is where the next read starts.
pub(crate) fn log_chunk(run: u64, attempt: u32, offset: u64, data: &[u8], eof: bool) -> LogChunk {
    LogChunk {
        run,
        attempt,
        offset,
        data: String::from_utf8_lossy(data).into_owned(),
        eof,
    }
}
