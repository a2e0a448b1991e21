//! Users' own DAGs (docs/users.md, "User DAGs"): kept by axd under
//! `state_dir/users/` (`files`), managed through the socket as with
//! `crontab`. This module holds the rules a user DAG must meet beyond
//! those of every job file: every job runs as its user, who must exist
//! and be allowed by `[users]`; `user` and `group` name no one else;
//! an `env_file` is the user's (or root's) own and private; and `after`
//! and the hooks name only the user's own DAGs.

pub mod files;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;

use ax_shared::jobfile::{DagFile, FileError, ValidateOptions, parse_dag};
use ax_shared::users::{user_dag_name, user_dag_owner};

use crate::accounts::{Account, group_gid};
use crate::jobs_folder::scan::{DagEntry, first_of};
use files::UserFiles;

/// Parses `text` as `user`'s DAG `name` (a short name) and checks the
/// rules of a user DAG; errors are located in `file`. On success every
/// job runs as `user`, and `after` and the hooks hold full names.
pub fn check(
    user: &str,
    name: &str,
    file: &str,
    text: &str,
    allow: &[String],
    opts: &ValidateOptions,
) -> Result<DagFile, Vec<FileError>> {
    let mut dag = parse_dag(&user_dag_name(user, name), file, text, opts)?;
    let at = |key: &str, value: &str, message: String| {
        let (line, column) = locate(text, key, value).unzip();
        FileError {
            file: file.to_string(),
            line,
            column,
            message,
        }
    };
    let whole = |message: String| FileError {
        file: file.to_string(),
        line: None,
        column: None,
        message,
    };
    let account = match Account::by_name(user) {
        Ok(a) => a,
        Err(e) => return Err(vec![whole(format!("{e}: a user DAG runs as its user"))]),
    };
    let groups = account.groups_with(account.gid).unwrap_or_default();
    if !allowed(&account, &groups, allow) {
        return Err(vec![whole(format!(
            "{user} is not allowed by [users] allow: their DAGs do not run"
        ))]);
    }
    let mut errors = Vec::new();
    for job in &mut dag.spec.jobs {
        if let Some(other) = job.user.as_deref()
            && other != user
        {
            errors.push(at(
                "user",
                other,
                format!("user = {other:?}: a DAG of {user} runs as {user}"),
            ));
        }
        if let Some(group) = job.group.as_deref() {
            match group_gid(group) {
                Ok(gid) if groups.contains(&gid) => {}
                Ok(_) => errors.push(at(
                    "group",
                    group,
                    format!("group = {group:?}: {user} is not a member of it"),
                )),
                Err(e) => errors.push(at("group", group, format!("group: {e}"))),
            }
        }
        if let Some(path) = &job.env_file
            && let Err(why) = env_file_is_private(path, account.uid)
        {
            let shown = path.display().to_string();
            errors.push(at("env_file", &shown, format!("env_file {shown:?}: {why}")));
        }
        job.user = Some(user.to_string());
    }
    let own =
        |target: &str, key: &str, errors: &mut Vec<FileError>, at: FileError| match user_dag_owner(
            target,
        ) {
            Some(owner) if owner == user => Some(target.to_string()),
            None if !target.starts_with('@') => Some(user_dag_name(user, target)),
            _ => {
                errors.push(FileError {
                    message: format!(
                        "{key}: {target:?}: a DAG of {user} may only name {user}'s own DAGs"
                    ),
                    ..at
                });
                None
            }
        };
    let spec = &mut dag.spec;
    for (i, target) in spec.after.iter_mut().enumerate() {
        let (line, column) = dag.after_at.get(i).copied().unzip();
        let here = FileError {
            file: file.to_string(),
            line,
            column,
            message: String::new(),
        };
        if let Some(full) = own(target, "after", &mut errors, here) {
            *target = full;
        }
    }
    if errors.is_empty() {
        Ok(dag)
    } else {
        Err(errors)
    }
}

/// Whether `[users] allow` names the user or one of their groups.
fn allowed(account: &Account, groups: &[u32], allow: &[String]) -> bool {
    allow.iter().any(|entry| match entry.strip_prefix('@') {
        Some(group) => group_gid(group).is_ok_and(|g| groups.contains(&g)),
        None => *entry == account.name,
    })
}

