//! A job's secrets (docs/job-files.md, "Secrets"): its `env_file`, read
//! with the checks ssh makes of a key file, and the redaction of secret
//! values from its output.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use aho_corasick::{AhoCorasick, MatchKind};
use ax_shared::envfile::{EnvFileError, parse_env_file};

/// What a secret value is replaced with.
pub(crate) const MASK: &[u8] = b"***";

/// Secret values shorter than this are not redacted in output: a one- to
/// three-byte value (`1`, `on`, `eu`) occurs all over ordinary output, and
/// masking each occurrence would make logs unreadable while hiding nothing
/// (such a value can be guessed anyway).
pub(crate) const MIN_REDACTED_LEN: usize = 4;

/// An env file larger than this is refused: env files hold a few
/// variables, and the whole file is read on the spawner thread.
pub(crate) const MAX_ENV_FILE_BYTES: u64 = 1 << 20;

/// Why an attempt's `env_file` was refused. Never carries the file's text.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EnvFileRefused {
    #[error("env_file {}: cannot read: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("env_file {}: not a regular file", path.display())]
    NotAFile { path: PathBuf },
    #[error(
        "env_file {}: owned by {}, not by {}the job's user {}",
        path.display(),
        crate::accounts::user_name(*owner),
        if *root_may_own { "root or " } else { "" },
        crate::accounts::user_name(*run_as)
    )]
    Owner {
        path: PathBuf,
        owner: u32,
        run_as: u32,
        root_may_own: bool,
    },
    #[error(
        "env_file {}: root's file, but {why}: a job running as {} could have put it there",
        path.display(),
        crate::accounts::user_name(*run_as)
    )]
    UntrustedPath {
        path: PathBuf,
        why: String,
        run_as: u32,
    },
    #[error(
        "env_file {}: mode {mode:04o} lets group or others read or write it (chmod 600 it)",
        path.display()
    )]
    Mode { path: PathBuf, mode: u32 },
    #[error("env_file {}: larger than {MAX_ENV_FILE_BYTES} bytes", path.display())]
    TooLarge { path: PathBuf },
    #[error("env_file {}: not UTF-8 text", path.display())]
    NotUtf8 { path: PathBuf },
    #[error("env_file {}: {source}", path.display())]
    Syntax { path: PathBuf, source: EnvFileError },
}

