//! Column widths from content: every column gets the width of its widest
//! cell; names (`Kind::Name`) are never cut while an optional column can
//! give up its room; the `Kind::Rest` column (WHY, ERROR, REASON) keeps
//! the room it asks for (`Column::keeping`) before optional columns and
//! gets what is left. Anything cut ends with `…`.

/// How a column behaves when room is short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Always shown at its content's width.
    Fixed,
    /// Shown whole unless even without every optional column it cannot be.
    Name,
    /// Hidden when room is short; higher ranks go first.
    Optional(u8),
    /// Takes the width left over (hidden below 4 columns).
    Rest,
}

#[derive(Clone, Copy, Debug)]
pub struct Column {
    pub title: &'static str,
    pub kind: Kind,
    /// The most it takes while room is short (see `widths`).
    pub max: usize,
    /// For the rest column: the room it keeps before optional columns
    /// (its whole text when that is shorter); 0 keeps none.
    pub keep: usize,
}

pub const fn col(title: &'static str, kind: Kind) -> Column {
    Column {
        title,
        kind,
        max: usize::MAX,
        keep: 0,
    }
}

impl Column {
    /// The same column taking at most `max` cells.
    pub const fn at_most(self, max: usize) -> Column {
        Column { max, ..self }
    }

    /// The rest column keeping `keep` cells before optional columns.
    pub const fn keeping(self, keep: usize) -> Column {
        Column { keep, ..self }
    }
}

/// Display width of a cell (one column per char: names, states and
/// numbers are narrow characters).
fn width_of(s: &str) -> usize {
    s.chars().count()
}

/// `s` in at most `w` columns; a cut ends with `…`.
pub fn fit(s: &str, w: usize) -> String {
    if width_of(s) <= w {
        return s.to_string();
    }
    if w == 0 {
        return String::new();
    }
    let mut out: String = s.chars().take(w - 1).collect();
    out.push('…');
    out
}

/// The room a WHY or REASON column keeps (`Column::keeping`): optional
/// columns go first so that it can say something.
pub const REST_MIN: usize = 24;

/// The width of each column in `width` cells (one cell between columns),
/// `None` for a hidden one.
///
/// Optional columns go (highest rank first) while the others and the
/// room the rest column keeps (`Column::keep`) do not fit; then the rest column takes
/// what is left (hidden below 4 cells); only then are names cut. A column
/// with a `max` takes at most that when room is short, and more of its
/// content from the rest column's room past what it keeps.
pub fn widths(cols: &[Column], rows: &[Vec<String>], width: u16) -> Vec<Option<u16>> {
    let width = width as usize;
    let content: Vec<usize> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, |s| width_of(s)))
                .max()
                .unwrap_or(0)
                .max(width_of(c.title))
        })
        .collect();
    let mut w: Vec<usize> = cols
        .iter()
        .zip(&content)
        .map(|(c, n)| (*n).min(c.max).max(width_of(c.title)))
        .collect();
    let mut shown: Vec<bool> = vec![true; cols.len()];
    let rest = cols.iter().position(|c| c.kind == Kind::Rest);
    // Cells the shown columns other than the rest take, gaps included
    // (the rest column's gap too, while it is shown).
    let others = |shown: &[bool], w: &[usize]| -> usize {
        let n = shown.iter().filter(|s| **s).count();
        let fixed: usize = (0..cols.len())
            .filter(|i| shown[*i] && cols[*i].kind != Kind::Rest)
            .map(|i| w[i])
            .sum();
        fixed + n.saturating_sub(1)
    };
    // An empty rest column (no row has text there) keeps nothing.
    let reserve = rest.map_or(0, |i| {
        let text = rows
            .iter()
            .map(|r| r.get(i).map_or(0, |s| width_of(s)))
            .max()
            .unwrap_or(0);
        if text == 0 {
            0
        } else {
            content[i].min(cols[i].keep)
        }
    });
    while others(&shown, &w) + reserve > width {
        // Drop the optional column of the highest rank still shown.
        let drop = (0..cols.len())
            .filter(|i| shown[*i])
            .filter_map(|i| match cols[i].kind {
                Kind::Optional(rank) => Some((rank, i)),
                _ => None,
            })
            .max();
        match drop {
            Some((_, i)) => shown[i] = false,
            None => break,
        }
    }
    // The rest column takes what is left, and goes when that is too
    // little; still too wide, names are cut (from the widest).
    if let Some(i) = rest {
        let room = width.saturating_sub(others(&shown, &w));
        if room < 4 || others(&shown, &w) > width {
            shown[i] = false;
        } else {
            w[i] = room;
        }
    }
    let mut over = others(&shown, &w).saturating_sub(width);
    while over > 0 {
        let widest = (0..cols.len())
            .filter(|i| shown[*i] && cols[*i].kind == Kind::Name)
            .max_by_key(|i| w[*i]);
        match widest {
            Some(i) if w[i] > width_of(cols[i].title).max(4) => {
                w[i] -= 1;
                over -= 1;
            }
            _ => break,
        }
    }
    // The rest column's room past what it keeps goes first to the
    // columns held at their `max`.
    let mut spare = match rest {
        Some(i) if shown[i] => w[i].saturating_sub(reserve),
        Some(_) => 0,
        None => width.saturating_sub(others(&shown, &w)),
    };
    for i in 0..cols.len() {
        if shown[i] && cols[i].kind != Kind::Rest && w[i] < content[i] && spare > 0 {
            let more = (content[i] - w[i]).min(spare);
            w[i] += more;
            spare -= more;
            if let Some(r) = rest.filter(|r| shown[*r]) {
                w[r] -= more;
            }
        }
    }
    (0..cols.len())
        .map(|i| shown[i].then_some(w[i].min(u16::MAX as usize) as u16))
        .collect()
}
