//! The console's views (runs, DAGs, pools, events), its `:` command line,
//! the fault banner, live clocks and NO_COLOR, rendered with ratatui's
//! TestBackend (insta snapshots at 80×24 and 200×50).

use crate::support::*;
use ax_clients::console::columns::{Kind, col, fit, widths};
use ax_clients::console::keymap::action_for;
use ax_clients::console::state::{
    Action, App, Command, DaemonEvent, EventQuery, LogChunk, Mode, View,
};
use ax_protocol::api::{DagRunViewState, DagView, EventView};
use ax_shared::RunState;
use ax_shared::jobfile::FileError;
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::style::Color;

/// A DAG name of exactly 30 characters.
const LONG_DAG: &str = "a-dag-name-of-thirty-chars-xyz";
/// A run whose DAG/JOB is exactly 30 characters.
const RUN_DAG: &str = "warehouse-reload-eu";
const LONG_JOB: &str = "load_facts";

fn dag(name: &str) -> DagView {
    DagView {
        name: name.into(),
        file: format!("/etc/ax/jobs.d/{name}.toml"),
        jobs: vec!["extract".into(), "load".into()],
        schedule: Some("0 3 * * *".into()),
        timezone: Some("UTC".into()),
        next_fire: t("15:00:00"),
        jitter: None,
        planned_start: None,
        paused: false,
        last_run_state: None,
        last_run_at: None,
        error: None,
        deps: [
            ("extract".to_string(), vec![]),
            ("load".to_string(), vec!["extract".to_string()]),
        ]
        .into_iter()
        .collect(),
        versions: None,
    }
}

fn dags() -> Vec<DagView> {
    let broken = DagView {
        jobs: vec![],
        schedule: None,
        next_fire: None,
        timezone: None,
        deps: Default::default(),
        error: Some(FileError {
            file: "/etc/ax/jobs.d/broken.toml".into(),
            line: Some(3),
            column: Some(5),
            message: "`retries` must be an integer, not string".into(),
        }),
        ..dag("broken")
    };
    vec![
        broken,
        DagView {
            last_run_state: Some(DagRunViewState::Success),
            last_run_at: t("11:30:00"),
            ..dag("etl-nightly")
        },
        dag("never-ran"),
        DagView {
            paused: true,
            last_run_state: Some(DagRunViewState::Failed),
            last_run_at: t("09:00:00"),
            ..dag(LONG_DAG)
        },
    ]
}

fn events() -> Vec<EventView> {
    let ev =
        |seq: i64, run: Option<u64>, from: &str, to: &str, reason: &str, actor: &str| EventView {
            seq,
            time: t(&format!("11:59:{:02}", seq)).unwrap(),
            run,
            dag_run: 1,
            from: RunState::parse(from),
            to: RunState::parse(to),
            reason: reason.into(),
            actor: actor.into(),
        };
    vec![
        ev(
            1,
            None,
            "",
            "",
            "DAG run created by manual trigger by uid 0 via ax",
            "uid 0 via ax",
        ),
        ev(
            2,
            Some(7),
            "",
            "waiting",
            "created by manual trigger",
            "uid 0 via ax",
        ),
        ev(
            3,
            Some(7),
            "waiting",
            "ready",
            "no dependencies",
            "scheduler",
        ),
        ev(
            4,
            Some(7),
            "ready",
            "running",
            "started (waited 0 ms)",
            "scheduler",
        ),
        ev(
            5,
            Some(7),
            "running",
            "failed",
            "attempt 1 failed (exit 1)",
            "scheduler",
        ),
    ]
}

/// The fixture app with DAGs, events, a job-file error in the status and
/// a run whose name is 30 characters long.
fn full_app() -> App {
    let mut a = app();
    let mut s = status();
    s.errors = dags().into_iter().filter_map(|d| d.error).collect();
    a.on_daemon(DaemonEvent::Status(Box::new(s)));
    let mut runs = a.runs().to_vec();
    let mut long = run(8, RUN_DAG, LONG_JOB, "failed");
    long.reason = Some("attempt 1 failed (exit 1)".into());
    assert_eq!(format!("{RUN_DAG}/{LONG_JOB}").len(), 30);
    assert_eq!(LONG_DAG.len(), 30);
    runs.insert(0, long);
    a.on_daemon(DaemonEvent::Window(runs));
    a.on_daemon(DaemonEvent::Dags(dags()));
    a.on_daemon(DaemonEvent::Events(events()));
    a
}

fn key(c: char) -> KeyEvent {
    KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)
}

fn press(a: &mut App, code: KeyCode) -> Vec<Command> {
    let k = KeyEvent::new(code, KeyModifiers::NONE);
    match action_for(a.mode(), a.view(), k) {
        Some(action) => a.update(action),
        None => vec![],
    }
}

