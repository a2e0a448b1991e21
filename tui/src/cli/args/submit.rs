//! The flags of `ax submit`.

use std::path::PathBuf;

/// The flags of `ax submit`: the `submit` request's params, as typed on
/// the command line.
#[derive(clap::Args, Debug, Default, Clone)]
#[command(after_help = SUBMIT_FILE_FLAGS)]
pub struct SubmitArgs {
    /// The job's name (with -f: the DAG's name; default: the file's stem).
    #[arg(long)]
    pub name: Option<String>,
    /// 1-100 (not with -f).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=100))]
    pub priority: Option<u8>,
    /// A configured pool (not with -f).
    #[arg(long)]
    pub pool: Option<String>,
    /// e.g. 90s, 10m, 1h30m, or none (not with -f)
    #[arg(long, value_parser = timeout_flag)]
    pub timeout: Option<String>,
    /// Retries after a failed attempt, 0-10000 (not with -f).
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=10000))]
    pub retries: Option<u32>,
    /// Fail the attempt without a heartbeat this long, e.g. 5m (not with -f).
    #[arg(long, value_parser = duration_flag)]
    pub heartbeat: Option<String>,
    /// Run only after this run succeeded (repeatable).
    #[arg(long = "after", value_name = "RUN")]
    pub after: Vec<u64>,
    /// Deduplicate: return the unfinished run with this key instead.
    #[arg(long)]
    pub unique: Option<String>,
    /// With --unique: also deduplicate against runs created this recently.
    #[arg(long, requires = "unique", value_parser = duration_flag)]
    pub unique_for: Option<String>,
    /// Set a variable in the job's environment (repeatable; not with -f).
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = env_flag)]
    pub env: Vec<(String, String)>,
    /// A variable of --env whose value is secret: kept in axd's memory
    /// only, never stored, redacted from the log (repeatable; not with -f).
    #[arg(long = "secret-env", value_name = "NAME")]
    pub secret_env: Vec<String>,
    /// Run the jobs as this user (root only).
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// A job file to run as an ad-hoc DAG run.
    #[arg(short = 'f', long = "file", conflicts_with = "command")]
    pub file: Option<PathBuf>,
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// What `ax submit --help` says about flags with `-f` (docs/cli.md).
const SUBMIT_FILE_FLAGS: &str = "\
With -f FILE.toml, the job options come from the file: --priority, --pool,
--timeout, --retries and --heartbeat are refused (exit 2) rather than applied
to some jobs or ignored. The DAG-run options apply to the whole DAG run:
--name names the DAG (default: the file's stem), --after makes its root jobs
wait for those runs, --unique/--unique-for deduplicate the DAG run.

A bad flag value exits 2 naming the flag, whether ax or the daemon finds it
(an unknown --pool is refused by the daemon with invalid_params).";

/// A duration flag as the daemon reads it (`90s`, `1h30m`), checked here so
/// a bad value is a usage error naming the flag.
fn duration_flag(text: &str) -> Result<String, String> {
    ax_shared::duration::parse_duration(text).map(|_| text.to_string())
}

/// `--env NAME=VALUE`.
fn env_flag(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err("expected NAME=VALUE".into()),
    }
}

/// `--timeout`: a duration, or `none`.
fn timeout_flag(text: &str) -> Result<String, String> {
    if text == "none" {
        return Ok(text.to_string());
    }
    duration_flag(text)
}

impl SubmitArgs {
    /// Why these flags make no request (exit 2, checked before connecting):
    /// neither a command nor a file, or a job flag with `-f`, which has no
    /// job to apply to alone (the file defines each job's options).
    pub fn usage_error(&self) -> Option<String> {
        if self.file.is_none() && self.command.is_empty() {
            return Some("give a command after `--`, or -f FILE.toml".into());
        }
        if let Some(name) = self
            .secret_env
            .iter()
            .find(|n| !self.env.iter().any(|(k, _)| k == *n))
        {
            return Some(format!(
                "--secret-env {name}: give its value with --env {name}=VALUE"
            ));
        }
        self.job_flag_refused_with_file().map(|flag| {
            format!(
                "{flag} cannot be used with -f: job options come from the file (edit it, or submit a single command)"
            )
        })
    }

    /// The first job flag given with `-f`.
    fn job_flag_refused_with_file(&self) -> Option<&'static str> {
        self.file.as_ref()?;
        [
            ("--priority", self.priority.is_some()),
            ("--pool", self.pool.is_some()),
            ("--timeout", self.timeout.is_some()),
            ("--retries", self.retries.is_some()),
            ("--heartbeat", self.heartbeat.is_some()),
            ("--env", !self.env.is_empty()),
            ("--secret-env", !self.secret_env.is_empty()),
        ]
        .into_iter()
        .find_map(|(flag, given)| given.then_some(flag))
    }
}
