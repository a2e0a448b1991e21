//! `ax`: the command line of ax (docs/cli.md). This edge parses the
//! command line, runs an offline command here or a remote one on a
//! runtime, and turns what failed into an exit code.

use std::io::Write;
use std::process::ExitCode;

use ax_clients::cli::args::{Cli, Command, CronCommand, ImportCommand};
use ax_clients::cli::remote::StdoutKind;
use ax_clients::cli::{exit, import, offline, reference, remote};
use ax_protocol::client::SocketChoice;
use clap::{CommandFactory, Parser};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let code = match run(&cli) {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "ax: {e}");
            exit::FAILED
        }
    };
    ExitCode::from(u8::try_from(code).unwrap_or(exit::FAILED as u8))
}

/// Runs the command; returns its exit code, or what kept it from running
/// or writing (exit 1).
fn run(cli: &Cli) -> anyhow::Result<i32> {
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr().lock();
    match &cli.command {
        Command::Validate(args) => Ok(offline::validate(&mut out, &mut err, args, cli.json)),
        Command::Cron(args) => match &args.command {
            CronCommand::Next(args) => Ok(offline::cron_next(&mut out, &mut err, args, cli.json)),
        },
        Command::Import(args) => match &args.command {
            ImportCommand::Cron(args) => Ok(import::import_cron(
                &mut out,
                &mut err,
                &mut std::io::stdin().lock(),
                args,
            )),
        },
        Command::Completions(args) => {
            reference::write_completions(&Cli::command(), args.shell, &mut out)?;
            Ok(exit::OK)
        }
        Command::Man(args) => {
            reference::write_man_pages(&Cli::command(), &args.dir)?;
            Ok(exit::OK)
        }
        Command::Remote(command) => {
            let socket = match cli.socket.clone() {
                Some(path) => SocketChoice::given(path),
                None => ax_protocol::client::default_socket(),
            };
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            Ok(runtime.block_on(remote::run(
                &socket,
                cli.json,
                command,
                StdoutKind::detect(),
                &mut out,
                &mut err,
            )))
        }
    }
}
