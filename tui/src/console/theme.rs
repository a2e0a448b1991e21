//! Colours, styles and time formatting shared by the frame (`ui.rs`) and
//! the views: the console's look in one place, depending on nothing else
//! in the console.

use ax_shared::time::Timestamp;
use ax_shared::{Outcome, RunState};
use chrono::{DateTime, FixedOffset, Utc};
use ratatui::style::{Color, Style};

/// Whether to colour, and the time zone of shown times.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Theme {
    /// Off with `NO_COLOR` (`console::colour_allowed`).
    pub(crate) colour: bool,
    /// The offset for shown times (`None`: the machine's, looked up per
    /// instant).
    pub(crate) local: Option<FixedOffset>,
}

impl Theme {
    /// `c` as the foreground, unless colour is off.
    pub(crate) fn fg(&self, c: Color) -> Style {
        if self.colour {
            Style::default().fg(c)
        } else {
            Style::default()
        }
    }

    /// An instant in the console's local time zone, formatted.
    pub(crate) fn local(&self, t: DateTime<Utc>, format: &str) -> String {
        match self.local {
            Some(offset) => t.with_timezone(&offset).format(format).to_string(),
            None => t.with_timezone(&chrono::Local).format(format).to_string(),
        }
    }
}

/// An instant in the time zone `zone` (an IANA name; UTC when absent or
/// unknown), formatted, then the zone's name: how a DAG's schedule reads
/// (`ax dags` shows it so too).
pub(crate) fn in_zone(t: DateTime<Utc>, zone: Option<&str>, format: &str) -> String {
    let zone: chrono_tz::Tz = zone.and_then(|z| z.parse().ok()).unwrap_or(chrono_tz::UTC);
    format!("{} {}", t.with_timezone(&zone).format(format), zone.name())
}

pub(crate) fn state_colour(state: RunState) -> Color {
    match state {
        RunState::Success => Color::Green,
        RunState::Failed | RunState::TimedOut => Color::Red,
        RunState::Running => Color::Cyan,
        RunState::Delayed => Color::Yellow,
        RunState::Cancelled => Color::DarkGray,
        RunState::Ready => Color::Blue,
        RunState::Waiting => Color::Gray,
    }
}

/// `None`: the attempt runs.
pub(crate) fn outcome_colour(outcome: Option<Outcome>) -> Color {
    match outcome {
        Some(Outcome::Success) => Color::Green,
        Some(Outcome::Failed | Outcome::SpawnError) => Color::Red,
        Some(Outcome::TimedOut | Outcome::Stalled) => Color::Magenta,
        Some(Outcome::Cancelled) => Color::DarkGray,
        Some(Outcome::Preempted | Outcome::Interrupted) => Color::Yellow,
        None => Color::Cyan,
    }
}

/// A wire timestamp as an instant (`None` when absent or unreadable).
pub(crate) fn parse(t: Option<Timestamp>) -> Option<DateTime<Utc>> {
    t.and_then(Timestamp::to_datetime)
}

/// `used` of `total` as a bar `width` cells wide.
pub(crate) fn gauge(used: u32, total: u32, width: usize) -> String {
    let filled = if total == 0 {
        0
    } else {
        ((used as usize * width) / total as usize).min(width)
    };
    format!("{}{}", "█".repeat(filled), "░".repeat(width - filled))
}
