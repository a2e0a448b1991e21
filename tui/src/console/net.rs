//! The console's daemon tasks: one connection subscribed to change
//! notifications, one for requests. Both reconnect by themselves, so a
//! daemon restart shows as "disconnected — retrying" and then recovers.

use std::time::Duration;

use ax_shared::client::{Client, ClientError, SocketChoice};
use ax_shared::protocol::Notification;
use ax_shared::protocol::request::{
    Cancel, CancelDagRun, DagTarget, GetDagRun, GetRun, ListRuns, Logs, Pause, Resume, Retry,
    StateFilter, Subscribe, Trigger,
};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::state::{Command, DaemonEvent, Event};

const RETRY: Duration = Duration::from_millis(500);
/// How much of a log the detail pane shows.
const TAIL_BYTES: u64 = 4096;

pub fn spawn(socket: SocketChoice, events: UnboundedSender<Event>) -> UnboundedSender<Command> {
    let (tx, rx) = unbounded_channel();
    tokio::spawn(subscription(socket.clone(), events.clone()));
    tokio::spawn(requests(socket, rx, events));
    tx
}

fn send(events: &UnboundedSender<Event>, ev: DaemonEvent) {
    let _ = events.send(Event::Daemon(ev));
}

async fn subscription(socket: SocketChoice, events: UnboundedSender<Event>) {
    loop {
        match Client::connect_to(&socket, "ax-tui").await {
            Ok(mut c) => {
                let version = c.server.version.clone();
                match c.request(Subscribe).await {
                    Ok(snapshot) => {
                        send(&events, DaemonEvent::Status(Box::new(snapshot.status)));
                        send(&events, DaemonEvent::Connected { version });
                    }
                    Err(e) => send(
                        &events,
                        DaemonEvent::Disconnected {
                            reason: e.to_string(),
                        },
                    ),
                }
                loop {
                    match c.next_notification().await {
                        Ok(Notification::Changed(changed)) => {
                            let runs_changed = changed.runs();
                            send(
                                &events,
                                DaemonEvent::Changed {
                                    status: Some(changed.status),
                                    runs_changed,
                                },
                            );
                        }
                        // Too slow: resubscribe (a new connection) and refetch.
                        Ok(Notification::Lagged(_)) => break,
                        Err(e) => {
                            send(
                                &events,
                                DaemonEvent::Disconnected {
                                    reason: e.to_string(),
                                },
                            );
                            break;
                        }
                    }
                }
            }
            Err(e) => send(
                &events,
                DaemonEvent::Disconnected {
                    reason: e.to_string(),
                },
            ),
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// Drops requests that a later one of the same kind makes pointless
/// (only the newest window, detail, log and DAG fetch matter).
fn coalesce(batch: Vec<Command>) -> Vec<Command> {
    let mut out: Vec<Command> = Vec::new();
    for c in batch.into_iter().rev() {
        let dup = out.iter().any(|o| {
            matches!(
                (o, &c),
                (Command::FetchWindow { .. }, Command::FetchWindow { .. })
                    | (Command::FetchDetail(_), Command::FetchDetail(_))
                    | (Command::FetchDagRun(_), Command::FetchDagRun(_))
            ) || (matches!(o, Command::FetchLog { .. }) && o == &c)
        });
        if !dup {
            out.push(c);
        }
    }
    out.reverse();
    out
}

async fn requests(
    socket: SocketChoice,
    mut rx: UnboundedReceiver<Command>,
    events: UnboundedSender<Event>,
) {
    let mut client: Option<Client> = None;
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while let Ok(c) = rx.try_recv() {
            batch.push(c);
        }
        for cmd in coalesce(batch) {
            if cmd == Command::Quit {
                return;
            }
            if client.is_none() {
                client = Client::connect_to(&socket, "ax-tui").await.ok();
            }
            let Some(c) = client.as_mut() else {
                if is_action(&cmd) {
                    send(
                        &events,
                        DaemonEvent::ActionResult {
                            ok: false,
                            message: "axd is unreachable".into(),
                        },
                    );
                }
                continue;
            };
            if let Err(e) = execute(c, &cmd, &events).await {
                if matches!(
                    e,
                    ClientError::Closed
                        | ClientError::Protocol(_)
                        | ClientError::Unreachable { .. }
                ) {
                    client = None;
                }
                if is_action(&cmd) {
                    let message = match &e {
                        ClientError::Rpc(r) => format!("{}: {}", action_name(&cmd), r.message),
                        other => format!("{}: {other}", action_name(&cmd)),
                    };
                    send(&events, DaemonEvent::ActionResult { ok: false, message });
                }
            }
        }
    }
}

fn is_action(c: &Command) -> bool {
    matches!(
        c,
        Command::Cancel(_)
            | Command::CancelDagRun(_)
            | Command::Retry(_)
            | Command::Trigger(_)
            | Command::Pause { .. }
    )
}

fn action_name(c: &Command) -> String {
    match c {
        Command::Cancel(id) => format!("cancel {id}"),
        Command::CancelDagRun(id) => format!("cancel DAG run {id}"),
        Command::Retry(id) => format!("retry {id}"),
        Command::Trigger(d) => format!("trigger {d}"),
        Command::Pause { dag, pause } => {
            format!("{} {dag}", if *pause { "pause" } else { "resume" })
        }
        _ => String::new(),
    }
}

/// The daemon accepted an action: say so on the status line.
fn done(events: &UnboundedSender<Event>, message: String) {
    send(events, DaemonEvent::ActionResult { ok: true, message });
}

async fn execute(
    c: &mut Client,
    cmd: &Command,
    events: &UnboundedSender<Event>,
) -> Result<(), ClientError> {
    match cmd {
        Command::FetchWindow {
            states,
            filter,
            limit,
        } => {
            let p = ListRuns {
                state: (!states.is_empty()).then(|| {
                    StateFilter::List(states.iter().map(|s| s.as_str().to_string()).collect())
                }),
                filter: (!filter.is_empty()).then(|| filter.clone()),
                limit: Some(u64::from(*limit)),
                ..ListRuns::default()
            };
            let runs = c.request(p).await?;
            send(events, DaemonEvent::Window(runs));
        }
        Command::FetchDetail(id) => {
            let r = c.request(GetRun { id: *id }).await?;
            send(events, DaemonEvent::Detail(Box::new(r)));
        }
        Command::FetchLog {
            run,
            attempt,
            offset,
        } => {
            let mut p = Logs {
                run: *run,
                attempt: attempt.map(u64::from),
                ..Logs::default()
            };
            if *offset == u64::MAX {
                // The tail for the detail pane: the last few KiB.
                p.tail = Some(TAIL_BYTES);
                let chunk = c.request(p).await?;
                let data = chunk.data.as_str();
                // Drop a partial first line.
                let text = match data.find('\n') {
                    Some(i) if data.len() as u64 >= TAIL_BYTES => &data[i + 1..],
                    _ => data,
                };
                send(
                    events,
                    DaemonEvent::LogTail {
                        run: *run,
                        text: text.to_string(),
                    },
                );
            } else {
                p.offset = Some(*offset);
                let chunk = c.request(p).await?;
                send(
                    events,
                    DaemonEvent::Log {
                        run: *run,
                        offset: chunk.offset,
                        data: chunk.data,
                        eof: chunk.eof,
                    },
                );
            }
        }
        Command::FetchDagRun(id) => {
            let v = c.request(GetDagRun { id: *id }).await?;
            send(events, DaemonEvent::DagRun(v));
        }
        Command::Cancel(id) => {
            c.request(Cancel {
                id: Some(*id),
                ids: None,
            })
            .await?;
            done(events, format!("cancel {id}: ok"));
        }
        Command::CancelDagRun(id) => {
            c.request(CancelDagRun { id: *id }).await?;
            done(events, format!("cancel DAG run {id}: ok"));
        }
        Command::Retry(id) => {
            c.request(Retry { id: *id }).await?;
            done(events, format!("retry {id}: ok"));
        }
        Command::Trigger(dag) => {
            let v = c
                .request(Trigger {
                    dag: dag.clone(),
                    force: None,
                })
                .await?;
            done(events, format!("trigger {dag}: {}", v.trigger_summary()));
        }
        Command::Pause { dag, pause } => {
            let target = DagTarget {
                dag: Some(dag.clone()),
                all: false,
            };
            if *pause {
                c.request(Pause(target)).await?;
            } else {
                c.request(Resume(target)).await?;
            }
            done(
                events,
                format!("{} {dag}: ok", if *pause { "pause" } else { "resume" }),
            );
        }
        Command::Quit => {}
    }
    Ok(())
}
