//! Edge routing between two layers: which horizontal track each edge
//! bends on, chosen so that lines cross only where the node positions
//! force them to.
//!
//! Edges are grouped into nets that share one horizontal line: the edges
//! into one target (a fan-in merges into it), else the edges out of one
//! source (a fan-out splits from it). A net's source verticals run from
//! the upper layer down to its track, its target verticals from its track
//! down to the lower layer. Net N must sit above net M when one of N's
//! source columns lies within M's span (else N's vertical would cut M's
//! line), and below M when one of N's target columns does. Tracks follow a
//! topological order of those constraints; a cycle (or a straight edge
//! through another net's line) is a crossing no track order avoids, and
//! is counted.

use std::collections::{BTreeSet, HashMap};

/// The tracks of one gap between layers.
pub(super) struct Gap {
    /// Track (0 = top) of each bent edge `(source, target)`.
    pub track: HashMap<(usize, usize), usize>,
    pub tracks: usize,
    /// Crossings that no track order could avoid.
    pub crossings: usize,
}

/// An edge between two layers: (upper vertex, lower vertex).
type Edge = (usize, usize);

struct Net {
    lo: usize,
    hi: usize,
    sources: BTreeSet<usize>,
    targets: BTreeSet<usize>,
}

/// Routes the edges of one gap; `center(v)` is vertex `v`'s column.
pub(super) fn route_gap(edges: &[(usize, usize)], center: &dyn Fn(usize) -> usize) -> Gap {
    let (nets, net_of_edge, straight) = group(edges, center);
    let (above, forced) = constraints(&nets, &straight, center);
    let (order, broken) = stack_order(&nets, &above);
    let (track, tracks) = tracks(&nets, &above, &order);
    Gap {
        track: net_of_edge
            .into_iter()
            .map(|(e, i)| (e, track[i]))
            .collect(),
        tracks,
        crossings: forced + broken,
    }
}

/// The bent edges grouped into nets, each edge with its net, and the
/// straight edges.
fn group(
    edges: &[(usize, usize)],
    center: &dyn Fn(usize) -> usize,
) -> (Vec<Net>, Vec<(Edge, usize)>, Vec<Edge>) {
    let mut indeg: HashMap<usize, usize> = HashMap::new();
    for &(_, b) in edges {
        *indeg.entry(b).or_default() += 1;
    }
    // Nets: keyed by (is_source_net, vertex).
    let mut nets: Vec<Net> = Vec::new();
    let mut key_of: HashMap<(bool, usize), usize> = HashMap::new();
    let mut net_of_edge: Vec<(Edge, usize)> = Vec::new();
    let mut straight: Vec<Edge> = Vec::new();
    for &(a, b) in edges {
        if center(a) == center(b) {
            straight.push((a, b));
            continue;
        }
        let key = if indeg[&b] >= 2 {
            (false, b)
        } else {
            (true, a)
        };
        let i = *key_of.entry(key).or_insert_with(|| {
            nets.push(Net {
                lo: usize::MAX,
                hi: 0,
                sources: BTreeSet::new(),
                targets: BTreeSet::new(),
            });
            nets.len() - 1
        });
        let n = &mut nets[i];
        n.lo = n.lo.min(center(a)).min(center(b));
        n.hi = n.hi.max(center(a)).max(center(b));
        n.sources.insert(a);
        n.targets.insert(b);
        net_of_edge.push(((a, b), i));
    }
    (nets, net_of_edge, straight)
}

/// `above[n]`: the nets that must sit below net `n`, with mutual
/// constraints dropped; and the crossings no order avoids (a mutual
/// constraint, a straight edge through another net's line).
fn constraints(
    nets: &[Net],
    straight: &[(usize, usize)],
    center: &dyn Fn(usize) -> usize,
) -> (Vec<BTreeSet<usize>>, usize) {
    let within = |x: usize, m: &Net| x >= m.lo && x <= m.hi;
    let k = nets.len();
    let mut above: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); k];
    let mut crossings = 0;
    for (i, n) in nets.iter().enumerate() {
        for (j, m) in nets.iter().enumerate() {
            if i == j {
                continue;
            }
            if n.sources
                .iter()
                .any(|s| !m.sources.contains(s) && within(center(*s), m))
            {
                above[i].insert(j);
            }
            if n.targets
                .iter()
                .any(|t| !m.targets.contains(t) && within(center(*t), m))
            {
                above[j].insert(i);
            }
        }
    }
    for &(a, b) in straight {
        crossings += nets
            .iter()
            .filter(|m| within(center(a), m) && !m.sources.contains(&a) && !m.targets.contains(&b))
            .count();
    }
    // Mutual constraints cannot both hold: one crossing each.
    for i in 0..k {
        let mutual: Vec<usize> = above[i]
            .iter()
            .copied()
            .filter(|j| *j > i && above[*j].contains(&i))
            .collect();
        for j in mutual {
            above[j].remove(&i);
            crossings += 1;
        }
    }
    (above, crossings)
}

/// The nets top to bottom: a topological order of `above` (leftmost
/// first among the free), breaking any remaining cycle at the net with
/// the fewest constraints from above; with the cycles broken.
fn stack_order(nets: &[Net], above: &[BTreeSet<usize>]) -> (Vec<usize>, usize) {
    let k = nets.len();
    let mut crossings = 0;
    let mut indeg_c = vec![0usize; k];
    for s in above {
        for &j in s {
            indeg_c[j] += 1;
        }
    }
    let mut done = vec![false; k];
    let mut order = Vec::with_capacity(k);
    while order.len() < k {
        let free = (0..k)
            .filter(|i| !done[*i] && indeg_c[*i] == 0)
            .min_by_key(|i| (nets[*i].lo, *i));
        let next = match free {
            Some(i) => i,
            None => {
                crossings += 1;
                (0..k)
                    .filter(|i| !done[*i])
                    .min_by_key(|i| (indeg_c[*i], nets[*i].lo))
                    .expect("a net is left")
            }
        };
        done[next] = true;
        order.push(next);
        for &j in &above[next] {
            indeg_c[j] = indeg_c[j].saturating_sub(1);
        }
    }
    (order, crossings)
}

/// Each net's track, in `order`: below every net that must be above, on
/// the first track whose lines leave a column free on both sides; and
/// how many tracks there are.
fn tracks(nets: &[Net], above: &[BTreeSet<usize>], order: &[usize]) -> (Vec<usize>, usize) {
    let k = nets.len();
    let mut track = vec![0usize; k];
    let mut lines: Vec<Vec<(usize, usize)>> = Vec::new();
    let mut placed = vec![false; k];
    for &i in order {
        let min = (0..k)
            .filter(|p| placed[*p] && above[*p].contains(&i))
            .map(|p| track[p] + 1)
            .max()
            .unwrap_or(0);
        let (lo, hi) = (nets[i].lo, nets[i].hi);
        let mut t = min;
        while lines
            .get(t)
            .is_some_and(|l| l.iter().any(|(a, b)| !(*b + 1 < lo || hi + 1 < *a)))
        {
            t += 1;
        }
        if lines.len() <= t {
            lines.resize(t + 1, Vec::new());
        }
        lines[t].push((lo, hi));
        track[i] = t;
        placed[i] = true;
    }
    (track, lines.len())
}
