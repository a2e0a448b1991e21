//! The `ax` commands that talk to the daemon: one file per command (or
//! family of commands), each a `run(client, out, args)` that makes the
//! requests and prints the answer through `out` and `format`.

mod access;
mod cancel_retry;
mod dag;
mod dag_match;
mod dags;
mod events;
mod failure;
mod format;
mod heartbeat;
mod logs;
mod ls;
mod metrics;
mod out;
mod pause_resume;
mod reload;
mod show;
mod shutdown;
mod status;
mod submit;
mod terminal;
mod trigger;
mod user_dags;

use std::io::Write;

use ax_protocol::client::{Client, ClientError, SocketChoice};
use ax_protocol::request::{Pause, Resume};

use crate::cli::args::RemoteCommand;
use crate::cli::exit;
use out::{Out, tell};

pub use out::StdoutKind;

/// Runs one remote command on the daemon at `socket`; returns its exit
/// code (`ax --help`, "Exit codes").
pub async fn run(
    socket: &SocketChoice,
    json: bool,
    command: &RemoteCommand,
    stdout: StdoutKind,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    // Found before connecting: a usage error whether axd runs or not.
    if let RemoteCommand::Submit(args) = command
        && let Some(problem) = args.usage_error()
    {
        let _ = writeln!(err, "ax submit: {problem}");
        return exit::USAGE;
    }
    let mut o = Out {
        out,
        err,
        json,
        stdout,
    };
    let mut client = match Client::connect_to(socket, "ax").await {
        Ok(c) => c,
        Err(ClientError::Unreachable { source, .. })
            if source.kind() == std::io::ErrorKind::PermissionDenied && !o.json =>
        {
            for line in access::denied(&socket.path) {
                tell!(o, "ax: {line}");
            }
            return exit::UNREACHABLE;
        }
        Err(e) => return failure::fail(&mut o, e),
    };
    match dispatch(&mut client, &mut o, command).await {
        Ok(code) => code,
        Err(e) => failure::fail(&mut o, e),
    }
}

async fn dispatch(
    c: &mut Client,
    o: &mut Out<'_>,
    command: &RemoteCommand,
) -> Result<i32, ClientError> {
    match command {
        RemoteCommand::Status => status::run(c, o).await,
        RemoteCommand::Ls(args) => ls::run(c, o, args).await,
        RemoteCommand::Show(args) => show::run(c, o, args, format::runs::run_page).await,
        RemoteCommand::Why(args) => show::run(c, o, args, format::why::why_lines).await,
        RemoteCommand::Logs(args) => logs::run(c, o, args).await,
        RemoteCommand::Dags => dags::run(c, o).await,
        RemoteCommand::Dag(args) => dag::run(c, o, args).await,
        RemoteCommand::Trigger(args) => trigger::run(c, o, args).await,
        RemoteCommand::Submit(args) => submit::run(c, o, args).await,
        RemoteCommand::Cancel(args) => cancel_retry::cancel(c, o, args).await,
        RemoteCommand::Retry(args) => cancel_retry::retry(c, o, args).await,
        RemoteCommand::Pause(args) => pause_resume::run(c, o, args, Pause).await,
        RemoteCommand::Resume(args) => pause_resume::run(c, o, args, Resume).await,
        RemoteCommand::Reload => reload::run(c, o).await,
        RemoteCommand::Shutdown { stop_jobs } => shutdown::run(c, o, *stop_jobs).await,
        RemoteCommand::Metrics => metrics::run(c, o).await,
        RemoteCommand::Events(args) => events::run(c, o, args).await,
        RemoteCommand::Heartbeat(args) => heartbeat::run(c, o, args).await,
        RemoteCommand::Apply(args) => user_dags::apply(c, o, args).await,
        RemoteCommand::Edit(args) => user_dags::edit(c, o, args).await,
        RemoteCommand::Export(args) => user_dags::export(c, o, args).await,
        RemoteCommand::Remove(args) => user_dags::remove(c, o, args).await,
    }
}
