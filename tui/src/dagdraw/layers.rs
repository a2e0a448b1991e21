//! The layout's first three phases: layers by longest path, one-cell
//! dummy vertices on edges that skip layers, and the order within each
//! layer (barycenter sweeps).

/// The graph ready to place: the real nodes (`0..n`) then the dummies,
/// every edge joining adjacent layers.
pub(super) struct Layered {
    /// How many of the vertices are real nodes.
    pub(super) n: usize,
    /// Layer of each real node.
    pub(super) node_layer: Vec<usize>,
    /// How many layers.
    pub(super) depth: usize,
    /// Layer of each vertex.
    pub(super) layer: Vec<usize>,
    /// Width of each vertex's box (1 for a dummy).
    pub(super) width: Vec<usize>,
    /// `(upper, lower)` vertex pairs.
    pub(super) edges: Vec<(usize, usize)>,
    /// Each vertex's neighbours in the layer above and below.
    pub(super) ups: Vec<Vec<usize>>,
    pub(super) downs: Vec<Vec<usize>>,
}

/// Each node's layer: one below its deepest dependency (iterative,
/// bounded against cycles).
fn longest_path(deps: &[Vec<usize>]) -> Vec<usize> {
    let n = deps.len();
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
    layer
}

/// Layers the nodes (`deps[i]`: node `i`'s dependencies, `widths[i]`:
/// its box) and splits every edge that skips layers with dummies.
pub(super) fn layered(deps: &[Vec<usize>], widths: Vec<usize>) -> Layered {
    let node_layer = longest_path(deps);
    let depth = node_layer.iter().copied().max().map_or(0, |m| m + 1);
    let mut layer = node_layer.clone();
    let mut width = widths;
    let mut edges: Vec<(usize, usize)> = Vec::new();
    for (i, ds) in deps.iter().enumerate() {
        for &d in ds {
            if node_layer[d] >= node_layer[i] {
                continue; // cycle remnant
            }
            let mut prev = d;
            for l in node_layer[d] + 1..node_layer[i] {
                layer.push(l);
                width.push(1);
                edges.push((prev, layer.len() - 1));
                prev = layer.len() - 1;
            }
            edges.push((prev, i));
        }
    }
    let nv = layer.len();
    let mut ups: Vec<Vec<usize>> = vec![Vec::new(); nv];
    let mut downs: Vec<Vec<usize>> = vec![Vec::new(); nv];
    for &(a, b) in &edges {
        downs[a].push(b);
        ups[b].push(a);
    }
    Layered {
        n: deps.len(),
        node_layer,
        depth,
        layer,
        width,
        edges,
        ups,
        downs,
    }
}

/// The vertices of each layer, left to right: barycenter sweeps down and
/// up the layers, eight in all.
pub(super) fn order(g: &Layered) -> Vec<Vec<usize>> {
    let depth = g.depth;
    let mut rows: Vec<Vec<usize>> = vec![Vec::new(); depth];
    for v in 0..g.layer.len() {
        rows[g.layer[v]].push(v);
    }
    let mut pos = vec![0f64; g.layer.len()];
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
            let neighbours = if down { &g.ups } else { &g.downs };
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
    rows
}

/// Each vertex's column: the first layer left to right; each later layer
/// tries to sit under the middle of its parents, keeping order and a
/// two-column gap; then a parent moves right over the middle of its
/// children when its right neighbour leaves room. Placement starts at a
/// margin so children can sit left of their parents' left edge; the
/// unused margin is trimmed.
pub(super) fn place(g: &Layered, rows: &[Vec<usize>]) -> Vec<usize> {
    let (ups, downs, w) = (&g.ups, &g.downs, &g.width);
    let margin = w.iter().copied().max().unwrap_or(0);
    let mut vx = vec![0usize; w.len()];
    let middle = |of: &[usize], vx: &[usize]| {
        of.iter().map(|u| vx[*u] + w[*u] / 2).sum::<usize>() / of.len()
    };
    for (l, row) in rows.iter().enumerate() {
        let mut next_free = if l == 0 { margin } else { 0 };
        for &v in row {
            let desired = if l == 0 || ups[v].is_empty() {
                next_free
            } else {
                middle(&ups[v], &vx).saturating_sub(w[v] / 2)
            };
            vx[v] = desired.max(next_free);
            next_free = vx[v] + w[v] + 2;
        }
    }
    // A fan-out opens below its parent.
    for l in (0..g.depth.saturating_sub(1)).rev() {
        let row = &rows[l];
        for k in (0..row.len()).rev() {
            let v = row[k];
            if downs[v].is_empty() {
                continue;
            }
            let want = middle(&downs[v], &vx).saturating_sub(w[v] / 2);
            let limit = row
                .get(k + 1)
                .map_or(usize::MAX, |r| vx[*r].saturating_sub(w[v] + 2));
            if want > vx[v] {
                vx[v] = want.min(limit).max(vx[v]);
            }
        }
    }
    let left = vx.iter().copied().min().unwrap_or(0);
    for x in &mut vx {
        *x -= left;
    }
    vx
}
