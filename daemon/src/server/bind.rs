//! Making the socket: one live axd per path, the socket file given to the
//! configured groups (its group, ACL entries for the others).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use tokio::net::UnixListener;

#[derive(Debug, thiserror::Error)]
pub(crate) enum BindError {
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
/// With `open_to_all` (`[users] allow` is set) the socket is 0666 in a
/// folder 0755 that axd creates: every local user can connect, as to the
/// system D-Bus, and `hello` refuses whoever has no role, by the peer's
/// credentials (docs/users.md, "The socket").
///
/// `groups` are the gids that may open the socket (`socket_group`, then
/// `admin_group`). The first owns the file (and the directory, when axd
/// creates it); each other one gets the group permissions through a POSIX
/// ACL entry, since a file has one owning group and members of either
/// group must be able to connect. Where the filesystem refuses ACLs, the
/// log says which group's members cannot connect (unless also members of
/// the first).
pub(crate) fn bind(
    path: &Path,
    groups: &[u32],
    open_to_all: bool,
) -> Result<UnixListener, BindError> {
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
            let mode = match (open_to_all, owner_group) {
                (true, _) => 0o755,
                (false, Some(_)) => 0o750,
                (false, None) => 0o700,
            };
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).map_err(io)?;
            if let Some(gid) = owner_group {
                give_to_group(dir, gid)?;
                grant_groups(dir, &extra_groups, AclPerm::DIR.open(open_to_all));
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
        grant_groups(path, &extra_groups, AclPerm::SOCKET.open(open_to_all));
    }
    if open_to_all {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666)).map_err(io)?;
    }
    Ok(listener)
}

/// Permission bits of a POSIX ACL entry (r = 4, w = 2, x = 1), for the
/// owner, the owning group and the named groups, and others.
struct AclPerm {
    owner: u16,
    group: u16,
    other: u16,
}

impl AclPerm {
    /// 0750: the owner all, the groups may pass and list.
    const DIR: AclPerm = AclPerm {
        owner: 7,
        group: 5,
        other: 0,
    };
    /// 0660: connecting to a socket needs write permission.
    const SOCKET: AclPerm = AclPerm {
        owner: 6,
        group: 6,
        other: 0,
    };

    /// With `open_to_all`, others get what the groups get (0755, 0666):
    /// the ACL must not close what `[users]` opens.
    fn open(self, open_to_all: bool) -> AclPerm {
        AclPerm {
            other: if open_to_all { self.group } else { self.other },
            ..self
        }
    }
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
    entries.extend([(MASK, perm.group, NO_ID), (OTHER, perm.other, NO_ID)]);
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
