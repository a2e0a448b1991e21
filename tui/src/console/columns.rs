//! Column widths from content: every column gets the width of its widest
//! cell; names (`Kind::Name`) are never cut while an optional column can
//! give up its room; the `Kind::Rest` column (WHY, ERROR, REASON) gets what
//! is left. Anything cut ends with `…`.

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
    /// The most it takes, even when its content is wider.
    pub max: usize,
}

pub const fn col(title: &'static str, kind: Kind) -> Column {
    Column {
        title,
        kind,
        max: usize::MAX,
    }
}

impl Column {
    /// The same column taking at most `max` cells.
    pub const fn at_most(self, max: usize) -> Column {
        Column { max, ..self }
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

/// The width of each column in `width` cells (one cell between columns),
/// `None` for a hidden one.
pub fn widths(cols: &[Column], rows: &[Vec<String>], width: u16) -> Vec<Option<u16>> {
    let width = width as usize;
    let natural: Vec<usize> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, |s| width_of(s)))
                .max()
                .unwrap_or(0)
                .min(c.max)
                .max(width_of(c.title))
        })
        .collect();
    let mut shown: Vec<bool> = vec![true; cols.len()];
    let need = |shown: &[bool]| -> usize {
        let n = shown.iter().filter(|s| **s).count();
        let fixed: usize = (0..cols.len())
            .filter(|i| shown[*i] && cols[*i].kind != Kind::Rest)
            .map(|i| natural[i])
            .sum();
        fixed + n.saturating_sub(1)
    };
    let mut out: Vec<Option<u16>> = Vec::with_capacity(cols.len());
    loop {
        if need(&shown) <= width {
            break;
        }
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
    let mut w: Vec<usize> = natural.clone();
    for (i, c) in cols.iter().enumerate() {
        if c.kind == Kind::Rest && shown[i] {
            let room = width.saturating_sub(need(&shown));
            if room < 4 || need(&shown) > width {
                shown[i] = false;
            } else {
                w[i] = room;
            }
        }
    }
    let mut over = need(&shown).saturating_sub(width);
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
    for i in 0..cols.len() {
        out.push(shown[i].then_some(w[i].min(u16::MAX as usize) as u16));
    }
    out
}
