//! The readings an operator trusts (docs/console.md, "Readings"): AGE and
//! DURATION, TRY, who cancelled, the y/n question, the log scrolled back,
//! the footer, WHY against the optional columns, single-job names, the
//! ACTOR column, `t` on an ad-hoc run, the tab counts, what started a DAG
//! run and the next fire's zone; drawn with TestBackend at 80×24 and a
//! wide size.

use crate::support::*;
use ax_clients::console::keymap::action_for;
use ax_clients::console::state::{Action, App, Command, DaemonEvent, LogChunk, View};
use ax_protocol::api::{AttemptView, DagView, EventView, RunView};
use ax_shared::{Outcome, RunState};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

const SIZES: [(u16, u16); 2] = [(80, 24), (200, 50)];

fn press(a: &mut App, c: char) -> Vec<Command> {
    let k = KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE);
    match action_for(a.mode(), a.view(), k) {
        Some(action) => a.update(action),
        None => vec![],
    }
}

/// The table row of run (or event) `id`.
fn row(screen: &str, id: u64) -> String {
    let start = format!("│{id} ");
    screen
        .lines()
        .find(|l| l.starts_with(&start))
        .unwrap_or_else(|| panic!("no row {id} in\n{screen}"))
        .to_string()
}

/// The table's header row.
fn header(screen: &str) -> String {
    screen
        .lines()
        .find(|l| l.starts_with("│ID ") || l.starts_with("│SEQ "))
        .unwrap_or_else(|| panic!("no header in\n{screen}"))
        .to_string()
}

/// The text of column `title` in `line`, by the header's positions.
fn cell(screen: &str, line: &str, title: &str, next: &str) -> String {
    let head: Vec<char> = header(screen).chars().collect();
    let find = |t: &str| {
        let t: Vec<char> = t.chars().collect();
        head.windows(t.len()).position(|w| w == t.as_slice())
    };
    let (from, to) = (find(title).unwrap(), find(next).unwrap());
    line.chars().skip(from).take(to - from).collect::<String>()
}

/// Checks the screen of `a` at each of `SIZES` (text, width).
fn each_size(a: &App, check: impl Fn(&str, u16)) {
    for (w, h) in SIZES {
        check(&screen_text(&draw(a, w, h)), w);
    }
}

fn attempt(n: u32, start: &str, end: Option<&str>, outcome: Option<Outcome>) -> AttemptView {
    AttemptView {
        n,
        started_at: t(start),
        finished_at: end.and_then(t),
        outcome,
        ..AttemptView::default()
    }
}

/// The fixture app showing `runs` only, the first selected with its
/// detail.
fn showing(runs: Vec<RunView>) -> App {
    let mut a = app();
    let first = runs[0].clone();
    a.on_daemon(DaemonEvent::Window(runs));
    a.on_daemon(DaemonEvent::Detail(Box::new(first)));
    a
}

#[test]
fn age_is_the_time_since_creation_and_duration_how_long_it_ran() {
    let mut done = run(9, "etl-nightly", "extract", "success");
    done.created_at = t("11:30:00");
    done.started_at = t("11:58:00");
    done.finished_at = t("11:58:42");
    done.attempts = vec![attempt(
        1,
        "11:58:00",
        Some("11:58:42"),
        Some(Outcome::Success),
    )];
    let mut running = run(10, "etl-nightly", "load", "running");
    running.created_at = t("11:40:00");
    running.started_at = t("11:59:30");
    running.attempts = vec![attempt(1, "11:59:30", None, None)];
    let a = showing(vec![done, running]);
    each_size(&a, |s, w| {
        assert!(row(s, 9).contains("30m00s"), "AGE at {w}:\n{s}");
        assert!(row(s, 10).contains("20m00s"), "AGE at {w}:\n{s}");
        assert!(s.contains("age 30m00s · duration 42s"), "at {w}:\n{s}");
    });
    let s = screen_text(&draw(&a, 200, 50));
    assert_eq!(cell(&s, &row(&s, 9), "DURATION", "WHY").trim(), "42s");
    assert_eq!(cell(&s, &row(&s, 10), "DURATION", "WHY").trim(), "30s");
}

