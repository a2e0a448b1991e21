//! `ax status`'s lines for the nodes of a cluster (a PostgreSQL store),
//! and `ax dags`'s lines for DAGs whose nodes hold different versions.

use ax_protocol::api::{ClusterRuns, DagView, NodeView};
use ax_shared::RunState;

/// `in the cluster: 3 running, 1 ready, 0 waiting, 0 delayed; 2 failed
/// in the last hour`.
pub(crate) fn cluster_runs_line(runs: &ClusterRuns) -> String {
    let n = |s: RunState| runs.unfinished.get(&s).copied().unwrap_or(0);
    format!(
        "in the cluster: {} running, {} ready, {} waiting, {} delayed; {} failed in the last hour",
        n(RunState::Running),
        n(RunState::Ready),
        n(RunState::Waiting),
        n(RunState::Delayed),
        runs.failed_last_hour
    )
}

/// One line per DAG the alive nodes disagree on: `etl: DIFFERS: node-b
/// has 0123abcd (this node 89abcdef); node-c lacks it`.
pub(crate) fn differences(dags: &[DagView]) -> Vec<String> {
    dags.iter()
        .filter_map(|d| {
            let v = d.versions.as_ref()?;
            (!v.agrees()).then(|| format!("{}: DIFFERS: {}", d.name, v.describe()))
        })
        .collect()
}

/// One line per node: id, host, alive or DEAD with its heartbeat's age,
/// slots, attempts running there, version, start, and which node answered.
pub(crate) fn node_lines(nodes: &[NodeView]) -> Vec<String> {
    let mut out = vec![format!(
        "nodes: {} alive of {}",
        nodes.iter().filter(|n| n.alive).count(),
        nodes.len()
    )];
    for n in nodes {
        out.push(format!(
            "  {:<24} {:<16} {:<5} beat {:.1}s ago (every {:.1}s)  slots {}{}  v{}  since {}{}",
            n.id,
            n.host,
            if n.alive { "alive" } else { "DEAD" },
            n.beat_age_ms as f64 / 1000.0,
            n.heartbeat_ms as f64 / 1000.0,
            n.slots,
            n.running
                .map(|r| format!("  running {r}"))
                .unwrap_or_default(),
            n.version,
            n.started_at,
            if n.this { "  (this node)" } else { "" }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_runs_name_every_unfinished_state_and_the_failures() {
        let runs = ClusterRuns {
            unfinished: [(RunState::Running, 3), (RunState::Delayed, 1)].into(),
            failed_last_hour: 2,
        };
        assert_eq!(
            cluster_runs_line(&runs),
            "in the cluster: 3 running, 0 ready, 0 waiting, 1 delayed; 2 failed in the last hour"
        );
    }
    use ax_protocol::api::{DagVersions, NodeVersion};

    #[test]
    fn dags_whose_nodes_differ_are_named_with_the_nodes() {
        let dag = |name: &str, differ: Vec<NodeVersion>| DagView {
            name: name.into(),
            versions: Some(DagVersions {
                hash: Some("89abcdef01234567".into()),
                agree: 3 - differ.len() as u32,
                differ,
            }),
            ..DagView::default()
        };
        let lines = differences(&[
            dag("report", vec![]),
            dag(
                "etl",
                vec![
                    NodeVersion {
                        node: "node-b".into(),
                        hash: Some("0123abcd99999999".into()),
                    },
                    NodeVersion {
                        node: "node-c".into(),
                        hash: None,
                    },
                ],
            ),
        ]);
        assert_eq!(
            lines,
            ["etl: DIFFERS: node-b has 0123abcd (this node 89abcdef); node-c lacks it"]
        );
    }

    #[test]
    fn dead_nodes_stand_out() {
        let node = |id: &str, alive, this| NodeView {
            id: id.into(),
            host: "web1".into(),
            version: "0.1.0".into(),
            slots: 8,
            heartbeat_ms: 2000,
            beat_age_ms: if alive { 400 } else { 9000 },
            alive,
            this,
            running: alive.then_some(3),
            ..NodeView::default()
        };
        let l = node_lines(&[node("a", true, true), node("b", false, false)]);
        assert!(l[1].contains("slots 8  running 3  v0.1.0"), "{}", l[1]);
        assert!(l[2].contains("slots 8  v0.1.0"), "{}", l[2]);
        assert_eq!(l[0], "nodes: 1 alive of 2");
        assert!(
            l[1].contains("alive beat 0.4s ago") && l[1].ends_with("(this node)"),
            "{}",
            l[1]
        );
        assert!(
            l[2].contains("DEAD  beat 9.0s ago (every 2.0s)"),
            "{}",
            l[2]
        );
    }
}
