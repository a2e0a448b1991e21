//! The flags of `ax events`.

use std::time::Duration;

use ax_shared::time::Timestamp;

/// The flags of `ax events`.
#[derive(clap::Args, Debug, Clone)]
pub struct EventsArgs {
    /// Keep printing new events as they happen.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Print the newest N matching events (oldest first).
    #[arg(long, value_name = "N", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub limit: u64,
    /// Only this run's events.
    #[arg(long, value_name = "ID")]
    pub run: Option<u64>,
    /// Only events of this DAG's runs.
    #[arg(long, value_name = "NAME")]
    pub dag: Option<String>,
    /// Only events of who asked: a user name or uid (alice, 1000, scheduler) matches the actors naming it; other TEXT is matched anywhere (via ax-tui).
    #[arg(long, value_name = "TEXT")]
    pub actor: Option<String>,
    /// Only events since TIME: RFC 3339 (2026-12-01T09:00:00Z) or a duration ago (10m, 2h).
    #[arg(long, value_name = "TIME", value_parser = parse_since)]
    pub since: Option<Since>,
}

impl EventsArgs {
    /// Whether any filter flag is given.
    pub(crate) fn is_filtered(&self) -> bool {
        self.run.is_some() || self.dag.is_some() || self.actor.is_some() || self.since.is_some()
    }
}

/// `--since`: an instant, or a duration before the moment the command runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Since {
    At(Timestamp),
    Ago(Duration),
}

impl Since {
    /// The instant meant, for a command that runs at `now`.
    pub(crate) fn instant(self, now: Timestamp) -> Timestamp {
        match self {
            Since::At(t) => t,
            Since::Ago(d) => {
                let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
                Timestamp::from_millis(now.millis().saturating_sub(ms))
            }
        }
    }
}

fn parse_since(text: &str) -> Result<Since, String> {
    if let Ok(t) = Timestamp::parse(text) {
        return Ok(Since::At(t));
    }
    ax_shared::duration::parse_duration(text)
        .map(Since::Ago)
        .map_err(|e| format!("not an RFC 3339 time nor a duration ({e})"))
}
