//! The values of `axd.toml` that are checked as they are read, so that a
//! bad one is reported with its line and column.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::*;

/// `shell`: an absolute path, checked as it is read (so reported with its
/// line).
pub(super) struct ShellPath(pub(super) PathBuf);
impl<'de> Deserialize<'de> for ShellPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let path = PathBuf::from(String::deserialize(d)?);
        if !path.is_absolute() {
            return Err(serde::de::Error::custom(format!(
                "{} is not an absolute path",
                path.display()
            )));
        }
        Ok(ShellPath(path))
    }
}

/// One `pass_env` name, checked as it is read.
pub(super) struct PassEnvName(pub(super) String);
impl<'de> Deserialize<'de> for PassEnvName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        check_job_var(&name).map_err(serde::de::Error::custom)?;
        Ok(PassEnvName(name))
    }
}

/// One `[users] allow` entry: a user name or `@group`, checked as it is
/// read (so reported with its line).
pub(super) struct AllowEntry(pub(super) String);
impl<'de> Deserialize<'de> for AllowEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let name = text.strip_prefix('@').unwrap_or(&text);
        if !ax_shared::jobfile::valid_account_name(name) {
            return Err(serde::de::Error::custom(format!(
                "{text:?} is not a user name or @group (1-32 of a-z 0-9 _ . -)"
            )));
        }
        Ok(AllowEntry(text))
    }
}

/// A count of at least 1, checked as it is read (so reported with its line).
pub(super) struct Count(pub(super) usize);
impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = i64::deserialize(d)?;
        if n < 1 {
            return Err(serde::de::Error::custom("must be at least 1"));
        }
        Ok(Count(n as usize))
    }
}

/// A client timeout: at least 100 ms.
pub(super) struct Timeout(pub(super) Duration);
impl<'de> Deserialize<'de> for Timeout {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Dur(t) = Dur::deserialize(d)?;
        if t < Duration::from_millis(100) {
            return Err(serde::de::Error::custom("must be at least 100ms"));
        }
        Ok(Timeout(t))
    }
}

/// `store`: checked as it is read, so that a bad URL is reported with its
/// line.
pub(super) struct StoreUrl(pub(super) PgUrl);
impl<'de> Deserialize<'de> for StoreUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        PgUrl::parse(&s)
            .map(StoreUrl)
            .map_err(serde::de::Error::custom)
    }
}

pub(super) struct Dur(pub(super) Duration);
impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_duration(&s)
            .map(Dur)
            .map_err(serde::de::Error::custom)
    }
}

/// `[cluster] heartbeat`, checked as it is read so that a too short one
/// is reported with its line.
pub(super) struct Heartbeat(pub(super) Duration);
impl<'de> Deserialize<'de> for Heartbeat {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let Dur(beat) = Dur::deserialize(d)?;
        if beat < MIN_HEARTBEAT {
            return Err(serde::de::Error::custom(format!(
                "must be at least {} ms",
                MIN_HEARTBEAT.as_millis()
            )));
        }
        Ok(Heartbeat(beat))
    }
}

pub(super) struct DurationOrNone(pub(super) Option<Duration>);
impl<'de> Deserialize<'de> for DurationOrNone {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s == "none" {
            return Ok(DurationOrNone(None));
        }
        parse_duration(&s)
            .map(|d| DurationOrNone(Some(d)))
            .map_err(serde::de::Error::custom)
    }
}

pub(super) struct Priority(pub(super) u8);
impl<'de> Deserialize<'de> for Priority {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = i64::deserialize(d)?;
        ax_shared::rules::check_priority(n)
            .map(Priority)
            .map_err(serde::de::Error::custom)
    }
}

#[derive(Clone, Copy)]
pub(super) enum Synchronous {
    Full,
    Normal,
}
impl<'de> Deserialize<'de> for Synchronous {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match String::deserialize(d)?.to_ascii_lowercase().as_str() {
            "full" => Ok(Synchronous::Full),
            "normal" => Ok(Synchronous::Normal),
            other => Err(serde::de::Error::custom(format!(
                "synchronous = {other:?}: use \"full\" or \"normal\""
            ))),
        }
    }
}

/// `"100/min"`, `"5/s"`, `"1000/h"` → per minute.
pub(super) struct Rate(pub(super) u32);
impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let bad = || {
            serde::de::Error::custom(format!(
                "rate {s:?}: write e.g. \"100/min\", \"5/s\" or \"1000/h\""
            ))
        };
        let (n, unit) = s.split_once('/').ok_or_else(bad)?;
        let n: f64 = n.trim().parse().map_err(|_| bad())?;
        let per_min = match unit.trim() {
            "s" | "sec" | "second" => n * 60.0,
            "min" | "m" | "minute" => n,
            "h" | "hour" => n / 60.0,
            _ => return Err(bad()),
        };
        if !(1.0..=1e9).contains(&per_min) {
            return Err(serde::de::Error::custom(format!(
                "rate {s:?} must be at least 1/min"
            )));
        }
        Ok(Rate(per_min.round() as u32))
    }
}

/// `extra = "30%"` of max_concurrency (rounded up) or a count.
pub(super) enum Extra {
    Percent(f64),
    Count(u32),
}
impl<'de> Deserialize<'de> for Extra {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum E {
            N(u32),
            S(String),
        }
        match E::deserialize(d)? {
            E::N(n) => Ok(Extra::Count(n)),
            E::S(s) => s
                .strip_suffix('%')
                .and_then(|p| p.trim().parse::<f64>().ok())
                .filter(|p| (0.0..=1000.0).contains(p))
                .map(Extra::Percent)
                .ok_or_else(|| {
                    serde::de::Error::custom(format!(
                        "burst.extra {s:?}: write a count or a percentage like \"30%\""
                    ))
                }),
        }
    }
}

/// `"10MiB"`, `"512KiB"`, `"1GB"`, or a number of bytes.
pub(super) struct Bytes(pub(super) u64);
impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum B {
            N(u64),
            S(String),
        }
        match B::deserialize(d)? {
            B::N(n) => Ok(Bytes(n)),
            B::S(s) => {
                let t = s.trim();
                let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
                let (num, unit) = t.split_at(split);
                let mult: u64 = match unit.trim() {
                    "" | "B" => 1,
                    "KiB" => 1 << 10,
                    "MiB" => 1 << 20,
                    "GiB" => 1 << 30,
                    "KB" | "kB" => 1000,
                    "MB" => 1_000_000,
                    "GB" => 1_000_000_000,
                    _ => 0,
                };
                match num.parse::<u64>() {
                    Ok(n) if mult > 0 => Ok(Bytes(n.saturating_mul(mult))),
                    _ => Err(serde::de::Error::custom(format!(
                        "size {s:?}: write e.g. \"10MiB\""
                    ))),
                }
            }
        }
    }
}
