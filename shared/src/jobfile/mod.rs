//! Job files (docs/job-files.md): TOML → a validated [`DagSpec`].
//!
//! The whole file is checked before anything of it is used, and *every*
//! error is reported with file, line and column. To get positions for
//! semantic errors (unknown keys, bad values, unknown deps) the file is read
//! into toml's spanned document tree (`DeTable`) and walked by hand rather
//! than deserialized with serde, which stops at the first error.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::cron::{Schedule, parse_zone};
use crate::duration::parse_duration;
use crate::envfile::valid_env_name;
use crate::model::*;
use crate::rules;

/// One problem in one file, located where the TOML allows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileError {
    pub file: String,
    pub line: Option<usize>,
    pub column: Option<usize>,
    pub message: String,
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(f, "{}:{l}:{c}: {}", self.file, self.message),
            (Some(l), None) => write!(f, "{}:{l}: {}", self.file, self.message),
            _ => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

/// What validation may check beyond the file itself.
#[derive(Clone, Debug, Default)]
pub struct ValidateOptions {
    /// The daemon's pool names; `None` skips the pool check (offline use
    /// without a config).
    pub pools: Option<Vec<String>>,
}

/// A parsed file: the DAG and where each `after` entry was written, so that
/// cross-file checks can point at it.
#[derive(Clone, Debug)]
pub struct DagFile {
    pub spec: DagSpec,
    pub after_at: Vec<(usize, usize)>,
    /// Every `user` and `group` name the jobs take, once per place it is
    /// written: what the daemon checks against the accounts of its host
    /// (this crate reads no password database).
    pub accounts_at: Vec<AccountAt>,
}

/// Which account field a name was given in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccountKey {
    User,
    Group,
}

impl AccountKey {
    pub fn as_str(self) -> &'static str {
        match self {
            AccountKey::User => "user",
            AccountKey::Group => "group",
        }
    }
}

/// One `user = "…"` or `group = "…"` of a job file, with its position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountAt {
    pub key: AccountKey,
    pub name: String,
    pub line: usize,
    pub column: usize,
}

const DAG_KEYS: &[&str] = &[
    "description",
    "schedule",
    "timezone",
    "catchup",
    "overlap",
    "after",
    "enabled",
    "on_failure",
    "on_success",
    "owner",
    "tags",
    "history",
    "jitter",
    "notify",
    "defaults",
    "job",
    "user",
    "group",
    "umask",
    "shell",
];
const JOB_KEYS: &[&str] = &[
    "id",
    "command",
    "argv",
    "cwd",
    "env",
    "env_file",
    "secret_env",
    "deps",
    "dep_mode",
    "priority",
    "pool",
    "timeout",
    "heartbeat",
    "kill_grace",
    "retries",
    "backoff",
    "retry_on",
    "preemptible",
    "user",
    "group",
    "umask",
    "shell",
];
/// Job keys a DAG may also set at its top level for every job (after the
/// job's own value and `[defaults]`): who its processes run as and how.
const DAG_WIDE_JOB_KEYS: &[&str] = &["user", "group", "umask", "shell"];
/// Job keys that `[defaults]` and the shorthand's top level may not set.
const PER_JOB_ONLY: &[&str] = &["id", "command", "argv", "deps"];
const HISTORY_KEYS: &[&str] = &["keep_runs"];
const NOTIFY_KEYS: &[&str] = &["mail", "on"];
const BACKOFF_KEYS: &[&str] = &["kind", "base", "max", "jitter"];

/// Largest job file accepted; bigger ones are refused before parsing. A
/// 100,000-job DAG is about 5 MiB.
pub const MAX_FILE_BYTES: usize = 16 << 20;

/// Whether a file name is one the jobs folder ignores (docs/job-files.md,
/// "Names and which files are read").
pub fn is_ignored_name(file_name: &str) -> bool {
    file_name.starts_with('.')
        || file_name.ends_with('~')
        || [".swp", ".tmp", ".part", ".bak"]
            .iter()
            .any(|s| file_name.ends_with(s))
        || !file_name.ends_with(".toml")
}

/// Longest DAG name, in bytes (a file name's limit on Linux).
pub const MAX_DAG_NAME: usize = 255;

/// Whether `name` may name a DAG, from a job file's path or a `submit`:
/// not empty, at most [`MAX_DAG_NAME`] bytes, no control character (a
/// newline or NUL would forge lines in logs and listings). The error says
/// which rule it breaks.
pub fn check_dag_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("a DAG name must not be empty".into());
    }
    if name.len() > MAX_DAG_NAME {
        return Err(format!(
            "a DAG name is at most {MAX_DAG_NAME} bytes (this one is {})",
            name.len()
        ));
    }
    if let Some((at, c)) = name.char_indices().find(|(_, c)| c.is_control()) {
        return Err(format!(
            "a DAG name must not contain control characters ({:?} at byte {at})",
            c
        ));
    }
    Ok(())
}

