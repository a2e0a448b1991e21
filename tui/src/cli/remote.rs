//! The `ax` commands that talk to the daemon.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use crate::dagdraw::{
    DagNode, LEGEND, layout, nodes_of_dag, nodes_of_dag_run, render_text, state_ansi, state_mark,
};
use ax_protocol::api::{EventView, RunView, SubmitResult, TriggerOutcome};
use ax_protocol::client::{Client, ClientError, SocketChoice};
use ax_protocol::request::{
    Cancel, CancelDagRun, DagTarget, GetDag, GetDagRun, GetRun, Heartbeat, ListRuns, Metrics,
    Pause, Reload, Resume, Retry, StateFilter, Status, Trigger,
};
use ax_protocol::{Method, codes};
use ax_shared::time::{Timestamp, elapsed_coarse};
use ax_shared::visible::visible;
use serde::Serialize;
use serde_json::{Value, json};

use super::exit;

/// `say!(o, "fmt", args…)`: a human line on stdout (see [`Out`]).
macro_rules! say {
    ($o:expr, $($arg:tt)*) => {
        $o.say(format_args!($($arg)*))
    };
}

/// `tell!(o, "fmt", args…)`: a human line on stderr (see [`Out`]).
macro_rules! tell {
    ($o:expr, $($arg:tt)*) => {
        $o.tell(format_args!($($arg)*))
    };
}

mod follow;
mod submit_args;
pub mod terminal;

pub use follow::{EventsArgs, Since};
pub use submit_args::SubmitArgs;

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
        /// stdout is a terminal: the job's output is shown through
        /// `terminal::TerminalText` instead of byte for byte.
        terminal: bool,
    },
    Dags,
    Dag {
        dag: String,
        run: Option<u64>,
        colour: bool,
    },
    Trigger {
        dag: String,
        force: bool,
    },
    Submit(SubmitArgs),
    Cancel {
        runs: Vec<u64>,
    },
    CancelDagRun {
        dag_run: u64,
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
    Metrics,
    Events(EventsArgs),
    Heartbeat {
        message: Option<String>,
        progress: Option<f64>,
    },
}

/// Where a command writes. Human output goes line by line through
/// [`say!`] (stdout) and [`tell!`] (stderr), which show control characters
/// from the daemon's answers (a DAG name, a heartbeat message, an error)
/// as visible escapes (`\e`, `\x07`, `\n`), so no answer can act on the
/// terminal or forge a line (`ax --help`, "Output", in docs/cli.md). `--json` documents and
/// a job's output (`ax logs`) are written to `out` as they are.
struct Out<'a> {
    out: &'a mut dyn Write,
    err: &'a mut dyn Write,
    json: bool,
}

impl Out<'_> {
    /// One human line on stdout, escaped by `visible`.
    fn say(&mut self, line: std::fmt::Arguments<'_>) {
        let _ = writeln!(self.out, "{}", visible(&line.to_string()));
    }

    /// One human line on stderr, escaped by `visible`.
    fn tell(&mut self, line: std::fmt::Arguments<'_>) {
        let _ = writeln!(self.err, "{}", visible(&line.to_string()));
    }
}

