//! Job files (SPEC §2): TOML → a validated [`DagSpec`].
//!
//! The whole file is checked before anything of it is used, and *every*
//! error is reported with file, line and column. To get positions for
//! semantic errors (unknown keys, bad values, unknown deps) the file is read
//! into toml's spanned document tree (`DeTable`) and walked by hand rather
//! than deserialized with serde, which stops at the first error.

use std::collections::{BTreeMap, HashMap, HashSet};
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
    "defaults",
    "job",
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
];
/// Job keys that `[defaults]` and the shorthand's top level may not set.
const PER_JOB_ONLY: &[&str] = &["id", "command", "argv", "deps"];
const HISTORY_KEYS: &[&str] = &["keep_runs"];
const BACKOFF_KEYS: &[&str] = &["kind", "base", "max", "jitter"];

/// Largest job file accepted; bigger ones are refused before parsing. A
/// 100,000-job DAG is about 5 MiB.
pub const MAX_FILE_BYTES: usize = 16 << 20;

/// Whether a file name is one the jobs folder ignores (SPEC §2).
pub fn is_ignored_name(file_name: &str) -> bool {
    file_name.starts_with('.')
        || file_name.ends_with('~')
        || [".swp", ".tmp", ".part", ".bak"]
            .iter()
            .any(|s| file_name.ends_with(s))
        || !file_name.ends_with(".toml")
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
    let names: Vec<&str> = dags.iter().map(|d| d.spec.name.as_str()).collect();
    let edges = |n: &str| -> Vec<String> {
        by_name
            .get(n)
            .map(|d| {
                d.spec
                    .after
                    .iter()
                    .filter(|t| by_name.contains_key(t.as_str()))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    };
    for cycle in find_cycles(&names, edges) {
        let first = &cycle[0];
        let dag = by_name[first.as_str()];
        errors.push((
            first.clone(),
            FileError {
                file: dag.spec.file.clone(),
                line: dag.after_at.first().map(|a| a.0),
                column: dag.after_at.first().map(|a| a.1),
                message: format!("after cycle: {}", cycle.join(" -> ")),
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

/// Every elementary cycle reachable by DFS, each reported once as a path
/// that returns to its start (`a -> b -> a`).
fn find_cycles<F: Fn(&str) -> Vec<String>>(nodes: &[&str], edges: F) -> Vec<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnStack,
        Done,
    }
    let mut mark: HashMap<String, Mark> =
        nodes.iter().map(|n| (n.to_string(), Mark::New)).collect();
    let mut cycles = Vec::new();
    for &start in nodes {
        if mark[start] != Mark::New {
            continue;
        }
        // Iterative DFS: (node, its successors, next successor index).
        let mut stack: Vec<(String, Vec<String>, usize)> =
            vec![(start.to_string(), edges(start), 0)];
        mark.insert(start.to_string(), Mark::OnStack);
        while let Some(top) = stack.last_mut() {
            if top.2 < top.1.len() {
                let next = top.1[top.2].clone();
                top.2 += 1;
                match mark.get(&next).copied().unwrap_or(Mark::Done) {
                    Mark::New => {
                        mark.insert(next.clone(), Mark::OnStack);
                        let succ = edges(&next);
                        stack.push((next, succ, 0));
                    }
                    Mark::OnStack => {
                        let from = stack.iter().position(|(n, _, _)| *n == next).unwrap_or(0);
                        let mut path: Vec<String> =
                            stack[from..].iter().map(|(n, _, _)| n.clone()).collect();
                        path.push(next);
                        cycles.push(path);
                    }
                    Mark::Done => {}
                }
            } else {
                let (node, _, _) = stack.pop().expect("non-empty");
                mark.insert(node, Mark::Done);
            }
        }
    }
    cycles
}

struct Cx<'a> {
    file: &'a str,
    text: &'a str,
    errors: Vec<FileError>,
}

type Table<'i> = DeTable<'i>;
type Val<'i> = Spanned<DeValue<'i>>;

impl Cx<'_> {
    fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map(|i| i + 1).unwrap_or(0);
        let column = self.text[line_start..offset].chars().count() + 1;
        (line, column)
    }

    fn err(&mut self, span: Range<usize>, message: impl Into<String>) {
        let (line, column) = self.line_col(span.start);
        self.errors.push(FileError {
            file: self.file.to_string(),
            line: Some(line),
            column: Some(column),
            message: message.into(),
        });
    }

    fn dag(&mut self, name: &str, root: &Table<'_>, opts: &ValidateOptions) -> DagFile {
        let shorthand = root.contains_key("command") || root.contains_key("argv");
        let has_jobs = root.contains_key("job");
        let job_id_for_shorthand = name.rsplit('/').next().unwrap_or(name).to_string();

        for key in root.keys() {
            let k = key.get_ref().as_ref();
            let known = DAG_KEYS.contains(&k)
                || (shorthand && JOB_KEYS.contains(&k) && !["id", "deps"].contains(&k));
            if !known {
                let hint = if JOB_KEYS.contains(&k) && !shorthand {
                    " (job fields belong in [[job]] or [defaults])"
                } else {
                    ""
                };
                self.err(key.span(), format!("unknown key `{k}`{hint}"));
            }
        }
        if shorthand && has_jobs {
            let span = root.get("job").map(|v| v.span()).unwrap_or(0..0);
            self.err(
                span,
                "a file with a top-level `command`/`argv` is a single job; it cannot also have [[job]] tables",
            );
        }

        let mut spec = DagSpec::adhoc(name, Vec::new());
        spec.file = self.file.to_string();
        spec.overlap = Overlap::Skip;
        spec.description = self.opt_string(root, "description");
        spec.owner = self.opt_string(root, "owner");
        spec.on_failure = self
            .opt_string(root, "on_failure")
            .filter(|s| !s.is_empty());
        spec.on_success = self
            .opt_string(root, "on_success")
            .filter(|s| !s.is_empty());
        spec.enabled = self.opt_bool(root, "enabled").unwrap_or(true);
        spec.tags = self.opt_strings(root, "tags").unwrap_or_default();
        if let Some(v) = root.get("schedule")
            && let Some(s) = self.as_str(v, "schedule")
        {
            match Schedule::parse(s) {
                Ok(_) => spec.schedule = Some(s.to_string()),
                Err(e) => self.err(v.span(), format!("schedule: {}", e.reason)),
            }
        }
        if let Some(v) = root.get("timezone")
            && let Some(s) = self.as_str(v, "timezone")
        {
            match parse_zone(s) {
                Ok(_) => spec.timezone = Some(s.to_string()),
                Err(e) => self.err(v.span(), format!("timezone: {e}")),
            }
        }
        if let Some(v) = root.get("catchup") {
            spec.catchup = self
                .enumeration(
                    v,
                    "catchup",
                    &[
                        ("none", Catchup::None),
                        ("latest", Catchup::Latest),
                        ("all", Catchup::All),
                    ],
                )
                .unwrap_or_default();
        }
        if let Some(v) = root.get("overlap") {
            spec.overlap = self
                .enumeration(
                    v,
                    "overlap",
                    &[
                        ("skip", Overlap::Skip),
                        ("queue", Overlap::Queue),
                        ("replace", Overlap::Replace),
                        ("allow", Overlap::Allow),
                    ],
                )
                .unwrap_or_default();
        }
        spec.keep_runs = self.history(root);
        let mut after_at = Vec::new();
        if let Some(v) = root.get("after")
            && let Some(items) = self.as_array(v, "after")
        {
            for item in items {
                if let Some(s) = self.as_str(item, "after entry") {
                    if s == name {
                        self.err(
                            item.span(),
                            format!("after: DAG {name:?} cannot trigger itself"),
                        );
                    }
                    spec.after.push(s.to_string());
                    after_at.push(self.line_col(item.span().start));
                }
            }
        }

        let empty = Table::default();
        let defaults = match root.get("defaults") {
            Some(v) => match v.get_ref() {
                DeValue::Table(t) => {
                    for (key, _) in t.iter() {
                        let k = key.get_ref().as_ref();
                        if !JOB_KEYS.contains(&k) || PER_JOB_ONLY.contains(&k) {
                            self.err(key.span(), format!("unknown key `{k}` in [defaults]"));
                        }
                    }
                    t
                }
                _ => {
                    self.err(v.span(), "`defaults` must be a table");
                    &empty
                }
            },
            None => &empty,
        };

        if shorthand {
            let job = self.job(root, defaults, Some(&job_id_for_shorthand), opts, 0..0);
            spec.jobs.push(job);
        } else if let Some(v) = root.get("job") {
            match v.get_ref() {
                DeValue::Array(items) => {
                    for item in items.iter() {
                        match item.get_ref() {
                            DeValue::Table(t) => {
                                for (key, _) in t.iter() {
                                    let k = key.get_ref().as_ref();
                                    if !JOB_KEYS.contains(&k) {
                                        self.err(
                                            key.span(),
                                            format!("unknown key `{k}` in [[job]]"),
                                        );
                                    }
                                }
                                let job = self.job(t, defaults, None, opts, item.span());
                                spec.jobs.push(job);
                            }
                            _ => {
                                self.err(item.span(), "each `job` entry must be a table ([[job]])")
                            }
                        }
                    }
                }
                _ => self.err(v.span(), "`job` must be an array of tables: write [[job]]"),
            }
        } else {
            self.errors.push(FileError {
                file: self.file.into(),
                line: None,
                column: None,
                message:
                    "no jobs: add [[job]] tables, or a top-level `command` for a single-job file"
                        .into(),
            });
        }
        self.check_graph(root, &spec);
        DagFile { spec, after_at }
    }

    /// `[history] keep_runs = N`: N is at least 1 (keeping no DAG run
    /// would lose a run before anyone saw how it ended).
    fn history(&mut self, root: &Table<'_>) -> Option<u32> {
        let v = root.get("history")?;
        let DeValue::Table(t) = v.get_ref() else {
            self.err(v.span(), "`history` must be a table: write [history]");
            return None;
        };
        for (key, _) in t.iter() {
            let k = key.get_ref().as_ref();
            if !HISTORY_KEYS.contains(&k) {
                self.err(key.span(), format!("unknown key `{k}` in [history]"));
            }
        }
        let v = t.get("keep_runs")?;
        let n = self.int(v, "history.keep_runs")?;
        match u32::try_from(n) {
            Ok(n) if n >= 1 => Some(n),
            _ => {
                self.err(
                    v.span(),
                    format!(
                        "history.keep_runs must be between 1 and {}, not {n}",
                        u32::MAX
                    ),
                );
                None
            }
        }
    }

    /// Duplicate ids, unknown deps, self-deps and cycles.
    fn check_graph(&mut self, root: &Table<'_>, spec: &DagSpec) {
        // Spans of each job's `id` and `deps` entries, in job order.
        let mut id_spans: Vec<Range<usize>> = Vec::new();
        let mut dep_spans: Vec<Vec<Range<usize>>> = Vec::new();
        if let Some(DeValue::Array(items)) = root.get("job").map(|v| v.get_ref()) {
            for item in items.iter() {
                if let DeValue::Table(t) = item.get_ref() {
                    id_spans.push(t.get("id").map(|v| v.span()).unwrap_or(item.span()));
                    dep_spans.push(match t.get("deps").map(|v| v.get_ref()) {
                        Some(DeValue::Array(a)) => a.iter().map(|d| d.span()).collect(),
                        _ => Vec::new(),
                    });
                }
            }
        }
        let span_of = |spans: &Vec<Range<usize>>, i: usize| spans.get(i).cloned().unwrap_or(0..0);
        let mut first_seen: HashMap<&str, usize> = HashMap::new();
        for (i, job) in spec.jobs.iter().enumerate() {
            if let Some(&prev) = first_seen.get(job.id.as_str()) {
                let (line, _) = self.line_col(span_of(&id_spans, prev).start);
                self.err(
                    span_of(&id_spans, i),
                    format!(
                        "duplicate job id {:?} (first defined on line {line})",
                        job.id
                    ),
                );
            } else {
                first_seen.insert(&job.id, i);
            }
        }
        let ids: HashSet<&str> = spec.jobs.iter().map(|j| j.id.as_str()).collect();
        for (i, job) in spec.jobs.iter().enumerate() {
            for (d, dep) in job.deps.iter().enumerate() {
                let span = dep_spans
                    .get(i)
                    .and_then(|s| s.get(d))
                    .cloned()
                    .unwrap_or(0..0);
                if dep == &job.id {
                    self.err(span, format!("job {:?} depends on itself", job.id));
                } else if !ids.contains(dep.as_str()) {
                    self.err(span, format!("job {:?}: unknown dep {dep:?}", job.id));
                }
            }
        }
        let names: Vec<&str> = spec.jobs.iter().map(|j| j.id.as_str()).collect();
        let deps_of = |id: &str| -> Vec<String> {
            spec.job(id)
                .map(|j| {
                    j.deps
                        .iter()
                        .filter(|d| *d != id && ids.contains(d.as_str()))
                        .cloned()
                        .collect()
                })
                .unwrap_or_default()
        };
        for mut cycle in find_cycles(&names, deps_of) {
            // The DFS follows deps (downstream → upstream); print the cycle
            // in execution order: a -> b means b depends on a.
            cycle.reverse();
            let i = names.iter().position(|n| *n == cycle[0]).unwrap_or(0);
            self.err(
                span_of(&id_spans, i),
                format!("cycle: {}", cycle.join(" -> ")),
            );
        }
    }

    /// Builds one job from its table, falling back to `[defaults]`.
    fn job(
        &mut self,
        own: &Table<'_>,
        defaults: &Table<'_>,
        forced_id: Option<&str>,
        opts: &ValidateOptions,
        table_span: Range<usize>,
    ) -> JobSpec {
        let get = |key: &str| own.get(key).or_else(|| defaults.get(key));
        let id = match forced_id {
            Some(id) => id.to_string(),
            None => match own.get("id") {
                Some(v) => self.as_str(v, "id").map(str::to_string).unwrap_or_default(),
                None => {
                    self.err(table_span.clone(), "job without `id`");
                    String::new()
                }
            },
        };
        if !id.is_empty() && !valid_id(&id) {
            let span = own
                .get("id")
                .map(|v| v.span())
                .unwrap_or(table_span.clone());
            self.err(
                span,
                format!("bad job id {id:?}: use 1-64 of A-Z a-z 0-9 _ . -"),
            );
        }
        let exec = match (own.get("command"), own.get("argv")) {
            (Some(_), Some(v)) => {
                self.err(
                    v.span(),
                    format!("job {id:?} has both `command` and `argv`; keep one"),
                );
                None
            }
            (Some(v), None) => self.as_str(v, "command").map(|s| {
                if s.trim().is_empty() {
                    self.err(v.span(), "`command` is empty");
                }
                Exec::Shell(s.to_string())
            }),
            (None, Some(v)) => self.strings(v, "argv").and_then(|a| {
                if a.is_empty() {
                    self.err(v.span(), "`argv` is empty");
                    None
                } else {
                    Some(Exec::Argv(a))
                }
            }),
            (None, None) => {
                self.err(
                    table_span.clone(),
                    format!("job {id:?} needs `command` or `argv`"),
                );
                None
            }
        };
        let mut job = JobSpec::new(id, exec.unwrap_or(Exec::Shell(String::new())));
        job.cwd = get("cwd").and_then(|v| self.absolute_path(v, "cwd"));
        if let Some(v) = get("env") {
            match v.get_ref() {
                DeValue::Table(t) => {
                    let mut env = BTreeMap::new();
                    for (k, val) in t.iter() {
                        let key = k.get_ref().to_string();
                        if !valid_env_name(&key) {
                            self.err(k.span(), format!("bad environment variable name {key:?}"));
                        }
                        if let Some(s) = self.as_str(val, "env value") {
                            env.insert(key, s.to_string());
                        }
                    }
                    job.env = env;
                }
                _ => self.err(
                    v.span(),
                    "`env` must be a table of strings, e.g. env = { REGION = \"cn\" }",
                ),
            }
        }
        job.env_file = get("env_file").and_then(|v| self.absolute_path(v, "env_file"));
        if let Some(v) = get("secret_env")
            && let Some(items) = self.as_array(v, "secret_env")
        {
            for item in items {
                if let Some(name) = self.as_str(item, "secret_env entry") {
                    if valid_env_name(name) {
                        job.secret_env.push(name.to_string());
                    } else {
                        self.err(
                            item.span(),
                            format!("secret_env: bad environment variable name {name:?}"),
                        );
                    }
                }
            }
        }
        if forced_id.is_none()
            && let Some(v) = own.get("deps")
        {
            job.deps = self.strings(v, "deps").unwrap_or_default();
        }
        if let Some(v) = get("dep_mode") {
            job.dep_mode = self
                .enumeration(
                    v,
                    "dep_mode",
                    &[("all", DepMode::All), ("any", DepMode::Any)],
                )
                .unwrap_or_default();
        }
        if let Some(v) = get("priority")
            && let Some(p) = self.int(v, "priority")
        {
            if (1..=100).contains(&p) {
                job.priority = p as u8;
            } else {
                self.err(v.span(), format!("priority {p} out of range 1-100"));
            }
        }
        if let Some(v) = get("pool")
            && let Some(s) = self.as_str(v, "pool")
        {
            if let Some(pools) = &opts.pools
                && !pools.iter().any(|p| p == s)
            {
                self.err(
                    v.span(),
                    format!("unknown pool {s:?} (configured: {})", pools.join(", ")),
                );
            }
            job.pool = s.to_string();
        }
        if let Some(v) = get("timeout") {
            if v.get_ref().as_str() == Some("none") {
                job.timeout = Timeout::Never;
            } else if let Some(d) = self.duration(v, "timeout") {
                job.timeout = Timeout::After(d);
            }
        }
        if let Some(v) = get("heartbeat")
            && v.get_ref().as_str() != Some("none")
        {
            job.heartbeat = self.duration(v, "heartbeat");
        }
        if let Some(v) = get("kill_grace")
            && let Some(d) = self.duration(v, "kill_grace")
        {
            job.kill_grace = d;
        }
        if let Some(v) = get("retries")
            && let Some(n) = self.int(v, "retries")
        {
            if (0..=10_000).contains(&n) {
                job.retries = n as u32;
            } else {
                self.err(v.span(), format!("retries {n} out of range 0-10000"));
            }
        }
        if let Some(v) = get("backoff") {
            job.backoff = self.backoff(v);
        }
        if let Some(v) = get("retry_on")
            && let Some(items) = self.as_array(v, "retry_on")
        {
            let mut codes = Vec::new();
            for item in items {
                if let Some(c) = self.int(item, "retry_on entry") {
                    if (0..=255).contains(&c) {
                        codes.push(c as i32);
                    } else {
                        self.err(item.span(), format!("exit code {c} out of range 0-255"));
                    }
                }
            }
            job.retry_on = Some(codes);
        }
        if let Some(v) = get("preemptible") {
            job.preemptible = self.as_bool(v, "preemptible").unwrap_or(false);
        }
        job
    }

    fn backoff(&mut self, v: &Val<'_>) -> Backoff {
        let mut backoff = Backoff::default();
        let DeValue::Table(t) = v.get_ref() else {
            self.err(
                v.span(),
                "`backoff` must be a table, e.g. { kind = \"exponential\", base = \"1s\" }",
            );
            return backoff;
        };
        for (key, _) in t.iter() {
            let k = key.get_ref().as_ref();
            if !BACKOFF_KEYS.contains(&k) {
                self.err(
                    key.span(),
                    format!("unknown key `{k}` in backoff (use kind, base, max, jitter)"),
                );
            }
        }
        if let Some(kind) = t.get("kind") {
            backoff.kind = self
                .enumeration(
                    kind,
                    "backoff.kind",
                    &[
                        ("exponential", BackoffKind::Exponential),
                        ("fixed", BackoffKind::Fixed),
                        ("none", BackoffKind::None),
                    ],
                )
                .unwrap_or_default();
        }
        for (key, slot) in [
            ("base", &mut backoff.base),
            ("max", &mut backoff.max),
            ("jitter", &mut backoff.jitter),
        ] {
            if let Some(v) = t.get(key)
                && let Some(d) = self.duration(v, &format!("backoff.{key}"))
            {
                *slot = d;
            }
        }
        backoff
    }

    fn as_str<'v>(&mut self, v: &'v Val<'_>, what: &str) -> Option<&'v str> {
        match v.get_ref() {
            DeValue::String(s) => Some(s.as_ref()),
            other => {
                self.err(
                    v.span(),
                    format!("`{what}` must be a string, not {}", other.type_str()),
                );
                None
            }
        }
    }

    /// A path that must be absolute: a job's processes start in whatever
    /// directory axd runs in, so a relative one would mean different files
    /// under systemd and in a terminal.
    fn absolute_path(&mut self, v: &Val<'_>, what: &str) -> Option<PathBuf> {
        let s = self.as_str(v, what)?;
        if Path::new(s).is_absolute() {
            Some(PathBuf::from(s))
        } else {
            self.err(v.span(), format!("{what} {s:?} must be an absolute path"));
            None
        }
    }

    fn as_bool(&mut self, v: &Val<'_>, what: &str) -> Option<bool> {
        match v.get_ref() {
            DeValue::Boolean(b) => Some(*b),
            other => {
                self.err(
                    v.span(),
                    format!("`{what}` must be true or false, not {}", other.type_str()),
                );
                None
            }
        }
    }

    fn as_array<'v, 'i>(&mut self, v: &'v Val<'i>, what: &str) -> Option<&'v [Val<'i>]> {
        match v.get_ref() {
            DeValue::Array(a) => Some(a),
            other => {
                self.err(
                    v.span(),
                    format!("`{what}` must be an array, not {}", other.type_str()),
                );
                None
            }
        }
    }

    fn int(&mut self, v: &Val<'_>, what: &str) -> Option<i64> {
        match v.get_ref() {
            DeValue::Integer(i) => match i64::from_str_radix(i.as_str(), i.radix()) {
                Ok(n) => Some(n),
                Err(_) => {
                    self.err(v.span(), format!("`{what}` is out of range"));
                    None
                }
            },
            other => {
                self.err(
                    v.span(),
                    format!("`{what}` must be an integer, not {}", other.type_str()),
                );
                None
            }
        }
    }

    fn strings(&mut self, v: &Val<'_>, what: &str) -> Option<Vec<String>> {
        let items = self.as_array(v, what)?;
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            if let Some(s) = self.as_str(item, &format!("{what} entry")) {
                out.push(s.to_string());
            }
        }
        Some(out)
    }

    fn duration(&mut self, v: &Val<'_>, what: &str) -> Option<Duration> {
        let s = self.as_str(v, what)?;
        match parse_duration(s) {
            Ok(d) => Some(d),
            Err(e) => {
                self.err(v.span(), format!("{what}: {e}"));
                None
            }
        }
    }

    fn enumeration<T: Copy>(
        &mut self,
        v: &Val<'_>,
        what: &str,
        choices: &[(&str, T)],
    ) -> Option<T> {
        let s = self.as_str(v, what)?;
        match choices.iter().find(|(name, _)| *name == s) {
            Some((_, value)) => Some(*value),
            None => {
                let names: Vec<&str> = choices.iter().map(|c| c.0).collect();
                self.err(
                    v.span(),
                    format!("{what}: {s:?} is not one of {}", names.join(", ")),
                );
                None
            }
        }
    }

    fn opt_string(&mut self, t: &Table<'_>, key: &str) -> Option<String> {
        let v = t.get(key)?;
        self.as_str(v, key).map(str::to_string)
    }

    fn opt_bool(&mut self, t: &Table<'_>, key: &str) -> Option<bool> {
        let v = t.get(key)?;
        self.as_bool(v, key)
    }

    fn opt_strings(&mut self, t: &Table<'_>, key: &str) -> Option<Vec<String>> {
        let v = t.get(key)?;
        self.strings(v, key)
    }
}

/// Job ids: `[A-Za-z0-9_.-]{1,64}`.
pub fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}
