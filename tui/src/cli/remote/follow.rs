//! `ax logs` and `ax events`: reading and following a run's output and
//! the event log.
//!
//! Following never polls on a timer: a run's log is read with the
//! daemon's long-poll `logs` follow, and everything else waits for a
//! `subscribe` notification, subscribed before the first read so no
//! change falls between a read and the wait.

use std::time::Duration;

use ax_protocol::Notification;
use ax_protocol::api::EventView;
use ax_protocol::client::{Client, ClientError};
use ax_protocol::request::{Events, GetRun, Logs, Subscribe};
use ax_shared::RunState;
use ax_shared::time::Timestamp;
use serde_json::json;

use super::terminal::TerminalText;
use super::{Out, event_line};
use crate::cli::exit;

/// Events read per request while catching up from the store.
const CATCH_UP_PAGE: u64 = 5000;

/// How long `ax logs -f` waits for a notification before reading the run
/// again anyway: in a cluster, a run that another node holds changes
/// without a notification from the node asked (each node notifies of its
/// own steps), so its next attempt or its end is found by reading.
const REREAD: Duration = Duration::from_secs(1);

/// The flags of `ax events`.
#[derive(clap::Args, Debug, Clone)]
pub struct EventsArgs {
    /// Keep printing new events as they happen.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Print the newest N matching events (oldest first).
    #[arg(long, value_name = "N", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub limit: u64,
    /// Only this run's events.
    #[arg(long, value_name = "ID")]
    pub run: Option<u64>,
    /// Only events of this DAG's runs.
    #[arg(long, value_name = "NAME")]
    pub dag: Option<String>,
    /// Only events whose actor contains TEXT (e.g. `scheduler`, `uid 1000`).
    #[arg(long, value_name = "TEXT")]
    pub actor: Option<String>,
    /// Only events since TIME: RFC 3339 (2026-12-01T09:00:00Z) or a duration ago (10m, 2h).
    #[arg(long, value_name = "TIME", value_parser = parse_since)]
    pub since: Option<Since>,
}

/// `--since`: an instant, or a duration before the moment the command runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Since {
    At(Timestamp),
    Ago(Duration),
}

impl Since {
    fn instant(self, now: Timestamp) -> Timestamp {
        match self {
            Since::At(t) => t,
            Since::Ago(d) => {
                let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
                Timestamp::from_millis(now.millis().saturating_sub(ms))
            }
        }
    }
}

fn parse_since(text: &str) -> Result<Since, String> {
    if let Ok(t) = Timestamp::parse(text) {
        return Ok(Since::At(t));
    }
    ax_shared::duration::parse_duration(text)
        .map(Since::Ago)
        .map_err(|e| format!("not an RFC 3339 time nor a duration ({e})"))
}

impl EventsArgs {
    /// The filters as request params (no `after`, `limit` or `newest`).
    fn filter(&self, now: Timestamp) -> Events {
        Events {
            run: self.run,
            dag: self.dag.clone(),
            actor: self.actor.clone(),
            since: self.since.map(|s| s.instant(now)),
            ..Events::default()
        }
    }

    fn is_filtered(&self) -> bool {
        self.run.is_some() || self.dag.is_some() || self.actor.is_some() || self.since.is_some()
    }
}

/// `ax events`: the newest `--limit` matching events; with `-f`, then every
/// new matching event. Each notification is only a wake-up: what is printed
/// is always read from the store after the last printed seq, so a `lagged`
/// notice (dropped notifications) leaves no gap.
pub(super) async fn events(
    c: &mut Client,
    o: &mut Out<'_>,
    args: EventsArgs,
) -> Result<i32, ClientError> {
    let filter = args.filter(Timestamp::from(chrono::Utc::now()));
    let mut after = 0;
    if args.follow {
        // Subscribe before reading, so nothing falls between.
        c.request(Subscribe).await?;
        if args.is_filtered() {
            // Start the catch-up from the log's end, not from the first
            // seq, when nothing matches yet.
            let newest = c
                .request(Events {
                    limit: Some(1),
                    newest: Some(true),
                    ..Events::default()
                })
                .await?;
            after = newest.last().map_or(0, |e| e.seq);
        }
    }
    let recent = c
        .request(Events {
            limit: Some(args.limit),
            newest: Some(true),
            ..filter.clone()
        })
        .await?;
    for e in &recent {
        after = after.max(e.seq);
        print_event(o, e);
    }
    if !args.follow {
        return Ok(exit::OK);
    }
    loop {
        match c.next_notification().await? {
            Notification::Lagged(lagged) => {
                c.request(Subscribe).await?;
                let caught = catch_up(c, o, &filter, &mut after).await?;
                // Said on stderr, so stdout stays the event stream.
                if o.json {
                    let note = json!({"lagged": {"missed": lagged.missed, "caught_up": caught}});
                    let _ = writeln!(o.err, "{note}");
                } else {
                    tell!(
                        o,
                        "ax: {} notifications were dropped; caught up {caught} event(s) from the store",
                        lagged.missed
                    );
                }
            }
            Notification::Changed(changed) => {
                if changed.events.iter().any(|e| e.seq > after) {
                    catch_up(c, o, &filter, &mut after).await?;
                }
            }
        }
    }
}

/// Prints every matching event after `after`, page by page until the
/// store has no more; returns how many were printed.
async fn catch_up(
    c: &mut Client,
    o: &mut Out<'_>,
    filter: &Events,
    after: &mut i64,
) -> Result<usize, ClientError> {
    let mut printed = 0;
    loop {
        let page = c
            .request(Events {
                after: Some(*after),
                limit: Some(CATCH_UP_PAGE),
                ..filter.clone()
            })
            .await?;
        for e in &page {
            *after = e.seq;
            print_event(o, e);
        }
        printed += page.len();
        if (page.len() as u64) < CATCH_UP_PAGE {
            return Ok(printed);
        }
    }
}

fn print_event(o: &mut Out<'_>, e: &EventView) {
    if o.json {
        let _ = writeln!(o.out, "{}", json!(e));
    } else {
        say!(o, "{}", event_line(e));
    }
    let _ = o.out.flush();
}

/// `ax logs`: one attempt's output (default the latest); with `-f` and no
/// `--attempt`, the whole run: every attempt in turn, waiting while the
/// run is queued, until the run is terminal (exit 0 on success, 1 on any
/// other end). Attempt headers go to stderr, so stdout is the job's output
/// byte for byte.
pub(super) async fn logs(
    c: &mut Client,
    o: &mut Out<'_>,
    run: u64,
    attempt: Option<u32>,
    follow: bool,
    terminal: bool,
) -> Result<i32, ClientError> {
    if follow && attempt.is_none() {
        return follow_run(c, o, run, terminal).await;
    }
    print_attempt(c, o, run, attempt, follow, terminal).await?;
    Ok(exit::OK)
}

async fn follow_run(
    c: &mut Client,
    o: &mut Out<'_>,
    run: u64,
    terminal: bool,
) -> Result<i32, ClientError> {
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
            print_attempt(c, o, run, Some(next_attempt), true, terminal).await?;
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
/// everything was read. On a `terminal` (and without `--json`) the output
/// goes through `TerminalText`, else byte for byte.
async fn print_attempt(
    c: &mut Client,
    o: &mut Out<'_>,
    run: u64,
    attempt: Option<u32>,
    follow: bool,
    terminal: bool,
) -> Result<(), ClientError> {
    let mut offset = 0u64;
    let mut shown = (terminal && !o.json).then(TerminalText::default);
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