/// The DAG name of `path` below `jobs_dir`: the relative path without
/// `.toml`, with `/` separators (`team-a/etl`).
pub fn dag_name_for(jobs_dir: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(jobs_dir).ok()?;
    let text = rel.to_str()?;
    let name = text.strip_suffix(".toml")?;
    (!name.is_empty()).then(|| name.replace(std::path::MAIN_SEPARATOR, "/"))
}

/// Reads and validates one job file from disk. The DAG name is the file
/// stem when `jobs_dir` is `None`.
pub fn load_file(
    path: &Path,
    jobs_dir: Option<&Path>,
    opts: &ValidateOptions,
) -> Result<DagFile, Vec<FileError>> {
    let file = path.display().to_string();
    let whole = |message: String| {
        vec![FileError {
            file: file.clone(),
            line: None,
            column: None,
            message,
        }]
    };
    let name = match jobs_dir {
        Some(dir) => dag_name_for(dir, path),
        None => path
            .file_stem()
            .and_then(|s| s.to_str())
            .map(str::to_string),
    }
    .ok_or_else(|| whole("cannot derive a DAG name from this path".into()))?;
    check_dag_name(&name).map_err(|e| whole(format!("file name: {e}")))?;
    let meta = std::fs::metadata(path).map_err(|e| whole(format!("cannot read: {e}")))?;
    if !meta.is_file() {
        return Err(whole("not a regular file".into()));
    }
    if meta.len() as usize > MAX_FILE_BYTES {
        return Err(whole(format!(
            "file is {} bytes; job files are limited to {} bytes",
            meta.len(),
            MAX_FILE_BYTES
        )));
    }
    let bytes = std::fs::read(path).map_err(|e| whole(format!("cannot read: {e}")))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        whole(format!(
            "not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        ))
    })?;
    parse_dag(&name, &file, &text, opts)
}

/// Parses and validates the text of one job file as DAG `name`.
pub fn parse_dag(
    name: &str,
    file: &str,
    text: &str,
    opts: &ValidateOptions,
) -> Result<DagFile, Vec<FileError>> {
    let mut cx = Cx {
        file,
        text,
        errors: Vec::new(),
        line_starts: std::cell::OnceCell::new(),
        accounts_at: Vec::new(),
    };
    if text.trim().is_empty() {
        cx.errors.push(FileError {
            file: file.into(),
            line: None,
            column: None,
            message: "empty file: a job file needs a `command` or at least one [[job]]".into(),
        });
        return Err(cx.errors);
    }
    let (root, syntax) = DeTable::parse_recoverable(text);
    if !syntax.is_empty() {
        for e in syntax {
            let span = e.span().unwrap_or(0..0);
            cx.err(span, format!("TOML syntax: {}", e.message().trim()));
        }
        return Err(cx.errors);
    }
    let root = root.into_inner();
    let result = cx.dag(name, &root, opts);
    if cx.errors.is_empty() {
        Ok(result)
    } else {
        Err(cx.errors)
    }
}

/// Cross-file checks of `after`: every name must be a loaded DAG and the
/// `after` graph must have no cycle. Returns errors keyed by DAG name.
pub fn check_after(dags: &[&DagFile]) -> Vec<(String, FileError)> {
    let by_name: HashMap<&str, &DagFile> =
        dags.iter().map(|d| (d.spec.name.as_str(), *d)).collect();
    let mut errors = Vec::new();
    for dag in dags {
        for (i, target) in dag.spec.after.iter().enumerate() {
            if !by_name.contains_key(target.as_str()) {
                let at = dag.after_at.get(i).copied();
                errors.push((
                    dag.spec.name.clone(),
                    FileError {
                        file: dag.spec.file.clone(),
                        line: at.map(|a| a.0),
                        column: at.map(|a| a.1),
                        message: format!("after: unknown DAG {target:?}"),
                    },
                ));
            }
        }
    }
    // Edges point from a DAG to the DAGs it waits for.
    let index: HashMap<&str, usize> = dags
        .iter()
        .enumerate()
        .map(|(i, d)| (d.spec.name.as_str(), i))
        .collect();
    let waits_for: Vec<Vec<usize>> = dags
        .iter()
        .map(|d| {
            d.spec
                .after
                .iter()
                .filter_map(|t| index.get(t.as_str()).copied())
                .collect()
        })
        .collect();
    for cycle in find_cycles(dags.len(), |i| waits_for[i].as_slice()) {
        let dag = dags[cycle[0]];
        let names: Vec<&str> = cycle.iter().map(|&i| dags[i].spec.name.as_str()).collect();
        errors.push((
            dag.spec.name.clone(),
            FileError {
                file: dag.spec.file.clone(),
                line: dag.after_at.first().map(|a| a.0),
                column: dag.after_at.first().map(|a| a.1),
                message: format!("after cycle: {}", names.join(" -> ")),
            },
        ));
    }
    errors
}

