//! The jobs folder's DAG set (docs/job-files.md): the physical walk of the
//! folder, and the scan that reads, parses and validates every job file
//! into the last good version of each DAG with its file's current error.
//! Scans run on the scanner thread (`watcher::spawn_scanner`); the
//! scheduler only swaps in a scan's result.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ax_shared::DagSpec;
use ax_shared::jobfile::{
    DagFile, FileError, ValidateOptions, check_after, is_ignored_name, load_file,
};

use crate::jobs_folder::trust::{Refusal, Target, Trust};

#[derive(Clone, Debug)]
pub struct DagEntry {
    /// The last good version; `None` if the file never parsed.
    pub spec: Option<Arc<DagSpec>>,
    pub file: PathBuf,
    /// The current file's error, if it is broken.
    pub error: Option<FileError>,
    pub hash: String,
    /// `spec`'s definition hash (`store::specs::definition_hash`): what
    /// the nodes of a cluster compare.
    pub version: Option<String>,
}

impl DagEntry {
    fn new(file: PathBuf) -> DagEntry {
        DagEntry {
            spec: None,
            file,
            error: None,
            hash: String::new(),
            version: None,
        }
    }
}

/// What a walk of the jobs folder found.
#[derive(Debug, Default)]
pub struct Walk {
    /// Every job file that is not ignored, sorted, with the verdict of
    /// the trust check (docs/users.md, "Trusted job files").
    pub files: Vec<(PathBuf, Result<(), Refusal>)>,
    /// Folders (or entries) that could not be read, with the error: what
    /// lies below them is unknown, not absent.
    pub failed: Vec<(PathBuf, std::io::Error)>,
    /// Job files and folders whose name starts with `@`, refused and not
    /// entered: those names are kept for users' own DAGs.
    pub reserved: Vec<PathBuf>,
}

/// Walks `dir` physically (docs/job-files.md): folders are entered, links
/// to folders are not (so no link loop is followed, and each file is seen
/// under one path), a link to a regular file counts as that file. Names
/// starting with `.` are skipped with all below them, and files with an
/// ignored name. A folder seen before by device and inode (a bind mount
/// of an ancestor) is not entered again. Every file found gets `trust`'s
/// verdict; below a folder that is not trusted, every file gets that
/// folder's refusal.
pub fn walk(dir: &Path, trust: &mut Trust) -> Walk {
    let mut out = Walk::default();
    let mut entered: HashSet<(u64, u64)> = HashSet::new();
    let mut top = None;
    if let Ok(m) = std::fs::metadata(dir) {
        entered.insert((m.dev(), m.ino()));
        top = trust.check_folder(&m, &dir.display().to_string()).err();
    }
    let mut stack = vec![(dir.to_path_buf(), top)];
    while let Some((folder, refused)) = stack.pop() {
        let entries = match std::fs::read_dir(&folder) {
            Ok(entries) => entries,
            // A sub-folder removed (or replaced by a file) since its parent
            // was listed is gone, and its DAGs with it.
            Err(e)
                if folder != dir
                    && matches!(
                        e.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                    ) =>
            {
                continue;
            }
            Err(e) => {
                out.failed.push((folder, e));
                continue;
            }
        };
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    // The listing broke off (EIO, EMFILE...): the rest of
                    // this folder is unknown.
                    out.failed.push((folder.clone(), e));
                    break;
                }
            };
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') {
                continue;
            }
            let path = entry.path();
            let kind = match entry.file_type() {
                Ok(kind) => kind,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    out.failed.push((path, e));
                    continue;
                }
            };
            let reserved = name.starts_with('@');
            if kind.is_dir() && reserved {
                out.reserved.push(path);
            } else if kind.is_dir() {
                match entry.metadata() {
                    Ok(m) if !entered.insert((m.dev(), m.ino())) => {}
                    Ok(m) => {
                        let label = path.strip_prefix(dir).unwrap_or(&path).display();
                        let below = refused
                            .clone()
                            .or_else(|| trust.check_folder(&m, &label.to_string()).err());
                        stack.push((path, below));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => out.failed.push((path, e)),
                }
            } else if is_ignored_name(&name) {
                continue;
            } else if reserved {
                out.reserved.push(path);
            } else if let Some(r) = &refused {
                out.files.push((path, Err(r.clone())));
            } else if let Some(verdict) = file_verdict(trust, &entry, kind, &folder) {
                out.files.push((path, verdict));
            }
        }
    }
    out.files.sort_by(|a, b| a.0.cmp(&b.0));
    out.reserved.sort();
    out
}

