//! `axd.toml` (docs/config.md). Unknown keys and bad values are errors that
//! name the key and its line (toml's error carries the span of the
//! offending value). Relative paths are relative to the config file's
//! folder.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ax_shared::duration::parse_duration;
use serde::{Deserialize, Deserializer};

use crate::store::postgres::PgUrl;
use ax_engine::{Aging, EngineConfig};

mod notify;
pub use notify::{DEFAULT_MAIL_COMMAND, no_mail};

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

/// `shell`: an absolute path, checked as it is read (so reported with its
/// line).
struct ShellPath(PathBuf);
impl<'de> Deserialize<'de> for ShellPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let path = PathBuf::from(String::deserialize(d)?);
        if !path.is_absolute() {
            return Err(serde::de::Error::custom(format!(
                "{} is not an absolute path",
                path.display()
            )));
        }
        Ok(ShellPath(path))
    }
}

/// One `pass_env` name, checked as it is read.
struct PassEnvName(String);
impl<'de> Deserialize<'de> for PassEnvName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        check_job_var(&name).map_err(serde::de::Error::custom)?;
        Ok(PassEnvName(name))
    }
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

/// One `[users] allow` entry: a user name or `@group`, checked as it is
/// read (so reported with its line).
struct AllowEntry(String);
impl<'de> Deserialize<'de> for AllowEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let name = text.strip_prefix('@').unwrap_or(&text);
        if !ax_shared::jobfile::valid_account_name(name) {
            return Err(serde::de::Error::custom(format!(
                "{text:?} is not a user name or @group (1-32 of a-z 0-9 _ . -)"
            )));
        }
        Ok(AllowEntry(text))
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLimits {
    connections_per_uid: Option<Count>,
    metrics_connections: Option<Count>,
    hello_timeout: Option<Timeout>,
    frame_timeout: Option<Timeout>,
}

/// A count of at least 1, checked as it is read (so reported with its line).
struct Count(usize);
impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = i64::deserialize(d)?;
        if n < 1 {
            return Err(serde::de::Error::custom("must be at least 1"));
        }
        Ok(Count(n as usize))
    }
}

/// A client timeout: at least 100 ms.
struct Timeout(Duration);
impl<'de> Deserialize<'de> for Timeout {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Dur(t) = Dur::deserialize(d)?;
        if t < Duration::from_millis(100) {
            return Err(serde::de::Error::custom("must be at least 100ms"));
        }
        Ok(Timeout(t))
    }
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

/// `store`: checked as it is read, so that a bad URL is reported with its
/// line.
struct StoreUrl(PgUrl);
impl<'de> Deserialize<'de> for StoreUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        PgUrl::parse(&s)
            .map(StoreUrl)
            .map_err(serde::de::Error::custom)
    }
}

struct Dur(Duration);
impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_duration(&s)
            .map(Dur)
            .map_err(serde::de::Error::custom)
    }
}

/// `[cluster] heartbeat`, checked as it is read so that a too short one
/// is reported with its line.
struct Heartbeat(Duration);
impl<'de> Deserialize<'de> for Heartbeat {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Dur(beat) = Dur::deserialize(d)?;
        if beat < MIN_HEARTBEAT {
            return Err(serde::de::Error::custom(format!(
                "must be at least {} ms",
                MIN_HEARTBEAT.as_millis()
            )));
        }
        Ok(Heartbeat(beat))
    }
}

struct DurationOrNone(Option<Duration>);
impl<'de> Deserialize<'de> for DurationOrNone {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s == "none" {
            return Ok(DurationOrNone(None));
        }
        parse_duration(&s)
            .map(|d| DurationOrNone(Some(d)))
            .map_err(serde::de::Error::custom)
    }
}

struct Priority(u8);
impl<'de> Deserialize<'de> for Priority {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = i64::deserialize(d)?;
        ax_shared::rules::check_priority(n)
            .map(Priority)
            .map_err(serde::de::Error::custom)
    }
}

#[derive(Clone, Copy)]
enum Synchronous {
    Full,
    Normal,
}
impl<'de> Deserialize<'de> for Synchronous {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match String::deserialize(d)?.to_ascii_lowercase().as_str() {
            "full" => Ok(Synchronous::Full),
            "normal" => Ok(Synchronous::Normal),
            other => Err(serde::de::Error::custom(format!(
                "synchronous = {other:?}: use \"full\" or \"normal\""
            ))),
        }
    }
}

