//! Snapshots of the ASCII DAG layout for the common shapes (chain,
//! fan-out, fan-in, diamond) and a seeded random 30-node DAG; shapes that
//! have a planar drawing are drawn without crossings.

use ax_clients::dagdraw::{DagNode, Grid, layout};

fn node(id: &str, deps: &[&str]) -> DagNode {
    DagNode {
        id: id.into(),
        deps: deps.iter().map(|d| d.to_string()).collect(),
    }
}

fn draw(nodes: &[DagNode]) -> Grid {
    layout(nodes, &|_| '·')
}

fn text(g: &Grid) -> String {
    g.lines().join("\n")
}

fn chain() -> Vec<DagNode> {
    vec![
        node("extract", &[]),
        node("transform", &["extract"]),
        node("load", &["transform"]),
    ]
}

fn fan_out2() -> Vec<DagNode> {
    vec![
        node("load", &[]),
        node("load_left", &["load"]),
        node("load_right", &["load"]),
    ]
}

fn fan_out4() -> Vec<DagNode> {
    vec![
        node("split", &[]),
        node("part_a", &["split"]),
        node("part_b", &["split"]),
        node("part_c", &["split"]),
        node("part_d", &["split"]),
    ]
}

fn fan_in() -> Vec<DagNode> {
    vec![
        node("fetch_sales", &[]),
        node("fetch_stock", &[]),
        node("fetch_ads", &[]),
        node("report", &["fetch_sales", "fetch_stock", "fetch_ads"]),
    ]
}

fn diamond() -> Vec<DagNode> {
    vec![
        node("start", &[]),
        node("left", &["start"]),
        node("right", &["start"]),
        node("join", &["left", "right"]),
    ]
}

/// A deterministic 30-node DAG (xorshift from a fixed seed).
fn random30() -> Vec<DagNode> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..30usize)
        .map(|i| {
            let mut deps: Vec<String> = (i.saturating_sub(6)..i)
                .filter(|_| rnd() % 3 == 0)
                .map(|d| format!("j{d}"))
                .collect();
            deps.truncate(3);
            DagNode {
                id: format!("j{i}"),
                deps,
            }
        })
        .collect()
}

/// The shapes that have a planar drawing are drawn without a crossing.
#[test]
fn common_shapes_have_no_crossings() {
    for (name, nodes) in [
        ("chain", chain()),
        ("fan_out2", fan_out2()),
        ("fan_out4", fan_out4()),
        ("fan_in", fan_in()),
        ("diamond", diamond()),
    ] {
        let g = draw(&nodes);
        assert_eq!(g.crossings, 0, "{name}:\n{}", text(&g));
        assert!(!text(&g).contains('┼'), "{name}:\n{}", text(&g));
        insta::assert_snapshot!(name, text(&g));
    }
}

/// A fan-out opens below its parent in one line (no track per child).
#[test]
fn a_fan_out_splits_on_one_line() {
    let g = draw(&fan_out2());
    let lines = g.lines();
    assert_eq!(g.height, 5, "{}", text(&g));
    assert!(lines[2].contains('┴') && lines[2].contains('┌') && lines[2].contains('┐'));
}

#[test]
fn random_30_nodes_seeded() {
    let g = draw(&random30());
    insta::assert_snapshot!("random30", text(&g));
}
