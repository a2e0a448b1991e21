//! What every view's render reads besides its own state, and how far a
//! pane scrolls.

use ax_protocol::api::StatusView;
use chrono::{DateTime, Utc};

use crate::console::theme::Theme;

/// What every view's render reads besides its own state.
pub(crate) struct Context<'a> {
    pub(crate) theme: Theme,
    pub(crate) now: DateTime<Utc>,
    /// The daemon's last status (pools and nodes come with it).
    pub(crate) status: Option<&'a StatusView>,
}

/// The farthest a pane scrolls, either way.
const MAX_SCROLL: i64 = 60_000;

/// A scroll position moved by `step` lines (or columns), within
/// `0..=MAX_SCROLL`.
pub(crate) fn scrolled(at: u16, step: i64) -> u16 {
    (i64::from(at).min(MAX_SCROLL) + step).clamp(0, MAX_SCROLL) as u16
}
