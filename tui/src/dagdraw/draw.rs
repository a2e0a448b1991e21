//! The layout's last phase, the edges as characters: each edge runs down
//! from its source, bends on its gap's track when its ends are in
//! different columns, and enters a real node with `▼`; the lines that
//! meet in a cell are joined with box-drawing characters.

use super::layers::Layered;
use super::route::Gap;

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

/// The connection bits of a `width`-wide grid.
struct Bits {
    width: usize,
    bits: Vec<u8>,
}

impl Bits {
    fn set(&mut self, x: usize, y: usize, b: u8) {
        self.bits[y * self.width + x] |= b;
    }

    /// A vertical line from `y0` to `y1` inclusive at `x`.
    fn vline(&mut self, x: usize, y0: usize, y1: usize) {
        for y in y0..=y1 {
            let mut b = 0;
            if y > y0 {
                b |= UP;
            }
            if y < y1 {
                b |= DOWN;
            }
            self.set(x, y, b);
        }
    }

    /// A horizontal line from `x0` to `x1` inclusive at `y`.
    fn hline(&mut self, x0: usize, x1: usize, y: usize) {
        let (lo, hi) = (x0.min(x1), x0.max(x1));
        for x in lo..=hi {
            let mut b = 0;
            if x > lo {
                b |= LEFT;
            }
            if x < hi {
                b |= RIGHT;
            }
            self.set(x, y, b);
        }
    }
}

/// The cells of a `width` × `height` grid with every edge of `g` drawn;
/// `row_y[l]` is layer `l`'s row, `gaps[l]` the tracks below it and
/// `center(v)` vertex `v`'s column.
pub(super) fn edges(
    g: &Layered,
    gaps: &[Gap],
    row_y: &[usize],
    (width, height): (usize, usize),
    center: &dyn Fn(usize) -> usize,
) -> Vec<char> {
    let mut bits = Bits {
        width,
        bits: vec![0u8; width * height],
    };
    let mut arrows = Vec::new();
    for (a, b) in g.edges.iter().copied() {
        let l = g.layer[a];
        let top = row_y[l] + 1;
        let bottom = row_y[l + 1] - 1;
        let (sx, tx) = (center(a), center(b));
        if sx == tx {
            bits.vline(sx, top, bottom);
        } else {
            let t = gaps[l].track.get(&(a, b)).copied().unwrap_or(0);
            let ty = top + 1 + t;
            bits.vline(sx, top, ty);
            bits.hline(sx, tx, ty);
            bits.vline(tx, ty, bottom);
        }
        bits.set(sx, top, UP);
        if b < g.n {
            arrows.push((tx, bottom));
        } else {
            bits.set(tx, bottom, DOWN);
        }
    }
    let mut cells: Vec<char> = bits.bits.iter().map(|b| bits_char(*b)).collect();
    for (x, y) in arrows {
        cells[y * width + x] = '▼';
    }
    cells
}
