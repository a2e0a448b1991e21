//! The data model shared by the daemon, the CLI and the console.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// State of a run (the states `ax ls --state` takes, docs/cli.md). Every
/// run starts `Waiting` (the default).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    #[default]
    Waiting,
    Delayed,
    Ready,
    Running,
    Success,
    Failed,
    TimedOut,
    Cancelled,
}

impl RunState {
    pub const ALL: [RunState; 8] = [
        RunState::Waiting,
        RunState::Delayed,
        RunState::Ready,
        RunState::Running,
        RunState::Success,
        RunState::Failed,
        RunState::TimedOut,
        RunState::Cancelled,
    ];

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            RunState::Success | RunState::Failed | RunState::TimedOut | RunState::Cancelled
        )
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Waiting => "waiting",
            RunState::Delayed => "delayed",
            RunState::Ready => "ready",
            RunState::Running => "running",
            RunState::Success => "success",
            RunState::Failed => "failed",
            RunState::TimedOut => "timed_out",
            RunState::Cancelled => "cancelled",
        }
    }

    pub fn parse(text: &str) -> Option<RunState> {
        RunState::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

impl fmt::Display for RunState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`: widths and alignment in format strings apply (table columns).
        f.pad(self.as_str())
    }
}

/// How one attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Success,
    Failed,
    TimedOut,
    Stalled,
    SpawnError,
    Cancelled,
    Preempted,
    Interrupted,
}

impl Outcome {
    pub const ALL: [Outcome; 8] = [
        Outcome::Success,
        Outcome::Failed,
        Outcome::TimedOut,
        Outcome::Stalled,
        Outcome::SpawnError,
        Outcome::Cancelled,
        Outcome::Preempted,
        Outcome::Interrupted,
    ];

    pub fn parse(text: &str) -> Option<Outcome> {
        Outcome::ALL.into_iter().find(|o| o.as_str() == text)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Failed => "failed",
            Outcome::TimedOut => "timed_out",
            Outcome::Stalled => "stalled",
            Outcome::SpawnError => "spawn_error",
            Outcome::Cancelled => "cancelled",
            Outcome::Preempted => "preempted",
            Outcome::Interrupted => "interrupted",
        }
    }

    /// Preempted and interrupted attempts never count against `retries`.
    pub fn counts_against_retries(self) -> bool {
        !matches!(self, Outcome::Preempted | Outcome::Interrupted)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad`: widths and alignment in format strings apply (table columns).
        f.pad(self.as_str())
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DepMode {
    #[default]
    All,
    Any,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackoffKind {
    #[default]
    Exponential,
    Fixed,
    None,
}

/// Retry delay policy (docs/job-files.md, "Retries").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backoff {
    pub kind: BackoffKind,
    #[serde(with = "millis")]
    pub base: Duration,
    #[serde(with = "millis")]
    pub max: Duration,
    #[serde(with = "millis")]
    pub jitter: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            kind: BackoffKind::Exponential,
            base: Duration::from_secs(1),
            max: Duration::from_secs(30),
            jitter: Duration::from_millis(500),
        }
    }
}