#[test]
fn try_never_exceeds_the_allowed_and_tells_interruptions_apart() {
    let mut restarted = run(11, "nightly", "load", "running");
    restarted.retries = 0;
    restarted.attempts = vec![
        attempt(1, "11:50:00", Some("11:51:00"), Some(Outcome::Interrupted)),
        attempt(2, "11:52:00", None, None),
    ];
    let mut flapping = run(12, "nightly", "sync", "failed");
    flapping.retries = 3;
    let o = [
        Outcome::Failed,
        Outcome::Interrupted,
        Outcome::Preempted,
        Outcome::Failed,
        Outcome::Interrupted,
        Outcome::Failed,
        Outcome::Failed,
    ];
    flapping.attempts = o
        .iter()
        .enumerate()
        .map(|(i, o)| attempt(i as u32 + 1, "11:50:00", Some("11:50:01"), Some(*o)))
        .collect();
    let a = showing(vec![restarted, flapping]);
    each_size(&a, |s, w| {
        assert!(!s.contains("2/1") && !s.contains("7/4"), "at {w}:\n{s}");
        let detail = "tries 1/1 ↻1 (↻ 1 interrupted, no try used)";
        assert!(s.contains(detail), "at {w}:\n{s}");
    });
    let s = screen_text(&draw(&a, 200, 50));
    assert_eq!(cell(&s, &row(&s, 11), "TRY", "POOL").trim(), "1/1 ↻1");
    assert_eq!(cell(&s, &row(&s, 12), "TRY", "POOL").trim(), "4/4 ↻3");
}

#[test]
fn a_cancelled_runs_why_says_who_cancelled_it() {
    let ev = |seq, from: &str, to: &str, reason: &str, actor: &str| EventView {
        seq,
        time: t("11:59:00").unwrap(),
        run: Some(13),
        dag_run: 1,
        from: RunState::parse(from),
        to: RunState::parse(to),
        reason: reason.into(),
        actor: actor.into(),
    };
    let mut r = run(13, "etl-nightly", "load", "cancelled");
    r.reason = Some("attempt 1 cancelled (signal 15)".into());
    r.attempts = vec![attempt(
        1,
        "11:58:00",
        Some("11:59:01"),
        Some(Outcome::Cancelled),
    )];
    let mut detail = r.clone();
    detail.events = Some(vec![
        ev(1, "ready", "running", "started", "scheduler"),
        ev(
            2,
            "running",
            "running",
            "cancel requested: stopping the process group",
            "alice (uid 1000) via ax",
        ),
        ev(
            3,
            "running",
            "cancelled",
            "attempt 1 cancelled (signal 15)",
            "scheduler",
        ),
    ]);
    let mut a = app();
    a.on_daemon(DaemonEvent::Window(vec![r]));
    a.on_daemon(DaemonEvent::Detail(Box::new(detail)));
    for (w, h) in SIZES {
        let s = screen_text(&draw(&a, w, h));
        assert!(
            s.contains("cancelled by alice (uid 1000) via ax"),
            "at {w}:\n{s}"
        );
        assert!(row(&s, 13).contains("cancelled by alice"), "at {w}:\n{s}");
    }
}

#[test]
fn the_confirm_question_and_actions_on_their_way_carry_no_tick() {
    let mut a = app();
    press(&mut a, 'c');
    let last = |a: &App| {
        let s = screen_text(&draw(a, 80, 24));
        s.lines().last().unwrap().to_string()
    };
    let q = last(&a);
    assert!(
        q.starts_with("cancel run 7 (etl-nightly/transform)? y/n"),
        "{q}"
    );
    assert!(!q.contains('✓'), "{q}");
    assert_eq!(press(&mut a, 'y'), vec![Command::Cancel(7)]);
    assert!(!last(&a).contains('✓'), "not done yet: {}", last(&a));
    press(&mut a, 'r');
    assert!(!last(&a).contains('✓'), "not done yet: {}", last(&a));
    // The daemon's answer is marked.
    a.on_daemon(DaemonEvent::ActionResult {
        ok: true,
        message: "retry 7: ok".into(),
    });
    assert!(last(&a).starts_with("✓ retry 7: ok"), "{}", last(&a));
}

