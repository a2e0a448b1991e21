//! `axd.toml` (docs/config.md). Unknown keys and bad values are errors that
//! name the key and its line (toml's error carries the span of the
//! offending value). Relative paths are relative to the config file's
//! folder.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ax_shared::duration::parse_duration;
use serde::Deserialize;

use crate::store::postgres::PgUrl;
use ax_engine::{Aging, EngineConfig};

mod notify;
mod values;
pub use notify::{DEFAULT_MAIL_COMMAND, no_mail};
use values::*;

#[derive(Clone, Debug)]
pub struct Config {
    pub jobs_dir: PathBuf,
    pub state_dir: PathBuf,
    /// `store = "postgres://…"`: PostgreSQL instead of SQLite in
    /// `state_dir` (which still holds the logs and the lock).
    pub store: Option<PgUrl>,
    /// `[cluster] heartbeat`: how often this node writes its row in the
    /// `nodes` table (PostgreSQL only).
    pub heartbeat: Duration,
    /// `[cluster] lease`: how long a renewal keeps this node alive for the
    /// others (on the database's clock); it stops its own attempts one
    /// heartbeat before that (docs/operations.md, "A partitioned node").
    pub lease: Duration,
    pub socket: PathBuf,
    pub max_concurrency: u32,
    pub timezone: String,
    pub default_timeout: Option<Duration>,
    pub socket_group: Option<String>,
    pub admin_group: Option<String>,
    pub shutdown_grace: Duration,
    /// `synchronous = FULL` (default) or `NORMAL`.
    pub synchronous_full: bool,
    /// Where `GET /metrics` is served, if anywhere.
    pub metrics_addr: Option<std::net::SocketAddr>,
    pub retry_per_minute: u32,
    pub aging_every: Duration,
    pub aging_cap: u8,
    pub burst_priority: u8,
    pub burst_extra: u32,
    pub log_max_bytes: u64,
    pub log_retain: Duration,
    pub pools: BTreeMap<String, u32>,
    /// `[pools.NAME] timeout`: the timeout of the pool's jobs that set
    /// none, in place of `default_timeout` (`None` inside: no limit).
    pub pool_timeouts: BTreeMap<String, Option<Duration>>,
    /// `[limits]`: what one client may hold of axd.
    pub limits: Limits,
    /// `[users] allow`: user names and `@group`s that may keep their own
    /// DAGs and act on their own runs (docs/users.md); empty: nobody.
    pub users_allow: Vec<String>,
    /// `shell`: what runs a job's `command` when the job names none.
    pub shell: PathBuf,
    /// `pass_env`: variables of axd's own environment that jobs keep.
    pub pass_env: Vec<String>,
    /// `[job_env]`: variables every job gets (names are unique, so their
    /// order does not matter).
    pub job_env: Vec<(String, String)>,
    /// `[notify]`: whom a DAG without a `notify` of its own mails, and when
    /// (no address: nobody).
    pub notify: ax_shared::Notify,
    /// `mail_command`: the program that sends a mail (read from its stdin)
    /// and its arguments.
    pub mail_command: Vec<String>,
}

/// `shell` when not set.
pub const DEFAULT_SHELL: &str = "/bin/sh";

/// Variables of axd's that never reach a job (docs/users.md, "What a job
/// gets"): systemd's, which would let a job speak for axd (notify,
/// watchdog, sockets), and the ones axd sets itself. Names ending in `_`
/// are prefixes.
pub const DAEMON_ONLY_VARS: &[&str] = &[
    "NOTIFY_SOCKET",
    "WATCHDOG_",
    "LISTEN_",
    "INVOCATION_ID",
    "JOURNAL_STREAM",
    "AX_",
];

/// Whether `name` is one of [`DAEMON_ONLY_VARS`].
pub fn is_daemon_only_var(name: &str) -> bool {
    DAEMON_ONLY_VARS.iter().any(|v| match v.strip_suffix('_') {
        Some(_) => name.starts_with(v),
        None => name == *v,
    })
}

