//! Which files of the jobs folder are trusted (docs/users.md, "Trusted job
//! files"), as cron trusts a crontab: a file is loaded only if it is a
//! regular file owned by axd's effective user (root for the system
//! service), writable by no group and no other user, and every folder from
//! the jobs folder down to it is owned and protected the same way. A link
//! is followed hop by hop, and every folder the resolution passes through
//! must pass the same check, so no one but axd's user (or root) can change
//! what a trusted path names.

use std::collections::{HashMap, VecDeque};
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// Links followed, at most, to resolve one path (the kernel's own limit).
const MAX_HOPS: usize = 40;

/// Why a file or folder is not trusted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Owned by `owner` (a user name, or `uid N`), not by `must`.
    #[error("owned by {owner}, must be {must}")]
    Owner { owner: String, must: String },
    /// Its mode lets group or others (`by`) write it.
    #[error("mode {mode:04o}: writable by {by}")]
    Writable { mode: u32, by: &'static str },
    #[error("not a regular file")]
    NotRegular,
    /// A folder on the way (`label`) is not trusted.
    #[error("folder {label}: {why}")]
    Folder { label: String, why: Box<Refusal> },
    /// A link on the way could not be followed.
    #[error("link {link}: {why}")]
    Link { link: String, why: String },
    #[error("names starting with @ are kept for users' own DAGs")]
    AtName,
    #[error("cannot look at it ({0})")]
    Unreadable(String),
}

/// What a link in the jobs folder leads to.
pub enum Target {
    /// A trusted regular file.
    File,
    /// Nothing (a dangling link), or a folder: the walk skips it.
    Skipped,
}

/// The owner every trusted file and folder must have, and the verdicts on
/// folders already checked (each folder is looked at once per scan, so a
/// scan stays linear in the number of entries).
pub struct Trust {
    owner: u32,
    folders: HashMap<PathBuf, Result<(), Refusal>>,
}

impl Trust {
    /// Trust for this process: files must belong to its effective user
    /// (root when axd runs as root, its own user in user mode).
    pub fn of_process() -> Trust {
        Trust::owned_by(nix::unistd::geteuid().as_raw())
    }

    pub fn owned_by(owner: u32) -> Trust {
        Trust {
            owner,
            folders: HashMap::new(),
        }
    }

    /// Whether `m` (a file or a folder of the jobs folder, not followed)
    /// is owned by axd's user and writable by no group and no other user.
    pub fn check_owner_mode(&self, m: &Metadata) -> Result<(), Refusal> {
        self.check_owner(m.uid(), false)?;
        check_mode(m)
    }

    /// Whether `uid` may own what is trusted: axd's user, or root too
    /// (`root_too`) for what lies outside the jobs folder on a link's way.
    fn check_owner(&self, uid: u32, root_too: bool) -> Result<(), Refusal> {
        if uid == self.owner || (root_too && uid == 0) {
            return Ok(());
        }
        let must = crate::accounts::user_name(self.owner);
        Err(Refusal::Owner {
            owner: crate::accounts::user_name(uid),
            must: if root_too && self.owner != 0 {
                format!("root or {must}")
            } else {
                must
            },
        })
    }

    /// The verdict on a regular file's own metadata (not followed).
    pub fn check_file(&self, m: &Metadata) -> Result<(), Refusal> {
        if !m.file_type().is_file() {
            return Err(Refusal::NotRegular);
        }
        self.check_owner_mode(m)
    }

    /// The verdict on a folder of the jobs folder, `label` in a refusal.
    pub fn check_folder(&self, m: &Metadata, label: &str) -> Result<(), Refusal> {
        self.check_owner_mode(m).map_err(|why| Refusal::Folder {
            label: label.to_string(),
            why: Box::new(why),
        })
    }

