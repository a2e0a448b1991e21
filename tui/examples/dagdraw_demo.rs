//! Prints a few layouts: `cargo run -p ax-clients --example dagdraw_demo`.
use ax_clients::dagdraw::{DagNode, layout};

fn main() {
    let n = |id: &str, deps: &[&str]| DagNode {
        id: id.into(),
        deps: deps.iter().map(|d| d.to_string()).collect(),
    };
    let weekly = vec![
        n("fetch_sales", &[]),
        n("fetch_stock", &[]),
        n("fetch_ads", &[]),
        n("calc_report", &["fetch_sales", "fetch_stock", "fetch_ads"]),
        n("email", &["calc_report"]),
    ];
    println!("{}\n", layout(&weekly, &|_| '○').lines().join("\n"));
    let mixed = vec![
        n("a", &[]),
        n("b", &["a"]),
        n("c", &["b"]),
        n("d", &["a", "c"]),
        n("e", &["a"]),
        n("f", &["e", "b"]),
    ];
    println!("{}", layout(&mixed, &|_| '✓').lines().join("\n"));
}
