//! Scenarios 3b, 5 and 6 of the suite on one daemon: runs queued behind a
//! paused DAG, then axd's RSS per queued run, the console's window query
//! and frame, the store's size per run, and restarts with them all in the
//! store.

use std::process::{Command, Stdio};
use std::time::Instant;

use ax_protocol::api::{RunView, StatusView};
use serde_json::json;

use crate::axd;
use crate::measure::{Report, fmt3, fmt3f, p50_p99, stats};
use crate::scenarios::submit::{HOLD, queue_behind_paused};

pub(crate) fn run(n: usize, report: &mut Report) -> anyhow::Result<()> {
    let mut d = axd::start(8, &[HOLD])?;
    let mut c = axd::open(&d.socket)?;
    let queued = queue_behind_paused(&d, &mut c, n)?;
    let submit_secs = queued.seconds;
    let per_run = queued.bytes_per_run(n);
    report.add(
        &format!("{n} runs submitted over one connection (streamed, durable)"),
        format!(
            "{:.2} s ({:.0} runs/s)",
            submit_secs,
            n as f64 / submit_secs
        ),
        "target ≤ 1 s per 100k".into(),
        json!({"runs": n, "seconds": submit_secs}),
    );
    report.add(
        &format!("daemon RSS growth per queued run ({n} queued)"),
        format!("{per_run:.0} B"),
        "target ≤ 1 KB".into(),
        json!({"bytes_per_run": per_run, "rss_before_kib": queued.rss_before_kib, "rss_after_kib": queued.rss_after_kib}),
    );
    let db = d.path("state/ax.db");
    let wal = d.path("state/ax.db-wal");
    // the console: the window it asks for, and a frame
    let mut lat = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        c.call("list_runs", json!({"limit": 50}))?;
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let (p50, p99) = p50_p99(&lat);
    report.add(
        &format!("list_runs limit 50 with {n} runs (p50 / p99)"),
        format!("{p50:.2} / {p99:.2} ms"),
        "target ≤ 20 ms".into(),
        json!({"p50_ms": p50, "p99_ms": p99}),
    );
    let ax = axd::sibling("ax")?;
    let mut ls = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        Command::new(&ax)
            .arg("--socket")
            .arg(&d.socket)
            .args(["ls", "--limit", "50"])
            .stdout(Stdio::null())
            .status()?;
        ls.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    report.add(
        &format!("`ax ls --limit 50` process with {n} runs"),
        fmt3f(stats(ls.clone()), " ms"),
        "target ≤ 20 ms".into(),
        json!({"ms": ls}),
    );
    let window: Vec<RunView> = serde_json::from_value(c.call("list_runs", json!({"limit": 80}))?)?;
    let status: StatusView = serde_json::from_value(c.call("status", json!({}))?)?;
    let frame = render_frames(window, status)?;
    report.add(
        &format!("console frame render (window of 80 runs, {n} in the daemon)"),
        fmt3f(stats(frame.clone()), " ms"),
        "target ≤ 5 ms".into(),
        json!({"ms": frame}),
    );
    drop(c);
    // restart with them in the store
    d.stop();
    let size = std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0)
        + std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    report.add(
        &format!("store size per run ({n} runs, incl. indexes and events)"),
        format!("{:.0} B", size as f64 / n as f64),
        "target ≤ 1 KB".into(),
        json!({"bytes": size}),
    );
    let mut restarts = Vec::new();
    for _ in 0..3 {
        restarts.push(d.spawn()?.as_secs_f64() * 1000.0);
        d.stop();
    }
    report.add(
        &format!("restart → first answered request ({n} queued runs in the store)"),
        fmt3(stats(restarts.clone()), " ms"),
        "target ≤ 150 ms at 100k".into(),
        json!({"ms": restarts}),
    );
    Ok(())
}

/// ms per frame of the console, drawn 200 times on a 160×50 test terminal
/// with `window` and `status` as the daemon sent them.
fn render_frames(window: Vec<RunView>, status: StatusView) -> anyhow::Result<Vec<f64>> {
    use ax_clients::console::state::{App, DaemonEvent};
    let mut app = App::new(chrono::Utc::now(), true);
    app.on_daemon(DaemonEvent::Connected {
        version: status.version.clone(),
    });
    app.on_daemon(DaemonEvent::Status(Box::new(status)));
    for _ in 0..180 {
        app.on_tick(chrono::Utc::now());
    }
    app.on_daemon(DaemonEvent::Window(window));
    let mut term = ratatui::Terminal::new(ratatui::backend::TestBackend::new(160, 50))?;
    (0..200)
        .map(|_| {
            let t = Instant::now();
            term.draw(|f| ax_clients::console::ui::render(f, &app))?;
            Ok(t.elapsed().as_secs_f64() * 1000.0)
        })
        .collect()
}