    /// The verdict on a folder a link's resolution passes through (`path`
    /// has no link in it): owned by root or axd's user, and writable by
    /// no group and no other user unless sticky (as `/tmp`: then no one
    /// else can rename or remove what root or axd's user put there, and
    /// what the resolution takes from it is checked for its owner).
    /// Remembered for the rest of the scan.
    fn on_the_way(&mut self, path: &Path) -> Result<(), Refusal> {
        if let Some(verdict) = self.folders.get(path) {
            return verdict.clone();
        }
        let verdict = match std::fs::symlink_metadata(path) {
            Ok(m) => self
                .check_owner(m.uid(), true)
                .and_then(|()| match m.mode() & 0o1000 {
                    0 => check_mode(&m),
                    _ => Ok(()),
                }),
            Err(e) => Err(Refusal::Unreadable(e.to_string())),
        }
        .map_err(|why| Refusal::Folder {
            label: path.display().to_string(),
            why: Box::new(why),
        });
        self.folders.insert(path.to_path_buf(), verdict.clone());
        verdict
    }

    /// Follows the link `name` in the trusted folder `folder` hop by hop:
    /// every folder the resolution enters or climbs to must be trusted
    /// (named by its full path), and the final target must be a trusted
    /// regular file. A dangling link, a link loop and a link to a folder
    /// lead to [`Target::Skipped`], as the walk has always skipped them.
    pub fn follow_link(&mut self, folder: &Path, name: &Path) -> Result<Target, Refusal> {
        let mut at = folder.to_path_buf();
        let mut rest: VecDeque<PathBuf> = VecDeque::from([name.to_path_buf()]);
        let mut hops = 0;
        while let Some(next) = rest.pop_front() {
            match next.as_os_str().to_str() {
                Some("..") => {
                    at.pop();
                    self.on_the_way(&at)?;
                    continue;
                }
                Some(".") => continue,
                _ => {}
            }
            let path = at.join(&next);
            let Ok(m) = std::fs::symlink_metadata(&path) else {
                return Ok(Target::Skipped);
            };
            if m.file_type().is_symlink() {
                hops += 1;
                if hops > MAX_HOPS {
                    return Ok(Target::Skipped);
                }
                // A link in a sticky folder may be anyone's: only one of
                // root or axd's user is followed.
                self.check_owner(m.uid(), true)
                    .map_err(|why| Refusal::Link {
                        link: path.display().to_string(),
                        why: why.to_string(),
                    })?;
                let target = std::fs::read_link(&path).map_err(|e| Refusal::Link {
                    link: path.display().to_string(),
                    why: e.to_string(),
                })?;
                if target.is_absolute() {
                    at = PathBuf::from("/");
                    self.on_the_way(&at)?;
                }
                for part in components(&target).into_iter().rev() {
                    rest.push_front(part);
                }
            } else if rest.is_empty() {
                return if m.is_dir() {
                    Ok(Target::Skipped)
                } else {
                    self.check_file(&m).map(|()| Target::File)
                };
            } else if m.is_dir() {
                self.on_the_way(&path)?;
                at = path;
            } else {
                return Ok(Target::Skipped);
            }
        }
        Ok(Target::Skipped)
    }
}

/// The names of `path`, in order (`..` and `.` kept; the root dropped).
fn components(path: &Path) -> Vec<PathBuf> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(PathBuf::from(n)),
            Component::ParentDir => Some(PathBuf::from("..")),
            Component::CurDir => Some(PathBuf::from(".")),
            Component::RootDir | Component::Prefix(_) => None,
        })
        .collect()
}

/// Whether `m`'s mode lets no group and no other user write it.
fn check_mode(m: &Metadata) -> Result<(), Refusal> {
    let mode = m.mode() & 0o7777;
    let by = match (mode & 0o020 != 0, mode & 0o002 != 0) {
        (false, false) => return Ok(()),
        (true, false) => "group",
        (false, true) => "others",
        (true, true) => "group and others",
    };
    Err(Refusal::Writable { mode, by })
}
