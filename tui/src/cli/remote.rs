//! The `ax` commands that talk to the daemon.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ax_shared::api::{DagView, EventView, LogChunk, RunView, StatusView, SubmitResult};
use ax_shared::client::{Client, ClientError};
use ax_shared::dagdraw::{
    DagNode, LEGEND, layout, nodes_of_dag_run, render_text, state_ansi, state_mark,
};
use ax_shared::protocol::codes;
use serde_json::{Value, json};

use super::exit;

/// Options of `ax submit`.
#[derive(Debug, Default, Clone)]
pub struct SubmitOpts {
    pub name: Option<String>,
    pub priority: Option<u8>,
    pub pool: Option<String>,
    pub timeout: Option<String>,
    pub retries: Option<u32>,
    pub heartbeat: Option<String>,
    pub after: Vec<u64>,
    pub unique: Option<String>,
    pub unique_for: Option<String>,
    pub file: Option<PathBuf>,
    pub command: Vec<String>,
}

#[derive(Debug, Clone)]
pub enum Remote {
    Status,
    Ls {
        state: Option<String>,
        dag: Option<String>,
        limit: u32,
    },
    Show {
        run: u64,
    },
    Logs {
        run: u64,
        attempt: Option<u32>,
        follow: bool,
    },
    Dags,
    Dag {
        dag: String,
        run: Option<u64>,
        colour: bool,
    },
    Trigger {
        dag: String,
    },
    Submit(SubmitOpts),
    Cancel {
        runs: Vec<u64>,
    },
    Retry {
        runs: Vec<u64>,
    },
    Pause {
        dag: Option<String>,
        all: bool,
    },
    Resume {
        dag: Option<String>,
        all: bool,
    },
    Reload,
    Events {
        follow: bool,
    },
    Heartbeat {
        message: Option<String>,
        progress: Option<f64>,
    },
}

struct Out<'a> {
    out: &'a mut dyn Write,
    err: &'a mut dyn Write,
    json: bool,
}

/// Runs one remote command; returns the exit code of SPEC §6.
pub async fn run(
    socket: &Path,
    json: bool,
    cmd: Remote,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let mut o = Out { out, err, json };
    let mut client = match Client::connect(socket, "ax").await {
        Ok(c) => c,
        Err(e) => return fail(&mut o, e),
    };
    match dispatch(&mut client, &mut o, cmd).await {
        Ok(code) => code,
        Err(e) => fail(&mut o, e),
    }
}

fn fail(o: &mut Out<'_>, e: ClientError) -> i32 {
    let code = match &e {
        ClientError::Unreachable { .. } => exit::UNREACHABLE,
        ClientError::Rpc(r) if r.kind() == codes::NOT_FOUND => exit::NOT_FOUND,
        ClientError::Rpc(r) if r.kind() == codes::INVALID_PARAMS => exit::FAILED,
        _ => exit::FAILED,
    };
    if o.json {
        let doc = match &e {
            ClientError::Rpc(r) => json!({"error": {"code": r.kind(), "message": r.message}}),
            other => {
                json!({"error": {"code": if code == exit::UNREACHABLE { "unreachable" } else { "failed" }, "message": other.to_string()}})
            }
        };
        let _ = writeln!(o.err, "{doc}");
    } else {
        let msg = match &e {
            ClientError::Rpc(r) => r.message.clone(),
            other => other.to_string(),
        };
        let _ = writeln!(o.err, "ax: {msg}");
        if code == exit::UNREACHABLE {
            let _ = writeln!(
                o.err,
                "ax: is axd running? start it with `axd --config PATH`, or pass --socket"
            );
        }
    }
    code
}

fn parse<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, ClientError> {
    serde_json::from_value(v).map_err(|e| ClientError::Protocol(format!("unexpected answer: {e}")))
}

fn age(created: &Option<String>) -> String {
    let Some(t) = created
        .as_deref()
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
    else {
        return "-".into();
    };
    let secs = (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
        .num_seconds()
        .max(0);
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m", secs / 60),
        3600..=86399 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86400),
    }
}

