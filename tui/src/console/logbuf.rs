//! The full-screen log's text: the newest lines only, so a job printing
//! thousands of lines a second costs the console a bounded amount of
//! memory and a frame costs the same whatever the log's size.

use std::collections::VecDeque;

/// Lines kept for scrolling back.
pub const KEEP_LINES: usize = 10_000;

#[derive(Clone, Debug, Default)]
pub struct LogBuf {
    lines: VecDeque<String>,
    /// The last line until its newline arrives.
    partial: String,
    /// Lines received in all (dropped ones included): a position that
    /// survives dropping.
    pub received: u64,
    /// Bytes jumped over to stay at the newest output.
    pub skipped: u64,
}

impl LogBuf {
    pub(crate) fn clear(&mut self) {
        *self = LogBuf::default();
    }

    /// Appends output; a chunk may end mid-line.
    pub(crate) fn push(&mut self, data: &str) {
        let mut rest = data;
        while let Some(i) = rest.find('\n') {
            let mut line = std::mem::take(&mut self.partial);
            line.push_str(&rest[..i]);
            self.push_line(line);
            rest = &rest[i + 1..];
        }
        self.partial.push_str(rest);
    }

    /// Output was jumped over (the console was `bytes` behind): one marker
    /// line says so, and the cut line is dropped.
    pub(crate) fn gap(&mut self, bytes: u64) {
        self.skipped += bytes;
        self.partial.clear();
        self.push_line(format!(
            "… {bytes} bytes skipped to show the newest output …"
        ));
    }

    fn push_line(&mut self, line: String) {
        if self.lines.len() == KEEP_LINES {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
        self.received += 1;
    }

    /// Complete lines held plus the partial one.
    pub fn len(&self) -> usize {
        self.lines.len() + usize::from(!self.partial.is_empty())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `count` lines from `start` (0 = the oldest held).
    pub(crate) fn window(&self, start: usize, count: usize) -> Vec<&str> {
        let held = self.lines.len();
        self.lines
            .range(start.min(held)..)
            .map(String::as_str)
            .chain((!self.partial.is_empty()).then_some(self.partial.as_str()))
            .skip(start.saturating_sub(held))
            .take(count)
            .collect()
    }

    /// The last line, until its newline arrives.
    pub fn partial(&self) -> &str {
        &self.partial
    }

    /// The newest `count` lines.
    pub fn newest(&self, count: usize) -> Vec<&str> {
        self.window(self.len().saturating_sub(count), count)
    }
}
