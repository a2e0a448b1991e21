//! Reading one job file's TOML table field by field: every value is
//! checked where it stands, so each error carries its line and column.

use super::*;

mod dag;

/// The file being read and the errors found so far.
pub(super) struct Cx<'a> {
    pub(super) file: &'a str,
    pub(super) text: &'a str,
    pub(super) errors: Vec<FileError>,
    /// Where each line of `text` starts, built at the first position asked
    /// for: each error's line is then a binary search, not a count of the
    /// newlines before it (which made many errors in a big file quadratic).
    pub(super) line_starts: std::cell::OnceCell<Vec<usize>>,
    /// The account names read so far (`DagFile::accounts_at`).
    pub(super) accounts_at: Vec<AccountAt>,
}

pub(super) type Table<'i> = DeTable<'i>;
pub(super) type Val<'i> = Spanned<DeValue<'i>>;

/// A job's own table, the `[defaults]` it falls back to, and the DAG's
/// top level for the keys a DAG sets for all its jobs.
#[derive(Clone, Copy)]
struct JobTable<'t, 'i> {
    own: &'t Table<'i>,
    defaults: &'t Table<'i>,
    dag: &'t Table<'i>,
}

impl<'t, 'i> JobTable<'t, 'i> {
    fn get(&self, key: &str) -> Option<&'t Val<'i>> {
        self.own
            .get(key)
            .or_else(|| self.defaults.get(key))
            .or_else(|| {
                DAG_WIDE_JOB_KEYS
                    .contains(&key)
                    .then(|| self.dag.get(key))
                    .flatten()
            })
    }
}

