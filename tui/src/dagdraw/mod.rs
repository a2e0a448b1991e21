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
pub fn nodes_of_dag(v: &ax_protocol::api::DagView) -> Vec<DagNode> {
    v.jobs
        .iter()
        .map(|j| DagNode {
            id: j.clone(),
            deps: v.deps.get(j).cloned().unwrap_or_default(),
        })
        .collect()
}

/// Nodes and run states from a `get_dag_run` answer.
pub fn nodes_of_dag_run(v: &ax_protocol::api::DagRunView) -> (Vec<DagNode>, Vec<Option<RunState>>) {
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
pub const LEGEND: &str =
    "○ waiting  ◷ delayed  ◌ ready  ▶ running  ✓ success  ✗ failed  ⊗ timed out  ⊘ cancelled";

// Connection bits of a cell.
const UP: u8 = 1;
const DOWN: u8 = 2;
const LEFT: u8 = 4;
const RIGHT: u8 = 8;

fn bits_char(b: u8) -> char {
    match b {
        0 => ' ',
        x if x == UP | DOWN || x == UP || x == DOWN => '│',
        x if x == LEFT | RIGHT || x == LEFT || x == RIGHT => '─',
        x if x == DOWN | RIGHT => '┌',
        x if x == DOWN | LEFT => '┐',
        x if x == UP | RIGHT => '└',
        x if x == UP | LEFT => '┘',
        x if x == UP | DOWN | RIGHT => '├',
        x if x == UP | DOWN | LEFT => '┤',
        x if x == DOWN | LEFT | RIGHT => '┬',
        x if x == UP | LEFT | RIGHT => '┴',
        _ => '┼',
    }
}

/// Lays out `nodes`; `mark(i)` is the state mark shown in node `i`.
/// Unknown deps are ignored; a cycle (which validation rejects) is broken
/// arbitrarily rather than looping.
pub fn layout(nodes: &[DagNode], mark: &dyn Fn(usize) -> char) -> Grid {
    let n = nodes.len();
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

    // 1. layers by longest path (iterative, bounded against cycles)
    let mut layer = vec![0usize; n];
    for _ in 0..n {
        let mut changed = false;
        for i in 0..n {
            for &d in &deps[i] {
                if d != i && layer[i] < layer[d] + 1 && layer[d] < n {
                    layer[i] = layer[d] + 1;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    let depth = layer.iter().copied().max().map_or(0, |m| m + 1);

    // 2. vertices: real nodes, then dummies; edges between adjacent layers
    let mut v_layer: Vec<usize> = layer.clone();
    let mut v_width: Vec<usize> = nodes.iter().map(|d| d.id.chars().count() + 4).collect();
    let mut edges: Vec<(usize, usize)> = Vec::new();
    for (i, ds) in deps.iter().enumerate() {
        for &d in ds {
            if layer[d] >= layer[i] {
                continue; // cycle remnant
            }
            let mut prev = d;
            for l in layer[d] + 1..layer[i] {
                v_layer.push(l);
                v_width.push(1);
                edges.push((prev, v_layer.len() - 1));
                prev = v_layer.len() - 1;
            }
            edges.push((prev, i));
        }
    }
    let nv = v_layer.len();
    let mut ups: Vec<Vec<usize>> = vec![Vec::new(); nv];
    let mut downs: Vec<Vec<usize>> = vec![Vec::new(); nv];
    for &(a, b) in &edges {
        downs[a].push(b);
        ups[b].push(a);
    }

    // 3. order within layers, barycenter sweeps
    let mut rows: Vec<Vec<usize>> = vec![Vec::new(); depth];
    for v in 0..nv {
        rows[v_layer[v]].push(v);
    }
    let mut pos = vec![0f64; nv];
    let reindex = |rows: &Vec<Vec<usize>>, pos: &mut Vec<f64>| {
        for row in rows {
            for (k, v) in row.iter().enumerate() {
                pos[*v] = k as f64;
            }
        }
    };
    reindex(&rows, &mut pos);
    for sweep in 0..8 {
        let down = sweep % 2 == 0;
        let order: Vec<usize> = if down {
            (1..depth).collect()
        } else {
            (0..depth.saturating_sub(1)).rev().collect()
        };
        for l in order {
            let neighbours = if down { &ups } else { &downs };
            let mut keyed: Vec<(f64, f64, usize)> = rows[l]
                .iter()
                .map(|&v| {
                    let ns = &neighbours[v];
                    let bc = if ns.is_empty() {
                        pos[v]
                    } else {
                        ns.iter().map(|u| pos[*u]).sum::<f64>() / ns.len() as f64
                    };
                    (bc, pos[v], v)
                })
                .collect();
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
            rows[l] = keyed.into_iter().map(|k| k.2).collect();
            reindex(&rows, &mut pos);
        }
    }

    // 4. x positions: the first layer left to right; each later layer
    //    tries to sit under the middle of its parents, keeping order and a
    //    two-column gap.
    // Placement starts at a margin so children can sit left of their
    // parents' left edge; the unused margin is trimmed afterwards.
    let margin = v_width.iter().copied().max().unwrap_or(0);
    let mut vx = vec![0usize; nv];
    for (l, row) in rows.iter().enumerate() {
        let mut next_free = if l == 0 { margin } else { 0 };
        for &v in row {
            let desired = if l == 0 || ups[v].is_empty() {
                next_free
            } else {
                let mid = ups[v]
                    .iter()
                    .map(|u| vx[*u] + v_width[*u] / 2)
                    .sum::<usize>()
                    / ups[v].len();
                mid.saturating_sub(v_width[v] / 2)
            };
            vx[v] = desired.max(next_free);
            next_free = vx[v] + v_width[v] + 2;
        }
    }
    // A parent moves right to sit over the middle of its children (a
    // fan-out opens below it), when its right neighbour leaves room.
    for l in (0..depth.saturating_sub(1)).rev() {
        let row = &rows[l];
        for k in (0..row.len()).rev() {
            let v = row[k];
            if downs[v].is_empty() {
                continue;
            }
            let mid = downs[v]
                .iter()
                .map(|c| vx[*c] + v_width[*c] / 2)
                .sum::<usize>()
                / downs[v].len();
            let want = mid.saturating_sub(v_width[v] / 2);
            let limit = row
                .get(k + 1)
                .map_or(usize::MAX, |r| vx[*r].saturating_sub(v_width[v] + 2));
            if want > vx[v] {
                vx[v] = want.min(limit).max(vx[v]);
            }
        }
    }
    let left = vx.iter().copied().min().unwrap_or(0);
    for x in &mut vx {
        *x -= left;
    }
    let width = (0..nv)
        .map(|v| vx[v] + v_width[v])
        .max()
        .unwrap_or(0)
        .max(1);
    let center = |v: usize| vx[v] + v_width[v] / 2;

    // 5. tracks per gap (see `route`), then rows
    let mut gaps: Vec<route::Gap> = Vec::with_capacity(depth.saturating_sub(1));
    for l in 0..depth.saturating_sub(1) {
        let in_gap: Vec<(usize, usize)> = edges
            .iter()
            .copied()
            .filter(|(a, _)| v_layer[*a] == l)
            .collect();
        gaps.push(route::route_gap(&in_gap, &center));
    }
    let gap_height: Vec<usize> = gaps.iter().map(|g| 2 + g.tracks).collect();
    let crossings = gaps.iter().map(|g| g.crossings).sum();
    let mut row_y = vec![0usize; depth];
    for l in 1..depth {
        row_y[l] = row_y[l - 1] + 1 + gap_height[l - 1];
    }
    let height = if depth == 0 { 0 } else { row_y[depth - 1] + 1 };

    let mut bits = vec![0u8; width * height];
    let mut cells = vec![' '; width * height];
    let mut owner = vec![None; width * height];
    let set_bits = |x: usize, y: usize, b: u8, bits: &mut Vec<u8>| bits[y * width + x] |= b;
    // A vertical line from y0 to y1 inclusive at x.
    let vline = |x: usize, y0: usize, y1: usize, bits: &mut Vec<u8>| {
        for y in y0..=y1 {
            let mut b = 0;
            if y > y0 {
                b |= UP;
            }
            if y < y1 {
                b |= DOWN;
            }
            set_bits(x, y, b, bits);
        }
    };
    let mut arrows = Vec::new();
    for (a, b) in edges.iter().copied() {
        let l = v_layer[a];
        let top = row_y[l] + 1;
        let bottom = row_y[l + 1] - 1;
        let (sx, tx) = (center(a), center(b));
        if sx == tx {
            vline(sx, top, bottom, &mut bits);
            set_bits(sx, top, UP, &mut bits);
        } else {
            let t = gaps[l].track.get(&(a, b)).copied().unwrap_or(0);
            let ty = top + 1 + t;
            vline(sx, top, ty, &mut bits);
            set_bits(sx, top, UP, &mut bits);
            let (lo, hi) = (sx.min(tx), sx.max(tx));
            for x in lo..=hi {
                let mut b = 0;
                if x > lo {
                    b |= LEFT;
                }
                if x < hi {
                    b |= RIGHT;
                }
                set_bits(x, ty, b, &mut bits);
            }
            vline(tx, ty, bottom, &mut bits);
        }
        if b < n {
            arrows.push((tx, bottom));
        } else {
            set_bits(tx, bottom, DOWN, &mut bits);
        }
    }
    for (i, b) in bits.iter().enumerate() {
        cells[i] = bits_char(*b);
    }
    for (x, y) in arrows {
        cells[y * width + x] = '▼';
    }
    // dummy nodes: a vertical line through their row
    for v in n..nv {
        cells[row_y[v_layer[v]] * width + vx[v]] = '│';
    }
    let mut boxes = Vec::with_capacity(n);
    for i in 0..n {
        let y = row_y[layer[i]];
        let label = format!("[{} {}]", mark(i), nodes[i].id);
        for (k, ch) in label.chars().enumerate() {
            let x = vx[i] + k;
            if x < width {
                cells[y * width + x] = ch;
                owner[y * width + x] = Some(i);
            }
        }
        boxes.push((vx[i], y, v_width[i]));
    }
    Grid {
        width,
        height,
        cells,
        owner,
        boxes,
        layers: layer,
        crossings,
    }
}

/// The grid as text; with `colour`, node boxes get the ANSI colour that
/// `colour(i)` returns (e.g. `"32"` for green).
pub fn render_text(grid: &Grid, colour: Option<&dyn Fn(usize) -> &'static str>) -> String {
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
pub fn state_ansi(state: Option<RunState>) -> &'static str {
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
