//! Time as ax writes it for people and programs: the API's timestamps
//! (RFC 3339, UTC, milliseconds, e.g. `2026-11-29T12:00:08.000Z`) and the
//! short elapsed-time texts of the CLI and the console.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An instant, in milliseconds since the Unix epoch. On the wire it is an
/// RFC 3339 UTC string with milliseconds, whatever offset it was read with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

#[derive(Debug, thiserror::Error)]
#[error("{text:?} is not an RFC 3339 time: {source}")]
pub struct TimestampError {
    text: String,
    source: chrono::ParseError,
}

impl Timestamp {
    pub fn from_millis(ms: i64) -> Timestamp {
        Timestamp(ms)
    }

    pub fn millis(self) -> i64 {
        self.0
    }

    /// Reads any RFC 3339 time (any offset).
    pub fn parse(text: &str) -> Result<Timestamp, TimestampError> {
        DateTime::parse_from_rfc3339(text)
            .map(|t| Timestamp(t.timestamp_millis()))
            .map_err(|source| TimestampError {
                text: text.to_string(),
                source,
            })
    }

    /// `None` only for instants chrono cannot represent (beyond year 262143).
    pub fn to_datetime(self) -> Option<DateTime<Utc>> {
        DateTime::from_timestamp_millis(self.0)
    }
}

impl From<DateTime<Utc>> for Timestamp {
    fn from(t: DateTime<Utc>) -> Timestamp {
        Timestamp(t.timestamp_millis())
    }
}

/// RFC 3339 UTC with milliseconds: the one format of every time ax prints
/// in JSON.
pub fn format_utc_ms(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}

/// RFC 3339 in a time zone, to the second (`2026-11-29T03:00:00+01:00`):
/// fire times as `ax validate` and `ax cron next` show them to people.
pub fn format_in_zone(t: DateTime<Utc>, zone: &chrono_tz::Tz) -> String {
    t.with_timezone(zone)
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

impl fmt::Display for Timestamp {
    /// An instant chrono cannot represent prints as the empty string.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_datetime() {
            Some(t) => f.write_str(&format_utc_ms(t)),
            None => Ok(()),
        }
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let text = String::deserialize(d)?;
        Timestamp::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// Elapsed time in its largest whole unit (`42s`, `5m`, `3h`, `2d`): the
/// AGE column of `ax ls`. Negative spans count as zero.
pub fn elapsed_coarse(secs: i64) -> String {
    let secs = secs.max(0);
    match secs {
        0..=59 => format!("{secs}s"),
        60..=3599 => format!("{}m", secs / 60),
        3600..=86_399 => format!("{}h", secs / 3600),
        _ => format!("{}d", secs / 86_400),
    }
}

/// Elapsed time in two units (`42s`, `5m07s`, `3h02m`, `2d05h`): the
/// console's durations. Negative spans count as zero.
pub fn elapsed(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_print_utc_with_milliseconds_and_read_any_offset() {
        let t = Timestamp::parse("2026-11-29T13:00:08.5+01:00").unwrap();
        assert_eq!(t.to_string(), "2026-11-29T12:00:08.500Z");
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            "\"2026-11-29T12:00:08.500Z\""
        );
        let back: Timestamp = serde_json::from_str("\"2026-11-29T12:00:08.500Z\"").unwrap();
        assert_eq!(back, t);
        assert!(Timestamp::parse("yesterday").is_err());
        let utc = t.to_datetime().unwrap();
        assert_eq!(format_utc_ms(utc), "2026-11-29T12:00:08.500Z");
        assert_eq!(
            format_in_zone(utc, &chrono_tz::Europe::Paris),
            "2026-11-29T13:00:08+01:00"
        );
    }

    #[test]
    fn elapsed_texts() {
        assert_eq!(elapsed_coarse(-3), "0s");
        assert_eq!(elapsed_coarse(61), "1m");
        assert_eq!(elapsed_coarse(7200), "2h");
        assert_eq!(elapsed_coarse(90_000), "1d");
        assert_eq!(elapsed(65), "1m05s");
        assert_eq!(elapsed(3660), "1h01m");
        assert_eq!(elapsed(90_000), "1d01h");
    }
}
