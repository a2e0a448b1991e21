//! Who a peer is: its uid and groups as the kernel recorded them at
//! connect, the role they give it, and the `hello` that must come first.

use std::os::fd::AsRawFd;
use std::sync::Arc;

use ax_protocol::api::{HelloAnswer, Role};
use ax_protocol::request::Hello;
use ax_protocol::{Method, PROTOCOL_VERSION, Request, RpcError, codes};
use serde_json::Value;
use tokio::net::UnixStream;

use crate::bus::Peer;
use crate::bus::answer::Answer;

#[derive(Clone, Debug, Default)]
pub(crate) struct Access {
    pub owner_uid: u32,
    pub admin_gid: Option<u32>,
    pub socket_gid: Option<u32>,
}

/// The peer's role and uid from the credentials the kernel recorded at
/// connect: `SO_PEERCRED` (uid, primary gid) and `SO_PEERGROUPS`
/// (supplementary groups).
pub(super) fn role_of(stream: &UnixStream, access: &Access) -> (Option<Role>, u32) {
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

/// `hello`: the protocol version must match and the peer must have a role.
pub(super) fn decode_hello(
    params: Value,
    role: Option<Role>,
    uid: u32,
) -> Result<(Peer, Answer), RpcError> {
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
    Ok((peer, answer.into()))
}