/// Runs one remote command; returns its exit code (docs/cli.md, "ax").
pub async fn run(
    socket: &SocketChoice,
    json: bool,
    cmd: Remote,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> i32 {
    let mut o = Out { out, err, json };
    let mut client = match Client::connect_to(socket, "ax").await {
        Ok(c) => c,
        Err(ClientError::Unreachable { source, .. })
            if source.kind() == std::io::ErrorKind::PermissionDenied && !o.json =>
        {
            for line in super::access::denied(&socket.path) {
                tell!(o, "ax: {line}");
            }
            return exit::UNREACHABLE;
        }
        Err(e) => return fail(&mut o, e),
    };
    match dispatch(&mut client, &mut o, cmd).await {
        Ok(code) => code,
        Err(e) => fail(&mut o, e),
    }
}

fn fail(o: &mut Out<'_>, e: ClientError) -> i32 {
    let code = fail_code(&e);
    if o.json {
        let doc = match &e {
            ClientError::Rpc(r) => json!({"error": {"code": r.kind(), "message": r.message}}),
            ClientError::UnsafeSocket(_) => {
                json!({"error": {"code": "unsafe_socket", "message": e.to_string()}})
            }
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
        tell!(o, "ax: {msg}");
        if matches!(e, ClientError::Unreachable { .. }) {
            tell!(
                o,
                "ax: is axd running? start it with `axd --config PATH`, or pass --socket"
            );
        }
    }
    code
}

/// `--json`: the answer as the daemon sent it (keys sorted).
fn print_json<T: Serialize>(o: &mut Out<'_>, answer: &T) -> i32 {
    let _ = writeln!(o.out, "{}", json!(answer));
    exit::OK
}

fn age(created: Option<Timestamp>) -> String {
    match created {
        Some(t) => elapsed_coarse((chrono::Utc::now().timestamp_millis() - t.millis()) / 1000),
        None => "-".into(),
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
        age(r.created_at),
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

/// Bytes in binary units with one decimal (`1.5 MiB`).
fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

async fn dispatch(c: &mut Client, o: &mut Out<'_>, cmd: Remote) -> Result<i32, ClientError> {
    match cmd {
        Remote::Status => {
            let s = c.request(Status).await?;
            if o.json {
                return Ok(print_json(o, &s));
            }
            say!(
                o,
                "axd {}  up {}s  max_concurrency {} (+{} burst, {} in use)",
                s.version,
                s.uptime_s,
                s.max_concurrency,
                s.burst_extra,
                s.burst_in_use
            );
            say!(o, "pools:");
            for p in &s.pools {
                let queued = p
                    .queued
                    .map(|q| format!(", {q} queued"))
                    .unwrap_or_default();
                match p.cluster_running {
                    Some(all) => say!(
                        o,
                        "  {:<12} {:>4}/{:<4} running in the cluster ({} here){queued}",
                        p.name,
                        all,
                        p.slots,
                        p.running
                    ),
                    None => say!(
                        o,
                        "  {:<12} {:>4}/{:<4} running{queued}",
                        p.name,
                        p.running,
                        p.slots
                    ),
                }
            }
            let cluster_runs = s.cluster.as_ref().and_then(|c| c.runs.as_ref());
            // In a cluster the counts below are the answering node's.
            let here = if cluster_runs.is_some() {
                " (this node)"
            } else {
                ""
            };
            say!(o, "runs{here}:");
            for (state, n) in &s.runs {
                say!(o, "  {state:<10} {n}");
            }
            say!(o, "failed in the last hour{here}: {}", s.failed_last_hour);
            if let Some(runs) = cluster_runs {
                say!(o, "{}", super::nodes::cluster_runs_line(runs));
            }
            let size = |b: Option<u64>| b.map_or_else(|| "not measured yet".into(), human_bytes);
            say!(
                o,
                "store {}  logs {}",
                size(s.store_bytes),
                size(s.log_bytes)
            );
            if let Some(cluster) = &s.cluster {
                for line in super::nodes::lines(&cluster.nodes) {
                    say!(o, "{line}");
                }
            }
            if let Some(c) = &s.config {
                say!(o, "config: {}", c.file.as_deref().unwrap_or("(defaults)"));
                if let Some(store) = &c.store {
                    say!(o, "  store {store}");
                }
                let timeout = c.default_timeout.as_deref().unwrap_or("none");
                say!(
                    o,
                    "  jobs_dir {}  state_dir {}  timezone {}",
                    c.jobs_dir,
                    c.state_dir,
                    c.timezone
                );
                say!(
                    o,
                    "  default_timeout {timeout}  shutdown_grace {}  retry.rate {}/min",
                    c.shutdown_grace,
                    c.retry_per_minute
                );
                say!(
                    o,
                    "  aging every {} cap {}  burst.priority {}  logs max_bytes {} retain {}",
                    c.aging_every,
                    c.aging_cap,
                    c.burst_priority,
                    c.log_max_bytes,
                    c.log_retain
                );
            }
            if let Some(e) = &s.store_error {
                say!(o, "STORE CANNOT WRITE: {e} (new writes are refused)");
            }
            if !s.errors.is_empty() {
                say!(o, "job-file errors:");
                for e in &s.errors {
                    say!(o, "  {e}");
                }
            }
            Ok(exit::OK)
        }
        Remote::Ls { state, dag, limit } => {
            // An answer is cut at a frame's size: ask on from where it
            // stopped until `limit` runs are in.
            let mut runs = Vec::new();
            let mut before = None;
            loop {
                let page = c
                    .request(ListRuns {
                        state: state.clone().map(StateFilter::Text),
                        dag: dag.clone(),
                        limit: Some(u64::from(limit) - runs.len() as u64),
                        before,
                        ..ListRuns::default()
                    })
                    .await?;
                runs.extend(page);
                let next = c
                    .truncated
                    .as_ref()
                    .and_then(|t| t["next"]["before"].as_u64());
                match next {
                    Some(b) if runs.len() < limit as usize => before = Some(b),
                    _ => break,
                }
            }
            if o.json {
                return Ok(print_json(o, &runs));
            }
            say!(
                o,
                "{:>7}  {:<20} {:<16} {:<9} {:>7} {:>5} {:<8} {:>4}  WHY / MESSAGE",
                "ID",
                "DAG",
                "JOB",
                "STATE",
                "PRIO",
                "TRY",
                "POOL",
                "AGE"
            );
            for r in &runs {
                say!(o, "{}", run_line(r));
            }
            Ok(exit::OK)
        }
        Remote::Show { run } => {
            let r = c.request(GetRun { id: run }).await?;
            if o.json {
                return Ok(print_json(o, &r));
            }
            say!(
                o,
                "run {}  {}/{}  (DAG run {})",
                r.id,
                r.dag,
                r.job,
                r.dag_run
            );
            say!(o, "  state       {}", r.state);
            if let Some(why) = &r.why {
                say!(o, "  why         {why}");
            }
            say!(
                o,
                "  priority    {} (effective {})",
                r.priority,
                r.effective_priority
            );
            say!(o, "  pool        {}", r.pool);
            say!(o, "  attempts    {}", attempts_line(&r));
            for (k, t) in [
                ("created", r.created_at),
                ("ready", r.ready_at),
                ("started", r.started_at),
                ("finished", r.finished_at),
                ("next", r.next_at),
            ] {
                if let Some(t) = t {
                    say!(o, "  {k:<11} {t}");
                }
            }
            if let Some(m) = &r.message {
                say!(
                    o,
                    "  message     {m}{}",
                    r.progress
                        .map(|p| format!(" ({:.0}%)", p * 100.0))
                        .unwrap_or_default()
                );
            }
            if let Some(reason) = &r.reason {
                say!(o, "  reason      {reason}");
            }
            say!(o, "attempts:");
            for a in &r.attempts {
                say!(
                    o,
                    "  #{:<2} {} → {}  {}{}{}{}{}",
                    a.n,
                    a.started_at.map_or("-".into(), |t| t.to_string()),
                    a.finished_at.map_or("running".into(), |t| t.to_string()),
                    a.outcome.map_or("", |o| o.as_str()),
                    a.exit_code
                        .map(|c| format!(" exit {c}"))
                        .unwrap_or_default(),
                    a.signal.map(|s| format!(" signal {s}")).unwrap_or_default(),
                    a.node
                        .as_deref()
                        .map(|n| format!(" on {n}"))
                        .unwrap_or_default(),
                    if a.log_lost > 0 {
                        format!("  log incomplete: {} bytes of output lost", a.log_lost)
                    } else {
                        String::new()
                    }
                );
            }
            say!(o, "events:");
            for e in r.events.unwrap_or_default() {
                say!(o, "  {}", event_line(&e));
            }
            Ok(exit::OK)
        }
        Remote::Logs {
            run,
            attempt,
            follow,
            terminal,
        } => follow::logs(c, o, run, attempt, follow, terminal).await,
        Remote::Dags => {
            let dags = c.all_dags().await?;
            if o.json {
                return Ok(print_json(o, &dags));
            }
            // In a cluster, whether the alive nodes hold the same version.
            let cluster = dags.iter().any(|d| d.versions.is_some());
            let nodes_of = |d: &ax_protocol::api::DagView| match (&d.versions, cluster) {
                (_, false) => String::new(),
                (Some(v), true) => format!("{:<16} ", v.summary()),
                (None, true) => format!("{:<16} ", "-"),
            };
            say!(
                o,
                "{:<24} {:<16} {:<22} {:<7} {:<10} {:<24} {}ERROR",
                "DAG",
                "SCHEDULE",
                "NEXT FIRE",
                "PAUSED",
                "LAST RUN",
                "AT",
                if cluster {
                    format!("{:<16} ", "NODES")
                } else {
                    String::new()
                }
            );
            for d in &dags {
                say!(
                    o,
                    "{:<24} {:<16} {:<22} {:<7} {:<10} {:<24} {}{}",
                    truncate(&d.name, 24),
                    d.schedule.as_deref().unwrap_or("-"),
                    d.next_fire.map_or("-".into(), |t| {
                        let t = t.to_string();
                        t[..t.len().min(19)].to_string()
                    }),
                    if d.paused { "yes" } else { "no" },
                    d.last_run_state.map_or("-", |s| s.as_str()),
                    d.last_run_at.map_or("-".into(), |t| t.to_string()),
                    nodes_of(d),
                    d.error.as_ref().map(|e| e.to_string()).unwrap_or_default()
                );
            }
            for line in super::nodes::differences(&dags) {
                say!(o, "{line}");
            }
            Ok(exit::OK)
        }
        Remote::Dag { dag, run, colour } => {
            let (nodes, states): (Vec<DagNode>, Vec<Option<ax_shared::RunState>>) = match run {
                None => {
                    let v = c.request(GetDag { name: dag.clone() }).await?;
                    (nodes_of_dag(&v), vec![None; v.jobs.len()])
                }
                Some(id) => {
                    let v = c.request(GetDagRun { id }).await?;
                    if v.dag != dag {
                        tell!(
                            o,
                            "ax: DAG run {id} belongs to DAG {}, not {dag:?}",
                            json!(v.dag)
                        );
                        return Ok(exit::NOT_FOUND);
                    }
                    nodes_of_dag_run(&v)
                }
            };
            let grid = layout(&nodes, &|i| state_mark(states[i]));
            if o.json {
                let _ = writeln!(
                    o.out,
                    "{}",
                    json!({"dag": dag, "run": run, "lines": grid.lines()})
                );
                return Ok(exit::OK);
            }
            let colour_of = |i: usize| state_ansi(states[i]);
            if colour && run.is_some() {
                // The colours are ax's own escapes around job ids, which
                // job files and `submit` hold to `[A-Za-z0-9_.-]`.
                let _ = write!(o.out, "{}", render_text(&grid, Some(&colour_of)));
            } else {
                for line in render_text(&grid, None).lines() {
                    say!(o, "{line}");
                }
            }
            if run.is_some() {
                say!(o, "");
                say!(o, "{LEGEND}");
            }
            Ok(exit::OK)
        }
        Remote::Trigger { dag, force } => {
            let r = c
                .request(Trigger {
                    dag: dag.clone(),
                    force: force.then_some(true),
                })
                .await?;
            if !o.json {
                // A paused DAG's new run waits for `ax resume`.
                let paused = !r.runs.is_empty()
                    && c.request(GetDag { name: dag.clone() })
                        .await
                        .is_ok_and(|d| d.paused);
                let held = if paused {
                    format!(" (held: {dag} is paused; `ax resume {dag}` lets it run)")
                } else {
                    String::new()
                };
                tell!(o, "ax: {}{held}", trigger_line(&r));
                if r.runs.is_empty() {
                    return Ok(exit::OK);
                }
            }
            Ok(print_submit(o, r))
        }
        Remote::Submit(args) => {
            let r = c.request(args.to_params()?).await?;
            Ok(print_submit(o, r))
        }
        Remote::Cancel { runs } | Remote::Retry { runs } if runs.is_empty() => {
            tell!(o, "ax: give at least one run id");
            Ok(exit::USAGE)
        }
        Remote::Cancel { runs } => {
            each(c, o, "cancelled", runs, |id| Cancel {
                id: Some(id),
                ids: None,
            })
            .await
        }
        Remote::CancelDagRun { dag_run } => {
            c.request(CancelDagRun { id: dag_run }).await?;
            if o.json {
                let _ = writeln!(o.out, "{}", json!({"dag_run": dag_run, "ok": true}));
            } else {
                say!(o, "cancelled DAG run {dag_run}");
            }
            Ok(exit::OK)
        }
        Remote::Retry { runs } => each(c, o, "retried", runs, |id| Retry { id }).await,
        Remote::Pause { dag, all } | Remote::Resume { dag, all } if dag.is_none() && !all => {
            tell!(o, "ax: name a DAG or give --all");
            Ok(exit::USAGE)
        }
        Remote::Pause { dag, all } => simple(c, o, Pause(DagTarget { dag, all })).await,
        Remote::Resume { dag, all } => simple(c, o, Resume(DagTarget { dag, all })).await,
        Remote::Metrics => {
            let answer = c.request(Metrics).await?;
            if o.json {
                return Ok(print_json(o, &answer));
            }
            for line in answer.text.lines() {
                say!(o, "{line}");
            }
            Ok(exit::OK)
        }
        Remote::Reload => {
            let answer = c.request(Reload).await?;
            if o.json {
                return Ok(print_json(o, &answer));
            }
            say!(
                o,
                "reloaded: {} DAGs, {} with errors",
                answer.dags,
                answer.errors
            );
            if !answer.not_applied.is_empty() {
                tell!(
                    o,
                    "ax: changed but not applied until axd restarts: {}",
                    answer.not_applied.join(", ")
                );
            }
            Ok(exit::OK)
        }
        Remote::Heartbeat { message, progress } => {
            let Some(run) = std::env::var("AX_RUN_ID")
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
            else {
                tell!(
                    o,
                    "ax heartbeat: $AX_RUN_ID is not set; run this from inside an ax job"
                );
                return Ok(exit::USAGE);
            };
            let beat = Heartbeat {
                run,
                message,
                progress,
            };
            simple(c, o, beat).await
        }
        Remote::Events(args) => follow::events(c, o, args).await,
    }
}

pub fn event_line(e: &EventView) -> String {
    let subject = match e.run {
        Some(r) => format!("run {r}"),
        // About axd or a DAG (a pause, a reload): the reason says which.
        None if e.dag_run == 0 => "-".to_string(),
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

/// What a trigger did, in words (`ax trigger` prints it on stderr), with
/// the way around a queue or a skip.
/// `3 of at most 4`; attempts that used no retry (interrupted by a stop
/// or a dead node, preempted) are set apart, as the limit does not count
/// them: `2 (1 of at most 1 counted; 1 interrupted or preempted)`.
fn attempts_line(r: &RunView) -> String {
    let free = r
        .attempts
        .iter()
        .filter(|a| {
            matches!(
                a.outcome,
                Some(ax_shared::Outcome::Interrupted | ax_shared::Outcome::Preempted)
            )
        })
        .count();
    let all = r.attempts.len();
    let most = r.retries + 1;
    if free == 0 {
        format!("{all} of at most {most}")
    } else {
        format!(
            "{all} ({} of at most {most} counted; {free} interrupted or preempted)",
            all - free
        )
    }
}

pub fn trigger_line(r: &SubmitResult) -> String {
    let summary = r.trigger_summary();
    match r.trigger {
        Some(TriggerOutcome::Queued { .. } | TriggerOutcome::Skipped { .. }) => {
            format!("{summary}; use --force to start one now")
        }
        _ => summary,
    }
}

fn print_submit(o: &mut Out<'_>, r: SubmitResult) -> i32 {
    if o.json {
        return print_json(o, &r);
    }
    let ids: Vec<String> = r.runs.iter().map(u64::to_string).collect();
    if r.runs.len() == 1 {
        say!(o, "{}", ids[0]);
    } else {
        say!(o, "{}", r.dag_run);
    }
    if r.deduplicated {
        tell!(
            o,
            "ax: deduplicated: an unfinished run with this key exists (DAG run {}, runs {})",
            r.dag_run,
            ids.join(" ")
        );
    }
    exit::OK
}

/// A request whose answer is printed only with `--json`.
async fn simple<M: Method>(c: &mut Client, o: &mut Out<'_>, params: M) -> Result<i32, ClientError> {
    let answer = c.request(params).await?;
    if o.json {
        print_json(o, &answer);
    }
    Ok(exit::OK)
}

/// One request per run; the exit code is the worst of them.
async fn each<M: Method>(
    c: &mut Client,
    o: &mut Out<'_>,
    past: &str,
    runs: Vec<u64>,
    params: impl Fn(u64) -> M,
) -> Result<i32, ClientError> {
    let mut worst = exit::OK;
    let mut results = Vec::new();
    for id in runs {
        match c.request(params(id)).await {
            Ok(_) => {
                results.push(json!({"id": id, "ok": true}));
                if !o.json {
                    say!(o, "{past} {id}");
                }
            }
            Err(e) => {
                let code = fail_code(&e);
                worst = worst.max(code);
                results.push(json!({"id": id, "ok": false, "error": e.to_string()}));
                if !o.json {
                    let message = match &e {
                        ClientError::Rpc(r) => r.message.clone(),
                        other => other.to_string(),
                    };
                    // Named once: axd's message may already begin with it.
                    if message.starts_with(&format!("run {id} ")) {
                        tell!(o, "ax: {message}");
                    } else {
                        tell!(o, "ax: run {id}: {message}");
                    }
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
        ClientError::Unreachable { .. } | ClientError::UnsafeSocket(_) => exit::UNREACHABLE,
        ClientError::Rpc(r) if r.kind() == codes::NOT_FOUND => exit::NOT_FOUND,
        // The daemon refused the request's parts: the command line was wrong.
        ClientError::Rpc(r) if r.kind() == codes::INVALID_PARAMS => exit::USAGE,
        // A broken axd.toml is a usage error of the operator's.
        ClientError::Rpc(r) if r.kind() == codes::INVALID_CONFIG => exit::USAGE,
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

#[cfg(test)]
mod tests {
    use super::{attempts_line, human_bytes};
    use ax_protocol::api::{AttemptView, RunView};
    use ax_shared::Outcome;

    #[test]
    fn attempts_that_used_no_retry_are_set_apart() {
        let attempt = |outcome| AttemptView {
            outcome: Some(outcome),
            ..AttemptView::default()
        };
        let mut r = RunView {
            retries: 0,
            attempts: vec![attempt(Outcome::Failed)],
            ..RunView::default()
        };
        assert_eq!(attempts_line(&r), "1 of at most 1");
        r.attempts.insert(0, attempt(Outcome::Interrupted));
        assert_eq!(
            attempts_line(&r),
            "2 (1 of at most 1 counted; 1 interrupted or preempted)"
        );
    }

    #[test]
    fn sizes_print_in_binary_units() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }
}
