//! axd's own files, readable by axd's user alone whatever the umask: the
//! state folder and its `logs/` folder are 0700, the store (`ax.db` with
//! its `-wal` and `-shm`), the lock and every attempt's log 0600. They hold
//! every command, inline value and output; other users read them through
//! the socket, where the access rules apply (docs/config.md, "Files and
//! their modes").
//!
//! A folder or file found wider than that (made by an earlier axd, or by
//! hand) is narrowed at start and the log says what it was.

use std::fs::{File, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The mode of axd's folders.
pub(crate) const DIR_MODE: u32 = 0o700;
/// The mode of axd's files.
pub(crate) const FILE_MODE: u32 = 0o600;

/// Creates `dir` (and missing parents) 0700; an existing one that group
/// or others may use is narrowed to 0700.
pub(crate) fn dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)?;
    narrow(dir, DIR_MODE)
}

/// Narrows an existing file to 0600 when group or others may read it;
/// nothing when it is absent.
pub(crate) fn existing_file(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_file() => narrow(path, FILE_MODE),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Opens (creating it 0600 if absent) a file for writing, without
/// truncating it.
pub(crate) fn open_rw(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .read(true)
        .mode(FILE_MODE)
        .open(path)?;
    narrow(path, FILE_MODE)?;
    Ok(file)
}

/// Creates (or truncates) a file 0600 for writing.
#[cfg(test)]
fn create(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(FILE_MODE)
        .open(path)
}

/// Makes the SQLite store at `db` private before SQLite opens it: SQLite
/// creates a new database 0644 less the umask and gives its `-wal` and
/// `-shm` the database's mode, so an empty 0600 file is made first (SQLite
/// takes an empty file as a new database), and existing ones are narrowed.
pub(crate) fn sqlite_store(db: &Path) -> io::Result<()> {
    open_rw(db)?;
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        existing_file(Path::new(&name))?;
    }
    Ok(())
}

/// Sets `path` to `mode` when group or others have any permission on it,
/// logging the mode it had.
fn narrow(path: &Path, mode: u32) -> io::Result<()> {
    let had = std::fs::metadata(path)?.permissions().mode() & 0o7777;
    if had & 0o077 == 0 {
        return Ok(());
    }
    std::fs::set_permissions(path, Permissions::from_mode(mode))?;
    tracing::warn!(
        path = %path.display(),
        "{} was {had:04o}: narrowed to {mode:04o}, so that only axd's user reads it",
        if mode == DIR_MODE { "folder" } else { "file" },
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn folders_and_files_are_private_and_wider_ones_narrowed() {
        let t = tempfile::tempdir().unwrap();
        let state = t.path().join("a/state");
        dir(&state).unwrap();
        assert_eq!(mode(&state), 0o700);
        std::fs::set_permissions(&state, Permissions::from_mode(0o755)).unwrap();
        dir(&state).unwrap();
        assert_eq!(mode(&state), 0o700);
        let db = state.join("ax.db");
        sqlite_store(&db).unwrap();
        assert_eq!(mode(&db), 0o600);
        let wal = state.join("ax.db-wal");
        std::fs::write(&wal, "").unwrap();
        std::fs::set_permissions(&wal, Permissions::from_mode(0o644)).unwrap();
        sqlite_store(&db).unwrap();
        assert_eq!(mode(&wal), 0o600);
        let log = state.join("1.1.log");
        drop(create(&log).unwrap());
        assert_eq!(mode(&log), 0o600);
    }
}