/// `[limits]` (docs/config.md): connections and how long a client may
/// take to say `hello` or send a whole request.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Socket connections one peer uid may hold at once.
    pub connections_per_uid: usize,
    /// Connections to `metrics_addr` at once, from anyone.
    pub metrics_connections: usize,
    /// From connect to a successful `hello`.
    pub hello_timeout: Duration,
    /// From the first byte of a request frame (or an HTTP request's
    /// headers) to its end.
    pub frame_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            connections_per_uid: 256,
            metrics_connections: 64,
            hello_timeout: Duration::from_secs(10),
            frame_timeout: Duration::from_secs(10),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Raw {
    jobs_dir: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    store: Option<StoreUrl>,
    socket: Option<PathBuf>,
    max_concurrency: Option<u32>,
    timezone: Option<String>,
    default_timeout: Option<DurationOrNone>,
    socket_group: Option<String>,
    admin_group: Option<String>,
    shutdown_grace: Option<Dur>,
    synchronous: Option<Synchronous>,
    metrics_addr: Option<String>,
    metrics_public: Option<bool>,
    #[serde(default)]
    retry: RawRetry,
    #[serde(default)]
    aging: RawAging,
    #[serde(default)]
    burst: RawBurst,
    #[serde(default)]
    logs: RawLogs,
    pools: Option<BTreeMap<String, RawPool>>,
    cluster: Option<RawCluster>,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    users: RawUsers,
    shell: Option<ShellPath>,
    #[serde(default)]
    pass_env: Vec<PassEnvName>,
    #[serde(default)]
    job_env: toml::Table,
    notify: Option<notify::RawNotify>,
    mail_command: Option<notify::MailCommand>,
}

