//! The command line of `ax` as clap reads it: the global flags, every
//! command and its flags. docs/cli.md, the man pages and the completions
//! are generated from these types (`cli::reference`), so the doc comments
//! on the fields and variants are the user's reference.

mod events;
mod import;
mod submit;
mod user_dags;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

pub use events::{EventsArgs, Since};
pub use import::{ImportArgs, ImportCommand, ImportCronArgs};
pub use submit::SubmitArgs;
pub use user_dags::{ApplyArgs, UserDagArgs};

// Plain comments on `Cli` and on the command enums: a doc comment there
// would become part of the `--help` text. A command's help is its
// variant's doc comment, which takes the place of its `Args` struct's.

// The whole command line: the global flags and one command.
#[derive(Parser, Debug)]
#[command(
    name = "ax",
    version,
    about = "Script the ax job scheduler",
    disable_help_subcommand = true,
    after_help = EXIT_CODES
)]
pub struct Cli {
    /// The daemon's socket (default: $AX_SOCKET, else the XDG/system place).
    #[arg(long, global = true, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// One JSON document on stdout (NDJSON for -f streams).
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

/// The exit codes of every command (`cli::exit`), shown under `ax --help`.
const EXIT_CODES: &str = "\
Exit codes:
  0  done
  1  the request failed (the daemon refused it, or the connection broke), or
     did not do what was asked: `ax reload` found job files with errors
     (each named), `ax trigger` was skipped (`overlap = skip`), `ax import
     cron` could not convert an entry (each named)
  2  usage error: a bad flag or argument, found by ax or by the daemon (its
     `invalid_params` answer, e.g. an unknown pool), or a broken axd.toml on
     `ax reload` (`invalid_config`)
  3  axd is unreachable (every socket tried is named)
  4  not found: no such run, DAG run or DAG

Without --socket or $AX_SOCKET, ax connects to the per-user socket when it
exists ($XDG_RUNTIME_DIR/ax/axd.sock, else $TMPDIR/ax-<uid>/ax/axd.sock: where
axd started without --config binds), else to /run/ax/axd.sock (the system
service). A per-user socket whose folder is another user's, or writable by
group or others, is not used (exit 3, naming the folder).

Output:
  Text from the daemon (DAG names, messages, reasons, errors) is printed with
  control characters shown as escapes (\\e, \\x07, \\n, \\u{9b}), so it can
  neither act on the terminal nor forge a line. --json prints it exact.
  `ax logs` writes a job's output byte for byte to a pipe or a file; on a
  terminal it passes text, tabs, line ends and colours (SGR, as `less -R`)
  and shows other escapes visibly (`ax logs RUN | cat` for the raw bytes).";

// Every command, in the order `ax --help` lists them: the offline ones
// around the block of commands that talk to the daemon.
#[derive(Subcommand, Debug, Clone)]
pub enum Command {
    /// Parse and validate job files offline: errors with line numbers, or
    /// each DAG's jobs and next 5 fire times.
    Validate(ValidateArgs),
    /// Cron helpers (offline).
    Cron(CronArgs),
    /// Convert other schedulers' files into job files (offline).
    Import(ImportArgs),
    #[command(flatten)]
    Remote(RemoteCommand),
    /// Print the shell completion script for ax to stdout.
    Completions(CompletionsArgs),
    /// Write the man pages (ax.1, ax-<command>.1) into DIR.
    Man(ManArgs),
}

// The commands that talk to the daemon (`cli::remote`).
#[derive(Subcommand, Debug, Clone)]
pub enum RemoteCommand {
    /// Daemon version, uptime, slots per pool, runs per state, job-file errors.
    Status,
    /// Runs, newest first.
    ///
    /// The table fits the terminal: names are shown whole while the line
    /// fits, WHY / MESSAGE gives way first, then the longer name column (down
    /// to 20 and 16 characters, cut with `…`). To a pipe or a file nothing is
    /// cut; `COLUMNS=N` fits it to N columns anywhere.
    Ls(LsArgs),
    /// One run: fields, attempts, events.
    Show(ShowArgs),
    /// Why a run is where it is, in words: what it waits on (its deps, a full pool, a paused DAG, a backoff or the retry budget until a time), or how it ended (exit code, signal, timeout, cancelled by whom), with the next command to use.
    Why(ShowArgs),
    /// Output of an attempt (default: the latest).
    Logs(LogsArgs),
    /// DAGs: schedule, next fire, last run state, load error; in a cluster, whether the nodes hold the same version.
    Dags,
    /// The DAG drawn as text; with --run, each node's state.
    Dag(DagArgs),
    /// Start a DAG run now, as the DAG's `overlap` allows; says what it did.
    ///
    /// While a DAG run of the DAG is active, a manual trigger follows the DAG's
    /// `overlap` like a cron slot: `allow` starts one more, `queue` waits behind
    /// the active one, `replace` cancels it and starts, `skip` starts nothing.
    /// Prints one DAG run id on stdout and on stderr what happened: the new
    /// DAG run's (started DAG run N / replaced DAG run M with DAG run N),
    /// else the active one's (queued behind DAG run M: the queued one gets
    /// its id when it starts / skipped because DAG run M is active). Exit 0
    /// when a DAG run started or is queued, 1 when the trigger was skipped.
    Trigger(TriggerArgs),
    /// Submit one ad-hoc run (`-- CMD ARGS…`; a single argument runs with /bin/sh -c), or a DAG run of a job file (`-f FILE`).
    Submit(Box<SubmitArgs>),
    /// Cancel runs, or a whole DAG run (--dag-run).
    Cancel(CancelArgs),
    /// Retry ended runs (revives downstream runs cancelled because of them).
    Retry(RetryArgs),
    /// Stop triggering a DAG (--all: every DAG).
    Pause(DagTargetArgs),
    /// Resume triggering a DAG (--all: every DAG).
    Resume(DagTargetArgs),
    /// Re-read the config and rescan the jobs folder; exit 1 naming each job file with errors (the last good version of its DAG stays in force).
    Reload,
    /// Stop axd. Running jobs keep running and the next axd takes them over; --stop-jobs stops them first (SIGTERM, shutdown_grace, SIGKILL; recorded interrupted).
    Shutdown {
        /// Stop the running jobs too.
        #[arg(long)]
        stop_jobs: bool,
    },
    /// Prometheus metrics (the text axd serves at `metrics_addr`).
    Metrics,
    /// The event log (-f: follow).
    Events(EventsArgs),
    /// From inside a job: a heartbeat for $AX_RUN_ID, with an optional message.
    Heartbeat(HeartbeatArgs),
    /// Store and load your own DAGs from job files, as `crontab FILE`.
    ///
    /// Each FILE is validated as `ax validate` does, as the DAG `@USER/<file
    /// stem>`, with the rules of a user DAG (it runs as you). If any file has
    /// an error, none is stored: the errors are printed (file:line:col) and
    /// the exit code is 1. Otherwise each is stored and loaded, replacing a
    /// DAG of that name (DAG runs already started keep their version).
    Apply(ApplyArgs),
    /// Edit one of your DAGs in $VISUAL, else $EDITOR, else vi, as `crontab -e`.
    ///
    /// The stored file (or, for a new NAME, a commented template) is written to
    /// a private temp file; once the editor exits, the file is applied as by
    /// `ax apply`. On errors they are printed and `re-edit? [Y/n]` is asked on
    /// stdin: `n` leaves the stored DAG unchanged (exit 1). An unchanged file
    /// prints `no changes`.
    Edit(UserDagArgs),
    /// Print one of your stored DAGs' job file, as `crontab -l`.
    Export(UserDagArgs),
    /// Delete one of your DAGs, as `crontab -r`: no new triggers, its waiting
    /// and ready runs cancelled (`definition removed`), running ones finish.
    Remove(UserDagArgs),
}

/// The flags of `ax validate`.
#[derive(Args, Debug, Clone)]
pub struct ValidateArgs {
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Name DAGs relative to this jobs folder and check `after` across files.
    #[arg(long, value_name = "DIR")]
    pub jobs_dir: Option<PathBuf>,
    /// Also check pool names against these (comma-separated).
    #[arg(long, value_delimiter = ',', value_name = "POOLS")]
    pub pools: Option<Vec<String>>,
    /// axd's config: DAGs without a `timezone` of their own are shown in its `timezone`, as axd plans them (without it: axd's default, `local`, resolved here).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// `ax cron`: its subcommand.
#[derive(Args, Debug, Clone)]
pub struct CronArgs {
    #[command(subcommand)]
    pub command: CronCommand,
}

// The cron helpers.
#[derive(Subcommand, Debug, Clone)]
pub enum CronCommand {
    /// The next N fire times strictly after FROM, one RFC 3339 instant per line.
    Next(CronNextArgs),
}

/// The flags of `ax cron next`.
#[derive(Args, Debug, Clone)]
pub struct CronNextArgs {
    /// 5 fields, 6 with seconds first, or @hourly/@daily/@weekly/@monthly/@yearly.
    pub expr: String,
    /// IANA time zone (default: local).
    #[arg(long)]
    pub tz: Option<String>,
    /// Start instant, RFC 3339 (default: now).
    #[arg(long)]
    pub from: Option<String>,
    /// How many fire times.
    #[arg(short = 'n', default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=10000))]
    pub n: u16,
}

/// The flags of `ax completions`.
#[derive(Args, Debug, Clone)]
pub struct CompletionsArgs {
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// The flags of `ax man`.
#[derive(Args, Debug, Clone)]
pub struct ManArgs {
    pub dir: PathBuf,
}

/// The flags of `ax ls`.
#[derive(Args, Debug, Clone)]
pub struct LsArgs {
    /// Only these states (comma-separated: waiting,delayed,ready,running,success,failed,timed_out,cancelled).
    #[arg(long)]
    pub state: Option<String>,
    /// A DAG's name, a prefix of names (`team-a/`) or a glob (`team-a/*`, `*-nightly`); no match exits 4.
    #[arg(long)]
    pub dag: Option<String>,
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10000))]
    pub limit: u32,
    /// Also list the runs of on_failure/on_success hooks (left out unless --dag names them).
    #[arg(long)]
    pub hooks: bool,
}

