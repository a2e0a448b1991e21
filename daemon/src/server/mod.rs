//! The Unix socket (docs/protocol.md): JSON-RPC 2.0 over NDJSON.
//!
//! Each connection is one task: it reads frames (at most `MAX_FRAME` bytes,
//! bigger ones get an error and the connection is closed), requires `hello`
//! first, answers each request through the scheduler, and, once subscribed,
//! forwards change notifications. Notifications come from a bounded
//! broadcast channel: a client that does not read falls behind, gets a
//! `lagged` notice and must resubscribe; it never slows the scheduler or
//! other clients.
//!
//! `bind` makes the socket and gives it its groups, `access` tells who a
//! peer is (its credentials, its role, `hello`), `connection` serves one
//! client; this file accepts them.

mod access;
mod bind;
mod connection;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ax_protocol::{Message, RpcError, codes};
use tokio::net::{UnixListener, UnixStream};

use crate::bus::Handle;
use crate::config::Limits;
use crate::runtime::ratelog::{RateLog, held_back};
use crate::runtime::shutdown::Shutdown;
pub(crate) use access::Access;
use access::role_of;
pub(crate) use bind::bind;
use connection::connection;

/// Accepts clients until the shutdown value says `Stopped`. A peer whose
/// uid already holds `limits.connections_per_uid` connections gets a
/// `too_many_connections` error and is closed; a failing `accept` (no
/// descriptors left) is retried after a pause that doubles up to 1 s. Both
/// are logged at most once per 10 s.
pub(crate) async fn serve(
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
        // change it afterwards. Its process group is read now, while the
        // connecting process is alive, and only counts for a peer with no
        // role (docs/protocol.md, "Access").
        let who = access::Identity::of(&stream);
        let role = role_of(&who, &access);
        let uid = who.uid;
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
        let access = access.clone();
        tokio::spawn(async move {
            connection(stream, handle, role, who, access, &limits).await;
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
