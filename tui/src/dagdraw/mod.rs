//! ASCII DAG layout (used by `ax dag` and the console's DAG view).
//!
//! A small Sugiyama-style layout, written here rather than taken from a
//! crate so the console and the CLI draw the same picture and the code can
//! be tuned for terminals:
//!
//! 1. layers by longest path from the roots (a job sits below all its deps);
//! 2. edges that skip layers get one-cell dummy nodes in between, so every
//!    edge joins adjacent layers;
//! 3. crossing reduction: barycenter sweeps down and up the layers;
//! 4. each layer is one row of `[mark id]` boxes, centred;
//! 5. between two layers every edge that bends gets its own horizontal
//!    track (interval colouring), so edges never share a horizontal segment
//!    and every edge can be followed by eye; lines are joined with box
//!    drawing characters (`│ ─ ┌ ┐ └ ┘ ├ ┤ ┬ ┴ ┼`) and enter a node with `▼`.

mod draw;
mod layers;
mod route;

use std::collections::HashMap;

use ax_shared::RunState;

/// One node: its id and the ids it depends on.
#[derive(Clone, Debug)]
pub struct DagNode {
    pub id: String,
    pub deps: Vec<String>,
}

/// A laid-out DAG: a character grid plus where each node landed.
#[derive(Clone, Debug)]
pub struct Grid {
    pub width: usize,
    pub height: usize,
    pub cells: Vec<char>,
    /// For each cell, the node whose box it belongs to.
    pub owner: Vec<Option<usize>>,
    /// (x, y, width) of each node's box, by node index.
    pub boxes: Vec<(usize, usize, usize)>,
    /// Layer of each node, by node index.
    pub layers: Vec<usize>,
    /// Places where two edges cross: zero unless the graph forces them.
    pub crossings: usize,
}

impl Grid {
    pub fn at(&self, x: usize, y: usize) -> char {
        self.cells[y * self.width + x]
    }
    pub fn owner_at(&self, x: usize, y: usize) -> Option<usize> {
        self.owner[y * self.width + x]
    }
    /// The grid as plain lines (trailing spaces trimmed).
    pub fn lines(&self) -> Vec<String> {
        (0..self.height)
            .map(|y| {
                let s: String = self.cells[y * self.width..(y + 1) * self.width]
                    .iter()
                    .collect();
                s.trim_end().to_string()
            })
            .collect()
    }
}

/// Nodes of a DAG's definition (a `get_dag` answer), in file order.
pub(crate) fn nodes_of_dag(v: &ax_protocol::api::DagView) -> Vec<DagNode> {
    v.jobs
        .iter()
        .map(|j| DagNode {
            id: j.clone(),
            deps: v.deps.get(j).cloned().unwrap_or_default(),
        })
        .collect()
}

/// Nodes and run states from a `get_dag_run` answer.
pub(crate) fn nodes_of_dag_run(
    v: &ax_protocol::api::DagRunView,
) -> (Vec<DagNode>, Vec<Option<RunState>>) {
    let nodes = v
        .jobs
        .iter()
        .map(|j| DagNode {
            id: j.id.clone(),
            deps: j.deps.clone(),
        })
        .collect();
    let states = v.jobs.iter().map(|j| j.state).collect();
    (nodes, states)
}

/// The mark shown in a node for a run state (`None`: no run).
pub fn state_mark(state: Option<RunState>) -> char {
    match state {
        Some(RunState::Waiting) => '○',
        Some(RunState::Delayed) => '◷',
        Some(RunState::Ready) => '◌',
        Some(RunState::Running) => '▶',
        Some(RunState::Success) => '✓',
        Some(RunState::Failed) => '✗',
        Some(RunState::TimedOut) => '⊗',
        Some(RunState::Cancelled) => '⊘',
        None => '·',
    }
}

/// Legend of the marks, one line.
pub(crate) const LEGEND: &str =
    "○ waiting  ◷ delayed  ◌ ready  ▶ running  ✓ success  ✗ failed  ⊗ timed out  ⊘ cancelled";

