//! The console's daemon tasks: one connection subscribed to change
//! notifications, one for requests. Both reconnect by themselves, so a
//! daemon restart shows as "disconnected — retrying" and then recovers.

use std::path::PathBuf;
use std::time::Duration;

use ax_shared::api::{RunView, StatusView};
use ax_shared::client::{Client, ClientError};
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use super::state::{Command, DaemonEvent, Event};

const RETRY: Duration = Duration::from_millis(500);
/// How much of a log the detail pane shows.
const TAIL_BYTES: u64 = 4096;

pub fn spawn(socket: PathBuf, events: UnboundedSender<Event>) -> UnboundedSender<Command> {
    let (tx, rx) = unbounded_channel();
    tokio::spawn(subscription(socket.clone(), events.clone()));
    tokio::spawn(requests(socket, rx, events));
    tx
}

fn send(events: &UnboundedSender<Event>, ev: DaemonEvent) {
    let _ = events.send(Event::Daemon(ev));
}

async fn subscription(socket: PathBuf, events: UnboundedSender<Event>) {
    loop {
        match Client::connect(&socket, "ax-tui").await {
            Ok(mut c) => {
                let version = c.server["version"].as_str().unwrap_or("?").to_string();
                match c.call("subscribe", Value::Null).await {
                    Ok(snapshot) => {
                        if let Ok(s) =
                            serde_json::from_value::<StatusView>(snapshot["status"].clone())
                        {
                            send(&events, DaemonEvent::Status(s));
                        }
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
                        Ok((method, params)) if method == "changed" => {
                            let status = serde_json::from_value(params["status"].clone()).ok();
                            let mut runs: Vec<u64> = params["events"]
                                .as_array()
                                .map(|a| a.iter().filter_map(|e| e["run"].as_u64()).collect())
                                .unwrap_or_default();
                            runs.extend(
                                params["progress"]
                                    .as_array()
                                    .map(|a| a.iter().filter_map(Value::as_u64).collect::<Vec<_>>())
                                    .unwrap_or_default(),
                            );
                            send(
                                &events,
                                DaemonEvent::Changed {
                                    status,
                                    runs_changed: runs,
                                },
                            );
                        }
                        // Too slow: resubscribe (a new connection) and refetch.
                        Ok((method, _)) if method == "lagged" => break,
                        Ok(_) => {}
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
    socket: PathBuf,
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
                client = Client::connect(&socket, "ax-tui").await.ok();
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
        Command::Cancel(_) | Command::Retry(_) | Command::Trigger(_) | Command::Pause { .. }
    )
}

fn action_name(c: &Command) -> String {
    match c {
        Command::Cancel(id) => format!("cancel {id}"),
        Command::Retry(id) => format!("retry {id}"),
        Command::Trigger(d) => format!("trigger {d}"),
        Command::Pause { dag, pause } => {
            format!("{} {dag}", if *pause { "pause" } else { "resume" })
        }
        _ => String::new(),
    }
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
            let mut p = json!({"limit": limit});
            if !states.is_empty() {
                p["state"] = json!(states);
            }
            if !filter.is_empty() {
                p["filter"] = json!(filter);
            }
            let runs: Vec<RunView> = serde_json::from_value(c.call("list_runs", p).await?)
                .map_err(|e| ClientError::Protocol(e.to_string()))?;
            send(events, DaemonEvent::Window(runs));
        }
        Command::FetchDetail(id) => {
            let r: RunView = serde_json::from_value(c.call("get_run", json!({"id": id})).await?)
                .map_err(|e| ClientError::Protocol(e.to_string()))?;
            send(events, DaemonEvent::Detail(Box::new(r)));
        }
        Command::FetchLog {
            run,
            attempt,
            offset,
        } => {
            let mut p = json!({"run": run});
            if let Some(a) = attempt {
                p["attempt"] = json!(a);
            }
            if *offset == u64::MAX {
                // The tail for the detail pane: the last few KiB.
                p["tail"] = json!(TAIL_BYTES);
                let chunk = c.call("logs", p).await?;
                let data = chunk["data"].as_str().unwrap_or_default();
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
                p["offset"] = json!(offset);
                let chunk = c.call("logs", p).await?;
                send(
                    events,
                    DaemonEvent::Log {
                        run: *run,
                        offset: chunk["offset"].as_u64().unwrap_or(*offset),
                        data: chunk["data"].as_str().unwrap_or_default().to_string(),
                        eof: chunk["eof"].as_bool().unwrap_or(true),
                    },
                );
            }
        }
        Command::FetchDagRun(id) => {
            let v = c.call("get_dag_run", json!({"id": id})).await?;
            send(events, DaemonEvent::DagRun(v));
        }
        Command::Cancel(id) => {
            c.call("cancel", json!({"id": id})).await?;
            send(
                events,
                DaemonEvent::ActionResult {
                    ok: true,
                    message: format!("cancel {id}: ok"),
                },
            );
        }
        Command::Retry(id) => {
            c.call("retry", json!({"id": id})).await?;
            send(
                events,
                DaemonEvent::ActionResult {
                    ok: true,
                    message: format!("retry {id}: ok"),
                },
            );
        }
        Command::Trigger(dag) => {
            let v = c.call("trigger", json!({"dag": dag})).await?;
            send(
                events,
                DaemonEvent::ActionResult {
                    ok: true,
                    message: format!("trigger {dag}: DAG run {}", v["dag_run"]),
                },
            );
        }
        Command::Pause { dag, pause } => {
            c.call(if *pause { "pause" } else { "resume" }, json!({"dag": dag}))
                .await?;
            send(
                events,
                DaemonEvent::ActionResult {
                    ok: true,
                    message: format!("{} {dag}: ok", if *pause { "pause" } else { "resume" }),
                },
            );
        }
        Command::Quit => {}
    }
    Ok(())
}
