//! The console in a cluster (SPEC §9): the DAGs view flags a DAG whose
//! alive nodes hold different versions, rendered with ratatui's
//! TestBackend (insta snapshots).

mod common;

use ax_shared::api::{DagVersions, DagView, NodeVersion};
use ax_tui::console::state::{Action, DaemonEvent, View};
use common::*;

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
    a.status_line = None;
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
