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

/// Who may use the socket, resolved at start from `axd.toml`.
#[derive(Clone, Debug, Default)]
pub(crate) struct Access {
    pub owner_uid: u32,
    pub admin_gid: Option<u32>,
    pub socket_gid: Option<u32>,
    /// `[users] allow`: these uids, and members of these groups, have the
    /// user role (docs/users.md).
    pub user_uids: Vec<u32>,
    pub user_gids: Vec<u32>,
}

impl Access {
    /// Whether anyone beyond axd's user and its groups may connect: then
    /// the socket is open to every local user, and `hello` refuses whoever
    /// has no role.
    pub(crate) fn has_users(&self) -> bool {
        !self.user_uids.is_empty() || !self.user_gids.is_empty()
    }
}

/// A peer as the kernel recorded it at connect: `SO_PEERCRED` (uid,
/// primary gid) and `SO_PEERGROUPS` (supplementary groups). The peer
/// cannot change any of it afterwards.
#[derive(Clone, Debug)]
pub(crate) struct Identity {
    pub uid: u32,
    /// The primary gid first, then the supplementary ones.
    pub gids: Vec<u32>,
    /// The process group of the process that connected, read from
    /// `/proc/PID/stat` at accept (PID from `SO_PEERCRED`): a role-less
    /// peer inside a running attempt's group gets the job role.
    pub pgid: Option<u32>,
}

impl Identity {
    pub(super) fn of(stream: &UnixStream) -> Identity {
        let Ok(cred) = stream.peer_cred() else {
            return Identity {
                uid: u32::MAX,
                gids: Vec::new(),
                pgid: None,
            };
        };
        let uid = cred.uid();
        let mut gids = vec![cred.gid()];
        match peer_groups(stream.as_raw_fd()) {
            Ok(groups) => gids.extend(groups.into_iter().filter(|&g| g != cred.gid())),
            Err(e) => tracing::warn!("uid {uid}: cannot read its groups (SO_PEERGROUPS): {e}"),
        }
        let pgid = cred.pid().and_then(|pid| process_group(pid as u32));
        Identity { uid, gids, pgid }
    }
}

/// The process group of `pid` (field 5 of `/proc/PID/stat`, after the
/// command name in parentheses, which may itself hold spaces and `)`).
fn process_group(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(2)?.parse().ok()
}

/// The role `access` gives a peer: root and axd's own uid are owners, then
/// `admin_group` members admins, then users allowed by `[users]` users,
/// then `socket_group` members viewers (a user who is also a viewer sees
/// only their own, docs/users.md).
pub(super) fn role_of(who: &Identity, access: &Access) -> Option<Role> {
    let member = |gid: Option<u32>| gid.is_some_and(|g| who.gids.contains(&g));
    if who.uid == 0 || who.uid == access.owner_uid {
        Some(Role::Owner)
    } else if member(access.admin_gid) {
        Some(Role::Admin)
    } else if access.user_uids.contains(&who.uid)
        || access.user_gids.iter().any(|g| who.gids.contains(g))
    {
        Some(Role::User)
    } else if member(access.socket_gid) {
        Some(Role::Viewer)
    } else {
        None
    }
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

/// Why a peer has no role, naming each way to one.
fn no_role(who: &Identity, access: &Access) -> String {
    let group = |gid: Option<u32>| match gid {
        None => "not set".to_string(),
        Some(g) => nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(g))
            .ok()
            .flatten()
            .map(|g| g.name)
            .unwrap_or_else(|| format!("gid {g}")),
    };
    format!(
        "uid {} ({}) has no role on this socket: not root or axd's user, not in admin_group ({}) or socket_group ({}), not allowed by [users] allow",
        who.uid,
        crate::accounts::user_name(who.uid),
        group(access.admin_gid),
        group(access.socket_gid),
    )
}

/// `hello`: the protocol version must match and the peer must have a
/// role; one with none that is part of a running attempt (`job_run`) gets
/// the job role, bound to that run.
pub(super) fn decode_hello(
    params: Value,
    role: Option<Role>,
    job_run: Option<u64>,
    who: &Identity,
    access: &Access,
) -> Result<(Peer, Answer), RpcError> {
    let uid = who.uid;
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
    let (role, run) = match (role, job_run) {
        (Some(role), _) => (role, None),
        (None, Some(run)) => (Role::Job, Some(run)),
        (None, None) => return Err(RpcError::new(codes::FORBIDDEN, no_role(who, access))),
    };
    let client: String = hello
        .client
        .as_deref()
        .unwrap_or("unknown")
        .chars()
        .filter(|c| c.is_ascii_graphic())
        .take(32)
        .collect();
    let user = crate::accounts::user_name(uid);
    let actor = if user.starts_with("uid ") {
        format!("{user} via {client}")
    } else {
        format!("{user} (uid {uid}) via {client}")
    };
    let peer = Peer {
        role,
        uid,
        user: Arc::from(user),
        actor: Arc::from(actor),
        run,
    };
    let answer = HelloAnswer {
        protocol: PROTOCOL_VERSION,
        server: "axd".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        role,
    };
    Ok((peer, answer.into()))
}
