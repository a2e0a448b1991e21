//! `ax logs`: a run's output, one attempt or (with `-f`) the whole run as
//! it happens.
//!
//! Following never polls on a timer alone: an attempt's log is read with
//! the daemon's long-poll `logs` follow, and the run's next attempt or its
//! end waits for a `subscribe` notification, subscribed before the first
//! read so no change falls between a read and the wait.

use std::time::Duration;

use ax_protocol::Notification;
use ax_protocol::client::{Client, ClientError};
use ax_protocol::request::{GetRun, Logs, Subscribe};
use ax_shared::RunState;
use ax_shared::time::Timestamp;
use serde_json::json;

use super::out::{Out, tell};
use super::terminal::TerminalText;
use crate::cli::args::LogsArgs;
use crate::cli::exit;

/// How long `ax logs -f` waits for a notification before reading the run
/// again anyway: in a cluster, a run that another node holds changes
/// without a notification from the node asked (each node notifies of its
/// own steps), so its next attempt or its end is found by reading.
const REREAD: Duration = Duration::from_secs(1);

/// `ax logs`: one attempt's output (default the latest); with `-f` and no
/// `--attempt`, the whole run: every attempt in turn, waiting while the
/// run is queued, until the run is terminal (exit 0 on success, 1 on any
/// other end). Attempt headers go to stderr, so stdout is the job's output
/// byte for byte.
pub(super) async fn run(
    c: &mut Client,
    o: &mut Out<'_>,
    args: &LogsArgs,
) -> Result<i32, ClientError> {
    let LogsArgs {
        run,
        attempt,
        follow,
    } = *args;
    if follow && attempt.is_none() {
        return follow_run(c, o, run).await;
    }
    print_attempt(c, o, run, attempt, follow).await?;
    Ok(exit::OK)
}

async fn follow_run(c: &mut Client, o: &mut Out<'_>, run: u64) -> Result<i32, ClientError> {
    c.request(Subscribe).await?;
    let mut next_attempt = 1u32;
    loop {
        let view = c.request(GetRun { id: run }).await?;
        if let Some(a) = view.attempts.iter().find(|a| a.n == next_attempt) {
            if !o.json {
                let started = a
                    .started_at
                    .and_then(Timestamp::to_datetime)
                    .map_or("-".into(), |t| t.format("%H:%M:%S UTC").to_string());
                tell!(o, "── attempt {} (started {started}) ──", a.n);
            }
            print_attempt(c, o, run, Some(next_attempt), true).await?;
            next_attempt += 1;
            continue;
        }
        if view.state.is_terminal() {
            if !o.json {
                tell!(o, "── run {run} {} ──", view.state);
            }
            return Ok(if view.state == RunState::Success {
                exit::OK
            } else {
                exit::FAILED
            });
        }
        wait_for_change(c, run).await?;
    }
}

/// Waits for a notification about `run` (or a `lagged` notice, after which
/// it subscribes again), at most `REREAD`: the caller re-reads the run
/// either way.
async fn wait_for_change(c: &mut Client, run: u64) -> Result<(), ClientError> {
    loop {
        // Cancel-safe: a notification half read stays buffered in the
        // connection for the next call.
        let Ok(notification) = tokio::time::timeout(REREAD, c.next_notification()).await else {
            return Ok(());
        };
        match notification? {
            Notification::Lagged(_) => {
                c.request(Subscribe).await?;
                return Ok(());
            }
            Notification::Changed(changed) => {
                if changed.runs().contains(&run) {
                    return Ok(());
                }
            }
        }
    }
}

/// Prints an attempt's log; with `follow`, until the attempt has ended and
/// everything was read. On a terminal (and without `--json`) the output
/// goes through `TerminalText`, else byte for byte.
async fn print_attempt(
    c: &mut Client,
    o: &mut Out<'_>,
    run: u64,
    attempt: Option<u32>,
    follow: bool,
) -> Result<(), ClientError> {
    let mut offset = 0u64;
    let mut shown = (o.stdout.terminal && !o.json).then(TerminalText::default);
    loop {
        let chunk = c
            .request(Logs {
                run,
                attempt: attempt.map(u64::from),
                offset: Some(offset),
                follow: Some(follow),
                ..Logs::default()
            })
            .await?;
        if o.json {
            // A long poll that timed out says nothing worth a line.
            if !follow || !chunk.data.is_empty() || chunk.eof {
                let _ = writeln!(o.out, "{}", json!(chunk));
            }
        } else if let Some(shown) = shown.as_mut() {
            let _ = o.out.write_all(shown.push(&chunk.data).as_bytes());
        } else {
            let _ = o.out.write_all(chunk.data.as_bytes());
        }
        offset = chunk.offset;
        let end = !follow || chunk.eof;
        if end && let Some(shown) = shown.as_mut() {
            let _ = o.out.write_all(shown.finish().as_bytes());
        }
        let _ = o.out.flush();
        if end {
            return Ok(());
        }
    }
}
