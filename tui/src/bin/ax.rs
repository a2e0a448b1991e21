//! `ax`: the command line of ax (SPEC §6).

use std::path::PathBuf;
use std::process::ExitCode;

use ax_tui::cli::{exit, offline};
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "ax",
    version,
    about = "Script the ax job scheduler",
    disable_help_subcommand = true
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

#[derive(Subcommand, Debug)]
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
}

#[derive(Subcommand, Debug)]
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
    };
    let _ = cli.socket;
    ExitCode::from(u8::try_from(code).unwrap_or(exit::FAILED as u8))
}
