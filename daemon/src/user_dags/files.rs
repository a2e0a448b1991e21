//! Where axd keeps users' DAGs (docs/users.md, "User DAGs"):
//! `state_dir/users/<user>/<name>.toml`, folders `0700` and files `0600`
//! owned by axd's user, so that only axd reads them and a user changes
//! them only through the socket. Every write is atomic: a temp file in the
//! same folder, fsync, rename, fsync of the folder.

use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The folder of every user's stored DAGs.
#[derive(Clone, Debug)]
pub struct UserFiles {
    root: PathBuf,
}

/// One stored file: whose, its short name, where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub user: String,
    pub name: String,
    pub path: PathBuf,
}

impl UserFiles {
    pub fn new(state_dir: &Path) -> UserFiles {
        UserFiles {
            root: state_dir.join("users"),
        }
    }

    /// The file of `user`'s DAG `name` (a name [`valid_short_name`] took).
    pub fn path(&self, user: &str, name: &str) -> PathBuf {
        self.root.join(user).join(format!("{name}.toml"))
    }

    /// The stored text, `None` if there is none.
    pub fn read(&self, user: &str, name: &str) -> std::io::Result<Option<String>> {
        match std::fs::read_to_string(self.path(user, name)) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Writes every file, each atomically. All temp files are written and
    /// synced before the first rename, so a full disk or an I/O error
    /// stores none of them.
    pub fn write_all(&self, files: &[(&str, &str, &str)]) -> std::io::Result<()> {
        let mut temps: Vec<(PathBuf, PathBuf)> = Vec::new();
        let result = (|| {
            for (user, name, text) in files {
                let dir = self.folder(user)?;
                let temp = dir.join(format!(".{name}.toml.{}.tmp", std::process::id()));
                let mut f = OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&temp)?;
                temps.push((temp, self.path(user, name)));
                f.set_permissions(Permissions::from_mode(0o600))?;
                f.write_all(text.as_bytes())?;
                f.sync_all()?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            for (temp, _) in &temps {
                let _ = std::fs::remove_file(temp);
            }
            return Err(e);
        }
        for (temp, path) in &temps {
            std::fs::rename(temp, path)?;
            sync_dir(path.parent().unwrap_or(&self.root))?;
        }
        Ok(())
    }

    /// Deletes the file; `false` if there was none.
    pub fn remove(&self, user: &str, name: &str) -> std::io::Result<bool> {
        let path = self.path(user, name);
        match std::fs::remove_file(&path) {
            Ok(()) => {
                sync_dir(path.parent().unwrap_or(&self.root))?;
                Ok(true)
            }
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Every stored file, by user then name. Names that are not a user's
    /// folder or a DAG's file (temp files, anything put there by hand
    /// with another name) are skipped.
    pub fn list(&self) -> std::io::Result<Vec<Stored>> {
        let mut out = Vec::new();
        let users = match std::fs::read_dir(&self.root) {
            Ok(users) => users,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(e),
        };
        for entry in users {
            let entry = entry?;
            let Some(user) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if !entry.file_type()?.is_dir() || !ax_shared::jobfile::valid_account_name(&user) {
                continue;
            }
            for file in std::fs::read_dir(entry.path())? {
                let file = file?;
                let file_name = file.file_name();
                let Some(name) = file_name.to_str().and_then(|n| n.strip_suffix(".toml")) else {
                    continue;
                };
                if valid_short_name(name).is_ok() && file.file_type()?.is_file() {
                    out.push(Stored {
                        user: user.clone(),
                        name: name.to_string(),
                        path: file.path(),
                    });
                }
            }
        }
        out.sort_by(|a, b| (&a.user, &a.name).cmp(&(&b.user, &b.name)));
        Ok(out)
    }

    /// `users/<user>/`, made `0700` (with `users/`) if missing.
    fn folder(&self, user: &str) -> std::io::Result<PathBuf> {
        let dir = self.root.join(user);
        for d in [&self.root, &dir] {
            match DirBuilder::new().mode(0o700).create(d) {
                Ok(()) => {
                    std::fs::set_permissions(d, Permissions::from_mode(0o700))?;
                    sync_dir(d.parent().unwrap_or(d))?;
                }
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        Ok(dir)
    }
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Whether `name` may be a user DAG's short name: a file name of letters,
/// digits, `_`, `-` and `.`, not starting with `.` or `-`, at most 100
/// bytes (it becomes `<name>.toml` in the user's folder).
pub fn valid_short_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && !name.starts_with(['.', '-'])
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} cannot name a user DAG: use letters, digits, `_`, `-` and `.` (not first), at most 100"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_private_and_listed_back() {
        let t = tempfile::tempdir().unwrap();
        let files = UserFiles::new(t.path());
        files
            .write_all(&[("alice", "standup", "command = \"true\"\n")])
            .unwrap();
        let path = files.path("alice", "standup");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        assert_eq!(mode(&t.path().join("users")), 0o700);
        let listed = files.list().unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(
            (listed[0].user.as_str(), listed[0].name.as_str()),
            ("alice", "standup")
        );
        assert!(files.remove("alice", "standup").unwrap());
        assert!(!files.remove("alice", "standup").unwrap());
        assert_eq!(files.read("alice", "standup").unwrap(), None);
    }

    #[test]
    fn short_names_are_plain_file_names() {
        assert!(valid_short_name("standup").is_ok());
        assert!(valid_short_name("db-backup.v2").is_ok());
        for bad in ["", ".hidden", "-x", "a/b", "@alice", "a b"] {
            assert!(valid_short_name(bad).is_err(), "{bad}");
        }
    }
}