impl Cx<'_> {
    fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let starts = self.line_starts.get_or_init(|| {
            std::iter::once(0)
                .chain(self.text.match_indices('\n').map(|(i, _)| i + 1))
                .collect()
        });
        // The last line start at or before `offset` (`starts[0]` is 0).
        let line = starts.partition_point(|&s| s <= offset);
        let line_start = starts[line - 1];
        let column = self.text[line_start..offset].chars().count() + 1;
        (line, column)
    }

    pub(super) fn err(&mut self, span: Range<usize>, message: impl Into<String>) {
        let (line, column) = self.line_col(span.start);
        self.errors.push(FileError {
            file: self.file.to_string(),
            line: Some(line),
            column: Some(column),
            message: message.into(),
        });
    }

    pub(super) fn dag(&mut self, name: &str, root: &Table<'_>, opts: &ValidateOptions) -> DagFile {
        let shorthand = root.contains_key("command") || root.contains_key("argv");
        self.check_dag_keys(root, shorthand);
        let mut spec = DagSpec::adhoc(name, Vec::new());
        spec.file = self.file.to_string();
        spec.overlap = Overlap::Skip;
        self.dag_about(root, &mut spec);
        self.dag_schedule(root, &mut spec);
        self.dag_notify(root, &mut spec);
        spec.keep_runs = self.history(root);
        let after_at = self.dag_after(root, name, &mut spec);
        let empty = Table::default();
        let defaults = self.defaults(root).unwrap_or(&empty);
        if shorthand {
            let job_id = name.rsplit('/').next().unwrap_or(name);
            let job = self.job(root, defaults, root, Some(job_id), opts, 0..0);
            spec.jobs.push(job);
        } else {
            self.dag_jobs(root, defaults, opts, &mut spec);
        }
        self.check_graph(root, &spec);
        DagFile {
            spec,
            after_at,
            accounts_at: std::mem::take(&mut self.accounts_at),
        }
    }

    /// Top-level keys: a DAG's, or also a job's in a single-job file
    /// (`shorthand`), which cannot also have `[[job]]` tables.
    fn check_dag_keys(&mut self, root: &Table<'_>, shorthand: bool) {
        let has_jobs = root.contains_key("job");
        for key in root.keys() {
            let k = key.get_ref().as_ref();
            let known = DAG_KEYS.contains(&k)
                || (shorthand && JOB_KEYS.contains(&k) && !["id", "deps"].contains(&k));
            if !known {
                let message = if JOB_KEYS.contains(&k) && !shorthand {
                    format!("unknown key `{k}` (job fields belong in [[job]] or [defaults])")
                } else if shorthand {
                    let valid = DAG_KEYS.iter().chain(JOB_KEYS).filter(|k| **k != "id");
                    unknown_key(k, "", valid)
                } else {
                    unknown_key(k, "", DAG_KEYS.iter())
                };
                self.err(key.span(), message);
            }
        }
        if shorthand && has_jobs {
            let span = root.get("job").map(|v| v.span()).unwrap_or(0..0);
            self.err(
                span,
                "a file with a top-level `command`/`argv` is a single job; it cannot also have [[job]] tables",
            );
        }
    }

    /// `[defaults]`: job fields every `[[job]]` falls back to; `None` when
    /// absent or not a table.
    fn defaults<'t, 'i>(&mut self, root: &'t Table<'i>) -> Option<&'t Table<'i>> {
        let v = root.get("defaults")?;
        match v.get_ref() {
            DeValue::Table(t) => {
                for (key, _) in t.iter() {
                    let k = key.get_ref().as_ref();
                    if !JOB_KEYS.contains(&k) || PER_JOB_ONLY.contains(&k) {
                        let valid = JOB_KEYS.iter().filter(|k| !PER_JOB_ONLY.contains(k));
                        self.err(key.span(), unknown_key(k, " in [defaults]", valid));
                    }
                }
                Some(t)
            }
            _ => {
                self.err(v.span(), "`defaults` must be a table");
                None
            }
        }
    }

    /// The `[[job]]` tables of a DAG file (one without any is an error).
    fn dag_jobs(
        &mut self,
        root: &Table<'_>,
        defaults: &Table<'_>,
        opts: &ValidateOptions,
        spec: &mut DagSpec,
    ) {
        if let Some(v) = root.get("job") {
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
                                            unknown_key(k, " in [[job]]", JOB_KEYS.iter()),
                                        );
                                    }
                                }
                                let job = self.job(t, defaults, root, None, opts, item.span());
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
        // Every job by id (the first of duplicates): deps are resolved
        // once, so the whole check is linear in the jobs and deps.
        let index = &first_seen;
        let mut upstream: Vec<Vec<usize>> = vec![Vec::new(); spec.jobs.len()];
        for (i, job) in spec.jobs.iter().enumerate() {
            // A duplicate id's node is the first job of that id.
            let holds_id = index.get(job.id.as_str()) == Some(&i);
            for (d, dep) in job.deps.iter().enumerate() {
                let span = dep_spans
                    .get(i)
                    .and_then(|s| s.get(d))
                    .cloned()
                    .unwrap_or(0..0);
                if dep == &job.id {
                    self.err(span, format!("job {:?} depends on itself", job.id));
                } else if let Some(&u) = index.get(dep.as_str()) {
                    if holds_id {
                        upstream[i].push(u);
                    }
                } else {
                    self.err(span, format!("job {:?}: unknown dep {dep:?}", job.id));
                }
            }
        }
        for mut cycle in find_cycles(spec.jobs.len(), |i| upstream[i].as_slice()) {
            // The DFS follows deps (downstream → upstream); print the cycle
            // in execution order: a -> b means b depends on a.
            cycle.reverse();
            let names: Vec<&str> = cycle.iter().map(|&i| spec.jobs[i].id.as_str()).collect();
            self.err(
                span_of(&id_spans, cycle[0]),
                format!("cycle: {}", names.join(" -> ")),
            );
        }
    }

    /// Builds one job from its table, falling back to `[defaults]`.
    fn job(
        &mut self,
        own: &Table<'_>,
        defaults: &Table<'_>,
        dag: &Table<'_>,
        forced_id: Option<&str>,
        opts: &ValidateOptions,
        table_span: Range<usize>,
    ) -> JobSpec {
        let t = JobTable { own, defaults, dag };
        let id = self.job_id(own, forced_id, table_span.clone());
        let exec = self.job_exec(own, &id, table_span);
        let mut job = JobSpec::new(id, exec.unwrap_or(Exec::Shell(String::new())));
        self.job_environment(t, &mut job);
        self.job_identity(t, &mut job);
        if forced_id.is_none() {
            self.job_deps(own, &mut job);
        }
        self.job_dep_mode(t, &mut job);
        self.job_placement(t, opts, &mut job);
        self.job_limits(t, &mut job);
        self.job_retries(t, &mut job);
        if let Some(v) = t.get("preemptible") {
            job.preemptible = self.as_bool(v, "preemptible").unwrap_or(false);
        }
        job
    }

    /// The job's `id` (`forced_id` for a single-job file), checked.
    fn job_id(
        &mut self,
        own: &Table<'_>,
        forced_id: Option<&str>,
        table_span: Range<usize>,
    ) -> String {
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
        id
    }

    /// What the job runs: exactly one of `command` and `argv`.
    fn job_exec(&mut self, own: &Table<'_>, id: &str, table_span: Range<usize>) -> Option<Exec> {
        match (own.get("command"), own.get("argv")) {
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
        }
    }

    /// The process's working directory and environment: `cwd`, `env`,
    /// `env_file`, `secret_env`.
    fn job_environment(&mut self, t: JobTable<'_, '_>, job: &mut JobSpec) {
        job.cwd = t.get("cwd").and_then(|v| self.absolute_path(v, "cwd"));
        if let Some(v) = t.get("env") {
            match v.get_ref() {
                DeValue::Table(vars) => {
                    let mut env = BTreeMap::new();
                    for (k, val) in vars.iter() {
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
        job.env_file = t
            .get("env_file")
            .and_then(|v| self.absolute_path(v, "env_file"));
        if let Some(v) = t.get("secret_env")
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
    }

    /// Who the process runs as and how: `user`, `group`, `umask`, `shell`
    /// (names only: whether the accounts exist is the daemon's check, at
    /// load and at each start).
    fn job_identity(&mut self, t: JobTable<'_, '_>, job: &mut JobSpec) {
        for (account, slot) in [
            (AccountKey::User, &mut job.user),
            (AccountKey::Group, &mut job.group),
        ] {
            let key = account.as_str();
            if let Some(v) = t.get(key)
                && let Some(name) = self.as_str(v, key)
            {
                if valid_account_name(name) {
                    *slot = Some(name.to_string());
                    // A `[defaults]` or top-level value is read for every
                    // job: recorded once.
                    let (line, column) = self.line_col(v.span().start);
                    let at = AccountAt {
                        key: account,
                        name: name.to_string(),
                        line,
                        column,
                    };
                    if !self.accounts_at.contains(&at) {
                        self.accounts_at.push(at);
                    }
                } else {
                    self.err(
                        v.span(),
                        format!(
                            "`{key}`: bad {key} name {name:?}: use 1-32 of a-z 0-9 _ . - (a name, not a number)"
                        ),
                    );
                }
            }
        }
        if let Some(v) = t.get("umask")
            && let Some(text) = self.as_str(v, "umask")
        {
            match u32::from_str_radix(text, 8) {
                Ok(mask) if (3..=4).contains(&text.len()) && mask <= 0o777 => {
                    job.umask = Some(mask)
                }
                _ => self.err(
                    v.span(),
                    format!("`umask`: {text:?} is not an octal mask such as \"022\" or \"0027\""),
                ),
            }
        }
        job.shell = t.get("shell").and_then(|v| self.absolute_path(v, "shell"));
    }

    /// `deps`: never inherited from `[defaults]`.
    fn job_deps(&mut self, own: &Table<'_>, job: &mut JobSpec) {
        if let Some(v) = own.get("deps") {
            job.deps = self.strings(v, "deps").unwrap_or_default();
        }
    }

    fn job_dep_mode(&mut self, t: JobTable<'_, '_>, job: &mut JobSpec) {
        if let Some(v) = t.get("dep_mode") {
            job.dep_mode = self
                .enumeration(
                    v,
                    "dep_mode",
                    &[("all", DepMode::All), ("any", DepMode::Any)],
                )
                .unwrap_or_default();
        }
    }

    /// Where the job queues: `priority` and `pool`.
    fn job_placement(&mut self, t: JobTable<'_, '_>, opts: &ValidateOptions, job: &mut JobSpec) {
        if let Some(v) = t.get("priority")
            && let Some(p) = self.int(v, "priority")
        {
            match rules::check_priority(p) {
                Ok(p) => job.priority = p,
                Err(e) => self.err(v.span(), e.to_string()),
            }
        }
        if let Some(v) = t.get("pool")
            && let Some(s) = self.as_str(v, "pool")
        {
            if let Some(pools) = &opts.pools
                && let Err(e) = rules::check_pool(s, pools.iter().map(String::as_str))
            {
                self.err(v.span(), e.to_string());
            }
            job.pool = s.to_string();
        }
    }

    /// How long an attempt may run and go silent: `timeout`, `heartbeat`,
    /// `kill_grace`.
    fn job_limits(&mut self, t: JobTable<'_, '_>, job: &mut JobSpec) {
        if let Some(v) = t.get("timeout") {
            if v.get_ref().as_str() == Some("none") {
                job.timeout = Timeout::Never;
            } else if let Some(d) = self.duration(v, "timeout") {
                job.timeout = Timeout::After(d);
            }
        }
        if let Some(v) = t.get("heartbeat")
            && v.get_ref().as_str() != Some("none")
        {
            job.heartbeat = self.duration(v, "heartbeat");
        }
        if let Some(v) = t.get("kill_grace")
            && let Some(d) = self.duration(v, "kill_grace")
        {
            job.kill_grace = d;
        }
    }

    /// When a failed attempt is retried: `retries`, `backoff`, `retry_on`.
    fn job_retries(&mut self, t: JobTable<'_, '_>, job: &mut JobSpec) {
        if let Some(v) = t.get("retries")
            && let Some(n) = self.int(v, "retries")
        {
            match rules::check_retries(n) {
                Ok(n) => job.retries = n,
                Err(e) => self.err(v.span(), e.to_string()),
            }
        }
        if let Some(v) = t.get("backoff") {
            job.backoff = self.backoff(v);
        }
        if let Some(v) = t.get("retry_on")
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
                    unknown_key(k, " in backoff", BACKOFF_KEYS.iter()),
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

    /// A path that must be absolute ([`rules::check_absolute`]).
    fn absolute_path(&mut self, v: &Val<'_>, what: &str) -> Option<PathBuf> {
        let s = self.as_str(v, what)?;
        rules::check_absolute(what, s)
            .map_err(|e| self.err(v.span(), e.to_string()))
            .ok()
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

/// The error for an unknown key `key` (found `place`, such as " in
/// [[job]]"): it names the nearest valid key when one is close enough to be
/// a typo, else lists the valid keys.
pub(super) fn unknown_key<'k>(
    key: &str,
    place: &str,
    valid: impl Iterator<Item = &'k &'k str>,
) -> String {
    let valid: Vec<&str> = valid.copied().collect();
    // A typo is at most a third of the key's letters away (and at least
    // one): `overlp` → `overlap`, `retires` → `retries`; `colour` suggests
    // nothing. The distance costs length × length, so only candidates of
    // a near length are measured, and a key longer than any valid one by
    // more than a typo (a hostile megabyte) none.
    let len = key.chars().count();
    let limit = (len / 3).max(1);
    let nearest = valid
        .iter()
        .filter(|v| v.len().abs_diff(len) <= limit)
        .map(|v| (strsim::damerau_levenshtein(key, v), *v))
        .filter(|(d, _)| *d <= limit)
        .min();
    let key: String = if len > 64 {
        key.chars().take(64).chain("…".chars()).collect()
    } else {
        key.to_string()
    };
    match nearest {
        Some((_, v)) => format!("unknown key `{key}`{place}: did you mean `{v}`?"),
        None => format!("unknown key `{key}`{place} (valid: {})", valid.join(", ")),
    }
}