/// Reads an env file as a job running as `run_as_uid` may use it: a
/// regular file owned by that uid, or by root when `root_may_own` (another
/// user could set the job's environment), that neither group nor others
/// may read or write (a secret others can read is no secret, and one
/// others can write lets them set a job's environment). A user's own DAG
/// passes `root_may_own = false`: axd reads the file as root, and would
/// otherwise hand the user any private file of root's in `KEY=VALUE` form.
pub(crate) fn read_env_file(
    path: &Path,
    run_as_uid: u32,
    root_may_own: bool,
) -> Result<Vec<(String, String)>, EnvFileRefused> {
    let path_buf = || path.to_path_buf();
    let unreadable = |source| EnvFileRefused::Unreadable {
        path: path_buf(),
        source,
    };
    // O_NONBLOCK: opening a FIFO put in the file's place must not block the
    // spawner thread; it has no effect on a regular file. The checks are
    // made on the opened file, so the file read is the file checked.
    let mut file = File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(unreadable)?;
    let meta = file.metadata().map_err(unreadable)?;
    if !meta.is_file() {
        return Err(EnvFileRefused::NotAFile { path: path_buf() });
    }
    if meta.uid() != run_as_uid && !(root_may_own && meta.uid() == 0) {
        return Err(EnvFileRefused::Owner {
            path: path_buf(),
            owner: meta.uid(),
            run_as: run_as_uid,
            root_may_own,
        });
    }
    // axd opens the file as root: a root-owned file read for a job of
    // another user must be reached by a path that user cannot have
    // bent (a link of theirs to a private file of root's).
    if meta.uid() == 0
        && run_as_uid != 0
        && let Err(why) = root_path(path, &meta)
    {
        return Err(EnvFileRefused::UntrustedPath {
            path: path_buf(),
            why,
            run_as: run_as_uid,
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(EnvFileRefused::Mode {
            path: path_buf(),
            mode,
        });
    }
    if meta.len() > MAX_ENV_FILE_BYTES {
        return Err(EnvFileRefused::TooLarge { path: path_buf() });
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.read_to_end(&mut bytes).map_err(unreadable)?;
    let text =
        String::from_utf8(bytes).map_err(|_| EnvFileRefused::NotUtf8 { path: path_buf() })?;
    parse_env_file(&text).map_err(|source| EnvFileRefused::Syntax {
        path: path_buf(),
        source,
    })
}

/// Whether `path` reaches the opened file `opened` through root's folders
/// alone: it is absolute, no part of it is a symbolic link, every folder
/// on the way is root's and writable by nobody else (or sticky), and its
/// last part is the file that was opened. Then nobody but root could have
/// changed where it leads.
fn root_path(path: &Path, opened: &std::fs::Metadata) -> Result<(), String> {
    if !path.is_absolute() {
        return Err("its path is not absolute".into());
    }
    let mut here = PathBuf::from("/");
    let parts: Vec<_> = path.components().skip(1).collect();
    for (i, part) in parts.iter().enumerate() {
        let std::path::Component::Normal(name) = part else {
            return Err(format!("its path has {:?}", part.as_os_str()));
        };
        let folder =
            std::fs::symlink_metadata(&here).map_err(|e| format!("{}: {e}", here.display()))?;
        // A sticky folder (`/tmp`) lets others add entries, never replace
        // root's.
        let others_write = folder.mode() & 0o022 != 0 && folder.mode() & 0o1000 == 0;
        if folder.uid() != 0 || others_write {
            return Err(format!(
                "folder {} is not root's alone (owner {}, mode {:04o})",
                here.display(),
                crate::accounts::user_name(folder.uid()),
                folder.mode() & 0o7777
            ));
        }
        here.push(name);
        let meta =
            std::fs::symlink_metadata(&here).map_err(|e| format!("{}: {e}", here.display()))?;
        if meta.file_type().is_symlink() {
            return Err(format!("{} is a symbolic link", here.display()));
        }
        let last = i + 1 == parts.len();
        if last && (meta.dev() != opened.dev() || meta.ino() != opened.ino()) {
            return Err("it changed while it was read".into());
        }
    }
    Ok(())
}

/// Replaces secret values in a byte stream with [`MASK`], across read
/// boundaries: the end of what it was fed that could be the start of a
/// secret (at most `longest - 1` bytes) is held back until the next feed
/// (or `finish`) shows whether it is one, so a value split across two
/// reads is still caught, and nothing else waits (output that waited here
/// would be lost if axd died before the next read).
pub(crate) struct OutputRedactor {
    /// Leftmost-longest: where one secret is a prefix of another, the
    /// longer is masked whole.
    matcher: AhoCorasick,
    secrets: Vec<Vec<u8>>,
    /// The most bytes held back: one less than the longest secret (a match
    /// of it that starts earlier is wholly in view).
    hold: usize,
    tail: Vec<u8>,
}

impl OutputRedactor {
    /// A redactor for the given values, or `None` when none of them is
    /// long enough to be redacted (the job's output is then copied as it
    /// is, at no cost).
    pub(crate) fn new<'a>(values: impl IntoIterator<Item = &'a str>) -> Option<OutputRedactor> {
        let mut secrets: Vec<&[u8]> = values
            .into_iter()
            .map(str::as_bytes)
            .filter(|v| v.len() >= MIN_REDACTED_LEN)
            .collect();
        secrets.sort_unstable();
        secrets.dedup();
        let longest = secrets.iter().map(|s| s.len()).max()?;
        let matcher = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&secrets)
            .ok()?;
        Some(OutputRedactor {
            matcher,
            secrets: secrets.iter().map(|s| s.to_vec()).collect(),
            hold: longest - 1,
            tail: Vec::new(),
        })
    }

    /// The length of the longest end of the tail (at most `hold` bytes)
    /// that begins some secret.
    fn open_prefix(&self) -> usize {
        let max = self.hold.min(self.tail.len());
        (1..=max)
            .rev()
            .find(|&k| {
                let end = &self.tail[self.tail.len() - k..];
                self.secrets.iter().any(|s| s.starts_with(end))
            })
            .unwrap_or(0)
    }

    /// Appends to `out` the redacted output that `input` completes; holds
    /// back what may be the start of a secret.
    pub(crate) fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) {
        self.tail.extend_from_slice(input);
        let settled = self.tail.len() - self.open_prefix();
        self.emit(settled, out);
    }

    /// Appends the held-back rest (the stream ended).
    pub(crate) fn finish(&mut self, out: &mut Vec<u8>) {
        self.emit(self.tail.len(), out);
    }

    /// Emits every byte before `settled`, and any secret starting there,
    /// masked; keeps the rest as the tail.
    fn emit(&mut self, settled: usize, out: &mut Vec<u8>) {
        let buf = &self.tail;
        let mut copied = 0;
        for m in self.matcher.find_iter(buf.as_slice()) {
            if m.start() >= settled {
                break;
            }
            out.extend_from_slice(&buf[copied..m.start()]);
            out.extend_from_slice(MASK);
            copied = m.end();
        }
        let cut = copied.max(settled);
        out.extend_from_slice(&buf[copied..cut]);
        self.tail.drain(..cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redact_in_pieces(secrets: &[&str], input: &[u8], piece: usize) -> Vec<u8> {
        let mut r = OutputRedactor::new(secrets.iter().copied()).unwrap();
        let mut out = Vec::new();
        for chunk in input.chunks(piece) {
            r.feed(chunk, &mut out);
        }
        r.finish(&mut out);
        out
    }

    #[test]
    fn a_secret_split_across_reads_is_masked_at_every_split() {
        let input = b"token=s3cr3t-value; again s3cr3t-value!";
        for piece in 1..=input.len() {
            assert_eq!(
                redact_in_pieces(&["s3cr3t-value"], input, piece),
                b"token=***; again ***!",
                "pieces of {piece}"
            );
        }
    }

    #[test]
    fn the_longer_of_two_overlapping_secrets_is_masked_whole() {
        for piece in 1..=8 {
            let out = redact_in_pieces(&["abcd", "abcdefgh"], b"xabcdefghy abcdz", piece);
            assert_eq!(out, b"x***y ***z", "pieces of {piece}");
        }
    }

    #[test]
    fn short_values_are_not_redacted_and_none_left_means_no_redactor() {
        assert!(OutputRedactor::new(["", "on", "eu1"]).is_none());
        assert_eq!(
            redact_in_pieces(&["on", "long-secret"], b"on and long-secret", 3),
            b"on and ***"
        );
    }

    #[test]
    fn env_files_are_refused_like_ssh_refuses_keys() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.env");
        let me = nix::unistd::geteuid().as_raw();
        let write = |text: &str, mode: u32| {
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        write("A=hunter22\n", 0o600);
        let vars = read_env_file(&path, me, true).unwrap();
        assert_eq!(vars, vec![("A".to_string(), "hunter22".to_string())]);
        for mode in [0o640, 0o604, 0o620, 0o602] {
            write("A=hunter22\n", mode);
            let e = read_env_file(&path, me, true).unwrap_err();
            assert!(
                matches!(e, EnvFileRefused::Mode { mode: m, .. } if m == mode),
                "{e}"
            );
            assert!(e.to_string().contains(&format!("mode {mode:04o}")), "{e}");
        }
        write("A=hunter22\nhunter22\n", 0o600);
        let e = read_env_file(&path, me, true).unwrap_err().to_string();
        assert!(e.contains("line 2") && !e.contains("hunter22"), "{e}");
        let e = read_env_file(dir.path(), me, true).unwrap_err();
        assert!(matches!(e, EnvFileRefused::NotAFile { .. }), "{e}");
        // Owned by someone else: checked as if the job ran as another uid, and
        // (as root, who can give the file away) with the file chowned.
        write("A=hunter22\n", 0o600);
        let owner_refused = |r| matches!(r, Err(EnvFileRefused::Owner { .. }));
        if me == 0 {
            assert!(
                read_env_file(&path, 4242, true).is_ok(),
                "root's file is accepted"
            );
            assert!(
                owner_refused(read_env_file(&path, 4242, false)),
                "root's file is refused to a user's own DAG"
            );
            std::os::unix::fs::chown(&path, Some(4242), None).unwrap();
            assert!(owner_refused(read_env_file(&path, 0, true)));
        } else {
            assert!(owner_refused(read_env_file(&path, me + 1, true)));
        }
    }

    #[test]
    fn a_root_file_reached_through_a_link_is_refused_to_another_users_job() {
        use std::os::unix::fs::PermissionsExt;
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("root.env");
        std::fs::write(&secret, "ROOTSECRET=x1234\n").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(read_env_file(&secret, 4242, true).is_ok(), "a root path");
        // A folder of the job's user holding a link to root's file.
        let theirs = dir.path().join("home");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(4242), None).unwrap();
        let link = theirs.join("app.env");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        let e = read_env_file(&link, 4242, true).unwrap_err().to_string();
        assert!(e.contains("root's file, but folder"), "{e}");
        // A link in root's own folder is refused as a link.
        let root_link = dir.path().join("link.env");
        std::os::unix::fs::symlink(&secret, &root_link).unwrap();
        let e = read_env_file(&root_link, 4242, true)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a symbolic link"), "{e}");
        // A job running as root may follow links: root could read it anyway.
        assert!(read_env_file(&link, 0, true).is_ok());
    }

    #[test]
    fn a_prefix_of_a_secret_at_the_end_of_the_stream_is_kept() {
        assert_eq!(redact_in_pieces(&["secret"], b"a secre", 2), b"a secre");
    }
}
