//! The console's daemon tasks: one connection subscribed to change
//! notifications, one for requests. Both reconnect by themselves, so a
//! daemon restart shows as "disconnected — retrying" and then recovers.

use std::time::Duration;

use ax_protocol::Notification;
use ax_protocol::client::{Client, ClientError, SocketChoice};
use ax_protocol::request::{
    Cancel, CancelDagRun, DagTarget, Events, GetDag, GetDagRun, GetRun, ListRuns, Logs, Pause,
    Resume, Retry, StateFilter, Status, Subscribe, Trigger,
};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::task::JoinHandle;

use super::state::{Command, DaemonEvent, Event, LogChunk};
use super::views::readings::cancelled_by;

const RETRY: Duration = Duration::from_millis(500);
/// How many of a cancelled run's newest events tell who cancelled it
/// (the cancel is among its last few).
const CANCEL_EVENTS: u64 = 20;
/// How much of a log the detail pane shows.
const TAIL_BYTES: u64 = 4096;
/// The most a followed log reads at once; a full read means the console
/// is behind, and it jumps to the last `FOLLOW_TAIL` bytes instead.
const FOLLOW_MAX: u64 = 256 * 1024;
const FOLLOW_TAIL: u64 = 64 * 1024;
/// How long the daemon holds a follow request open without new output.
const FOLLOW_WAIT_MS: u64 = 500;

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
                    | (Command::FetchDags, Command::FetchDags)
                    | (Command::FetchStatus, Command::FetchStatus)
                    | (Command::FetchEvents(_), Command::FetchEvents(_))
                    | (Command::FetchLogTail(_), Command::FetchLogTail(_))
            )
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
    let mut follower: Option<JoinHandle<()>> = None;
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while let Ok(c) = rx.try_recv() {
            batch.push(c);
        }
        for cmd in coalesce(batch) {
            match cmd {
                Command::Quit => return,
                Command::FollowLog(run) => {
                    if let Some(f) = follower.take() {
                        f.abort();
                    }
                    follower = Some(tokio::spawn(follow_log(
                        socket.clone(),
                        run,
                        events.clone(),
                    )));
                    continue;
                }
                Command::StopLog => {
                    if let Some(f) = follower.take() {
                        f.abort();
                    }
                    continue;
                }
                _ => {}
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
            | Command::TogglePause(_)
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
        Command::TogglePause(dag) => format!("pause/resume {dag}"),
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
    if is_action(cmd) {
        act(c, cmd, events).await
    } else {
        fetch(c, cmd, events).await
    }
}

/// Asks the daemon for data and reports the answer.
async fn fetch(
    c: &mut Client,
    cmd: &Command,
    events: &UnboundedSender<Event>,
) -> Result<(), ClientError> {
    match cmd {
        Command::FetchWindow {
            states,
            dag,
            filter,
            limit,
        } => {
            let p = ListRuns {
                state: (!states.is_empty()).then(|| {
                    StateFilter::List(states.iter().map(|s| s.as_str().to_string()).collect())
                }),
                dag: dag.clone(),
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
        Command::FetchCancelledBy(run) => {
            let list = c
                .request(Events {
                    run: Some(*run),
                    limit: Some(CANCEL_EVENTS),
                    newest: Some(true),
                    ..Events::default()
                })
                .await?;
            let actor = cancelled_by(&list).map(str::to_string);
            send(events, DaemonEvent::CancelledBy { run: *run, actor });
        }
        Command::FetchLogTail(run) => {
            let chunk = c
                .request(Logs {
                    run: *run,
                    tail: Some(TAIL_BYTES),
                    ..Logs::default()
                })
                .await?;
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
        }
        Command::FetchDagRun(id) => {
            let v = c.request(GetDagRun { id: *id }).await?;
            send(events, DaemonEvent::DagRun(v));
        }
        Command::FetchLatestDagRun(dag) => {
            let newest = c
                .request(ListRuns {
                    dag: Some(dag.clone()),
                    limit: Some(1),
                    ..ListRuns::default()
                })
                .await?;
            if let Some(r) = newest.first() {
                let v = c.request(GetDagRun { id: r.dag_run }).await?;
                send(events, DaemonEvent::DagRun(v));
            }
        }
        Command::FetchDags => {
            let dags = c.all_dags().await?;
            send(events, DaemonEvent::Dags(dags));
        }
        Command::FetchStatus => {
            let status = c.request(Status).await?;
            send(events, DaemonEvent::Status(Box::new(status)));
        }
        Command::FetchEvents(q) => {
            let list = c
                .request(Events {
                    limit: Some(u64::from(q.limit)),
                    run: q.run,
                    dag: q.dag.clone(),
                    actor: q.actor.clone(),
                    newest: Some(true),
                    ..Events::default()
                })
                .await?;
            send(events, DaemonEvent::Events(list));
        }
        // Actions and the log's follow requests are not fetches.
        _ => {}
    }
    Ok(())
}

/// Sends an action and says on the status line that it was accepted.
async fn act(
    c: &mut Client,
    cmd: &Command,
    events: &UnboundedSender<Event>,
) -> Result<(), ClientError> {
    match cmd {
        Command::TogglePause(dag) => {
            let now = c.request(GetDag { name: dag.clone() }).await?;
            let target = DagTarget {
                dag: Some(dag.clone()),
                all: false,
            };
            let verb = if now.paused {
                c.request(Resume(target)).await?;
                "resume"
            } else {
                c.request(Pause(target)).await?;
                "pause"
            };
            done(events, format!("{verb} {dag}: ok"));
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
        _ => {}
    }
    Ok(())
}

/// Follows the newest attempt's log of `run` on a connection of its own
/// (a follow request waits for output, which must not hold up the other
/// requests). It starts at the newest output and stays there: a read that
/// comes back full means the console fell behind, and it jumps to the end
/// (saying how much it skipped) rather than lagging.
pub async fn follow_log(socket: SocketChoice, run: u64, events: UnboundedSender<Event>) {
    let log = |data: String, gap: u64, restart: bool, eof: bool| {
        send(
            &events,
            DaemonEvent::Log(LogChunk {
                run,
                data,
                gap,
                restart,
                eof,
            }),
        )
    };
    let mut attempt: Option<u32> = None;
    let mut offset: Option<u64> = None;
    let mut jumped_from: Option<u64> = None;
    loop {
        let Ok(mut c) = Client::connect_to(&socket, "ax-tui-log").await else {
            tokio::time::sleep(RETRY).await;
            continue;
        };
        loop {
            let p = Logs {
                run,
                offset,
                tail: offset.is_none().then_some(FOLLOW_TAIL),
                max: Some(FOLLOW_MAX),
                follow: Some(true),
                wait_ms: Some(FOLLOW_WAIT_MS),
                ..Logs::default()
            };
            let chunk = match c.request(p).await {
                Ok(chunk) => chunk,
                Err(ClientError::Rpc(e)) => {
                    log(format!("[{}]\n", e.message), 0, false, true);
                    return;
                }
                Err(_) => break,
            };
            let restart = attempt.is_some_and(|a| a != chunk.attempt);
            if restart && offset.is_some() {
                // A new attempt began: read its log from the start.
                attempt = Some(chunk.attempt);
                offset = Some(0);
                log(String::new(), 0, true, false);
                continue;
            }
            attempt = Some(chunk.attempt);
            if chunk.data.len() as u64 >= FOLLOW_MAX {
                // Behind: skip to the newest output.
                jumped_from = jumped_from.or(offset);
                offset = None;
                continue;
            }
            let mut data = chunk.data;
            let mut gap = 0;
            if offset.is_none() {
                let start = chunk.offset.saturating_sub(data.len() as u64);
                if start > 0 {
                    // Started mid-file: drop the cut first line.
                    let cut = data.find('\n').map_or(data.len(), |i| i + 1);
                    data.drain(..cut);
                }
                if let Some(from) = jumped_from.take() {
                    gap = start.saturating_sub(from);
                }
            }
            offset = Some(chunk.offset);
            let eof = chunk.eof;
            if !data.is_empty() || eof || gap > 0 {
                log(data, gap, false, eof);
            }
            if eof {
                return;
            }
        }
        tokio::time::sleep(RETRY).await;
    }
}
