//! A log line that a flood cannot multiply: at most one per period, the
//! next one saying how many were held back.

use std::time::{Duration, Instant};

/// How often a rate-limited line is written at most.
pub(crate) const PERIOD: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
pub(crate) struct RateLog {
    last: Option<Instant>,
    held_back: u64,
}

impl RateLog {
    /// Whether to write the line now; `Some(n)`: yes, and `n` lines were
    /// held back since the last one written.
    pub(crate) fn allow(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(t) if now.duration_since(t) < PERIOD => {
                self.held_back += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.held_back))
            }
        }
    }
}

/// `" (N more like it since the last one)"` when some were held back.
pub(crate) fn held_back(n: u64) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(" ({n} more like it since the last such line)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_period_then_the_count_held_back() {
        let mut log = RateLog::default();
        let t0 = Instant::now();
        assert_eq!(log.allow(t0), Some(0));
        for i in 1..=1000 {
            assert_eq!(log.allow(t0 + Duration::from_millis(i)), None);
        }
        assert_eq!(log.allow(t0 + PERIOD), Some(1000));
        assert_eq!(log.allow(t0 + PERIOD), None);
    }
}