/// Lays out `nodes`; `mark(i)` is the state mark shown in node `i`.
/// Unknown deps are ignored; a cycle (which validation rejects) is broken
/// arbitrarily rather than looping.
pub fn layout(nodes: &[DagNode], mark: &dyn Fn(usize) -> char) -> Grid {
    let index: HashMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, d)| (d.id.as_str(), i))
        .collect();
    let deps: Vec<Vec<usize>> = nodes
        .iter()
        .map(|d| {
            d.deps
                .iter()
                .filter_map(|x| index.get(x.as_str()).copied())
                .collect()
        })
        .collect();
    let widths = nodes.iter().map(|d| d.id.chars().count() + 4).collect();
    // Phases 1 to 4 (see the module's comment).
    let g = layers::layered(&deps, widths);
    let rows = layers::order(&g);
    let vx = layers::place(&g, &rows);
    let width = (0..vx.len())
        .map(|v| vx[v] + g.width[v])
        .max()
        .unwrap_or(0)
        .max(1);
    let center = |v: usize| vx[v] + g.width[v] / 2;

    // 5. tracks per gap (see `route`), then rows and the edges' lines
    let depth = g.depth;
    let gaps: Vec<route::Gap> = (0..depth.saturating_sub(1))
        .map(|l| {
            let in_gap: Vec<(usize, usize)> = g
                .edges
                .iter()
                .copied()
                .filter(|(a, _)| g.layer[*a] == l)
                .collect();
            route::route_gap(&in_gap, &center)
        })
        .collect();
    let crossings = gaps.iter().map(|gap| gap.crossings).sum();
    let mut row_y = vec![0usize; depth];
    for l in 1..depth {
        row_y[l] = row_y[l - 1] + 1 + 2 + gaps[l - 1].tracks;
    }
    let height = if depth == 0 { 0 } else { row_y[depth - 1] + 1 };
    let mut cells = draw::edges(&g, &gaps, &row_y, (width, height), &center);

    // dummy nodes: a vertical line through their row
    for v in g.n..vx.len() {
        cells[row_y[g.layer[v]] * width + vx[v]] = '│';
    }
    let mut owner = vec![None; width * height];
    let mut boxes = Vec::with_capacity(g.n);
    for i in 0..g.n {
        let y = row_y[g.layer[i]];
        let label = format!("[{} {}]", mark(i), nodes[i].id);
        for (k, ch) in label.chars().enumerate() {
            let x = vx[i] + k;
            if x < width {
                cells[y * width + x] = ch;
                owner[y * width + x] = Some(i);
            }
        }
        boxes.push((vx[i], y, g.width[i]));
    }
    Grid {
        width,
        height,
        cells,
        owner,
        boxes,
        layers: g.node_layer,
        crossings,
    }
}

/// The grid as text; with `colour`, node boxes get the ANSI colour that
/// `colour(i)` returns (e.g. `"32"` for green).
pub(crate) fn render_text(grid: &Grid, colour: Option<&dyn Fn(usize) -> &'static str>) -> String {
    let mut out = String::new();
    for y in 0..grid.height {
        let mut line = String::new();
        let mut current: Option<usize> = None;
        for x in 0..grid.width {
            let o = grid.owner_at(x, y);
            if let Some(c) = colour
                && o != current
            {
                if current.is_some() {
                    line.push_str("\x1b[0m");
                }
                if let Some(i) = o {
                    line.push_str(&format!("\x1b[{}m", c(i)));
                }
                current = o;
            }
            line.push(grid.at(x, y));
        }
        if current.is_some() {
            line.push_str("\x1b[0m");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// ANSI colour of a state (for `render_text`).
pub(crate) fn state_ansi(state: Option<RunState>) -> &'static str {
    match state {
        Some(RunState::Success) => "32",
        Some(RunState::Failed | RunState::TimedOut) => "31",
        Some(RunState::Running) => "36;1",
        Some(RunState::Delayed) => "33",
        Some(RunState::Cancelled) => "90",
        Some(RunState::Ready) => "34",
        Some(RunState::Waiting) | None => "37",
    }
}
