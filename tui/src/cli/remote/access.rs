//! What `ax` says when the socket refuses it ("Permission denied"): the
//! socket and its folder with their owner, group and mode, and the groups
//! the user is in, so the missing membership is plain to see.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// `name (N)` for a uid, or the number alone when it has no name.
fn user_name(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(u)) => format!("{} ({uid})", u.name),
        _ => uid.to_string(),
    }
}

/// `name (N)` for a gid, or the number alone when it has no name.
fn group_name(gid: u32) -> String {
    match nix::unistd::Group::from_gid(nix::unistd::Gid::from_raw(gid)) {
        Ok(Some(g)) => format!("{} ({gid})", g.name),
        _ => gid.to_string(),
    }
}

/// One line per file on the way: `PATH: owner O, group G, mode 0750`.
fn describe(path: &Path) -> String {
    match std::fs::metadata(path) {
        Ok(m) => format!(
            "{}: owner {}, group {}, mode {:04o}",
            path.display(),
            user_name(m.uid()),
            group_name(m.gid()),
            m.mode() & 0o7777
        ),
        Err(e) => format!("{}: cannot be looked at ({e})", path.display()),
    }
}

/// The lines that explain a refused connection to `socket`.
pub(super) fn denied(socket: &Path) -> Vec<String> {
    let mut lines = vec![format!(
        "permission denied on the socket {}:",
        socket.display()
    )];
    if let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) {
        lines.push(format!("  {}", describe(dir)));
    }
    lines.push(format!("  {}", describe(socket)));
    let uid = nix::unistd::getuid().as_raw();
    let mut groups: Vec<u32> = nix::unistd::getgroups()
        .map(|gs| gs.into_iter().map(|g| g.as_raw()).collect())
        .unwrap_or_default();
    let primary = nix::unistd::getgid().as_raw();
    if !groups.contains(&primary) {
        groups.insert(0, primary);
    }
    let groups: Vec<String> = groups.into_iter().map(group_name).collect();
    lines.push(format!(
        "you are {} in groups {}",
        user_name(uid),
        groups.join(", ")
    ));
    lines.push(
        "to use it, be axd's user or root, or be in the group above (axd.toml's socket_group \
         may read, admin_group may act); a new group membership counts from the next login"
            .into(),
    );
    lines
}