#[test]
fn every_view_at_80x24_and_200x50() {
    for view in View::ALL {
        let mut a = full_app();
        a.update(Action::Show(view));
        a.clear_status_line();
        for (w, h) in [(80, 24), (200, 50)] {
            insta::assert_snapshot!(format!("{}_{w}x{h}", view.name()), draw(&a, w, h).backend());
        }
    }
}

#[test]
fn names_of_30_characters_are_whole_at_120_columns_and_wider() {
    let name = format!("{RUN_DAG}/{LONG_JOB}");
    for view in [View::Runs, View::Dags] {
        let mut a = full_app();
        a.update(Action::Show(view));
        for w in [120, 140, 160, 161, 200, 240] {
            let screen = screen_text(&draw(&a, w, 40));
            let want = if view == View::Runs {
                name.as_str()
            } else {
                LONG_DAG
            };
            assert!(screen.contains(want), "{view:?} at {w}:\n{screen}");
        }
    }
    // Narrower, a name is cut with … rather than silently.
    let a = full_app();
    let screen = screen_text(&draw(&a, 44, 24));
    assert!(screen.contains('…'), "{screen}");
}

#[test]
fn widths_give_names_room_before_the_rest_column() {
    let cols = [
        col("ID", Kind::Fixed),
        col("NAME", Kind::Name),
        col("POOL", Kind::Optional(1)),
        col("WHY", Kind::Rest),
    ];
    let rows = vec![vec![
        "7".to_string(),
        "a".repeat(30),
        "default".to_string(),
        "a long explanation".to_string(),
    ]];
    // Room for all: WHY takes what is left.
    assert_eq!(
        widths(&cols, &rows, 80),
        vec![Some(2), Some(30), Some(7), Some(80 - 2 - 30 - 7 - 3)]
    );
    // Short: the optional POOL goes first, then WHY; the name stays whole.
    assert_eq!(
        widths(&cols, &rows, 40),
        vec![Some(2), Some(30), None, Some(6)]
    );
    assert_eq!(
        widths(&cols, &rows, 34),
        vec![Some(2), Some(30), None, None]
    );
    // Only then is the name cut.
    assert_eq!(
        widths(&cols, &rows, 20),
        vec![Some(2), Some(17), None, None]
    );
    assert_eq!(fit("weekly-report/calc_report", 10), "weekly-re…");
    assert_eq!(fit("short", 10), "short");
}

#[test]
fn dags_view_triggers_pauses_resumes_and_draws() {
    let mut a = full_app();
    assert_eq!(press(&mut a, KeyCode::Char('d')), vec![Command::FetchDags]);
    assert_eq!(a.view(), View::Dags);
    // rows: broken, etl-nightly, never-ran, LONG_DAG (paused)
    press(&mut a, KeyCode::Down);
    press(&mut a, KeyCode::Down);
    assert_eq!(a.selected_dag().unwrap().name, "never-ran");
    assert_eq!(
        press(&mut a, KeyCode::Char('t')),
        vec![Command::Trigger("never-ran".into())],
        "a DAG that never ran can be triggered"
    );
    assert_eq!(
        press(&mut a, KeyCode::Char('p')),
        vec![Command::Pause {
            dag: "never-ran".into(),
            pause: true
        }]
    );
    press(&mut a, KeyCode::Down);
    assert_eq!(
        press(&mut a, KeyCode::Char('p')),
        vec![Command::Pause {
            dag: LONG_DAG.into(),
            pause: false
        }],
        "a paused DAG is resumed, whatever its runs say"
    );
    // g: its newest DAG run, the definition until (unless) one comes.
    press(&mut a, KeyCode::Up);
    assert_eq!(
        press(&mut a, KeyCode::Char('g')),
        vec![Command::FetchLatestDagRun("never-ran".into())]
    );
    assert_eq!(*a.mode(), Mode::Dag);
    let drawn = screen_text(&draw(&a, 100, 30));
    assert!(drawn.contains("definition (no run yet)"), "{drawn}");
    assert!(
        drawn.contains("[· extract]") && drawn.contains("[· load]"),
        "{drawn}"
    );
    let cmds = a.on_daemon(DaemonEvent::Changed {
        status: None,
        runs_changed: vec![],
    });
    assert!(
        cmds.contains(&Command::FetchLatestDagRun("never-ran".into())),
        "a change may be its first DAG run: {cmds:?}"
    );
    press(&mut a, KeyCode::Char('q'));
    assert_eq!(*a.mode(), Mode::Main);
    assert_eq!(a.view(), View::Dags, "q leaves the drawing for the list");
    // Enter: that DAG's runs.
    match press(&mut a, KeyCode::Enter).as_slice() {
        [Command::FetchWindow { dag, .. }] => assert_eq!(dag.as_deref(), Some("never-ran")),
        other => panic!("{other:?}"),
    }
    assert_eq!(a.view(), View::Runs);
    let screen = screen_text(&draw(&a, 120, 30));
    assert!(screen.contains("DAG never-ran (Esc: all)"), "{screen}");
    match press(&mut a, KeyCode::Esc).as_slice() {
        [Command::FetchWindow { dag: None, .. }] => {}
        other => panic!("Esc shows all runs again: {other:?}"),
    }
}