/// The trust verdict on a job file in the trusted `folder`; `None` for
/// what the walk skips without an error: an entry gone since the listing,
/// a dangling link, a link loop, a link to a folder.
fn file_verdict(
    trust: &mut Trust,
    entry: &std::fs::DirEntry,
    kind: std::fs::FileType,
    folder: &Path,
) -> Option<Result<(), Refusal>> {
    if kind.is_symlink() {
        return match trust.follow_link(folder, Path::new(&entry.file_name())) {
            Ok(Target::File) => Some(Ok(())),
            Ok(Target::Skipped) => None,
            Err(r) => Some(Err(r)),
        };
    }
    if !kind.is_file() {
        return Some(Err(Refusal::NotRegular));
    }
    match entry.metadata() {
        Ok(m) => Some(trust.check_file(&m)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => Some(Err(Refusal::Unreadable(e.to_string()))),
    }
}

/// One scan's result: the whole DAG set to put in force.
#[derive(Debug, Default)]
pub struct Scan {
    pub dags: BTreeMap<String, DagEntry>,
    /// Folders this scan could not read; the DAGs of the files below them
    /// are kept as they were.
    pub folder_errors: Vec<FileError>,
    /// Job files and folders refused for a name starting with `@`.
    pub reserved: Vec<FileError>,
}

/// The jobs folder and the DAG set its last scan produced, which the next
/// scan merges into.
pub struct JobsFolder {
    dir: PathBuf,
    opts: ValidateOptions,
    dags: BTreeMap<String, DagEntry>,
    /// Who must own every trusted file and folder: axd's effective user.
    owner: u32,
}

impl JobsFolder {
    pub fn new(dir: &Path, pools: Vec<String>) -> JobsFolder {
        JobsFolder {
            dir: dir.to_path_buf(),
            opts: ValidateOptions { pools: Some(pools) },
            dags: BTreeMap::new(),
            owner: nix::unistd::geteuid().as_raw(),
        }
    }

    /// The pool names files are checked against (after a config reload).
    pub fn set_pools(&mut self, pools: Vec<String>) {
        self.opts.pools = Some(pools);
    }

    /// The last good version of every DAG from an earlier life: a file that
    /// is broken now keeps it (docs/job-files.md), across restarts too.
    pub fn restore_last_good(&mut self, defs: Vec<DagSpec>) {
        for spec in defs {
            let mut entry = DagEntry::new(PathBuf::from(&spec.file));
            entry.version = Some(crate::store::specs::definition_hash(&spec));
            let name = spec.name.clone();
            entry.spec = Some(Arc::new(spec));
            self.dags.insert(name, entry);
        }
    }

    /// Reads the folder again and merges it into the DAG set: new and
    /// changed valid files replace their DAG; broken files keep the last
    /// good version and set the error; files that are not trusted lose
    /// their DAG (as a deleted file does) and set the error; DAGs whose
    /// file is gone are removed, except below a folder the walk could not
    /// read, where they stay as they were.
    pub fn scan(&mut self) -> Scan {
        let walk = walk(&self.dir, &mut Trust::owned_by(self.owner));
        let mut parsed: Vec<DagFile> = Vec::new();
        let mut broken: Vec<(String, PathBuf, FileError)> = Vec::new();
        let mut refused: Vec<(String, PathBuf, FileError)> = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        for (path, verdict) in walk.files {
            let Some(name) = ax_shared::jobfile::dag_name_for(&self.dir, &path) else {
                continue;
            };
            seen.insert(name.clone());
            if let Err(why) = verdict {
                let e = whole_file_error(&path, why.to_string());
                refused.push((name, path, e));
                continue;
            }
            // The accounts are checked at each scan: a user created or
            // removed since is seen at the next one.
            let loaded = load_file(&path, Some(&self.dir), &self.opts)
                .and_then(crate::accounts::accounts_known);
            match loaded {
                Ok(d) => parsed.push(d),
                Err(errors) => broken.push((name, path, first_of(errors))),
            }
        }
        let kept: Vec<String> = self
            .dags
            .iter()
            .filter(|(name, e)| {
                !seen.contains(*name) && walk.failed.iter().any(|(f, _)| e.file.starts_with(f))
            })
            .map(|(name, _)| name.clone())
            .collect();
        let after_errors = self.check_after(&parsed, &kept);
        for d in parsed {
            let name = d.spec.name.clone();
            let entry = self
                .dags
                .entry(name.clone())
                .or_insert_with(|| DagEntry::new(PathBuf::from(&d.spec.file)));
            if let Some(e) = after_errors.get(&name) {
                entry.error = Some(e.clone());
                continue;
            }
            let text = serde_json::to_string(&d.spec).unwrap_or_default();
            let hash = crate::store::specs::content_hash(&text);
            entry.error = None;
            if entry.hash != hash {
                entry.version = Some(crate::store::specs::definition_hash(&d.spec));
                entry.spec = Some(Arc::new(d.spec));
                entry.hash = hash;
            }
        }
        for (name, path, e) in broken {
            let entry = self.dags.entry(name).or_insert_with(|| DagEntry::new(path));
            entry.error = Some(e);
        }
        // No last good version is kept for a file that is not trusted: what
        // it held may never have been its owner's.
        for (name, path, e) in refused {
            let entry = DagEntry {
                error: Some(e),
                ..DagEntry::new(path)
            };
            self.dags.insert(name, entry);
        }
        let kept: HashSet<String> = kept.into_iter().collect();
        self.dags
            .retain(|name, _| seen.contains(name) || kept.contains(name));
        let folder_errors = walk
            .failed
            .into_iter()
            .map(|(folder, e)| {
                whole_file_error(
                    &folder,
                    format!(
                        "cannot read this folder ({e}); the DAGs of the files below it stay as last loaded"
                    ),
                )
            })
            .collect();
        let reserved = walk
            .reserved
            .iter()
            .map(|path| whole_file_error(path, Refusal::AtName.to_string()))
            .collect();
        Scan {
            dags: self.dags.clone(),
            folder_errors,
            reserved,
        }
    }

    /// Cross-file `after` checks over what will be in force: the files just
    /// parsed and the DAGs kept below unreadable folders. Errors are those
    /// of parsed files, by DAG name (the first of each).
    fn check_after(&self, parsed: &[DagFile], kept: &[String]) -> HashMap<String, FileError> {
        let kept: Vec<DagFile> = kept
            .iter()
            .filter_map(|name| self.dags.get(name)?.spec.as_deref())
            .map(after_only)
            .collect();
        let refs: Vec<&DagFile> = parsed.iter().chain(&kept).collect();
        let parsed_names: HashSet<&str> = parsed.iter().map(|d| d.spec.name.as_str()).collect();
        let mut errors = HashMap::new();
        for (name, e) in check_after(&refs) {
            if parsed_names.contains(name.as_str()) {
                errors.entry(name).or_insert(e);
            }
        }
        errors
    }
}

/// An error of a whole file or folder (no line).
fn whole_file_error(path: &Path, message: String) -> FileError {
    FileError {
        file: path.display().to_string(),
        line: None,
        column: None,
        message,
    }
}

/// A file's first error, saying how many more there are.
pub(crate) fn first_of(mut errors: Vec<FileError>) -> FileError {
    let mut first = errors.remove(0);
    let more = errors.len();
    if more > 0 {
        first.message = format!(
            "{} (and {more} more error{})",
            first.message,
            if more == 1 { "" } else { "s" }
        );
    }
    first
}

/// One scan of `dir` merged into `dags` (a [`JobsFolder`] around them);
/// returns the DAGs removed.
pub fn rescan(dir: &Path, pools: &[String], dags: &mut BTreeMap<String, DagEntry>) -> Vec<String> {
    let mut folder = JobsFolder::new(dir, pools.to_vec());
    folder.dags = std::mem::take(dags);
    let before: Vec<String> = folder.dags.keys().cloned().collect();
    *dags = folder.scan().dags;
    before
        .into_iter()
        .filter(|n| !dags.contains_key(n))
        .collect()
}

/// A DAG in force as the cross-file `after` check needs it: its name, file
/// and `after`.
pub(crate) fn after_only(spec: &DagSpec) -> DagFile {
    DagFile {
        spec: DagSpec {
            file: spec.file.clone(),
            after: spec.after.clone(),
            ..DagSpec::adhoc(spec.name.clone(), Vec::new())
        },
        after_at: Vec::new(),
        accounts_at: Vec::new(),
    }
}