#[test]
fn scrolling_up_a_short_log_keeps_its_newest_line() {
    let mut a = app();
    a.update(Action::OpenLog);
    a.on_daemon(DaemonEvent::Log(LogChunk {
        run: 7,
        data: "first line\nsecond line\nnewest line\n".into(),
        gap: 0,
        restart: false,
        eof: false,
    }));
    for _ in 0..3 {
        a.update(Action::Up);
        for (w, h) in SIZES {
            let s = screen_text(&draw(&a, w, h));
            for line in ["first line", "second line", "newest line"] {
                assert!(s.contains(line), "{line} at {w}:\n{s}");
            }
        }
    }
}

#[test]
fn the_footer_fits_or_ends_in_help() {
    for view in [View::Runs, View::Dags, View::Events] {
        let mut a = app();
        a.update(Action::Show(view));
        a.clear_status_line();
        for w in (40..=200).step_by(3) {
            let s = screen_text(&draw(&a, w, 24));
            let footer = s.lines().last().unwrap().trim_end().to_string();
            assert!(!footer.contains('…'), "{view:?} at {w}: {footer}");
            assert!(
                footer.ends_with("? help") || footer.ends_with("q quit"),
                "{view:?} at {w}: {footer}"
            );
        }
    }
}

#[test]
fn why_wins_over_pool_prio_and_try() {
    let a = app();
    let s = screen_text(&draw(&a, 80, 24));
    assert!(
        row(&s, 7).contains("backoff until 12:00:08 UTC"),
        "WHY whole at 80×24:\n{s}"
    );
    // Narrowing, POOL goes first, then PRIO, then TRY; WHY stays.
    let gone = |title: &str| {
        (50..=200u16)
            .rev()
            .find(|w| !header(&screen_text(&draw(&a, *w, 40))).contains(title))
    };
    let (pool, prio, tr) = (gone("POOL"), gone("PRIO"), gone("TRY"));
    assert!(pool > prio && prio > tr, "{pool:?} {prio:?} {tr:?}");
    for w in 60..=200 {
        let s = screen_text(&draw(&a, w, 40));
        assert!(header(&s).contains("WHY"), "WHY at {w}:\n{s}");
    }
}

#[test]
fn a_single_job_dag_is_named_once() {
    let mut r = run(14, "team-a/cleanup", "cleanup", "success");
    r.finished_at = t("11:59:00");
    let a = showing(vec![r, run(15, "team-a/etl", "load", "waiting")]);
    for (w, h) in SIZES {
        let s = screen_text(&draw(&a, w, h));
        assert!(!s.contains("cleanup/cleanup"), "at {w}:\n{s}");
        assert!(row(&s, 14).contains("team-a/cleanup "), "at {w}:\n{s}");
        assert!(
            s.contains("run 14 team-a/cleanup · DAG run 1"),
            "at {w}:\n{s}"
        );
        assert!(row(&s, 15).contains("team-a/etl/load"), "at {w}:\n{s}");
    }
}

fn event(seq: i64, reason: &str, actor: &str) -> EventView {
    EventView {
        seq,
        time: t(&format!("11:59:{seq:02}")).unwrap(),
        run: None,
        dag_run: seq as u64,
        from: None,
        to: None,
        reason: reason.into(),
        actor: actor.into(),
    }
}

#[test]
fn the_actor_column_is_whole_while_reason_has_room() {
    let mut a = app();
    a.on_daemon(DaemonEvent::Events(vec![
        event(1, "DAG paused", "alice (uid 1000) via ax"),
        event(2, "DAG resumed", "bob (uid 1001) via ax-tui"),
    ]));
    a.update(Action::Show(View::Events));
    for (w, h) in SIZES {
        let s = screen_text(&draw(&a, w, h));
        assert!(s.contains("alice (uid 1000) via ax "), "at {w}:\n{s}");
        assert!(s.contains("bob (uid 1001) via ax-tui "), "at {w}:\n{s}");
    }
}

