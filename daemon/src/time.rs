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

/// RFC 3339 UTC with milliseconds, the API's time format.
pub fn rfc3339(ms: Millis) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_default()
}
