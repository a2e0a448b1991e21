//! The console in a cluster (docs/console.md, "Views"): the nodes view
//! (`:nodes`), alive and dead nodes, and the single node that has no
//! cluster; the DAGs view flags a DAG whose alive nodes hold different
//! versions. Rendered with ratatui's TestBackend (insta snapshots).

use crate::support::*;
use ax_clients::console::keymap::action_for;
use ax_clients::console::state::{Action, App, Command, DaemonEvent, Mode, View};
use ax_protocol::api::{ClusterView, DagVersions, DagView, NodeVersion, NodeView};
use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

fn press(a: &mut App, code: KeyCode) -> Vec<Command> {
    let k = KeyEvent::new(code, KeyModifiers::NONE);
    match action_for(a.mode(), a.view(), k) {
        Some(action) => a.update(action),
        None => vec![],
    }
}

/// Three nodes: this one, another alive with work, one dead.
fn nodes() -> Vec<NodeView> {
    let node = |id: &str, host: &str, age_ms, alive, running| NodeView {
        id: id.into(),
        host: host.into(),
        version: "0.1.0".into(),
        slots: 8,
        heartbeat_ms: 2000,
        started_at: t("10:57:30").unwrap(),
        last_beat: t("11:59:59").unwrap(),
        beat_age_ms: age_ms,
        alive,
        this: false,
        running: Some(running),
    };
    vec![
        NodeView {
            this: true,
            ..node("web1-5f3a9c0d", "web1", 400, true, 3)
        },
        node("web2-4c1d9e07", "web2.example.org", 1_200, true, 8),
        NodeView {
            started_at: t("08:00:00").unwrap(),
            ..node("web3-a0b1c2d3", "web3", 95_000, false, 0)
        },
    ]
}

/// The fixture app of a node in a three-node cluster.
fn cluster_app() -> App {
    let mut a = app();
    let mut s = status();
    s.cluster = Some(Box::new(ClusterView {
        nodes: nodes(),
        runs: None,
    }));
    a.on_daemon(DaemonEvent::Status(Box::new(s)));
    a
}

#[test]
fn the_nodes_view_shows_alive_and_dead_nodes_at_80x24_and_200x50() {
    let mut a = cluster_app();
    a.update(Action::Show(View::Nodes));
    a.clear_status_line();
    for (w, h) in [(80, 24), (200, 50)] {
        let term = draw(&a, w, h);
        let screen = screen_text(&term);
        assert!(screen.contains("nodes (2 alive of 3)"), "{screen}");
        assert!(
            screen.contains("✗ DEAD") && screen.contains("● alive"),
            "{screen}"
        );
        insta::assert_snapshot!(format!("nodes_{w}x{h}"), term.backend());
    }
    let screen = screen_text(&draw(&a, 200, 50));
    for want in [
        "web2.example.org",
        "95.0s / 2.0s",
        "◀ this node",
        "10:57 (up 1h02m)",
    ] {
        assert!(screen.contains(want), "{want:?} in:\n{screen}");
    }
    // The selection moves over the nodes, and a filter narrows them.
    press(&mut a, KeyCode::Down);
    press(&mut a, KeyCode::Down);
    press(&mut a, KeyCode::Down);
    assert_eq!(a.selected_row(View::Nodes), 2);
    a.set_filter(View::Nodes, "web2");
    assert_eq!(a.shown_nodes().len(), 1);
}

#[test]
fn nodes_is_reachable_by_its_command_and_keeps_its_ages_fresh() {
    let mut a = cluster_app();
    press(&mut a, KeyCode::Char(':'));
    press(&mut a, KeyCode::Char('n'));
    press(&mut a, KeyCode::Tab);
    assert_eq!(a.command_line(), "nodes", "Tab completes a unique prefix");
    let asked = press(&mut a, KeyCode::Enter);
    assert_eq!((a.view(), a.mode().clone()), (View::Nodes, Mode::Main));
    assert_eq!(asked, vec![Command::FetchStatus]);
    // Heartbeats age with nothing changing: each tick asks again.
    assert_eq!(a.on_tick(now()), vec![Command::FetchStatus]);
    press(&mut a, KeyCode::Char('q'));
    assert_eq!(a.view(), View::Runs);
    assert!(a.on_tick(now()).is_empty(), "only the nodes view polls");
}

#[test]
fn a_single_node_says_it_has_no_cluster() {
    let mut a = app();
    a.update(Action::Show(View::Nodes));
    let screen = screen_text(&draw(&a, 120, 30));
    assert!(
        screen.contains("no cluster: this axd runs alone on SQLite"),
        "{screen}"
    );
    assert!(!screen.contains("NODE "), "no empty table:\n{screen}");
}

fn dag(name: &str, versions: DagVersions) -> DagView {
    DagView {
        name: name.into(),
        file: format!("/etc/ax/jobs.d/{name}.toml"),
        jobs: vec!["extract".into(), "load".into()],
        schedule: Some("0 3 * * *".into()),
        timezone: Some("UTC".into()),
        next_fire: t("15:00:00"),
        versions: Some(versions),
        ..DagView::default()
    }
}

fn cluster_dags() -> Vec<DagView> {
    let agreed = DagVersions {
        hash: Some("5f3a9c0d12e4b6a8".into()),
        agree: 3,
        differ: vec![],
    };
    let differing = DagVersions {
        hash: Some("89abcdef01234567".into()),
        agree: 1,
        differ: vec![
            NodeVersion {
                node: "web2-4c1d9e07".into(),
                hash: Some("0123abcd99999999".into()),
            },
            NodeVersion {
                node: "web3-a0b1c2d3".into(),
                hash: None,
            },
        ],
    };
    vec![
        dag("etl-nightly", differing),
        dag("report", agreed.clone()),
        dag("weekly", agreed),
    ]
}

#[test]
fn a_dag_whose_nodes_differ_is_flagged_in_the_dags_view() {
    let mut a = app();
    a.on_daemon(DaemonEvent::Dags(cluster_dags()));
    a.update(Action::Show(View::Dags));
    a.clear_status_line();
    for (w, h) in [(80, 24), (200, 50)] {
        let term = draw(&a, w, h);
        let screen = screen_text(&term);
        assert!(screen.contains("1 differ across nodes"), "{screen}");
        assert!(screen.contains("≠ DIFFERS"), "{screen}");
        insta::assert_snapshot!(format!("dags_differ_{w}x{h}"), term.backend());
    }
    // The selected (differing) DAG names the nodes and their versions.
    let screen = screen_text(&draw(&a, 200, 50));
    assert!(
        screen.contains(
            "≠ nodes differ: web2-4c1d9e07 has 0123abcd (this node 89abcdef); web3-a0b1c2d3 lacks it"
        ),
        "{screen}"
    );
    assert!(screen.contains("✓ 3 nodes agree"), "{screen}");
}