/// A name a job's environment may take from the config: a valid variable
/// name that is none of axd's own.
fn check_job_var(name: &str) -> Result<(), String> {
    if !ax_shared::envfile::valid_env_name(name) {
        return Err(format!("{name:?} is not a variable name"));
    }
    if is_daemon_only_var(name) {
        return Err(format!(
            "{name:?} is axd's own and never given to jobs (docs/users.md, \"What a job gets\")"
        ));
    }
    Ok(())
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawUsers {
    #[serde(default)]
    allow: Vec<AllowEntry>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    connections_per_uid: Option<Count>,
    metrics_connections: Option<Count>,
    hello_timeout: Option<Timeout>,
    frame_timeout: Option<Timeout>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawCluster {
    heartbeat: Option<Heartbeat>,
    lease: Option<Dur>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawRetry {
    rate: Option<Rate>,
}
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawAging {
    every: Option<Dur>,
    cap: Option<Priority>,
}
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawBurst {
    priority: Option<Priority>,
    extra: Option<Extra>,
}
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLogs {
    max_bytes: Option<Bytes>,
    retain: Option<Dur>,
}
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPool {
    slots: u32,
    timeout: Option<DurationOrNone>,
}

fn limits_of(raw: RawLimits) -> Limits {
    let d = Limits::default();
    Limits {
        connections_per_uid: raw
            .connections_per_uid
            .map_or(d.connections_per_uid, |c| c.0),
        metrics_connections: raw
            .metrics_connections
            .map_or(d.metrics_connections, |c| c.0),
        hello_timeout: raw.hello_timeout.map_or(d.hello_timeout, |t| t.0),
        frame_timeout: raw.frame_timeout.map_or(d.frame_timeout, |t| t.0),
    }
}

/// `[cluster] heartbeat` when not set.
const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(5);
/// `[cluster] lease` when not set, in heartbeats.
const DEFAULT_LEASE_BEATS: u32 = 6;
/// The shortest lease, in heartbeats: a node renews at least once more
/// after a missed beat before it stops its attempts, one heartbeat ahead
/// of its lease's end.
const MIN_LEASE_BEATS: u32 = 3;
/// Shorter beats would be mostly database load.
const MIN_HEARTBEAT: Duration = Duration::from_millis(100);

/// Where a user-mode daemon keeps things without `--config` (XDG).
pub fn xdg_defaults() -> (PathBuf, PathBuf, PathBuf) {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/"));
    let env_or =
        |var: &str, fallback: PathBuf| std::env::var_os(var).map(PathBuf::from).unwrap_or(fallback);
    let config = env_or("XDG_CONFIG_HOME", home.join(".config"));
    let state = env_or("XDG_STATE_HOME", home.join(".local/state"));
    // Where `ax` looks first (one function for both).
    let socket = ax_protocol::socket_dir::this_user_socket();
    (config.join("ax/jobs.d"), state.join("ax"), socket)
}

impl Config {
    /// Defaults for a daemon started without `--config`.
    pub fn defaults() -> Config {
        Config::from_raw(Raw::default(), None).expect("defaults are valid")
    }

    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        // The one check across tables: named at the `[cluster]` header.
        let invalid_at_cluster =
            |message: String| match text.lines().position(|l| l.trim() == "[cluster]") {
                Some(i) if message.starts_with("[cluster]") => {
                    invalid(format!("line {}: {message}", i + 1))
                }
                _ => invalid(message),
            };
        let raw: Raw = toml::from_str(text).map_err(|e| invalid(describe_toml_error(text, &e)))?;
        // Relative paths are relative to the config file's folder, made
        // absolute: jobs get AX_SOCKET and run in other directories.
        let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let base = absolute.parent().map(Path::to_path_buf).unwrap_or_default();
        let job_env_at = |message: String| match text.lines().position(|l| l.trim() == "[job_env]")
        {
            Some(i) if message.starts_with("[job_env]") => {
                invalid(format!("line {}: {message}", i + 1))
            }
            _ => invalid_at_cluster(message),
        };
        let cfg = Config::from_raw(raw, Some(&base)).map_err(job_env_at)?;
        cfg.folders_apart().map_err(invalid)?;
        Ok(cfg)
    }

    /// `state_dir` and `jobs_dir` must not hold each other: users' own
    /// DAGs are root's files under `state_dir`, and the jobs folder would
    /// load them again as system DAGs, run as root (docs/users.md).
    fn folders_apart(&self) -> Result<(), String> {
        let real = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let (jobs, state) = (real(&self.jobs_dir), real(&self.state_dir));
        if state.starts_with(&jobs) || jobs.starts_with(&state) {
            return Err(format!(
                "state_dir {} and jobs_dir {} must not be inside one another: the jobs folder would load axd's own files",
                self.state_dir.display(),
                self.jobs_dir.display()
            ));
        }
        Ok(())
    }

    fn from_raw(raw: Raw, base: Option<&Path>) -> Result<Config, String> {
        let (xdg_jobs, xdg_state, xdg_socket) = xdg_defaults();
        let resolve = |p: Option<PathBuf>, fallback: PathBuf| match (p, base) {
            (Some(p), Some(b)) if p.is_relative() => normalize(&b.join(p)),
            (Some(p), _) => p,
            (None, _) => fallback,
        };
        let cpus = std::thread::available_parallelism()
            .map(|n| n.get() as u32)
            .unwrap_or(1);
        let max_concurrency = raw.max_concurrency.unwrap_or(cpus);
        if max_concurrency == 0 {
            return Err("max_concurrency must be at least 1".into());
        }
        let timezone = raw.timezone.unwrap_or_else(|| "local".into());
        ax_shared::cron::parse_zone(&timezone).map_err(|e| format!("timezone: {e}"))?;
        let raw_pools = raw.pools.unwrap_or_default();
        let pool_timeouts: BTreeMap<String, Option<Duration>> = raw_pools
            .iter()
            .filter_map(|(k, v)| v.timeout.as_ref().map(|t| (k.clone(), t.0)))
            .collect();
        let mut pools: BTreeMap<String, u32> =
            raw_pools.into_iter().map(|(k, v)| (k, v.slots)).collect();
        for (name, slots) in &pools {
            if *slots == 0 {
                return Err(format!("pools.{name}.slots must be at least 1"));
            }
        }
        pools.entry("default".into()).or_insert(max_concurrency);
        let metrics_addr = match raw.metrics_addr {
            None => None,
            Some(text) => {
                let addr: std::net::SocketAddr = text.parse().map_err(|_| {
                    format!(
                        "metrics_addr {text:?}: write an address and port, e.g. \"127.0.0.1:9464\""
                    )
                })?;
                if !addr.ip().is_loopback() && raw.metrics_public != Some(true) {
                    return Err(format!(
                        "metrics_addr {text:?} is not a loopback address: set metrics_public = true to serve metrics to other hosts"
                    ));
                }
                Some(addr)
            }
        };
        let (heartbeat, lease) = match (&raw.cluster, &raw.store) {
            (Some(_), None) => {
                return Err("[cluster] needs a shared store: set store = \"postgres://…\"".into());
            }
            (Some(c), _) => {
                let beat = c.heartbeat.as_ref().map_or(DEFAULT_HEARTBEAT, |d| d.0);
                let lease = c.lease.as_ref().map_or(beat * DEFAULT_LEASE_BEATS, |d| d.0);
                if lease < beat * MIN_LEASE_BEATS {
                    return Err(format!(
                        "[cluster] lease = {:?} is shorter than {MIN_LEASE_BEATS} heartbeats ({:?}): a node must be able to miss a beat and renew before it stops its attempts",
                        lease,
                        beat * MIN_LEASE_BEATS
                    ));
                }
                (beat, lease)
            }
            _ => (DEFAULT_HEARTBEAT, DEFAULT_HEARTBEAT * DEFAULT_LEASE_BEATS),
        };
        let burst_extra = match raw.burst.extra {
            None => (f64::from(max_concurrency) * 0.3).ceil() as u32,
            Some(Extra::Count(n)) => n,
            Some(Extra::Percent(p)) => (f64::from(max_concurrency) * p / 100.0).ceil() as u32,
        };
        let mut job_env = Vec::with_capacity(raw.job_env.len());
        for (name, value) in raw.job_env {
            check_job_var(&name).map_err(|e| format!("[job_env] {e}"))?;
            let toml::Value::String(value) = value else {
                return Err(format!("[job_env] {name}: the value must be a string"));
            };
            job_env.push((name, value));
        }
        Ok(Config {
            shell: raw
                .shell
                .map_or_else(|| PathBuf::from(DEFAULT_SHELL), |s| s.0),
            pass_env: raw.pass_env.into_iter().map(|n| n.0).collect(),
            job_env,
            jobs_dir: resolve(raw.jobs_dir, xdg_jobs),
            state_dir: resolve(raw.state_dir, xdg_state),
            store: raw.store.map(|s| s.0),
            heartbeat,
            lease,
            socket: resolve(raw.socket, xdg_socket),
            max_concurrency,
            timezone,
            default_timeout: raw.default_timeout.and_then(|d| d.0),
            socket_group: raw.socket_group,
            admin_group: raw.admin_group,
            shutdown_grace: raw
                .shutdown_grace
                .map(|d| d.0)
                .unwrap_or(Duration::from_secs(30)),
            synchronous_full: !matches!(raw.synchronous, Some(Synchronous::Normal)),
            metrics_addr,
            retry_per_minute: raw.retry.rate.map(|r| r.0).unwrap_or(100),
            aging_every: raw
                .aging
                .every
                .map(|d| d.0)
                .unwrap_or(Duration::from_secs(600)),
            aging_cap: raw.aging.cap.map(|p| p.0).unwrap_or(90),
            burst_priority: raw.burst.priority.map(|p| p.0).unwrap_or(90),
            burst_extra,
            log_max_bytes: raw.logs.max_bytes.map(|b| b.0).unwrap_or(10 << 20),
            log_retain: raw
                .logs
                .retain
                .map(|d| d.0)
                .unwrap_or(Duration::from_secs(30 * 86400)),
            pools,
            pool_timeouts,
            limits: limits_of(raw.limits),
            users_allow: raw.users.allow.into_iter().map(|e| e.0).collect(),
            notify: raw
                .notify
                .map_or_else(no_mail, notify::RawNotify::into_notify),
            mail_command: raw.mail_command.map_or_else(
                || DEFAULT_MAIL_COMMAND.iter().map(|w| w.to_string()).collect(),
                |c| c.0,
            ),
        })
    }

    /// The keys whose change needs a restart, with `self` the running
    /// config and `new` the one read again: the store, the socket and its
    /// groups are opened once, and the watch is set on `jobs_dir` at start.
    pub fn restart_only_changes(&self, new: &Config) -> Vec<&'static str> {
        let mut keys = Vec::new();
        let mut check = |key, changed: bool| {
            if changed {
                keys.push(key);
            }
        };
        check("state_dir", self.state_dir != new.state_dir);
        check("store", self.store != new.store);
        check("cluster.heartbeat", self.heartbeat != new.heartbeat);
        check("cluster.lease", self.lease != new.lease);
        check("socket", self.socket != new.socket);
        check("socket_group", self.socket_group != new.socket_group);
        check("admin_group", self.admin_group != new.admin_group);
        check("synchronous", self.synchronous_full != new.synchronous_full);
        check("jobs_dir", self.jobs_dir != new.jobs_dir);
        check("metrics_addr", self.metrics_addr != new.metrics_addr);
        check("limits", self.limits != new.limits);
        check("users.allow", self.users_allow != new.users_allow);
        keys
    }

    /// `new` with the restart-only keys of `self` kept: what is in force
    /// after a reload.
    pub fn reloaded(&self, new: Config) -> Config {
        Config {
            state_dir: self.state_dir.clone(),
            store: self.store.clone(),
            heartbeat: self.heartbeat,
            lease: self.lease,
            socket: self.socket.clone(),
            socket_group: self.socket_group.clone(),
            admin_group: self.admin_group.clone(),
            synchronous_full: self.synchronous_full,
            jobs_dir: self.jobs_dir.clone(),
            metrics_addr: self.metrics_addr,
            limits: self.limits.clone(),
            users_allow: self.users_allow.clone(),
            ..new
        }
    }

    /// What `ax status` shows of the config in force.
    pub fn view(&self, file: Option<&Path>) -> ax_protocol::api::ConfigView {
        use ax_shared::duration::format_duration;
        ax_protocol::api::ConfigView {
            file: file.map(|f| f.display().to_string()),
            jobs_dir: self.jobs_dir.display().to_string(),
            state_dir: self.state_dir.display().to_string(),
            socket: self.socket.display().to_string(),
            timezone: self.timezone.clone(),
            default_timeout: self.default_timeout.map(format_duration),
            shutdown_grace: format_duration(self.shutdown_grace),
            retry_per_minute: self.retry_per_minute,
            aging_every: format_duration(self.aging_every),
            aging_cap: self.aging_cap,
            burst_priority: self.burst_priority,
            log_max_bytes: self.log_max_bytes,
            log_retain: format_duration(self.log_retain),
            store: self.store.as_ref().map(PgUrl::redacted),
        }
    }

    pub fn engine_config(&self) -> EngineConfig {
        EngineConfig {
            max_concurrency: self.max_concurrency,
            pools: self.pools.clone(),
            burst_priority: self.burst_priority,
            burst_extra: self.burst_extra,
            aging: Aging {
                every: self.aging_every.as_millis() as i64,
                cap: self.aging_cap,
            },
            retry_per_minute: self.retry_per_minute,
            default_timeout: self.default_timeout.map(|d| d.as_millis() as i64),
            pool_timeouts: self
                .pool_timeouts
                .iter()
                .map(|(k, t)| (k.clone(), t.map(|d| d.as_millis() as i64)))
                .collect(),
        }
    }
}

/// Removes `.` and `a/..` lexically (`config/../.ax-state` → `.ax-state`),
/// so logs and errors show the path a person would write.
fn normalize(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    if out.as_os_str().is_empty() {
        PathBuf::from(".")
    } else {
        out
    }
}

/// `line L, column C: message` from toml's error.
fn describe_toml_error(text: &str, e: &toml::de::Error) -> String {
    let message = e.message().trim().to_string();
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let col = before.len() - before.rfind('\n').map(|i| i + 1).unwrap_or(0) + 1;
            let key = key_at(text, before.len())
                .map(|k| format!(" (key `{k}`)"))
                .unwrap_or_default();
            format!("line {line}, column {col}{key}: {message}")
        }
        None => message,
    }
}

/// The dotted key of the `key = value` line holding byte `at`, under the
/// table header above it (`retry.rate`); `None` on a header line.
fn key_at(text: &str, at: usize) -> Option<String> {
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next().unwrap_or("");
    let key = line
        .split('=')
        .next()
        .map(str::trim)
        .filter(|k| !k.is_empty() && !k.starts_with('['))?;
    let table = text[..line_start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('['))
        .map(|h| h.trim_matches(|c| c == '[' || c == ']').trim());
    Some(match table {
        Some(t) => format!("{t}.{key}"),
        None => key.to_string(),
    })
}

#[cfg(test)]
mod tests;
