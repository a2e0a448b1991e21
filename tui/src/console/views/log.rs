//! The followed log, a full-body sub-screen: the newest lines while
//! following; scrolled back, the lines shown stay in place as output
//! arrives.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph};

use crate::console::event::{Command, LogChunk};
use crate::console::logbuf::LogBuf;

#[derive(Debug)]
pub(crate) struct LogView {
    pub(crate) buf: LogBuf,
    /// The run followed (`None`: no log open).
    pub(crate) run: Option<u64>,
    /// The run's newest attempt ended and its log was read to the end.
    eof: bool,
    /// Following the newest output (else paused where `back` says).
    pub(crate) follow: bool,
    /// Lines up from the newest.
    pub(crate) back: u16,
}

impl Default for LogView {
    fn default() -> LogView {
        LogView {
            buf: LogBuf::default(),
            run: None,
            eof: false,
            follow: true,
            back: 0,
        }
    }
}

impl LogView {
    /// Follows `run`'s log from its newest output.
    pub(crate) fn open(&mut self, run: u64) -> Vec<Command> {
        *self = LogView {
            run: Some(run),
            ..LogView::default()
        };
        vec![Command::FollowLog(run)]
    }

    pub(crate) fn close(&mut self) -> Vec<Command> {
        self.run = None;
        vec![Command::StopLog]
    }

    /// New output of `run`'s log (see `DaemonEvent::Log`).
    pub(crate) fn push(&mut self, chunk: LogChunk) {
        let LogChunk {
            run,
            data,
            gap,
            restart,
            eof,
        } = chunk;
        if self.run != Some(run) {
            return;
        }
        if restart {
            self.buf.clear();
        }
        let before = self.buf.received;
        if gap > 0 {
            self.buf.gap(gap);
        }
        self.buf.push(&data);
        self.eof = eof;
        if !self.follow {
            // Paused: the lines shown stay where they are.
            let added = (self.buf.received - before).min(u64::from(u16::MAX)) as u16;
            let held = self.buf.len().min(usize::from(u16::MAX)) as u16;
            self.back = self.back.saturating_add(added).min(held);
        }
    }

    /// Scrolls `step` lines down (towards the newest); at the newest it
    /// follows again.
    pub(crate) fn scroll_down(&mut self, step: i64) {
        let held = self.buf.len() as i64;
        let back = (i64::from(self.back) - step).clamp(0, held);
        self.back = back as u16;
        self.follow = back == 0;
    }

    pub(crate) fn toggle_follow(&mut self) {
        self.follow = !self.follow;
        if self.follow {
            self.back = 0;
        }
    }

    pub(crate) fn render(&self, f: &mut Frame, area: Rect) {
        let state = if self.eof {
            "(ended)"
        } else if self.follow {
            "(following — f to stop)"
        } else {
            "(paused — f to follow)"
        };
        let skipped = if self.buf.skipped > 0 {
            format!("· {} bytes skipped to keep up ", self.buf.skipped)
        } else {
            String::new()
        };
        let title = format!(
            " log of run {} {state} {skipped}",
            self.run.map(|r| r.to_string()).unwrap_or_default(),
        );
        let block = Block::default().borders(Borders::ALL).title(title);
        let height = area.height.saturating_sub(2) as usize;
        // Scrolled back at most as far as the lines above the pane reach:
        // a log the pane holds whole shows whole, its newest line too.
        let back = if self.follow { 0 } else { self.back as usize };
        let back = back.min(self.buf.len().saturating_sub(height));
        let end = self.buf.len().saturating_sub(back);
        let text: Vec<Line> = self
            .buf
            .window(end.saturating_sub(height), height.min(end))
            .into_iter()
            .map(|l| Line::from(l.to_string()))
            .collect();
        f.render_widget(Paragraph::new(text).block(block), area);
    }
}
