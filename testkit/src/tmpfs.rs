//! A small tmpfs mounted on a folder, for a full disk that is real: the
//! kernel says `ENOSPC` to axd's writes once it is filled.
//!
//! Mounting needs root (or `CAP_SYS_ADMIN`); [`Tmpfs::mount`] returns
//! `None` where it cannot, and the test says it was skipped.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A tmpfs of a fixed size on `path`, unmounted when dropped (lazily: a
/// process that still has a file open in it does not keep the mount).
pub struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (`mount -o size=`, e.g. `"4m"`) on `path`,
    /// created if missing. `None` when mounting is not allowed here, with
    /// a line on stderr naming `what` was skipped.
    pub fn mount(path: &Path, size: &str, what: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(path).ok()?;
        let mounted = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(path)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("SKIPPED: cannot mount a tmpfs (needs root); {what} not run");
            return None;
        }
        Some(Tmpfs {
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Fills the file system with one file until a write fails; returns
    /// the file, whose removal ([`Tmpfs::free`]) gives the space back.
    pub fn fill(&self) -> std::io::Result<Filler> {
        let path = self.path.join(".filler");
        let mut f = std::fs::File::create(&path)?;
        let chunk = vec![0u8; 64 * 1024];
        // Big chunks first, then single pages, then bytes: the file system
        // is full to the last byte.
        for size in [chunk.len(), 4096, 1] {
            while f.write_all(&chunk[..size]).is_ok() {}
        }
        let _ = f.sync_all();
        Ok(Filler { path })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .stderr(Stdio::null())
            .status();
    }
}

/// The file that fills a [`Tmpfs`].
pub struct Filler {
    path: PathBuf,
}

impl Filler {
    /// Gives the space back.
    pub fn free(self) -> std::io::Result<()> {
        std::fs::remove_file(&self.path)
    }
}
