//! The DAG registry: what the jobs folder defines, with the last good
//! version of each DAG and the error of its current file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ax_shared::DagSpec;
use ax_shared::jobfile::{
    DagFile, FileError, ValidateOptions, check_after, is_ignored_name, load_file,
};

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

/// Every job file below `dir` that is not ignored (SPEC §2): regular files
/// or links to regular files, recursively.
pub fn job_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            // `metadata` follows links: a link to a regular file counts as
            // one, and a dangling link (or a loop, or an entry removed since
            // `read_dir`) has none and is skipped without an error, as
            // anything else that is not a regular file (sockets, fifos).
            match std::fs::metadata(&path) {
                Ok(m) if m.is_dir() => stack.push(path),
                Ok(m) if m.is_file() && !is_ignored_name(&name) => out.push(path),
                _ => {}
            }
        }
    }
    out.sort();
    out
}

/// Re-reads the folder and merges it into `dags`: new and changed valid
/// files replace their DAG; broken files keep the last good version and set
/// the error; DAGs whose file is gone are removed and returned.
pub fn rescan(dir: &Path, pools: &[String], dags: &mut BTreeMap<String, DagEntry>) -> Vec<String> {
    let opts = ValidateOptions {
        pools: Some(pools.to_vec()),
    };
    let mut parsed: Vec<DagFile> = Vec::new();
    let mut broken: Vec<(String, PathBuf, FileError)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for path in job_files(dir) {
        let Some(name) = ax_shared::jobfile::dag_name_for(dir, &path) else {
            continue;
        };
        seen.insert(name.clone());
        match load_file(&path, Some(dir), &opts) {
            Ok(d) => parsed.push(d),
            Err(mut errors) => {
                let first = errors.remove(0);
                let more = errors.len();
                let mut e = first;
                if more > 0 {
                    e.message = format!(
                        "{} (and {more} more error{})",
                        e.message,
                        if more == 1 { "" } else { "s" }
                    );
                }
                broken.push((name, path, e));
            }
        }
    }
    // Cross-file `after` checks over what will be in force.
    let after_errors = {
        let refs: Vec<&DagFile> = parsed.iter().collect();
        check_after(&refs)
    };
    for d in parsed {
        let name = d.spec.name.clone();
        let text = serde_json::to_string(&d.spec).unwrap_or_default();
        let hash = crate::store::specs::content_hash(&text);
        if let Some((_, e)) = after_errors.iter().find(|(n, _)| *n == name) {
            let entry = dags.entry(name.clone()).or_insert_with(|| DagEntry {
                spec: None,
                file: PathBuf::from(&d.spec.file),
                error: None,
                hash: String::new(),
                version: None,
            });
            entry.error = Some(e.clone());
            continue;
        }
        let entry = dags.entry(name).or_insert_with(|| DagEntry {
            spec: None,
            file: PathBuf::from(&d.spec.file),
            error: None,
            hash: String::new(),
            version: None,
        });
        entry.error = None;
        if entry.hash != hash {
            entry.version = Some(crate::store::specs::definition_hash(&d.spec));
            entry.spec = Some(Arc::new(d.spec));
            entry.hash = hash;
        }
    }
    for (name, path, e) in broken {
        let entry = dags.entry(name).or_insert_with(|| DagEntry {
            spec: None,
            file: path,
            error: None,
            hash: String::new(),
            version: None,
        });
        entry.error = Some(e);
    }
    let removed: Vec<String> = dags
        .keys()
        .filter(|n| !seen.contains(*n))
        .cloned()
        .collect();
    for n in &removed {
        dags.remove(n);
    }
    removed
}