#[test]
fn a_broken_file_shows_in_the_dags_view_and_the_banner() {
    let mut a = full_app();
    let runs = screen_text(&draw(&a, 120, 30));
    assert!(runs.contains("⚠ 1 job-file error"), "{runs}");
    a.update(Action::Show(View::Dags));
    let screen = screen_text(&draw(&a, 160, 30));
    assert!(
        screen.contains("✗ line 3:5: `retries` must be an integer, not string"),
        "{screen}"
    );
    assert!(screen.contains("DAGs (4, 1 with errors)"), "{screen}");
    // A store fault is counted too, and the banner goes when all is well.
    let mut s = status();
    s.store_error = Some("disk full".into());
    s.errors.push(FileError {
        file: "/etc/ax/jobs.d/.hidden/x.toml".into(),
        line: None,
        column: None,
        message: "cannot read: permission denied".into(),
    });
    a.on_daemon(DaemonEvent::Status(Box::new(s)));
    let with_fault = screen_text(&draw(&a, 120, 30));
    assert!(
        with_fault.contains("⚠ 1 job-file error · store fault: disk full"),
        "{with_fault}"
    );
    assert!(
        with_fault.contains("✗ store fault: disk full (new writes are refused")
            && with_fault.contains("✗ /etc/ax/jobs.d/.hidden/x.toml: cannot read"),
        "the DAGs view lists faults no DAG row shows:\n{with_fault}"
    );
    a.on_daemon(DaemonEvent::Status(Box::new(status())));
    assert!(!screen_text(&draw(&a, 120, 30)).contains('⚠'));
}

/// A folder of the jobs folder axd cannot list (its error as axd words
/// it) shows in the banner and, naming the folder, in the DAGs view.
#[test]
fn an_unreadable_jobs_folder_shows_in_the_banner_and_the_dags_view() {
    let mut a = full_app();
    let mut s = status();
    s.errors = vec![FileError {
        file: "/etc/ax/jobs.d/team-a".into(),
        line: None,
        column: None,
        message: "cannot read this folder (Permission denied (os error 13)); the DAGs of the files below it stay as last loaded".into(),
    }];
    a.on_daemon(DaemonEvent::Status(Box::new(s)));
    a.update(Action::Show(View::Dags));
    let screen = screen_text(&draw(&a, 200, 30));
    assert!(screen.contains("⚠ 1 job-file error"), "{screen}");
    assert!(
        screen.contains("✗ /etc/ax/jobs.d/team-a: cannot read this folder (Permission denied"),
        "{screen}"
    );
}

#[test]
fn command_line_switches_views_with_completion() {
    let mut a = full_app();
    press(&mut a, KeyCode::Char(':'));
    assert_eq!(*a.mode(), Mode::Command);
    press(&mut a, KeyCode::Char('p'));
    press(&mut a, KeyCode::Tab);
    assert_eq!(a.command_line(), "pools", "Tab completes a unique prefix");
    let shown = screen_text(&draw(&a, 80, 24));
    assert!(shown.contains(":pools▏"), "{shown}");
    press(&mut a, KeyCode::Enter);
    assert_eq!((a.view(), a.mode().clone()), (View::Pools, Mode::Main));
    for (typed, view) in [
        ("events", View::Events),
        ("dag", View::Dags),
        ("ru", View::Runs),
    ] {
        press(&mut a, KeyCode::Char(':'));
        for c in typed.chars() {
            press(&mut a, KeyCode::Char(c));
        }
        press(&mut a, KeyCode::Enter);
        assert_eq!(a.view(), view, ":{typed}");
    }
    press(&mut a, KeyCode::Char(':'));
    press(&mut a, KeyCode::Char('x'));
    press(&mut a, KeyCode::Enter);
    let (msg, error) = a.status_line().cloned().unwrap();
    assert!(error && msg.contains("unknown command :x"), "{msg}");
    // e and d from any list
    press(&mut a, KeyCode::Char('e'));
    assert_eq!(a.view(), View::Events);
    press(&mut a, KeyCode::Char('d'));
    assert_eq!(a.view(), View::Dags);
    press(&mut a, KeyCode::Char('q'));
    assert_eq!(a.view(), View::Runs, "q goes back to the runs first");
    assert!(!a.quitting());
}

