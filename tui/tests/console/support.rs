//! Shared fixtures of the console tests: a fixed clock, a status, a
//! window of runs with a flaky one selected, and drawing helpers.

use ax_clients::console::state::{App, DaemonEvent};
use ax_clients::console::ui;
use ax_protocol::api::{AttemptView, PoolView, RunView, StatusView};
use ax_shared::time::Timestamp;
use ax_shared::{Outcome, RunState};
use chrono::{DateTime, Utc};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

pub(crate) fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-29T12:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

pub(crate) fn t(s: &str) -> Option<Timestamp> {
    Some(Timestamp::parse(&format!("2026-11-29T{s}.000Z")).unwrap())
}

pub(crate) fn run(id: u64, dag: &str, job: &str, state: &str) -> RunView {
    RunView {
        id,
        dag: dag.into(),
        job: job.into(),
        dag_run: 1,
        state: RunState::parse(state).unwrap(),
        priority: 50,
        effective_priority: 50,
        pool: "default".into(),
        retries: 0,
        created_at: t("11:58:00"),
        ..RunView::default()
    }
}

/// A run with 3 attempts (failed, timed out, failed) and a pending retry.
pub(crate) fn flaky() -> RunView {
    let a = |n, s: &str, e: &str, outcome: &str| AttemptView {
        n,
        started_at: t(s),
        finished_at: t(e),
        outcome: Outcome::parse(outcome),
        exit_code: if outcome == "failed" { Some(1) } else { None },
        signal: None,
        node: None,
        log_lost: 0,
    };
    RunView {
        attempts: vec![
            a(1, "11:59:00", "11:59:10", "failed"),
            a(2, "11:59:12", "11:59:22", "timed_out"),
            a(3, "11:59:26", "11:59:40", "failed"),
        ],
        retries: 3,
        next_at: t("12:00:08"),
        why: Some("backoff until 12:00:08 UTC".into()),
        reason: Some("attempt 3 failed (exit 1); retry 3 of 3".into()),
        ..run(7, "etl-nightly", "transform", "delayed")
    }
}

pub(crate) fn status() -> StatusView {
    StatusView {
        version: "0.1.0".into(),
        uptime_s: 3725,
        pools: vec![
            PoolView {
                name: "default".into(),
                slots: 8,
                running: 3,
                queued: Some(0),
                cluster_running: None,
            },
            PoolView {
                name: "io".into(),
                slots: 40,
                running: 40,
                queued: Some(12),
                cluster_running: None,
            },
        ],
        max_concurrency: 8,
        burst_in_use: 1,
        burst_extra: 3,
        runs: [
            ("waiting", 4),
            ("delayed", 1),
            ("ready", 2),
            ("running", 3),
            ("success", 120),
            ("failed", 2),
            ("timed_out", 0),
            ("cancelled", 1),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect(),
        failed_last_hour: 2,
        errors: vec![],
        jobs_folder: Default::default(),
        store_error: None,
        store_bytes: None,
        log_bytes: None,
        config: None,
        cluster: None,
    }
}

pub(crate) fn app() -> App {
    let mut app = App::new(now(), false);
    app.set_time_zone(Some(chrono::FixedOffset::east_opt(0).unwrap()));
    app.on_daemon(DaemonEvent::Connected {
        version: "0.1.0".into(),
    });
    app.on_daemon(DaemonEvent::Status(Box::new(status())));
    for i in 0..30u64 {
        let mut s = status();
        s.runs.insert("waiting".into(), (i * 7) % 13);
        s.runs.insert("running".into(), i % 5);
        app.on_daemon(DaemonEvent::Status(Box::new(s)));
        app.on_tick(now());
    }
    app.on_daemon(DaemonEvent::Status(Box::new(status())));
    let mut runs = vec![flaky()];
    let mut r = run(6, "etl-nightly", "extract", "success");
    r.started_at = t("11:58:00");
    r.finished_at = t("11:58:42");
    r.attempts = vec![AttemptView {
        n: 1,
        started_at: t("11:58:00"),
        finished_at: t("11:58:42"),
        outcome: Some(Outcome::Success),
        exit_code: Some(0),
        signal: None,
        node: None,
        log_lost: 0,
    }];
    runs.push(r);
    let mut w = run(5, "weekly-report", "email", "waiting");
    w.why = Some("waiting for calc_report (running)".into());
    runs.push(w);
    let mut q = run(4, "weekly-report", "calc_report", "ready");
    q.priority = 40;
    q.effective_priority = 43;
    q.why = Some("pool io full (40/40)".into());
    runs.push(q);
    let mut b = run(3, "backfill", "chunks", "running");
    b.started_at = t("11:59:30");
    b.message = Some("chunk 42 of 100".into());
    b.progress = Some(0.42);
    runs.push(b);
    app.on_daemon(DaemonEvent::Window(runs));
    app.on_daemon(DaemonEvent::Detail(Box::new(flaky())));
    app.on_daemon(DaemonEvent::LogTail {
        run: 7,
        text: "transform attempt 3\nupstream API returned 503\n".into(),
    });
    app
}

pub(crate) fn draw(app: &App, w: u16, h: u16) -> Terminal<TestBackend> {
    let mut terminal = Terminal::new(TestBackend::new(w, h)).unwrap();
    terminal.draw(|f| ui::render(f, app)).unwrap();
    terminal
}

/// The terminal's text, row by row.
pub(crate) fn screen_text(terminal: &Terminal<TestBackend>) -> String {
    let buffer = terminal.backend().buffer();
    let width = buffer.area.width as usize;
    buffer
        .content
        .chunks(width)
        .map(|row| row.iter().map(|c| c.symbol()).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}
