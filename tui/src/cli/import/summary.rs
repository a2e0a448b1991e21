//! The summary `ax import cron` writes on stderr: the counts, then each
//! caveat and each entry that could not be converted, as FILE:LINE: why.

use std::io::Write;

use ax_shared::visible::Visible;

/// What an import did, entry by entry.
#[derive(Default, Debug)]
pub(crate) struct Report {
    pub converted: usize,
    pub with_caveats: usize,
    /// (FILE:LINE, caveat), in input order.
    pub caveats: Vec<(String, String)>,
    /// (FILE:LINE or FILE, why), in input order.
    pub failures: Vec<(String, String)>,
}

impl Report {
    pub(crate) fn caveat(&mut self, place: &str, caveats: &[String]) {
        if !caveats.is_empty() {
            self.with_caveats += 1;
        }
        for c in caveats {
            self.caveats.push((place.to_string(), c.clone()));
        }
    }

    pub(crate) fn failure(&mut self, place: impl Into<String>, why: impl Into<String>) {
        self.failures.push((place.into(), why.into()));
    }

    /// Takes back a conversion whose file could not be written.
    pub(crate) fn unconvert(&mut self, place: &str, had_caveats: bool, why: String) {
        self.converted -= 1;
        if had_caveats {
            self.with_caveats -= 1;
            self.caveats.retain(|(p, _)| p != place);
        }
        self.failure(place, why);
    }

    pub(crate) fn print(&self, err: &mut dyn Write) {
        let plural = |n: usize| if n == 1 { "entry" } else { "entries" };
        let _ = writeln!(
            err,
            "{} {} converted, {} with caveats, {} could not be converted",
            self.converted,
            plural(self.converted),
            self.with_caveats,
            self.failures.len()
        );
        for (place, c) in &self.caveats {
            let _ = writeln!(err, "{}: caveat: {}", Visible(place), Visible(c));
        }
        for (place, why) in &self.failures {
            let _ = writeln!(err, "{}: cannot convert: {}", Visible(place), Visible(why));
        }
    }
}