/// An `env_file` of a user DAG must be a regular file of the user's own,
/// mode `0600`: axd reads it (as root) for the job, and must not read for
/// them what they could not read themselves (a private file of root's) or
/// what others may change.
fn env_file_is_private(path: &std::path::Path, uid: u32) -> Result<(), String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read it ({e})"))?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.uid() != uid {
        return Err(format!(
            "owned by {}; it must be the DAG's user's",
            crate::accounts::user_name(meta.uid())
        ));
    }
    if meta.mode() & 0o777 != 0o600 {
        return Err(format!("mode {:04o}; it must be 0600", meta.mode() & 0o777));
    }
    Ok(())
}

/// Where `key = "value"` is written (1-based line and column of the key):
/// the first such line, else the first line that sets `key`.
fn locate(text: &str, key: &str, value: &str) -> Option<(usize, usize)> {
    let sets = |line: &str| {
        let trimmed = line.trim_start();
        let rest = trimmed.strip_prefix(key)?;
        rest.trim_start()
            .starts_with('=')
            .then(|| line.len() - trimmed.len() + 1)
    };
    let quoted = format!("{value:?}");
    let mut first = None;
    for (n, line) in text.lines().enumerate() {
        if let Some(column) = sets(line) {
            if line.contains(&quoted) || line.contains(&format!("'{value}'")) {
                return Some((n + 1, column));
            }
            first.get_or_insert((n + 1, column));
        }
    }
    first
}

/// Every stored user DAG, read and checked again (at start and at each
/// reload): a file that no longer meets the rules (its user was removed
/// or is no longer allowed) is listed with its error and has no spec, so
/// it does not run.
pub fn load_stored(
    files: &UserFiles,
    allow: &[String],
    opts: &ValidateOptions,
) -> (BTreeMap<String, DagEntry>, Vec<FileError>) {
    let mut dags = BTreeMap::new();
    let stored = match files.list() {
        Ok(stored) => stored,
        Err(e) => {
            let error = FileError {
                file: files
                    .path("", "")
                    .parent()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                line: None,
                column: None,
                message: format!("cannot read the users' DAGs ({e})"),
            };
            return (dags, vec![error]);
        }
    };
    let mut parsed: Vec<DagFile> = Vec::new();
    for s in stored {
        let name = user_dag_name(&s.user, &s.name);
        let file = s.path.display().to_string();
        let result = std::fs::read_to_string(&s.path)
            .map_err(|e| vec![whole_error(&file, format!("cannot read: {e}"))])
            .and_then(|text| check(&s.user, &s.name, &file, &text, allow, opts));
        let entry = match result {
            Ok(d) => {
                parsed.push(d);
                continue;
            }
            Err(errors) => broken(s.path.clone(), first_of(errors)),
        };
        dags.insert(name, entry);
    }
    let after = after_errors(&parsed.iter().collect::<Vec<_>>());
    for d in parsed {
        let name = d.spec.name.clone();
        let entry = match after.get(&name) {
            Some(e) => broken(PathBuf::from(&d.spec.file), e.clone()),
            None => entry_of(d.spec),
        };
        dags.insert(name, entry);
    }
    (dags, Vec::new())
}

/// The entry of a DAG that meets every rule.
pub fn entry_of(spec: ax_shared::DagSpec) -> DagEntry {
    let text = serde_json::to_string(&spec).unwrap_or_default();
    DagEntry {
        file: PathBuf::from(&spec.file),
        error: None,
        hash: crate::store::specs::content_hash(&text),
        version: Some(crate::store::specs::definition_hash(&spec)),
        spec: Some(Arc::new(spec)),
    }
}

/// `after` over a set of user DAGs: each name must be in the set, with no
/// cycle (the first error of each DAG, by name).
pub fn after_errors(dags: &[&DagFile]) -> BTreeMap<String, FileError> {
    let mut errors = BTreeMap::new();
    for (name, e) in ax_shared::jobfile::check_after(dags) {
        errors.entry(name).or_insert(e);
    }
    errors
}

/// The entry of a stored file that does not meet the rules: listed with
/// its error, never run.
fn broken(file: PathBuf, error: FileError) -> DagEntry {
    DagEntry {
        spec: None,
        file,
        error: Some(error),
        hash: String::new(),
        version: None,
    }
}

fn whole_error(file: &str, message: String) -> FileError {
    FileError {
        file: file.to_string(),
        line: None,
        column: None,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_located_by_its_value() {
        let text = "[[job]]\nid = \"a\"\ncommand = \"x\"\n\n[[job]]\n  user = \"bob\"\n";
        assert_eq!(locate(text, "user", "bob"), Some((6, 3)));
        assert_eq!(locate(text, "command", "nope"), Some((3, 1)));
        assert_eq!(locate(text, "group", "x"), None);
    }
}