/// `"100/min"`, `"5/s"`, `"1000/h"` → per minute.
struct Rate(u32);
impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let bad = || {
            serde::de::Error::custom(format!(
                "rate {s:?}: write e.g. \"100/min\", \"5/s\" or \"1000/h\""
            ))
        };
        let (n, unit) = s.split_once('/').ok_or_else(bad)?;
        let n: f64 = n.trim().parse().map_err(|_| bad())?;
        let per_min = match unit.trim() {
            "s" | "sec" | "second" => n * 60.0,
            "min" | "m" | "minute" => n,
            "h" | "hour" => n / 60.0,
            _ => return Err(bad()),
        };
        if !(1.0..=1e9).contains(&per_min) {
            return Err(serde::de::Error::custom(format!(
                "rate {s:?} must be at least 1/min"
            )));
        }
        Ok(Rate(per_min.round() as u32))
    }
}

/// `extra = "30%"` of max_concurrency (rounded up) or a count.
enum Extra {
    Percent(f64),
    Count(u32),
}
impl<'de> Deserialize<'de> for Extra {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum E {
            N(u32),
            S(String),
        }
        match E::deserialize(d)? {
            E::N(n) => Ok(Extra::Count(n)),
            E::S(s) => s
                .strip_suffix('%')
                .and_then(|p| p.trim().parse::<f64>().ok())
                .filter(|p| (0.0..=1000.0).contains(p))
                .map(Extra::Percent)
                .ok_or_else(|| {
                    serde::de::Error::custom(format!(
                        "burst.extra {s:?}: write a count or a percentage like \"30%\""
                    ))
                }),
        }
    }
}