#[test]
fn trigger_on_an_ad_hoc_run_says_why_it_cannot() {
    let dag = DagView {
        name: "etl-nightly".into(),
        file: "/etc/ax/jobs.d/etl-nightly.toml".into(),
        ..DagView::default()
    };
    for (name, what) in [("adhoc", "ad-hoc"), ("etl-nightly:on_failure", "hook")] {
        let mut a = showing(vec![run(16, name, name, "failed")]);
        a.on_daemon(DaemonEvent::Dags(vec![dag.clone()]));
        let sent = press(&mut a, 't');
        assert!(
            !sent.iter().any(|c| matches!(c, Command::Trigger(_))),
            "{sent:?}"
        );
        let (msg, error) = a.status_line().cloned().unwrap();
        assert!(error, "{msg}");
        assert!(msg.contains(what) && msg.contains("no DAG file"), "{msg}");
        for (w, h) in SIZES {
            let s = screen_text(&draw(&a, w, h));
            assert!(s.contains("cannot trigger"), "at {w}:\n{s}");
        }
    }
    // A DAG of the jobs folder is triggered.
    let mut a = showing(vec![run(17, "etl-nightly", "load", "failed")]);
    a.on_daemon(DaemonEvent::Dags(vec![dag]));
    assert_eq!(
        press(&mut a, 't'),
        vec![Command::Trigger("etl-nightly".into())]
    );
}

#[test]
fn the_tab_count_says_how_many_of_its_runs_the_list_holds() {
    let mut a = app();
    for (w, h) in SIZES {
        let s = screen_text(&draw(&a, w, h));
        assert!(s.contains("1 All 5 of 133 │"), "at {w}:\n{s}");
        assert!(s.contains("2 Running 3 │"), "at {w}:\n{s}");
    }
    a.update(Action::SelectTab(3));
    a.on_daemon(DaemonEvent::Window(vec![run(8, "etl", "load", "failed")]));
    let s = screen_text(&draw(&a, 80, 24));
    assert!(s.contains("4 Failed 1 of 3"), "{s}");
    assert!(s.contains("1 All 133 │"), "{s}");
    let all: Vec<RunView> = (0..3).map(|i| run(i, "etl", "load", "failed")).collect();
    a.on_daemon(DaemonEvent::Window(all));
    let s = screen_text(&draw(&a, 80, 24));
    assert!(s.contains("4 Failed 3 "), "all held: no \"of\":\n{s}");
}

#[test]
fn after_triggers_and_hooks_are_not_credited_to_cron() {
    let mut a = app();
    a.on_daemon(DaemonEvent::Events(vec![
        event(
            1,
            "DAG run created by cron slot 2026-11-29T11:00:00Z",
            "cron",
        ),
        event(
            2,
            "DAG run created by after etl-nightly (DAG run 1)",
            "cron",
        ),
        event(3, "DAG run created by on_failure hook of DAG run 2", "cron"),
        event(
            4,
            "DAG run created by manual trigger by alice via ax",
            "alice via ax",
        ),
    ]));
    a.update(Action::Show(View::Events));
    for (w, h) in SIZES {
        let s = screen_text(&draw(&a, w, h));
        let actor = |seq| {
            cell(&s, &row(&s, seq), "ACTOR", "REASON")
                .trim()
                .to_string()
        };
        assert_eq!(actor(1), "cron", "at {w}:\n{s}");
        assert_eq!(actor(2), "after etl-nightly", "at {w}:\n{s}");
        assert_eq!(actor(3), "on_failure hook", "at {w}:\n{s}");
        assert_eq!(actor(4), "alice via ax", "at {w}:\n{s}");
    }
}

#[test]
fn the_next_fire_shows_the_dags_zone() {
    let mut a = app();
    a.on_daemon(DaemonEvent::Dags(vec![DagView {
        name: "paris-report".into(),
        file: "/etc/ax/jobs.d/paris-report.toml".into(),
        schedule: Some("0 16 * * *".into()),
        timezone: Some("Europe/Paris".into()),
        next_fire: t("15:00:00"),
        ..DagView::default()
    }]));
    a.update(Action::Show(View::Dags));
    for (w, h) in SIZES {
        let s = screen_text(&draw(&a, w, h));
        assert!(s.contains("Sun 16:00 Europe/Paris in 3h"), "at {w}:\n{s}");
        assert!(
            s.contains("next Sun 16:00 Europe/Paris in 3h"),
            "at {w}:\n{s}"
        );
    }
}

