//! The ASCII DAG layout: no overlapping nodes, every edge drawn, layers
//! respect deps, and readable at 50 nodes.

use ax_clients::dagdraw::{DagNode, Grid, layout, state_mark};
use proptest::prelude::*;

fn node(id: &str, deps: &[&str]) -> DagNode {
    DagNode {
        id: id.into(),
        deps: deps.iter().map(|d| d.to_string()).collect(),
    }
}

fn weekly() -> Vec<DagNode> {
    vec![
        node("fetch_sales", &[]),
        node("fetch_stock", &[]),
        node("fetch_ads", &[]),
        node("calc_report", &["fetch_sales", "fetch_stock", "fetch_ads"]),
        node("email", &["calc_report"]),
    ]
}

/// Follows line characters from just below `from`'s box; true if the path
/// reaches `to`'s box top (the `▼` above it).
fn connected(g: &Grid, from: usize, to: usize) -> bool {
    let (fx, fy, fw) = g.boxes[from];
    let (tx, ty, tw) = g.boxes[to];
    let start = (fx + fw / 2, fy + 1);
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![start];
    while let Some((x, y)) = stack.pop() {
        if y >= g.height || x >= g.width || !seen.insert((x, y)) {
            continue;
        }
        let c = g.at(x, y);
        if c == '▼' && y + 1 == ty && x >= tx && x < tx + tw {
            return true;
        }
        let (up, down, left, right) = match c {
            '│' => (true, true, false, false),
            '─' => (false, false, true, true),
            '┌' => (false, true, false, true),
            '┐' => (false, true, true, false),
            '└' => (true, false, false, true),
            '┘' => (true, false, true, false),
            '├' => (true, true, false, true),
            '┤' => (true, true, true, false),
            '┬' => (false, true, true, true),
            '┴' => (true, false, true, true),
            '┼' => (true, true, true, true),
            _ => (false, false, false, false),
        };
        // travel downward only (edges go down), sideways along tracks
        let _ = up;
        if down {
            stack.push((x, y + 1));
        }
        if left && x > 0 {
            stack.push((x - 1, y));
        }
        if right {
            stack.push((x + 1, y));
        }
    }
    false
}

fn check(nodes: &[DagNode]) -> Grid {
    let g = layout(nodes, &|_| '·');
    // no overlapping boxes
    for (i, a) in g.boxes.iter().enumerate() {
        for b in &g.boxes[i + 1..] {
            let overlap = a.1 == b.1 && a.0 < b.0 + b.2 && b.0 < a.0 + a.2;
            assert!(
                !overlap,
                "boxes overlap: {a:?} {b:?}\n{}",
                g.lines().join("\n")
            );
        }
    }
    // layer order respects deps, every edge drawn
    for (i, n) in nodes.iter().enumerate() {
        for d in &n.deps {
            let j = nodes.iter().position(|x| &x.id == d).unwrap();
            assert!(g.layers[j] < g.layers[i], "{d} above {}", n.id);
            assert!(g.boxes[j].1 < g.boxes[i].1);
            assert!(
                connected(&g, j, i),
                "edge {d} -> {} not drawn\n{}",
                n.id,
                g.lines().join("\n")
            );
        }
    }
    g
}

#[test]
fn weekly_report_is_a_diamond() {
    let g = check(&weekly());
    let marks = ["✓", "✓", "▶", "○", "○"];
    let g2 = layout(&weekly(), &|i| marks[i].chars().next().unwrap());
    let text = g2.lines().join("\n");
    assert!(text.contains("[✓ fetch_sales]"));
    assert!(text.contains("[○ email]"));
    assert_eq!(g.layers, vec![0, 0, 0, 1, 2]);
    insta_like_snapshot(&text);
}

fn insta_like_snapshot(text: &str) {
    // Three fetches on the first row, the report below them, mail last.
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].contains("fetch_sales")
            && lines[0].contains("fetch_stock")
            && lines[0].contains("fetch_ads"),
        "{text}"
    );
    assert_eq!(
        text.matches('▼').count(),
        2,
        "one arrow into calc_report and one into email:\n{text}"
    );
}

#[test]
fn fifty_nodes_stay_readable() {
    let mut nodes = Vec::new();
    for i in 0..50 {
        let deps: Vec<String> = match i {
            0..=4 => vec![],
            _ => vec![format!("n{}", i - 5), format!("n{}", (i * 7) % i)],
        };
        nodes.push(DagNode {
            id: format!("n{i}"),
            deps: {
                let mut d = deps;
                d.dedup();
                d
            },
        });
    }
    let g = check(&nodes);
    assert!(g.width < 200, "width {}", g.width);
}

#[test]
fn long_edges_pass_through_dummy_columns() {
    check(&[
        node("a", &[]),
        node("b", &["a"]),
        node("c", &["b"]),
        node("d", &["a", "c"]),
    ]);
}

#[test]
fn marks_are_distinct() {
    let states = ax_shared::RunState::ALL;
    let mut marks: Vec<char> = states.iter().map(|s| state_mark(Some(*s))).collect();
    marks.sort();
    marks.dedup();
    assert_eq!(marks.len(), states.len());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(60))]
    #[test]
    fn random_dags_lay_out_correctly(n in 1usize..30, seed in any::<u64>()) {
        let mut x = seed | 1;
        let mut rnd = move || { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x };
        let nodes: Vec<DagNode> = (0..n).map(|i| {
            let mut deps: Vec<String> = (0..i).filter(|_| rnd() % 4 == 0).map(|d| format!("j{d}")).collect();
            deps.truncate(4);
            DagNode { id: format!("j{i}"), deps }
        }).collect();
        check(&nodes);
    }
}