impl Backoff {
    /// The delay before the `n`-th retry (n ≥ 1), without jitter.
    pub fn base_delay(&self, n: u32) -> Duration {
        match self.kind {
            BackoffKind::None => Duration::ZERO,
            BackoffKind::Fixed => self.base,
            BackoffKind::Exponential => {
                let factor = 1u64.checked_shl(n.saturating_sub(1)).unwrap_or(u64::MAX);
                let ms = (self.base.as_millis() as u64).saturating_mul(factor);
                Duration::from_millis(ms).min(self.max)
            }
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Catchup {
    None,
    #[default]
    Latest,
    All,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    #[default]
    Skip,
    Queue,
    Replace,
    Allow,
}

/// What to execute.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Exec {
    /// Run with `/bin/sh -c`.
    Shell(String),
    /// Run directly, no shell.
    Argv(Vec<String>),
}

impl Exec {
    pub fn display(&self) -> String {
        match self {
            Exec::Shell(s) => s.clone(),
            Exec::Argv(v) => v.join(" "),
        }
    }
}

/// A job's timeout: the daemon's default, none at all, or a duration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Timeout {
    #[default]
    Default,
    Never,
    After(#[serde(with = "millis")] Duration),
}

/// One job of a DAG, with every default applied.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    pub id: String,
    pub exec: Exec,
    pub cwd: Option<PathBuf>,
    pub env: BTreeMap<String, String>,
    /// A file of `KEY=VALUE` lines read at each attempt's start
    /// (docs/job-files.md, "Secrets"); every value in it is secret. A
    /// stored spec without the field decodes as none (the serde default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env_file: Option<PathBuf>,
    /// Names of variables (from `env`, `env_file` or the daemon's
    /// environment) whose values are secret.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_env: Vec<String>,
    pub deps: Vec<String>,
    pub dep_mode: DepMode,
    pub priority: u8,
    pub pool: String,
    pub timeout: Timeout,
    #[serde(with = "opt_millis")]
    pub heartbeat: Option<Duration>,
    #[serde(with = "millis")]
    pub kill_grace: Duration,
    pub retries: u32,
    pub backoff: Backoff,
    pub retry_on: Option<Vec<i32>>,
    pub preemptible: bool,
    /// Who the process runs as (docs/users.md): a user name from the
    /// password database; `None` is axd's own user. The name is resolved
    /// again at each attempt's start, so a changed account takes effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The process's primary group by name; `None` is the user's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The process's umask; `None` is the default, 022 (as cron).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub umask: Option<u32>,
    /// What runs a `command`; `None` is axd's `shell` (`/bin/sh`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<PathBuf>,
    /// Names of secret variables of an ad-hoc submission (`ax submit
    /// --secret-env`) whose values axd holds in memory only, never in the
    /// store (docs/job-files.md, "Secrets"): they are put in `env` for
    /// each attempt, and an attempt without them fails.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_secrets: Vec<String>,
}

impl JobSpec {
    /// A job with every default of docs/job-files.md, "Job fields".
    pub fn new(id: impl Into<String>, exec: Exec) -> JobSpec {
        JobSpec {
            id: id.into(),
            exec,
            cwd: None,
            env: BTreeMap::new(),
            env_file: None,
            secret_env: Vec::new(),
            deps: Vec::new(),
            dep_mode: DepMode::All,
            priority: 50,
            pool: "default".into(),
            timeout: Timeout::Default,
            heartbeat: None,
            kill_grace: Duration::from_secs(10),
            retries: 0,
            backoff: Backoff::default(),
            retry_on: None,
            preemptible: false,
            user: None,
            group: None,
            umask: None,
            shell: None,
            held_secrets: Vec::new(),
        }
    }
}

/// One job file: a named DAG of jobs plus its triggers and hooks.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DagSpec {
    pub name: String,
    pub file: String,
    pub description: Option<String>,
    pub schedule: Option<String>,
    pub timezone: Option<String>,
    pub catchup: Catchup,
    pub overlap: Overlap,
    pub after: Vec<String>,
    pub enabled: bool,
    pub on_failure: Option<String>,
    pub on_success: Option<String>,
    pub owner: Option<String>,
    pub tags: Vec<String>,
    /// `[history] keep_runs`: the store keeps this DAG's newest N DAG runs
    /// (and what `logs.retain` keeps); older finished ones are pruned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_runs: Option<u32>,
    /// `jitter`: a scheduled DAG run's jobs start after a random delay in
    /// [0, jitter] from its slot, holding no slot while they wait.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "opt_millis")]
    pub jitter: Option<Duration>,
    /// `notify`: whom to mail when a DAG run ends; `None` follows the
    /// daemon's `[notify]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<Notify>,
    pub jobs: Vec<JobSpec>,
}

/// Whom to mail about a DAG run, and when (docs/job-files.md, "Mail").
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Notify {
    /// Addresses; empty: no mail.
    pub mail: Vec<String>,
    pub on: Vec<NotifyOn>,
}

/// What a DAG run must have done for a mail to go out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NotifyOn {
    /// It ended in any state but success.
    Failure,
    Success,
    /// One of its jobs printed something (cron's `MAILTO` rule).
    Output,
}

impl NotifyOn {
    pub const ALL: [(&'static str, NotifyOn); 3] = [
        ("failure", NotifyOn::Failure),
        ("success", NotifyOn::Success),
        ("output", NotifyOn::Output),
    ];
}

impl DagSpec {
    /// An ad-hoc DAG (no schedule, no triggers) around the given jobs.
    pub fn adhoc(name: impl Into<String>, jobs: Vec<JobSpec>) -> DagSpec {
        DagSpec {
            name: name.into(),
            file: String::new(),
            description: None,
            schedule: None,
            timezone: None,
            catchup: Catchup::default(),
            overlap: Overlap::Allow,
            after: Vec::new(),
            enabled: true,
            on_failure: None,
            on_success: None,
            owner: None,
            tags: Vec::new(),
            keep_runs: None,
            jitter: None,
            notify: None,
            jobs,
        }
    }

    pub fn job(&self, id: &str) -> Option<&JobSpec> {
        self.jobs.iter().find(|j| j.id == id)
    }
}

/// Serde helper: a `Duration` as integer milliseconds.
pub mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_millis() as u64)
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_millis(u64::deserialize(d)?))
    }
}

/// Serde helper: an `Option<Duration>` as integer milliseconds or null.
pub mod opt_millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&(d.as_millis() as u64)),
            None => s.serialize_none(),
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_millis))
    }
}

#[cfg(test)]
mod display_tests {
    use super::*;

    #[test]
    fn states_and_outcomes_fill_a_column() {
        assert_eq!(format!("[{:<9}]", RunState::Ready), "[ready    ]");
        assert_eq!(format!("[{:>9}]", Outcome::Failed), "[   failed]");
    }
}