#[test]
fn every_cancelled_row_asks_once_who_cancelled_it() {
    let mut a = app();
    let mut gone = run(20, "etl-nightly", "load", "cancelled");
    gone.finished_at = t("11:59:00");
    let mut upstream = run(21, "etl-nightly", "report", "cancelled");
    upstream.finished_at = t("11:59:00");
    upstream.reason = Some("upstream_failed: load".into());
    let window = vec![run(19, "etl-nightly", "extract", "waiting"), gone, upstream];
    let asked = a.on_daemon(DaemonEvent::Window(window.clone()));
    assert!(asked.contains(&Command::FetchCancelledBy(20)), "{asked:?}");
    assert!(asked.contains(&Command::FetchCancelledBy(21)), "{asked:?}");
    // The next window asks nothing again.
    let again = a.on_daemon(DaemonEvent::Window(window.clone()));
    assert!(
        !again
            .iter()
            .any(|c| matches!(c, Command::FetchCancelledBy(_))),
        "{again:?}"
    );
    for run in [20, 21] {
        a.on_daemon(DaemonEvent::CancelledBy {
            run,
            actor: Some("bob (uid 1001) via ax".into()),
        });
    }
    each_size(&a, |s, w| {
        assert!(row(s, 20).contains("cancelled by bob"), "at {w}:\n{s}");
        assert!(row(s, 21).contains("cancelled by bob"), "at {w}:\n{s}");
    });
    let s = screen_text(&draw(&a, 150, 30));
    assert!(
        row(&s, 21).contains("cancelled by bob (uid 1001) via ax (upstream_failed: load)"),
        "{s}"
    );
    // Retried and cancelled again: asked again.
    let mut window = window;
    window[1].finished_at = t("11:59:30");
    let asked = a.on_daemon(DaemonEvent::Window(window));
    assert_eq!(
        asked
            .iter()
            .filter(|c| matches!(c, Command::FetchCancelledBy(_)))
            .collect::<Vec<_>>(),
        vec![&Command::FetchCancelledBy(20)]
    );
}

#[test]
fn widths_keep_the_rest_columns_room_and_give_capped_columns_the_spare() {
    use ax_clients::console::columns::{Kind, col, widths};
    let cols = [
        col("ID", Kind::Fixed),
        col("NAME", Kind::Name),
        col("POOL", Kind::Optional(2)),
        col("ACTOR", Kind::Optional(1)).at_most(8),
        col("WHY", Kind::Rest).keeping(24),
    ];
    let rows = vec![vec![
        "7".to_string(),
        "n".repeat(20),
        "default".to_string(),
        "alice (uid 1000)".to_string(),
        "w".repeat(40),
    ]];
    // Wide: all whole, WHY takes the rest.
    assert_eq!(
        widths(&cols, &rows, 100),
        vec![
            Some(2),
            Some(20),
            Some(7),
            Some(16),
            Some(100 - 2 - 20 - 7 - 16 - 4)
        ]
    );
    // POOL goes for WHY's 24; ACTOR takes what WHY has past its 24.
    assert_eq!(
        widths(&cols, &rows, 62),
        vec![Some(2), Some(20), None, Some(13), Some(24)]
    );
    // Shorter: ACTOR at its cap of 8, then gone; WHY keeps its room.
    assert_eq!(
        widths(&cols, &rows, 57),
        vec![Some(2), Some(20), None, Some(8), Some(24)]
    );
    assert_eq!(
        widths(&cols, &rows, 50),
        vec![Some(2), Some(20), None, None, Some(26)]
    );
}

#[test]
fn a_dag_run_waiting_out_its_jitter_shows_its_planned_start() {
    let mut a = app();
    a.on_daemon(DaemonEvent::Dags(vec![DagView {
        name: "certbot".into(),
        file: "/etc/ax/jobs.d/certbot.toml".into(),
        schedule: Some("0 */12 * * *".into()),
        timezone: Some("UTC".into()),
        next_fire: t("15:00:00"),
        jitter: Some("12h".into()),
        planned_start: t("14:00:00"),
        ..DagView::default()
    }]));
    a.update(Action::Show(View::Dags));
    for (w, h) in SIZES {
        let s = screen_text(&draw(&a, w, h));
        assert!(s.contains("starts Sun 14:00 UTC in 2h"), "at {w}:\n{s}");
        assert!(s.contains("(jitter 12h)"), "at {w}:\n{s}");
    }
}
