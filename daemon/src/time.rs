//! The only module that reads the real clock. Everything else is given
//! `now` (milliseconds since the Unix epoch) by its caller.

use crate::engine::Millis;

pub fn now_ms() -> Millis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as Millis)
        .unwrap_or(0)
}

/// A monotonic instant, for measuring durations (uptime, latency).
pub fn monotonic() -> std::time::Instant {
    std::time::Instant::now()
}
