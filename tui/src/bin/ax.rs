//! `ax`: the command line of ax (docs/cli.md).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use ax_protocol::client::SocketChoice;
use ax_tui::cli::remote::{EventsArgs, Remote, SubmitArgs};
use ax_tui::cli::{exit, offline, reference, remote};
use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "ax",
    version,
    about = "Script the ax job scheduler",
    disable_help_subcommand = true,
    after_help = EXIT_CODES
)]
struct Cli {
    /// The daemon's socket (default: $AX_SOCKET, else the XDG/system place).
    #[arg(long, global = true, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// One JSON document on stdout (NDJSON for -f streams).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

/// The exit codes of every command, shown under `ax --help` (and in
/// docs/cli.md, "ax").
const EXIT_CODES: &str = "\
Exit codes:
  0  done
  1  the request failed (the daemon refused it, or the connection broke)
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

#[derive(Subcommand, Debug, Clone)]
enum Command {
    /// Parse and validate job files offline: errors with line numbers, or
    /// each DAG's jobs and next 5 fire times.
    Validate {
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
        /// Name DAGs relative to this jobs folder and check `after` across files.
        #[arg(long, value_name = "DIR")]
        jobs_dir: Option<PathBuf>,
        /// Also check pool names against these (comma-separated).
        #[arg(long, value_delimiter = ',', value_name = "POOLS")]
        pools: Option<Vec<String>>,
    },
    /// Cron helpers (offline).
    Cron {
        #[command(subcommand)]
        command: CronCommand,
    },
    /// Daemon version, uptime, slots per pool, runs per state, job-file errors.
    Status,
    /// Runs, newest first.
    Ls {
        /// Only these states (comma-separated: waiting,delayed,ready,running,success,failed,timed_out,cancelled).
        #[arg(long)]
        state: Option<String>,
        #[arg(long)]
        dag: Option<String>,
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10000))]
        limit: u32,
    },
    /// One run: fields, attempts, events.
    Show { run: u64 },
    /// Output of an attempt (default: the latest).
    Logs {
        run: u64,
        #[arg(long)]
        attempt: Option<u32>,
        /// Keep printing new output. Without --attempt: follow the whole run,
        /// waiting while it is queued, each attempt in turn (a header per
        /// attempt on stderr, so stdout is the job's output only), until it ends;
        /// exit 0 if it succeeded, else 1.
        #[arg(short = 'f', long)]
        follow: bool,
    },
    /// DAGs: schedule, next fire, last run state, load error; in a cluster, whether the nodes hold the same version.
    Dags,
    /// The DAG drawn as text; with --run, each node's state.
    Dag {
        dag: String,
        /// A DAG run id: show its runs' states.
        #[arg(long)]
        run: Option<u64>,
    },
    /// Start a DAG run now, as the DAG's `overlap` allows; says what it did.
    ///
    /// While a DAG run of the DAG is active, a manual trigger follows the DAG's
    /// `overlap` like a cron slot: `allow` starts one more, `queue` waits behind
    /// the active one, `replace` cancels it and starts, `skip` starts nothing.
    /// Prints the new DAG run's id on stdout and on stderr what happened
    /// (started DAG run N / queued behind DAG run M / replaced DAG run M /
    /// skipped because DAG run M is active). Exit 0 in every case.
    Trigger {
        dag: String,
        /// Start a DAG run even while one is active, whatever `overlap` says.
        #[arg(long)]
        force: bool,
    },
    /// Submit one ad-hoc run (`-- CMD ARGS…`; a single argument runs with /bin/sh -c), or a DAG run of a job file (`-f FILE`).
    Submit(SubmitArgs),
    /// Cancel runs, or a whole DAG run (--dag-run).
    Cancel {
        #[arg(value_name = "RUN")]
        runs: Vec<u64>,
        /// Cancel every unfinished run of this DAG run.
        #[arg(long, value_name = "DAG_RUN", conflicts_with = "runs")]
        dag_run: Option<u64>,
    },
    /// Retry ended runs (revives downstream runs cancelled because of them).
    Retry { runs: Vec<u64> },
    /// Stop triggering a DAG (--all: every DAG).
    Pause {
        dag: Option<String>,
        #[arg(long, conflicts_with = "dag")]
        all: bool,
    },
    /// Resume triggering a DAG (--all: every DAG).
    Resume {
        dag: Option<String>,
        #[arg(long, conflicts_with = "dag")]
        all: bool,
    },
    /// Re-read the config and rescan the jobs folder.
    Reload,
    /// Prometheus metrics (the text axd serves at `metrics_addr`).
    Metrics,
    /// The event log (-f: follow).
    Events(EventsArgs),
    /// From inside a job: a heartbeat for $AX_RUN_ID, with an optional message.
    Heartbeat {
        /// Progress between 0 and 1.
        #[arg(long)]
        progress: Option<f64>,
        message: Option<String>,
    },
    /// Print the shell completion script for ax to stdout.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages (ax.1, ax-<command>.1) into DIR.
    Man { dir: PathBuf },
}