/// The flags of `ax show`.
#[derive(Args, Debug, Clone)]
pub struct ShowArgs {
    pub run: u64,
}

/// The flags of `ax logs`.
#[derive(Args, Debug, Clone)]
pub struct LogsArgs {
    pub run: u64,
    #[arg(long)]
    pub attempt: Option<u32>,
    /// Keep printing new output. Without --attempt: follow the whole run,
    /// waiting while it is queued, each attempt in turn (a header per
    /// attempt on stderr, so stdout is the job's output only), until it ends;
    /// exit 0 if it succeeded, else 1.
    #[arg(short = 'f', long)]
    pub follow: bool,
}

/// The flags of `ax dag`.
#[derive(Args, Debug, Clone)]
pub struct DagArgs {
    pub dag: String,
    /// A DAG run id: show its runs' states.
    #[arg(long)]
    pub run: Option<u64>,
}

/// The flags of `ax trigger`.
#[derive(Args, Debug, Clone)]
pub struct TriggerArgs {
    pub dag: String,
    /// Start a DAG run even while one is active, whatever `overlap` says.
    #[arg(long)]
    pub force: bool,
}

/// The flags of `ax cancel`.
#[derive(Args, Debug, Clone)]
pub struct CancelArgs {
    #[arg(value_name = "RUN")]
    pub runs: Vec<u64>,
    /// Cancel every unfinished run of this DAG run (one that has ended: accepted, nothing changes).
    #[arg(long, value_name = "DAG_RUN", conflicts_with = "runs")]
    pub dag_run: Option<u64>,
}

/// The flags of `ax retry`.
#[derive(Args, Debug, Clone)]
pub struct RetryArgs {
    pub runs: Vec<u64>,
}

/// The flags of `ax pause` and `ax resume`: one DAG, or every DAG.
#[derive(Args, Debug, Clone)]
pub struct DagTargetArgs {
    pub dag: Option<String>,
    #[arg(long, conflicts_with = "dag")]
    pub all: bool,
}

/// The flags of `ax heartbeat`.
#[derive(Args, Debug, Clone)]
pub struct HeartbeatArgs {
    /// Progress between 0 and 1.
    #[arg(long)]
    pub progress: Option<f64>,
    pub message: Option<String>,
}