#[test]
fn events_filter_goes_to_the_daemon_and_narrows_the_list() {
    let q = EventQuery::parse("dag:etl run:7 actor:uid failed exit", 100);
    assert_eq!(q.dag.as_deref(), Some("etl"));
    assert_eq!(q.run, Some(7));
    assert_eq!(q.actor.as_deref(), Some("uid"));
    assert_eq!(q.words, vec!["failed", "exit"]);
    let mut a = full_app();
    a.update(Action::Show(View::Events));
    assert_eq!(a.shown_events().len(), 5);
    a.update(Action::StartFilter);
    let mut last = vec![];
    for c in "running".chars() {
        last = a.update(Action::FilterInput(c));
    }
    assert!(matches!(last.as_slice(), [Command::FetchEvents(_)]));
    let seqs: Vec<i64> = a.shown_events().iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![5, 4], "newest first, matching the text");
}

#[test]
fn uptime_ages_and_countdowns_tick() {
    let mut a = full_app();
    let before = screen_text(&draw(&a, 120, 32));
    assert!(before.contains("up 1h02m"), "{before}");
    assert!(before.contains("next retry in 8s"), "{before}");
    a.on_daemon(DaemonEvent::ActionResult {
        ok: true,
        message: "trigger etl: started DAG run 2".into(),
    });
    a.on_tick(now() + chrono::Duration::seconds(5));
    assert!(a.status_line().is_some(), "an answer stays a while");
    a.on_tick(now() + chrono::Duration::seconds(65));
    assert!(a.status_line().is_none(), "and then clears itself");
    let after = screen_text(&draw(&a, 120, 32));
    assert!(after.contains("up 1h03m"), "the uptime counts on: {after}");
    assert!(after.contains("next retry due now"), "{after}");
    assert!(after.contains("3m05s"), "ages count on: {after}");
}

#[test]
fn no_color_is_honoured() {
    use std::ffi::OsString;
    assert!(!ax_clients::console::colour_allowed(Some(OsString::from(
        "1"
    ))));
    assert!(ax_clients::console::colour_allowed(Some(OsString::new())));
    assert!(ax_clients::console::colour_allowed(None));
    for view in View::ALL {
        let mut a = full_app();
        a.set_colour(false);
        a.update(Action::Show(view));
        let term = draw(&a, 120, 32);
        for cell in &term.backend().buffer().content {
            assert!(
                cell.fg == Color::Reset && cell.bg == Color::Reset,
                "{view:?}: {cell:?}"
            );
        }
    }
    // With colour on, some cell is coloured (the test above could fail).
    let coloured = draw(
        &{
            let mut a = full_app();
            a.set_colour(true);
            a
        },
        120,
        32,
    );
    assert!(
        coloured
            .backend()
            .buffer()
            .content
            .iter()
            .any(|c| c.fg != Color::Reset)
    );
}

#[test]
fn every_state_has_its_own_mark() {
    use ax_clients::console::views::runs::state_text;
    let marks: std::collections::BTreeSet<char> = RunState::ALL
        .iter()
        .map(|s| state_text(*s).chars().next().unwrap())
        .collect();
    assert_eq!(marks.len(), RunState::ALL.len());
}

#[test]
fn the_log_view_holds_the_newest_lines() {
    let mut a = full_app();
    assert_eq!(a.update(Action::OpenLog), vec![Command::FollowLog(7)]);
    for chunk in 0..40 {
        let data: String = (0..1000)
            .map(|i| format!("line {}\n", chunk * 1000 + i))
            .collect();
        a.on_daemon(DaemonEvent::Log(LogChunk {
            run: 7,
            data,
            gap: 0,
            restart: false,
            eof: false,
        }));
    }
    assert_eq!(a.log().len(), ax_clients::console::logbuf::KEEP_LINES);
    let screen = screen_text(&draw(&a, 80, 24));
    assert!(screen.contains("line 39999"), "{screen}");
    // Scrolled back, new output does not move the lines shown.
    a.update(Action::PageUp);
    assert!(!a.following());
    let held = screen_text(&draw(&a, 80, 24));
    a.on_daemon(DaemonEvent::Log(LogChunk {
        run: 7,
        data: "line 40000\n".into(),
        gap: 0,
        restart: false,
        eof: false,
    }));
    assert_eq!(
        screen_text(&draw(&a, 80, 24)).lines().nth(8),
        held.lines().nth(8)
    );
    a.on_daemon(DaemonEvent::Log(LogChunk {
        run: 7,
        data: String::new(),
        gap: 5000,
        restart: false,
        eof: false,
    }));
    a.update(Action::ToggleFollow);
    let screen = screen_text(&draw(&a, 80, 24));
    assert!(screen.contains("5000 bytes skipped"), "{screen}");
    let _ = key('x');
}