#[derive(Subcommand, Debug, Clone)]
enum CronCommand {
    /// The next N fire times strictly after FROM, one RFC 3339 instant per line.
    Next {
        /// 5 fields, 6 with seconds first, or @hourly/@daily/@weekly/@monthly/@yearly.
        expr: String,
        /// IANA time zone (default: local).
        #[arg(long)]
        tz: Option<String>,
        /// Start instant, RFC 3339 (default: now).
        #[arg(long)]
        from: Option<String>,
        /// How many fire times.
        #[arg(short = 'n', default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=10000))]
        n: u16,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr().lock();
    let code = match &cli.command {
        Command::Validate {
            files,
            jobs_dir,
            pools,
        } => offline::validate(
            &mut out,
            &mut err,
            files,
            jobs_dir.as_deref(),
            pools.clone(),
            cli.json,
        ),
        Command::Cron {
            command: CronCommand::Next { expr, tz, from, n },
        } => offline::cron_next(
            &mut out,
            &mut err,
            expr,
            tz.as_deref(),
            from.as_deref(),
            usize::from(*n),
            cli.json,
        ),
        Command::Completions { shell } => report_io(
            reference::write_completions(&Cli::command(), *shell, &mut out),
            &mut err,
        ),
        Command::Man { dir } => report_io(
            reference::write_man_pages(&Cli::command(), dir).map(|_| ()),
            &mut err,
        ),
        other => {
            let remote = match other.clone() {
                Command::Status => Remote::Status,
                Command::Ls { state, dag, limit } => Remote::Ls { state, dag, limit },
                Command::Show { run } => Remote::Show { run },
                Command::Logs {
                    run,
                    attempt,
                    follow,
                } => Remote::Logs {
                    run,
                    attempt,
                    follow,
                    terminal: std::io::IsTerminal::is_terminal(&std::io::stdout()),
                },
                Command::Dags => Remote::Dags,
                Command::Dag { dag, run } => Remote::Dag {
                    dag,
                    run,
                    colour: std::io::IsTerminal::is_terminal(&std::io::stdout())
                        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
                },
                Command::Trigger { dag, force } => Remote::Trigger { dag, force },
                Command::Submit(args) => {
                    if args.file.is_none() && args.command.is_empty() {
                        let _ =
                            writeln!(err, "ax submit: give a command after `--`, or -f FILE.toml");
                        return ExitCode::from(exit::USAGE as u8);
                    }
                    if let Some(flag) = args.job_flag_refused_with_file() {
                        let _ = writeln!(
                            err,
                            "ax submit: {flag} cannot be used with -f: job options come from the file (edit it, or submit a single command)"
                        );
                        return ExitCode::from(exit::USAGE as u8);
                    }
                    Remote::Submit(args)
                }
                Command::Cancel { runs, dag_run } => match dag_run {
                    Some(dag_run) => Remote::CancelDagRun { dag_run },
                    None => Remote::Cancel { runs },
                },
                Command::Retry { runs } => Remote::Retry { runs },
                Command::Pause { dag, all } => Remote::Pause { dag, all },
                Command::Resume { dag, all } => Remote::Resume { dag, all },
                Command::Reload => Remote::Reload,
                Command::Metrics => Remote::Metrics,
                Command::Events(args) => Remote::Events(args),
                Command::Heartbeat { progress, message } => Remote::Heartbeat { message, progress },
                Command::Validate { .. }
                | Command::Cron { .. }
                | Command::Completions { .. }
                | Command::Man { .. } => unreachable!("handled above"),
            };
            let socket = match cli.socket.clone() {
                Some(path) => SocketChoice::given(path),
                None => ax_protocol::client::default_socket(),
            };
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    let _ = writeln!(err, "ax: {e}");
                    return ExitCode::from(exit::FAILED as u8);
                }
            };
            runtime.block_on(remote::run(&socket, cli.json, remote, &mut out, &mut err))
        }
    };
    ExitCode::from(u8::try_from(code).unwrap_or(exit::FAILED as u8))
}

/// The exit code of an offline command that only writes (exit::FAILED with
/// the error on stderr when the write failed).
fn report_io(result: std::io::Result<()>, err: &mut impl Write) -> i32 {
    match result {
        Ok(()) => exit::OK,
        Err(e) => {
            let _ = writeln!(err, "ax: {e}");
            exit::FAILED
        }
    }
}