pub fn run_line(r: &RunView) -> String {
    let detail = r
        .why
        .clone()
        .or_else(|| {
            r.message.clone().map(|m| match r.progress {
                Some(p) => format!("{:.0}% {m}", p * 100.0),
                None => m,
            })
        })
        .or_else(|| r.reason.clone())
        .unwrap_or_default();
    format!(
        "{:>7}  {:<20} {:<16} {:<9} {:>3}/{:<3} {:>2}/{:<2} {:<8} {:>4}  {}",
        r.id,
        truncate(&r.dag, 20),
        truncate(&r.job, 16),
        r.state,
        r.priority,
        r.effective_priority,
        r.attempts.len(),
        r.retries + 1,
        truncate(&r.pool, 8),
        age(&r.created_at),
        detail
    )
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

async fn dispatch(c: &mut Client, o: &mut Out<'_>, cmd: Remote) -> Result<i32, ClientError> {
    match cmd {
        Remote::Status => {
            let v = c.call("status", Value::Null).await?;
            if o.json {
                let _ = writeln!(o.out, "{v}");
                return Ok(exit::OK);
            }
            let s: StatusView = parse(v)?;
            let _ = writeln!(
                o.out,
                "axd {}  up {}s  max_concurrency {} (+{} burst, {} in use)",
                s.version, s.uptime_s, s.max_concurrency, s.burst_extra, s.burst_in_use
            );
            let _ = writeln!(o.out, "pools:");
            for p in &s.pools {
                let _ = writeln!(
                    o.out,
                    "  {:<12} {:>4}/{:<4} running",
                    p.name, p.running, p.slots
                );
            }
            let _ = writeln!(o.out, "runs:");
            for (state, n) in &s.runs {
                let _ = writeln!(o.out, "  {state:<10} {n}");
            }
            if let Some(e) = &s.store_error {
                let _ = writeln!(o.out, "STORE CANNOT WRITE: {e} (new writes are refused)");
            }
            if !s.errors.is_empty() {
                let _ = writeln!(o.out, "job-file errors:");
                for e in &s.errors {
                    let _ = writeln!(o.out, "  {e}");
                }
            }
            Ok(exit::OK)
        }
        Remote::Ls { state, dag, limit } => {
            let mut p = json!({"limit": limit});
            if let Some(s) = state {
                p["state"] = json!(s);
            }
            if let Some(d) = dag {
                p["dag"] = json!(d);
            }
            let v = c.call("list_runs", p).await?;
            if o.json {
                let _ = writeln!(o.out, "{v}");
                return Ok(exit::OK);
            }
            let runs: Vec<RunView> = parse(v)?;
            let _ = writeln!(
                o.out,
                "{:>7}  {:<20} {:<16} {:<9} {:>7} {:>5} {:<8} {:>4}  WHY / MESSAGE",
                "ID", "DAG", "JOB", "STATE", "PRIO", "TRY", "POOL", "AGE"
            );
            for r in &runs {
                let _ = writeln!(o.out, "{}", run_line(r));
            }
            Ok(exit::OK)
        }
        Remote::Show { run } => {
            let v = c.call("get_run", json!({"id": run})).await?;
            if o.json {
                let _ = writeln!(o.out, "{v}");
                return Ok(exit::OK);
            }
            let r: RunView = parse(v)?;
            let w = &mut o.out;
            let _ = writeln!(
                w,
                "run {}  {}/{}  (DAG run {})",
                r.id, r.dag, r.job, r.dag_run
            );
            let _ = writeln!(w, "  state       {}", r.state);
            if let Some(why) = &r.why {
                let _ = writeln!(w, "  why         {why}");
            }
            let _ = writeln!(
                w,
                "  priority    {} (effective {})",
                r.priority, r.effective_priority
            );
            let _ = writeln!(w, "  pool        {}", r.pool);
            let _ = writeln!(
                w,
                "  attempts    {} of at most {}",
                r.attempts.len(),
                r.retries + 1
            );
            for (k, t) in [
                ("created", &r.created_at),
                ("ready", &r.ready_at),
                ("started", &r.started_at),
                ("finished", &r.finished_at),
                ("next", &r.next_at),
            ] {
                if let Some(t) = t {
                    let _ = writeln!(w, "  {k:<11} {t}");
                }
            }
            if let Some(m) = &r.message {
                let _ = writeln!(
                    w,
                    "  message     {m}{}",
                    r.progress
                        .map(|p| format!(" ({:.0}%)", p * 100.0))
                        .unwrap_or_default()
                );
            }
            if let Some(reason) = &r.reason {
                let _ = writeln!(w, "  reason      {reason}");
            }
            let _ = writeln!(w, "attempts:");
            for a in &r.attempts {
                let _ = writeln!(
                    w,
                    "  #{:<2} {} → {}  {}{}{}",
                    a.n,
                    a.started_at.as_deref().unwrap_or("-"),
                    a.finished_at.as_deref().unwrap_or("running"),
                    a.outcome.as_deref().unwrap_or(""),
                    a.exit_code
                        .map(|c| format!(" exit {c}"))
                        .unwrap_or_default(),
                    a.signal.map(|s| format!(" signal {s}")).unwrap_or_default()
                );
            }
            let _ = writeln!(w, "events:");
            for e in r.events.unwrap_or_default() {
                let _ = writeln!(w, "  {}", event_line(&e));
            }
            Ok(exit::OK)
        }
        Remote::Logs {
            run,
            attempt,
            follow,
        } => {
            let mut offset = 0u64;
            loop {
                let mut p = json!({"run": run, "offset": offset, "follow": follow});
                if let Some(a) = attempt {
                    p["attempt"] = json!(a);
                }
                let chunk: LogChunk = parse(c.call("logs", p).await?)?;
                if o.json {
                    let _ = writeln!(o.out, "{}", json!(chunk));
                } else {
                    let _ = o.out.write_all(chunk.data.as_bytes());
                    let _ = o.out.flush();
                }
                offset = chunk.offset;
                if !follow || chunk.eof {
                    return Ok(exit::OK);
                }
            }
        }
        Remote::Dags => {
            let v = c.call("list_dags", Value::Null).await?;
            if o.json {
                let _ = writeln!(o.out, "{v}");
                return Ok(exit::OK);
            }
            let dags: Vec<DagView> = parse(v)?;
            let _ = writeln!(
                o.out,
                "{:<24} {:<16} {:<22} {:<7} {:<10} ERROR",
                "DAG", "SCHEDULE", "NEXT FIRE", "PAUSED", "LAST RUN"
            );
            for d in &dags {
                let _ = writeln!(
                    o.out,
                    "{:<24} {:<16} {:<22} {:<7} {:<10} {}",
                    truncate(&d.name, 24),
                    d.schedule.as_deref().unwrap_or("-"),
                    d.next_fire
                        .as_deref()
                        .map(|t| &t[..t.len().min(19)])
                        .unwrap_or("-"),
                    if d.paused { "yes" } else { "no" },
                    d.last_run_state.as_deref().unwrap_or("-"),
                    d.error.as_ref().map(|e| e.to_string()).unwrap_or_default()
                );
            }
            Ok(exit::OK)
        }
        Remote::Dag { dag, run, colour } => {
            let (nodes, states): (Vec<DagNode>, Vec<Option<String>>) = match run {
                None => {
                    let v: DagView = parse(c.call("get_dag", json!({"name": dag})).await?)?;
                    let nodes = v
                        .jobs
                        .iter()
                        .map(|j| DagNode {
                            id: j.clone(),
                            deps: v.deps.get(j).cloned().unwrap_or_default(),
                        })
                        .collect();
                    (nodes, vec![None; v.jobs.len()])
                }
                Some(id) => {
                    let v = c.call("get_dag_run", json!({"id": id})).await?;
                    if v["dag"] != dag.as_str() {
                        let _ = writeln!(
                            o.err,
                            "ax: DAG run {id} belongs to DAG {}, not {dag:?}",
                            v["dag"]
                        );
                        return Ok(exit::NOT_FOUND);
                    }
                    nodes_of_dag_run(&v)
                }
            };
            let grid = layout(&nodes, &|i| state_mark(states[i].as_deref()));
            if o.json {
                let _ = writeln!(
                    o.out,
                    "{}",
                    json!({"dag": dag, "run": run, "lines": grid.lines()})
                );
                return Ok(exit::OK);
            }
            let colour_of = |i: usize| state_ansi(states[i].as_deref());
            let text = render_text(
                &grid,
                if colour && run.is_some() {
                    Some(&colour_of)
                } else {
                    None
                },
            );
            let _ = write!(o.out, "{text}");
            if run.is_some() {
                let _ = writeln!(o.out, "\n{LEGEND}");
            }
            Ok(exit::OK)
        }
        Remote::Trigger { dag } => {
            let v = c.call("trigger", json!({"dag": dag})).await?;
            print_submit(o, v)
        }
        Remote::Submit(opts) => {
            let mut p = json!({});
            if let Some(f) = &opts.file {
                let text = std::fs::read_to_string(f).map_err(|e| {
                    ClientError::Protocol(format!("cannot read {}: {e}", f.display()))
                })?;
                let name = opts
                    .name
                    .clone()
                    .or_else(|| f.file_stem().and_then(|s| s.to_str()).map(str::to_string))
                    .unwrap_or_else(|| "adhoc".into());
                p = json!({"toml": text, "name": name, "file": f.display().to_string()});
            } else if opts.command.len() == 1 {
                p["command"] = json!(opts.command[0]);
            } else {
                p["argv"] = json!(opts.command);
            }
            let set = |p: &mut Value, k: &str, v: Value| {
                if !v.is_null() {
                    p[k] = v;
                }
            };
            if opts.file.is_none() {
                set(&mut p, "name", json!(opts.name));
            }
            set(&mut p, "priority", json!(opts.priority));
            set(&mut p, "pool", json!(opts.pool));
            set(&mut p, "timeout", json!(opts.timeout));
            set(&mut p, "retries", json!(opts.retries));
            set(&mut p, "heartbeat", json!(opts.heartbeat));
            set(&mut p, "unique", json!(opts.unique));
            set(&mut p, "unique_for", json!(opts.unique_for));
            if !opts.after.is_empty() {
                p["after"] = json!(opts.after);
            }
            let v = c.call("submit", p).await?;
            print_submit(o, v)
        }
        Remote::Cancel { runs } | Remote::Retry { runs } if runs.is_empty() => {
            let _ = writeln!(o.err, "ax: give at least one run id");
            Ok(exit::USAGE)
        }
        Remote::Cancel { runs } => each(c, o, "cancel", "cancelled", runs).await,
        Remote::Retry { runs } => each(c, o, "retry", "retried", runs).await,
        Remote::Pause { dag, all } | Remote::Resume { dag, all } if dag.is_none() && !all => {
            let _ = writeln!(o.err, "ax: name a DAG or give --all");
            Ok(exit::USAGE)
        }
        Remote::Pause { dag, all } => {
            simple(
                c,
                o,
                "pause",
                if all {
                    json!({"all": true})
                } else {
                    json!({"dag": dag})
                },
            )
            .await
        }
        Remote::Resume { dag, all } => {
            simple(
                c,
                o,
                "resume",
                if all {
                    json!({"all": true})
                } else {
                    json!({"dag": dag})
                },
            )
            .await
        }
        Remote::Reload => simple(c, o, "reload", Value::Null).await,
        Remote::Heartbeat { message, progress } => {
            let Some(run) = std::env::var("AX_RUN_ID")
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
            else {
                let _ = writeln!(
                    o.err,
                    "ax heartbeat: $AX_RUN_ID is not set; run this from inside an ax job"
                );
                return Ok(exit::USAGE);
            };
            simple(
                c,
                o,
                "heartbeat",
                json!({"run": run, "message": message, "progress": progress}),
            )
            .await
        }
        Remote::Events { follow } => {
            let mut after = 0i64;
            if follow {
                // Subscribe first so nothing falls between the backlog and the stream.
                c.call("subscribe", Value::Null).await?;
            }
            loop {
                let v = c
                    .call("events", json!({"after": after, "limit": 5000}))
                    .await?;
                let events: Vec<EventView> = parse(v)?;
                if events.is_empty() {
                    break;
                }
                after = events.last().map(|e| e.seq).unwrap_or(after);
                for e in &events {
                    print_event(o, e);
                }
            }
            if !follow {
                return Ok(exit::OK);
            }
            loop {
                let (method, params) = c.next_notification().await?;
                if method == "lagged" {
                    c.call("subscribe", Value::Null).await?;
                    let v = c
                        .call("events", json!({"after": after, "limit": 5000}))
                        .await?;
                    for e in parse::<Vec<EventView>>(v)? {
                        after = e.seq;
                        print_event(o, &e);
                    }
                    continue;
                }
                for e in params["events"].as_array().cloned().unwrap_or_default() {
                    if let Ok(ev) = serde_json::from_value::<EventView>(e)
                        && ev.seq > after
                    {
                        after = ev.seq;
                        print_event(o, &ev);
                    }
                }
            }
        }
    }
}

fn print_event(o: &mut Out<'_>, e: &EventView) {
    if o.json {
        let _ = writeln!(o.out, "{}", json!(e));
    } else {
        let _ = writeln!(o.out, "{}", event_line(e));
    }
    let _ = o.out.flush();
}

pub fn event_line(e: &EventView) -> String {
    let subject = match e.run {
        Some(r) => format!("run {r}"),
        None => format!("dag run {}", e.dag_run),
    };
    let change = match (&e.from, &e.to) {
        (Some(f), Some(t)) if f != t => format!("{f} → {t}"),
        (None, Some(t)) => format!("→ {t}"),
        _ => String::new(),
    };
    format!(
        "{:>6} {} {subject:<12} {change:<22} {} [{}]",
        e.seq, e.time, e.reason, e.actor
    )
}

fn print_submit(o: &mut Out<'_>, v: Value) -> Result<i32, ClientError> {
    if o.json {
        let _ = writeln!(o.out, "{v}");
        return Ok(exit::OK);
    }
    let r: SubmitResult = parse(v)?;
    let ids: Vec<String> = r.runs.iter().map(u64::to_string).collect();
    if r.runs.len() == 1 {
        let _ = writeln!(o.out, "{}", ids[0]);
    } else {
        let _ = writeln!(o.out, "{}", r.dag_run);
    }
    if r.deduplicated {
        let _ = writeln!(
            o.err,
            "ax: deduplicated: an unfinished run with this key exists (DAG run {}, runs {})",
            r.dag_run,
            ids.join(" ")
        );
    }
    Ok(exit::OK)
}

async fn simple(
    c: &mut Client,
    o: &mut Out<'_>,
    method: &str,
    params: Value,
) -> Result<i32, ClientError> {
    let v = c.call(method, params).await?;
    if o.json {
        let _ = writeln!(o.out, "{v}");
    }
    Ok(exit::OK)
}

async fn each(
    c: &mut Client,
    o: &mut Out<'_>,
    method: &str,
    past: &str,
    runs: Vec<u64>,
) -> Result<i32, ClientError> {
    let mut worst = exit::OK;
    let mut results = Vec::new();
    for id in runs {
        match c.call(method, json!({"id": id})).await {
            Ok(_) => {
                results.push(json!({"id": id, "ok": true}));
                if !o.json {
                    let _ = writeln!(o.out, "{past} {id}");
                }
            }
            Err(e) => {
                let code = fail_code(&e);
                worst = worst.max(code);
                results.push(json!({"id": id, "ok": false, "error": e.to_string()}));
                if !o.json {
                    let _ = writeln!(
                        o.err,
                        "ax: run {id}: {}",
                        match &e {
                            ClientError::Rpc(r) => r.message.clone(),
                            other => other.to_string(),
                        }
                    );
                }
            }
        }
    }
    if o.json {
        let _ = writeln!(o.out, "{}", Value::Array(results));
    }
    Ok(worst)
}

fn fail_code(e: &ClientError) -> i32 {
    match e {
        ClientError::Unreachable { .. } => exit::UNREACHABLE,
        ClientError::Rpc(r) if r.kind() == codes::NOT_FOUND => exit::NOT_FOUND,
        _ => exit::FAILED,
    }
}

/// Waits until the socket answers (for scripts starting axd).
pub async fn wait_ready(socket: &Path, timeout: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < deadline {
        if Client::connect(socket, "ax").await.is_ok() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}
