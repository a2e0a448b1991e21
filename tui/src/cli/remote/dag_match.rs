//! Which DAGs `ax ls --dag PATTERN` means: one name, a prefix
//! (`team-a/`), or a glob (`team-a/*`, `*-nightly`, `etl-?`).

/// A `--dag` pattern. `*` matches any run of characters (`/` included),
/// `?` one character; a pattern without them is a name, or else the
/// prefix of names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum DagPattern {
    Literal(String),
    Glob(String),
}

impl DagPattern {
    pub(super) fn new(text: &str) -> DagPattern {
        if text.contains(['*', '?']) {
            DagPattern::Glob(text.to_string())
        } else {
            DagPattern::Literal(text.to_string())
        }
    }

    /// Whether `name` is matched as a prefix (a literal) or by the glob;
    /// a literal's exact name is asked of the daemon first, see `ls`.
    pub(super) fn matches(&self, name: &str) -> bool {
        match self {
            DagPattern::Literal(p) => name.starts_with(p.as_str()),
            DagPattern::Glob(g) => glob(g.as_bytes(), name.as_bytes()),
        }
    }

    /// The longest text every matching name contains, for the daemon's
    /// substring `filter` (which also matches job names, so each run is
    /// matched again here).
    pub(super) fn needle(&self) -> &str {
        match self {
            DagPattern::Literal(p) => p,
            DagPattern::Glob(g) => g
                .split(['*', '?'])
                .max_by_key(|s| s.len())
                .unwrap_or_default(),
        }
    }
}

/// `*` and `?` over bytes of UTF-8 (a `?` then matches one byte of a
/// character; a name whose only mismatch is that is rare enough).
fn glob(pattern: &[u8], name: &[u8]) -> bool {
    // The last `*` seen and where in `name` it was tried to end: on a
    // mismatch, that star swallows one byte more (linear backtracking).
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == b'?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    star = Some((sp, sn + 1));
                    p = sp + 1;
                    n = sn + 1;
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::DagPattern;

    #[test]
    fn prefixes_and_globs_match_names() {
        let m = |p: &str, n: &str| DagPattern::new(p).matches(n);
        assert!(m("team-a/", "team-a/cleanup"));
        assert!(!m("team-a/", "team-b/cleanup"));
        assert!(m("team-a/*", "team-a/cleanup"));
        assert!(m("team-a/*", "team-a/x/y"));
        assert!(!m("team-a/*", "team-ab/x"));
        assert!(m("*-nightly", "etl-nightly"));
        assert!(!m("*-nightly", "etl-nightly2"));
        assert!(m("etl-?", "etl-1"));
        assert!(!m("etl-?", "etl-12"));
        assert!(m("*a*b*", "xxaxxbxx"));
        assert_eq!(DagPattern::new("team-a/*").needle(), "team-a/");
        assert_eq!(DagPattern::new("*-nightly").needle(), "-nightly");
    }
}
