//! The console, rendered with ratatui's TestBackend (insta snapshots), and
//! `update` for every action.

use crate::support::*;
use ax_clients::console::state::{Action, Command, Conn, DaemonEvent, LogChunk, Mode, Pane, View};
use ax_clients::console::ui;
use ax_protocol::api::DagRunView;
use ax_shared::RunState;
use serde_json::json;

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
    assert_eq!(a.selected_row(View::Runs), 0);
    assert_eq!(a.update(Action::Down), vec![Command::FetchDetail(6)]);
    assert_eq!(a.selected_row(View::Runs), 1);
    a.update(Action::PageDown);
    assert_eq!(a.selected_row(View::Runs), 4, "clamped to the last run");
    a.update(Action::Up);
    assert_eq!(a.selected_row(View::Runs), 3);
    a.update(Action::PageUp);
    assert_eq!(a.selected_row(View::Runs), 0);
    assert!(
        a.update(Action::Up).is_empty(),
        "at the top nothing happens"
    );
    a.update(Action::NextPane);
    assert_eq!(a.focus(), Pane::Detail);
    a.update(Action::Down);
    assert_eq!(a.scroll().0, 1, "the focused detail pane scrolls");
    a.update(Action::NextPane);
    assert_eq!(a.focus(), Pane::Runs);
    assert_eq!(a.update(Action::Detail), vec![Command::FetchDetail(7)]);
    assert_eq!(a.focus(), Pane::Detail);
    match a.update(Action::SelectTab(3)).as_slice() {
        [Command::FetchWindow { states, .. }] => {
            assert_eq!(
                states,
                &vec![RunState::Failed, RunState::TimedOut, RunState::Cancelled]
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(a.tab(), 3);
}

#[test]
fn update_filter() {
    let mut a = app();
    a.update(Action::StartFilter);
    assert_eq!(*a.mode(), Mode::Filter);
    a.update(Action::FilterInput('e'));
    match a.update(Action::FilterInput('t')).as_slice() {
        [Command::FetchWindow { filter, .. }] => assert_eq!(filter, "et"),
        other => panic!("{other:?}"),
    }
    a.update(Action::FilterBackspace);
    assert_eq!(a.filter(View::Runs), "e");
    a.update(Action::FilterDone);
    assert_eq!(*a.mode(), Mode::Main);
    assert_eq!(a.filter(View::Runs), "e");
    a.update(Action::Back);
    assert_eq!(a.filter(View::Runs), "", "Esc clears the filter");
    a.update(Action::StartFilter);
    a.update(Action::FilterInput('x'));
    a.update(Action::FilterCancel);
    assert_eq!(
        (a.mode().clone(), a.filter(View::Runs).to_string()),
        (Mode::Main, String::new())
    );
}

#[test]
fn update_cancel_asks_first() {
    let mut a = app();
    a.update(Action::AskCancel);
    assert_eq!(
        *a.mode(),
        Mode::ConfirmCancel(ax_clients::console::state::CancelTarget::Run(7))
    );
    assert!(a.status_line().unwrap().0.contains("cancel run 7"));
    assert!(a.update(Action::Confirm(false)).is_empty());
    assert_eq!(*a.mode(), Mode::Main);
    a.update(Action::AskCancel);
    assert_eq!(a.update(Action::Confirm(true)), vec![Command::Cancel(7)]);
    // an ended run cannot be cancelled
    a.update(Action::Down);
    assert!(a.update(Action::AskCancel).is_empty());
    assert!(a.status_line().unwrap().1, "shown as an error");
    // the daemon's answer goes to the status line
    a.on_daemon(DaemonEvent::ActionResult {
        ok: false,
        message: "cancel 7: run 7 already ended".into(),
    });
    assert_eq!(
        a.status_line(),
        Some(&("cancel 7: run 7 already ended".into(), true))
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
        vec![Command::TogglePause("etl-nightly".into())],
        "from a run, the daemon's paused state decides"
    );
}

#[test]
fn update_views_and_quit() {
    let mut a = app();
    assert_eq!(a.update(Action::OpenDag), vec![Command::FetchDagRun(1)]);
    assert_eq!(*a.mode(), Mode::Dag);
    a.update(Action::Right);
    a.update(Action::Down);
    assert_eq!(a.scroll(), (1, 4));
    a.update(Action::Left);
    assert_eq!(a.scroll(), (1, 0));
    assert!(
        a.update(Action::Quit).is_empty(),
        "q leaves a sub-view first"
    );
    assert_eq!(*a.mode(), Mode::Main);
    assert_eq!(a.update(Action::OpenLog), vec![Command::FollowLog(7)]);
    assert_eq!(*a.mode(), Mode::Log);
    a.on_daemon(DaemonEvent::Log(LogChunk {
        run: 7,
        data: "hello\n".into(),
        gap: 0,
        restart: false,
        eof: false,
    }));
    assert_eq!(a.log().newest(5), vec!["hello"]);
    a.update(Action::ToggleFollow);
    assert!(!a.following());
    assert_eq!(a.update(Action::Back), vec![Command::StopLog]);
    a.update(Action::Help);
    assert_eq!(*a.mode(), Mode::Help);
    a.update(Action::Help);
    assert_eq!(*a.mode(), Mode::Main);
    assert_eq!(
        a.update(Action::Quit),
        vec![Command::StopLog, Command::Quit]
    );
    assert!(a.quitting());
}

#[test]
fn daemon_events_keep_the_selection_and_refetch() {
    let mut a = app();
    a.update(Action::Down); // run 6
    let mut runs = a.runs().to_vec();
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
    assert!(matches!(a.conn(), Conn::Disconnected { .. }));
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
        bar.contains('▓') && bar.contains('▒') && bar.contains('·') && bar.ends_with('▷'),
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

/// `C` asks y/n, then cancels the selected run's whole DAG run, and the
/// daemon's answer reaches the status line.
#[test]
fn capital_c_cancels_the_whole_dag_run_after_asking() {
    use ax_clients::console::keymap::action_for;
    use ax_clients::console::state::CancelTarget;
    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

    let mut a = app();
    let dag_run = a.selected_run().unwrap().dag_run;
    let key = |c: char| KeyEvent::new(KeyCode::Char(c), KeyModifiers::SHIFT);
    let ask = action_for(a.mode(), a.view(), key('C')).expect("C is bound");
    assert_eq!(ask, Action::AskCancelDagRun);
    assert!(
        a.update(ask).is_empty(),
        "nothing is sent before the answer"
    );
    assert_eq!(
        *a.mode(),
        Mode::ConfirmCancel(CancelTarget::DagRun(dag_run))
    );
    let asking = screen_text(&draw(&a, 120, 32));
    assert!(
        asking.contains(&format!("cancel DAG run {dag_run} (etl-nightly)")),
        "{asking}"
    );

    // n: nothing happens.
    let no = action_for(
        a.mode(),
        a.view(),
        KeyEvent::new(KeyCode::Char('n'), KeyModifiers::NONE),
    );
    assert!(a.update(no.unwrap()).is_empty());
    assert_eq!(*a.mode(), Mode::Main);

    // y: the whole DAG run is cancelled.
    a.update(Action::AskCancelDagRun);
    let yes = action_for(
        a.mode(),
        a.view(),
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
    a.clear_status_line();
    let footer = screen_text(&draw(&a, 200, 32));
    assert!(footer.contains("C cancel DAG run"), "{footer}");
    a.update(Action::Help);
    let help = screen_text(&draw(&a, 100, 40));
    assert!(
        help.contains("cancel the selected run's whole DAG run"),
        "{help}"
    );
}