/// `"10MiB"`, `"512KiB"`, `"1GB"`, or a number of bytes.
struct Bytes(u64);
impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum B {
            N(u64),
            S(String),
        }
        match B::deserialize(d)? {
            B::N(n) => Ok(Bytes(n)),
            B::S(s) => {
                let t = s.trim();
                let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
                let (num, unit) = t.split_at(split);
                let mult: u64 = match unit.trim() {
                    "" | "B" => 1,
                    "KiB" => 1 << 10,
                    "MiB" => 1 << 20,
                    "GiB" => 1 << 30,
                    "KB" | "kB" => 1000,
                    "MB" => 1_000_000,
                    "GB" => 1_000_000_000,
                    _ => 0,
                };
                match num.parse::<u64>() {
                    Ok(n) if mult > 0 => Ok(Bytes(n.saturating_mul(mult))),
                    _ => Err(serde::de::Error::custom(format!(
                        "size {s:?}: write e.g. \"10MiB\""
                    ))),
                }
            }
        }
    }
}

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
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, String> {
        Config::parse(text, Path::new("/etc/ax/axd.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn the_shipped_example_parses() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config/axd.toml");
        let c = Config::load(&path).unwrap();
        assert_eq!(c.pools.get("io"), Some(&40));
        assert_eq!(c.burst_extra, 3, "30% of 8, rounded up");
        assert_eq!(c.retry_per_minute, 100);
        assert_eq!(c.log_max_bytes, 10 << 20);
        assert!(c.jobs_dir.ends_with("config/jobs.d"));
    }

    #[test]
    fn state_dir_and_jobs_dir_may_not_hold_each_other() {
        for text in [
            "jobs_dir = \"/srv/ax/jobs\"\nstate_dir = \"/srv/ax/jobs/state\"\n",
            "jobs_dir = \"/srv/ax/state/jobs\"\nstate_dir = \"/srv/ax/state\"\n",
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.contains("must not be inside one another"), "{e}");
        }
        assert!(parse("jobs_dir = \"/srv/ax/jobs\"\nstate_dir = \"/srv/ax/state\"\n").is_ok());
    }

    #[test]
    fn metrics_addr_is_loopback_unless_public() {
        let c = parse("metrics_addr = \"127.0.0.1:9464\"\n").unwrap();
        assert_eq!(c.metrics_addr, Some("127.0.0.1:9464".parse().unwrap()));
        let c = parse("metrics_addr = \"0.0.0.0:9464\"\nmetrics_public = true\n").unwrap();
        assert!(c.metrics_addr.is_some());
        assert_eq!(parse("").unwrap().metrics_addr, None);
    }

    #[test]
    fn store_is_sqlite_unless_a_postgres_url_is_given() {
        assert!(parse("").unwrap().store.is_none());
        let c = parse("store = \"postgres://ax:pw@db.example/ax\"\n").unwrap();
        let url = c.store.expect("a PostgreSQL store");
        assert_eq!(url.redacted(), "postgres://ax:***@db.example/ax");
        let c = parse("store = \"postgres://ax@db/ax\"\n[cluster]\nheartbeat = \"2s\"\n").unwrap();
        assert_eq!(c.heartbeat, Duration::from_secs(2));
        assert_eq!(c.lease, Duration::from_secs(12), "six heartbeats");
        assert_eq!(parse("").unwrap().heartbeat, Duration::from_secs(5));
        let c = parse(
            "store = \"postgres://ax@db/ax\"\n[cluster]\nheartbeat = \"1s\"\nlease = \"30s\"\n",
        )
        .unwrap();
        assert_eq!(c.lease, Duration::from_secs(30));
        let other = parse("store = \"postgres://ax@other/ax\"\n").unwrap();
        assert_eq!(
            parse("").unwrap().restart_only_changes(&other),
            vec!["store"]
        );
    }

    #[test]
    fn relative_paths_and_defaults() {
        let c = parse("jobs_dir = \"j\"\nmax_concurrency = 4\n").unwrap();
        assert_eq!(c.jobs_dir, PathBuf::from("/etc/ax/j"));
        assert_eq!(c.pools.get("default"), Some(&4));
        assert_eq!(c.default_timeout, None, "no timeout unless asked");
        let p = parse("[pools.io]\nslots = 2\ntimeout = \"2h\"\n[pools.open]\nslots = 1\ntimeout = \"none\"\n").unwrap();
        assert_eq!(
            p.pool_timeouts.get("io"),
            Some(&Some(Duration::from_secs(7200)))
        );
        assert_eq!(p.pool_timeouts.get("open"), Some(&None));
        assert_eq!(p.pool_timeouts.get("default"), None);
        assert!(c.synchronous_full);
        assert_eq!(c.burst_extra, 2);
    }

    #[test]
    fn job_environment_keys() {
        let c = parse("").unwrap();
        assert_eq!(c.shell, PathBuf::from("/bin/sh"));
        assert!(c.pass_env.is_empty() && c.job_env.is_empty());
        let c = parse(
            "shell = \"/bin/bash\"\npass_env = [\"KEEP_ME\"]\n[job_env]\nLANG = \"C.UTF-8\"\n",
        )
        .unwrap();
        assert_eq!(c.shell, PathBuf::from("/bin/bash"));
        assert_eq!(c.pass_env, ["KEEP_ME"]);
        assert_eq!(c.job_env, [("LANG".to_string(), "C.UTF-8".to_string())]);
    }

    #[test]
    fn errors_name_key_and_line() {
        for (text, needle) in [
            ("max_concurrency = 4\ncolour = 1\n", "line 2"),
            ("max_concurrency = 4\ncolour = 1\n", "(key `colour`)"),
            ("default_timeout = \"ten\"\n", "line 1"),
            (
                "[retry]\nrate = \"lots\"\n",
                "line 2, column 8 (key `retry.rate`)",
            ),
            ("[aging]\ncap = 200\n", "out of range"),
            ("[pools.gpu]\nslots = 0\n", "pools.gpu.slots"),
            ("timezone = \"Mars/Base\"\n", "unknown time zone"),
            ("max_concurrency = \"x\"\n", "line 1"),
            ("[logs]\nmax_bytes = \"10 parsecs\"\n", "size"),
            ("metrics_addr = \"9464\"\n", "address and port"),
            ("metrics_addr = \"0.0.0.0:9464\"\n", "metrics_public = true"),
            (
                "max_concurrency = 4\nstore = \"mysql://db/ax\"\n",
                "line 2, column 9 (key `store`)",
            ),
            ("store = \"mysql://db/ax\"\n", "postgres://"),
            ("store = \"postgres://db:port/ax\"\n", "(key `store`)"),
            (
                "max_concurrency = 4\n[cluster]\nheartbeat = \"2s\"\n",
                "line 2: [cluster] needs a shared store: set store = \"postgres://",
            ),
            (
                "store = \"postgres://db/ax\"\n[cluster]\nheartbeat = \"1ms\"\n",
                "line 3, column 13 (key `cluster.heartbeat`): must be at least 100 ms",
            ),
            (
                "store = \"postgres://db/ax\"\n[cluster]\nbeat = \"1s\"\n",
                "line 3",
            ),
            (
                "pass_env = [\"KEEP\", \"NOTIFY_SOCKET\"]\n",
                "line 1, column 12 (key `pass_env`)",
            ),
            ("pass_env = [\"WATCHDOG_USEC\"]\n", "axd's own"),
            (
                "shell = \"bash\"\n",
                "line 1, column 9 (key `shell`): bash is not an absolute path",
            ),
            (
                "max_concurrency = 4\n[job_env]\nAX_JOB = \"x\"\n",
                "line 2: [job_env] \"AX_JOB\" is axd's own",
            ),
            (
                "[job_env]\nN = 1\n",
                "line 1: [job_env] N: the value must be a string",
            ),
            (
                "store = \"postgres://db/ax\"\n[cluster]\nheartbeat = \"2s\"\nlease = \"5s\"\n",
                "line 2: [cluster] lease = 5s is shorter than 3 heartbeats (6s)",
            ),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(needle), "{text:?}: {err}");
            assert!(err.contains("/etc/ax/axd.toml"), "{err}");
        }
    }
}