/// Why a DAG's jobs have no execution order.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GraphError {
    #[error("a DAG needs at least one job")]
    Empty,
    #[error("duplicate job id {0:?}")]
    DuplicateId(String),
    #[error("job {job:?}: bad dep {dep:?}")]
    BadDep { job: String, dep: String },
    #[error("the jobs' deps form a cycle")]
    Cycle,
}

/// The jobs' indices in an order where every job comes after its deps
/// (Kahn's algorithm, ties in file order). The graph rules `check_graph`
/// reports with positions are the ones refused here: at least one job,
/// unique ids, deps that name another job of the DAG, no cycle. Specs built
/// without a file (ad-hoc submissions, hooks) go through this alone.
pub fn job_order(spec: &DagSpec) -> Result<Vec<usize>, GraphError> {
    let n = spec.jobs.len();
    if n == 0 {
        return Err(GraphError::Empty);
    }
    let mut index: HashMap<&str, usize> = HashMap::with_capacity(n);
    for (i, job) in spec.jobs.iter().enumerate() {
        if index.insert(job.id.as_str(), i).is_some() {
            return Err(GraphError::DuplicateId(job.id.clone()));
        }
    }
    let mut indegree = vec![0usize; n];
    let mut down: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, job) in spec.jobs.iter().enumerate() {
        for d in &job.deps {
            let u = match index.get(d.as_str()) {
                Some(&u) if u != i => u,
                _ => {
                    return Err(GraphError::BadDep {
                        job: job.id.clone(),
                        dep: d.clone(),
                    });
                }
            };
            indegree[i] += 1;
            down[u].push(i);
        }
    }
    let mut ready: std::collections::VecDeque<usize> =
        (0..n).filter(|i| indegree[*i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(u) = ready.pop_front() {
        order.push(u);
        for &d in &down[u] {
            indegree[d] -= 1;
            if indegree[d] == 0 {
                ready.push_back(d);
            }
        }
    }
    if order.len() == n {
        Ok(order)
    } else {
        Err(GraphError::Cycle)
    }
}

/// The cycles a depth-first search over nodes `0..n` meets, each reported
/// once as a path of node indices that returns to its start
/// (`a -> b -> a`), at the edge that closes it. Nodes are visited in index
/// order and successors in `edges` order. Linear in nodes and edges, plus
/// the length of each reported path.
fn find_cycles<'a>(n: usize, edges: impl Fn(usize) -> &'a [usize]) -> Vec<Vec<usize>> {
    const NEW: usize = usize::MAX;
    const DONE: usize = usize::MAX - 1;
    // Per node: NEW, DONE, or its position on the DFS stack.
    let mut mark = vec![NEW; n];
    let mut cycles = Vec::new();
    for start in 0..n {
        if mark[start] != NEW {
            continue;
        }
        // Iterative DFS: (node, index of its next successor).
        let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
        mark[start] = 0;
        while let Some(top) = stack.last_mut() {
            let (node, next) = *top;
            match edges(node).get(next) {
                Some(&succ) => {
                    top.1 += 1;
                    match mark[succ] {
                        NEW => {
                            mark[succ] = stack.len();
                            stack.push((succ, 0));
                        }
                        DONE => {}
                        at => {
                            let mut path: Vec<usize> =
                                stack[at..].iter().map(|&(v, _)| v).collect();
                            path.push(succ);
                            cycles.push(path);
                        }
                    }
                }
                None => {
                    mark[node] = DONE;
                    stack.pop();
                }
            }
        }
    }
    cycles
}

mod fields;

use fields::Cx;

/// Job ids: `[A-Za-z0-9_.-]{1,64}`.
/// An account or group name as `useradd` accepts it by default: 1-32 of
/// `a-z 0-9 _ . -`, not starting with `-` (a leading `-` reads as an
/// option to the tools that take names), with an optional final `$`.
pub fn valid_account_name(name: &str) -> bool {
    let body = name.strip_suffix('$').unwrap_or(name);
    (1..=32).contains(&body.len())
        && !body.starts_with('-')
        && body.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'.' | b'-')
        })
        && !body.bytes().all(|b| b.is_ascii_digit())
}

pub fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}
