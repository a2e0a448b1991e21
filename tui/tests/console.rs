//! The console, rendered with ratatui's TestBackend (insta snapshots), and
//! `update` for every action.

use ax_shared::api::{AttemptView, DagRunView, PoolView, RunView, StatusView};
use ax_shared::time::Timestamp;
use ax_shared::{Outcome, RunState};
use ax_tui::console::state::{Action, App, Command, Conn, DaemonEvent, Mode, Pane};
use ax_tui::console::ui;
use chrono::{DateTime, Utc};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use serde_json::json;

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-29T12:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn t(s: &str) -> Option<Timestamp> {
    Some(Timestamp::parse(&format!("2026-11-29T{s}.000Z")).unwrap())
}

fn run(id: u64, dag: &str, job: &str, state: &str) -> RunView {
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
fn flaky() -> RunView {
    let a = |n, s: &str, e: &str, outcome: &str| AttemptView {
        n,
        started_at: t(s),
        finished_at: t(e),
        outcome: Outcome::parse(outcome),
        exit_code: if outcome == "failed" { Some(1) } else { None },
        signal: None,
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

fn status() -> StatusView {
    StatusView {
        version: "0.1.0".into(),
        uptime_s: 3725,
        pools: vec![
            PoolView {
                name: "default".into(),
                slots: 8,
                running: 3,
            },
            PoolView {
                name: "io".into(),
                slots: 40,
                running: 40,
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
        store_error: None,
        store_bytes: None,
        log_bytes: None,
        config: None,
        cluster: None,
    }
}

fn app() -> App {
    let mut app = App::new(now(), false);
    app.on_daemon(DaemonEvent::Connected {
        version: "0.1.0".into(),
    });
    app.on_daemon(DaemonEvent::Status(Box::new(status())));
    for i in 0..30u64 {
        let mut s = status();
        s.runs.insert("waiting".into(), (i * 7) % 13);
        s.runs.insert("running".into(), i % 5);
        app.status = Some(s);
        app.on_tick(now());
    }
    app.status = Some(status());
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

fn draw(app: &App, w: u16, h: u16) -> Terminal<TestBackend> {
    let mut terminal = Terminal::new(TestBackend::new(w, h)).unwrap();
    terminal.draw(|f| ui::render(f, app)).unwrap();
    terminal
}

#[test]
fn main_screen_with_retry_timeline() {
    insta::assert_snapshot!(draw(&app(), 120, 32).backend());
}

#[test]
fn main_screen_at_80x24() {
    insta::assert_snapshot!(draw(&app(), 80, 24).backend());
}

#[test]
fn help_screen() {
    let mut a = app();
    a.update(Action::Help);
    insta::assert_snapshot!(draw(&a, 100, 34).backend());
}

#[test]
fn disconnected_state() {
    let mut a = app();
    a.on_daemon(DaemonEvent::Disconnected {
        reason: "cannot reach axd at /run/ax/axd.sock: Connection refused".into(),
    });
    insta::assert_snapshot!(draw(&a, 80, 24).backend());
}

fn dag_json(jobs: Vec<(String, Vec<String>, &str)>) -> DagRunView {
    serde_json::from_value(json!({"id": 1, "dag": "d", "state": "active", "jobs": jobs.into_iter().map(|(id, deps, state)| json!({"id": id, "deps": deps, "run": null, "state": state})).collect::<Vec<_>>()})).unwrap()
}

#[test]
fn dag_view_of_the_weekly_report() {
    let mut a = app();
    a.update(Action::OpenDag);
    let s = |x: &str| x.to_string();
    a.on_daemon(DaemonEvent::DagRun(dag_json(vec![
        (s("fetch_sales"), vec![], "success"),
        (s("fetch_stock"), vec![], "running"),
        (s("fetch_ads"), vec![], "failed"),
        (
            s("calc_report"),
            vec![s("fetch_sales"), s("fetch_stock"), s("fetch_ads")],
            "waiting",
        ),
        (s("email"), vec![s("calc_report")], "waiting"),
    ])));
    insta::assert_snapshot!(draw(&a, 100, 26).backend());
}

#[test]
fn dag_view_of_fifty_nodes_scrolls() {
    let mut a = app();
    a.update(Action::OpenDag);
    let jobs = (0..50)
        .map(|i| {
            let deps = if i < 5 {
                vec![]
            } else {
                vec![format!("n{}", i - 5)]
            };
            (
                format!("n{i}"),
                deps,
                if i % 3 == 0 { "success" } else { "waiting" },
            )
        })
        .collect();
    a.on_daemon(DaemonEvent::DagRun(dag_json(jobs)));
    insta::assert_snapshot!("fifty_top", draw(&a, 80, 30).backend());
    for _ in 0..3 {
        a.update(Action::PageDown);
    }
    a.update(Action::Right);
    insta::assert_snapshot!("fifty_scrolled", draw(&a, 80, 30).backend());
}

#[test]
fn update_moves_and_switches() {
    let mut a = app();
    assert_eq!(a.selected, 0);
    assert_eq!(a.update(Action::Down), vec![Command::FetchDetail(6)]);
    assert_eq!(a.selected, 1);
    a.update(Action::PageDown);
    assert_eq!(a.selected, 4, "clamped to the last run");
    a.update(Action::Up);
    assert_eq!(a.selected, 3);
    a.update(Action::PageUp);
    assert_eq!(a.selected, 0);
    assert!(
        a.update(Action::Up).is_empty(),
        "at the top nothing happens"
    );
    a.update(Action::NextPane);
    assert_eq!(a.focus, Pane::Detail);
    a.update(Action::Down);
    assert_eq!(a.scroll.0, 1, "the focused detail pane scrolls");
    a.update(Action::NextPane);
    assert_eq!(a.focus, Pane::Runs);
    assert_eq!(a.update(Action::Detail), vec![Command::FetchDetail(7)]);
    assert_eq!(a.focus, Pane::Detail);
    match a.update(Action::SelectTab(3)).as_slice() {
        [Command::FetchWindow { states, .. }] => {
            assert_eq!(
                states,
                &vec![RunState::Failed, RunState::TimedOut, RunState::Cancelled]
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(a.tab, 3);
}

#[test]
fn update_filter() {
    let mut a = app();
    a.update(Action::StartFilter);
    assert_eq!(a.mode, Mode::Filter);
    a.update(Action::FilterInput('e'));
    match a.update(Action::FilterInput('t')).as_slice() {
        [Command::FetchWindow { filter, .. }] => assert_eq!(filter, "et"),
        other => panic!("{other:?}"),
    }
    a.update(Action::FilterBackspace);
    assert_eq!(a.filter, "e");
    a.update(Action::FilterDone);
    assert_eq!(a.mode, Mode::Main);
    assert_eq!(a.filter, "e");
    a.update(Action::Back);
    assert_eq!(a.filter, "", "Esc clears the filter");
    a.update(Action::StartFilter);
    a.update(Action::FilterInput('x'));
    a.update(Action::FilterCancel);
    assert_eq!(
        (a.mode.clone(), a.filter.clone()),
        (Mode::Main, String::new())
    );
}

#[test]
fn update_cancel_asks_first() {
    let mut a = app();
    a.update(Action::AskCancel);
    assert_eq!(
        a.mode,
        Mode::ConfirmCancel(ax_tui::console::state::CancelTarget::Run(7))
    );
    assert!(a.status_line.as_ref().unwrap().0.contains("cancel run 7"));
    assert!(a.update(Action::Confirm(false)).is_empty());
    assert_eq!(a.mode, Mode::Main);
    a.update(Action::AskCancel);
    assert_eq!(a.update(Action::Confirm(true)), vec![Command::Cancel(7)]);
    // an ended run cannot be cancelled
    a.update(Action::Down);
    assert!(a.update(Action::AskCancel).is_empty());
    assert!(a.status_line.as_ref().unwrap().1, "shown as an error");
    // the daemon's answer goes to the status line
    a.on_daemon(DaemonEvent::ActionResult {
        ok: false,
        message: "cancel 7: run 7 already ended".into(),
    });
    assert_eq!(
        a.status_line,
        Some(("cancel 7: run 7 already ended".into(), true))
    );
}

#[test]
fn update_retry_trigger_pause() {
    let mut a = app();
    assert_eq!(a.update(Action::Retry), vec![Command::Retry(7)]);
    assert_eq!(
        a.update(Action::Trigger),
        vec![Command::Trigger("etl-nightly".into())]
    );
    assert_eq!(
        a.update(Action::TogglePause),
        vec![Command::Pause {
            dag: "etl-nightly".into(),
            pause: true
        }]
    );
}

#[test]
fn update_views_and_quit() {
    let mut a = app();
    assert_eq!(a.update(Action::OpenDag), vec![Command::FetchDagRun(1)]);
    assert_eq!(a.mode, Mode::Dag);
    a.update(Action::Right);
    a.update(Action::Down);
    assert_eq!(a.scroll, (1, 4));
    a.update(Action::Left);
    assert_eq!(a.scroll, (1, 0));
    assert!(
        a.update(Action::Quit).is_empty(),
        "q leaves a sub-view first"
    );
    assert_eq!(a.mode, Mode::Main);
    assert_eq!(
        a.update(Action::OpenLog),
        vec![Command::FetchLog {
            run: 7,
            attempt: None,
            offset: 0
        }]
    );
    assert_eq!(a.mode, Mode::Log);
    a.on_daemon(DaemonEvent::Log {
        run: 7,
        offset: 6,
        data: "hello\n".into(),
        eof: false,
    });
    assert_eq!(a.log, "hello\n");
    a.update(Action::ToggleFollow);
    assert!(!a.follow);
    a.update(Action::Back);
    a.update(Action::Help);
    assert_eq!(a.mode, Mode::Help);
    a.update(Action::Help);
    assert_eq!(a.mode, Mode::Main);
    assert_eq!(a.update(Action::Quit), vec![Command::Quit]);
    assert!(a.quit);
}

#[test]
fn daemon_events_keep_the_selection_and_refetch() {
    let mut a = app();
    a.update(Action::Down); // run 6
    let mut runs = a.runs.clone();
    runs.insert(0, run(8, "new", "job", "ready"));
    a.on_daemon(DaemonEvent::Window(runs));
    assert_eq!(
        a.selected_run().unwrap().id,
        6,
        "selection follows the run, not the row"
    );
    let cmds = a.on_daemon(DaemonEvent::Changed {
        status: None,
        runs_changed: vec![6],
    });
    assert!(cmds.contains(&Command::FetchDetail(6)));
    a.on_daemon(DaemonEvent::Disconnected { reason: "x".into() });
    assert!(matches!(a.conn, Conn::Disconnected { .. }));
    let cmds = a.on_daemon(DaemonEvent::Connected {
        version: "0.1.0".into(),
    });
    assert!(
        matches!(cmds[0], Command::FetchWindow { .. }),
        "reconnect refetches the window"
    );
}

#[test]
fn timeline_shows_attempts_gaps_and_countdown() {
    let a = app();
    let lines = ui::timeline(&a, &flaky(), 70);
    let bar: String = lines[0]
        .spans
        .iter()
        .map(|s| s.content.to_string())
        .collect();
    assert_eq!(bar.chars().count(), 70);
    assert!(
        bar.contains('█') && bar.contains('·') && bar.ends_with('▷'),
        "{bar}"
    );
    let legend: String = lines[1]
        .spans
        .iter()
        .map(|s| s.content.to_string())
        .collect();
    assert!(legend.contains("#2 timed_out 10s"), "{legend}");
    assert!(legend.contains("next retry in 8s"), "{legend}");
}

/// The terminal's text, row by row.
fn screen_text(terminal: &Terminal<TestBackend>) -> String {
    let buffer = terminal.backend().buffer();
    let width = buffer.area.width as usize;
    buffer
        .content
        .chunks(width)
        .map(|row| row.iter().map(|c| c.symbol()).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Issue 13: `C` asks y/n, then cancels the selected run's whole DAG run,
/// and the daemon's answer reaches the status line.
#[test]
fn capital_c_cancels_the_whole_dag_run_after_asking() {
    use ax_tui::console::keymap::action_for;
    use ax_tui::console::state::CancelTarget;
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

    let mut a = app();
    let dag_run = a.selected_run().unwrap().dag_run;
    let key = |c: char| KeyEvent::new(KeyCode::Char(c), KeyModifiers::SHIFT);
    let ask = action_for(&a.mode, key('C')).expect("C is bound");
    assert_eq!(ask, Action::AskCancelDagRun);
    assert!(
        a.update(ask).is_empty(),
        "nothing is sent before the answer"
    );
    assert_eq!(a.mode, Mode::ConfirmCancel(CancelTarget::DagRun(dag_run)));
    let asking = screen_text(&draw(&a, 120, 32));
    assert!(
        asking.contains(&format!("cancel DAG run {dag_run} (etl-nightly)")),
        "{asking}"
    );

    // n: nothing happens.
    let no = action_for(
        &a.mode,
        KeyEvent::new(KeyCode::Char('n'), KeyModifiers::NONE),
    );
    assert!(a.update(no.unwrap()).is_empty());
    assert_eq!(a.mode, Mode::Main);

    // y: the whole DAG run is cancelled.
    a.update(Action::AskCancelDagRun);
    let yes = action_for(
        &a.mode,
        KeyEvent::new(KeyCode::Char('y'), KeyModifiers::NONE),
    );
    assert_eq!(a.update(yes.unwrap()), vec![Command::CancelDagRun(dag_run)]);
    a.on_daemon(DaemonEvent::ActionResult {
        ok: true,
        message: format!("cancel DAG run {dag_run}: ok"),
    });
    let done = screen_text(&draw(&a, 120, 32));
    assert!(
        done.contains(&format!("cancel DAG run {dag_run}: ok")),
        "{done}"
    );
}

#[test]
fn footer_and_help_list_capital_c_from_the_keymap() {
    let mut a = app();
    a.status_line = None;
    let footer = screen_text(&draw(&a, 200, 32));
    assert!(footer.contains("C cancel DAG run"), "{footer}");
    a.update(Action::Help);
    let help = screen_text(&draw(&a, 100, 40));
    assert!(
        help.contains("cancel the selected run's whole DAG run"),
        "{help}"
    );
}
