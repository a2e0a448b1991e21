//! `ax events`: the event log, and with `-f` every new event as it
//! happens.
//!
//! Following never polls: it waits for a `subscribe` notification,
//! subscribed before the first read so no event falls between a read and
//! the wait.

use ax_protocol::Notification;
use ax_protocol::api::EventView;
use ax_protocol::client::{Client, ClientError};
use ax_protocol::request::{Events, Subscribe};
use ax_shared::time::Timestamp;
use serde_json::json;

use super::format::runs::event_line;
use super::out::{Out, say, tell};
use crate::cli::args::EventsArgs;
use crate::cli::exit;

/// Events read per request while catching up from the store.
const CATCH_UP_PAGE: u64 = 5000;

/// The filters of `args` as request params (no `after`, `limit` or
/// `newest`), for a command that runs at `now`.
fn filter(args: &EventsArgs, now: Timestamp) -> Events {
    Events {
        run: args.run,
        dag: args.dag.clone(),
        actor: args.actor.clone(),
        since: args.since.map(|s| s.instant(now)),
        ..Events::default()
    }
}

/// `ax events`: the newest `--limit` matching events; with `-f`, then every
/// new matching event. Each notification is only a wake-up: what is printed
/// is always read from the store after the last printed seq, so a `lagged`
/// notice (dropped notifications) leaves no gap.
pub(super) async fn run(
    c: &mut Client,
    o: &mut Out<'_>,
    args: &EventsArgs,
) -> Result<i32, ClientError> {
    let filter = filter(args, Timestamp::from(chrono::Utc::now()));
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
