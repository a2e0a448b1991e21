//! Where a user-mode axd puts its socket, and whether the folder holding a
//! socket can be trusted. One place for both, so that `axd` binds where
//! `ax` and `ax-tui` look, and both refuse the same folders.
//!
//! Without `$XDG_RUNTIME_DIR` the socket goes under `$TMPDIR/ax-<uid>`,
//! a name anyone can create first. A user who owns a folder on the way to
//! the socket, or may write to one, can put their own socket in its
//! place and read every request (a submitted command with a password in
//! it). So, as tmux does with its `/tmp/tmux-<uid>`, a socket's folder
//! must be owned by the user and writable by nobody else, and each folder
//! above it owned by the user or root and writable by nobody else unless
//! it is sticky like `/tmp` (where no one may rename what is not theirs).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The per-user socket: `$XDG_RUNTIME_DIR/ax/axd.sock`, else
/// `$TMPDIR/ax-<uid>/ax/axd.sock` (`TMPDIR` defaulting to `/tmp`).
pub fn user_socket(xdg_runtime_dir: Option<PathBuf>, tmp: &Path, uid: u32) -> PathBuf {
    xdg_runtime_dir
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or_else(|| tmp.join(format!("ax-{uid}")))
        .join("ax/axd.sock")
}

/// [`user_socket`] for this process: its environment and its uid.
pub fn this_user_socket() -> PathBuf {
    user_socket(
        std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from),
        &std::env::temp_dir(),
        nix::unistd::getuid().as_raw(),
    )
}

/// Why a socket's folder cannot be trusted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unsafe socket folder {path}: {why}; another user could replace the socket and read every \
     request. Remove or fix it (it must be owned by uid {uid} and writable by no one else), or \
     set XDG_RUNTIME_DIR or name another socket"
)]
pub struct UnsafeFolder {
    pub path: PathBuf,
    pub why: String,
    /// The uid the folder must belong to.
    pub uid: u32,
}

/// Checks the folders that hold `socket` for user `uid` (see the module
/// doc). Folders not created yet are skipped: what exists of the path is
/// checked, so axd can check before it creates the rest. Symbolic links
/// are followed: the folders checked are the real ones.
pub fn check(socket: &Path, uid: u32) -> Result<(), UnsafeFolder> {
    let Some(folder) = socket.parent().filter(|p| !p.as_os_str().is_empty()) else {
        return Ok(());
    };
    let folder = std::path::absolute(folder).unwrap_or_else(|_| folder.to_path_buf());
    // The deepest folder that exists, resolved; the socket's own folder
    // when it exists.
    let mut existing = folder.as_path();
    while !existing.exists() {
        match existing.parent() {
            Some(p) => existing = p,
            None => return Ok(()),
        }
    }
    let own_exists = existing == folder;
    let real = std::fs::canonicalize(existing).unwrap_or_else(|_| existing.to_path_buf());
    let refuse = |path: &Path, why: String| UnsafeFolder {
        path: path.to_path_buf(),
        why,
        uid,
    };
    for (depth, dir) in real.ancestors().enumerate() {
        let Ok(meta) = std::fs::metadata(dir) else {
            continue;
        };
        let mode = meta.mode() & 0o7777;
        let own = depth == 0 && own_exists;
        if own && meta.uid() != uid {
            return Err(refuse(dir, format!("it is owned by uid {}", meta.uid())));
        }
        if !own && meta.uid() != uid && meta.uid() != 0 {
            return Err(refuse(
                dir,
                format!(
                    "it is owned by uid {}, neither uid {uid} nor root",
                    meta.uid()
                ),
            ));
        }
        let sticky = mode & 0o1000 != 0;
        if mode & 0o022 != 0 && (own || !sticky) {
            return Err(refuse(
                dir,
                format!("its mode {mode:04o} lets group or others write to it"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_user_socket_is_under_the_runtime_dir_else_tmp() {
        let tmp = Path::new("/var/tmp");
        assert_eq!(
            user_socket(Some("/run/user/7".into()), tmp, 7),
            Path::new("/run/user/7/ax/axd.sock")
        );
        assert_eq!(
            user_socket(None, tmp, 7),
            Path::new("/var/tmp/ax-7/ax/axd.sock")
        );
        assert_eq!(
            user_socket(Some("".into()), tmp, 7),
            Path::new("/var/tmp/ax-7/ax/axd.sock")
        );
    }

    #[test]
    fn a_folder_others_may_write_is_refused() {
        let me = nix::unistd::getuid().as_raw();
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("ax-1");
        let socket = dir.join("ax/axd.sock");
        // Nothing made yet: only the temp dir (0700, ours) is checked.
        check(&socket, me).unwrap();
        std::fs::create_dir_all(dir.join("ax")).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(dir.join("ax"), std::fs::Permissions::from_mode(0o700)).unwrap();
        check(&socket, me).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = check(&socket, me).unwrap_err();
        assert_eq!(e.path, std::fs::canonicalize(&dir).unwrap());
        assert!(e.to_string().contains("mode 0777"), "{e}");
        // Sticky like /tmp: others cannot rename our folder, so it passes.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        check(&socket, me).unwrap();
        // The socket's own folder may not be writable by others, sticky
        // or not, nor belong to someone else.
        std::fs::set_permissions(dir.join("ax"), std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(check(&socket, me).is_err());
        std::fs::set_permissions(dir.join("ax"), std::fs::Permissions::from_mode(0o700)).unwrap();
        let e = check(&socket, me + 1).unwrap_err();
        assert!(e.to_string().contains(&format!("owned by uid {me}")), "{e}");
    }
}
