//! Whether the state dir axd locked at start is still there
//! (docs/operations.md, "State folder deleted").
//!
//! After `rm -rf state_dir` axd's open files (the lock, the database) live
//! on as deleted inodes: SQLite commits into them without an error, and a
//! second axd can create and lock a new state dir at the same path. So
//! the writer checks, after each commit and before its answers go out,
//! that each file it holds open still has a link and is still the file
//! its path names (same device and inode); one `fstat` and one `stat` per
//! file, per commit group.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A file held open, and the identity it had when opened.
struct Held {
    path: PathBuf,
    file: std::fs::File,
    dev: u64,
    ino: u64,
}

/// The files whose identity says the state dir is the one axd locked.
pub(crate) struct Identity {
    held: Vec<Held>,
}

impl Identity {
    /// Opens each of `paths` (read-only) and notes its identity.
    pub(crate) fn of(paths: &[PathBuf]) -> std::io::Result<Identity> {
        let mut held = Vec::with_capacity(paths.len());
        for path in paths {
            let file = std::fs::File::open(path)?;
            let m = file.metadata()?;
            held.push(Held {
                path: path.clone(),
                file,
                dev: m.dev(),
                ino: m.ino(),
            });
        }
        Ok(Identity { held })
    }

    /// `Err` says which file is gone or replaced.
    pub(crate) fn check(&self) -> Result<(), String> {
        for h in &self.held {
            let gone = |how: &str| format!("the state dir was deleted: {} {how}", h.path.display());
            match h.file.metadata() {
                Ok(m) if m.nlink() == 0 => return Err(gone("has no links left")),
                Ok(_) => {}
                Err(e) => return Err(gone(&format!("cannot be read ({e})"))),
            }
            match std::fs::metadata(&h.path) {
                Ok(m) if (m.dev(), m.ino()) != (h.dev, h.ino) => {
                    return Err(gone("names another file now"));
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(gone("is missing"));
                }
                // Another error (EACCES on a changed mode) says nothing of
                // the file's identity.
                Err(_) => {}
            }
        }
        Ok(())
    }
}

/// The paths `Identity` watches for a SQLite state dir.
pub(crate) fn watched(state_dir: &Path) -> Vec<PathBuf> {
    vec![state_dir.join("axd.lock"), state_dir.join("ax.db")]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deleted_or_replaced_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("axd.lock");
        std::fs::write(&a, b"1").unwrap();
        let id = Identity::of(std::slice::from_ref(&a)).unwrap();
        assert_eq!(id.check(), Ok(()));
        std::fs::remove_file(&a).unwrap();
        let err = id.check().unwrap_err();
        assert!(err.contains("axd.lock has no links left"), "{err}");
        // Replaced by another file of the same name.
        std::fs::write(&a, b"2").unwrap();
        let err = id.check().unwrap_err();
        assert!(err.contains("no links"), "{err}");
        let b = dir.path().join("other");
        std::fs::write(&b, b"3").unwrap();
        let id = Identity::of(std::slice::from_ref(&b)).unwrap();
        std::fs::rename(&b, dir.path().join("moved")).unwrap();
        std::fs::write(&b, b"4").unwrap();
        assert!(id.check().unwrap_err().contains("names another file now"));
    }
}
