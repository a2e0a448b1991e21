//! The rules a job's fields obey wherever a job comes from (a job file, a
//! socket `submit`, a spec given to the engine), each owned by one function
//! here so that every entry point refuses the same values with the same
//! words (docs/job-files.md, "Job fields").

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

/// Priorities a job may have (docs/job-files.md, "Job fields"); the burst
/// priority and the aging cap of `axd.toml` use the same scale.
const PRIORITY: RangeInclusive<i64> = 1..=100;

/// Further attempts a job may ask for after a failed one.
const RETRIES: RangeInclusive<i64> = 0..=10_000;

/// A value one of the rules refuses; its text names the value and the rule.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("priority {0} out of range 1-100")]
    Priority(i64),
    #[error("retries {0} out of range 0-10000")]
    Retries(i64),
    /// A job's processes start in whatever directory axd runs in, so a
    /// relative path would mean different files under systemd and in a
    /// terminal. `what` names the field (`cwd`, `env_file`).
    #[error("{what} {path:?} must be an absolute path")]
    NotAbsolute { what: String, path: String },
    #[error("unknown pool {pool:?} (configured: {configured})")]
    UnknownPool { pool: String, configured: String },
    /// An address goes into a mail's `To:` header as written, so anything
    /// that could end the header or add a recipient is refused.
    #[error(
        "mail address {0:?} must be `user` or `user@host`, without spaces, commas, quotes or <>"
    )]
    MailAddress(String),
}

/// One address of `notify.mail` (a job file or `axd.toml`): `user@host` or
/// a local user, as `MAILTO` takes them.
pub fn check_mail_address(address: &str) -> Result<(), RuleError> {
    let bad = |c: char| c.is_whitespace() || c.is_control() || ",;<>\"'()\\".contains(c);
    let ok = !address.is_empty()
        && address.len() <= 254
        && !address.starts_with(['@', '-'])
        && !address.ends_with('@')
        && address.matches('@').count() <= 1
        && !address.chars().any(bad);
    if ok {
        Ok(())
    } else {
        Err(RuleError::MailAddress(address.to_string()))
    }
}

/// A job's priority: 1–100.
pub fn check_priority(priority: i64) -> Result<u8, RuleError> {
    if PRIORITY.contains(&priority) {
        Ok(priority as u8)
    } else {
        Err(RuleError::Priority(priority))
    }
}

/// A job's `retries`: 0–10000.
pub fn check_retries(retries: i64) -> Result<u32, RuleError> {
    if RETRIES.contains(&retries) {
        Ok(retries as u32)
    } else {
        Err(RuleError::Retries(retries))
    }
}

/// A path field of a job (`what`: `cwd`, `env_file`): absolute.
pub fn check_absolute(what: &str, path: &str) -> Result<PathBuf, RuleError> {
    if Path::new(path).is_absolute() {
        Ok(PathBuf::from(path))
    } else {
        Err(RuleError::NotAbsolute {
            what: what.to_string(),
            path: path.to_string(),
        })
    }
}

/// A job's pool: one of the pools configured (`known`, in the order the
/// error lists them). Nothing is allocated unless the pool is unknown.
pub fn check_pool<'a, I>(pool: &str, known: I) -> Result<(), RuleError>
where
    I: IntoIterator<Item = &'a str>,
    I::IntoIter: Clone,
{
    let known = known.into_iter();
    if known.clone().any(|k| k == pool) {
        Ok(())
    } else {
        Err(RuleError::UnknownPool {
            pool: pool.to_string(),
            configured: known.collect::<Vec<&str>>().join(", "),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mail_address_cannot_add_a_header_or_a_recipient() {
        for ok in ["ops@example.com", "root", "alice+cron@mail.example.org"] {
            assert_eq!(check_mail_address(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "a b@c",
            "ops@example.com\nBcc: x@y",
            "a@b,c@d",
            "Ops <ops@x>",
            "\"q\"@x",
            "@x",
            "a@",
            "a@b@c",
            "-oQ/tmp",
        ] {
            assert!(check_mail_address(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn each_rule_takes_its_bounds_and_refuses_past_them() {
        assert_eq!(check_priority(1), Ok(1));
        assert_eq!(check_priority(100), Ok(100));
        assert_eq!(
            check_priority(0).unwrap_err().to_string(),
            "priority 0 out of range 1-100"
        );
        assert_eq!(check_retries(10_000), Ok(10_000));
        assert_eq!(
            check_retries(-1).unwrap_err().to_string(),
            "retries -1 out of range 0-10000"
        );
        assert!(check_absolute("cwd", "/srv").is_ok());
        assert_eq!(
            check_absolute("cwd", "srv").unwrap_err().to_string(),
            "cwd \"srv\" must be an absolute path"
        );
        assert_eq!(check_pool("io", ["default", "io"]), Ok(()));
        assert_eq!(
            check_pool("gpu", ["default", "io"])
                .unwrap_err()
                .to_string(),
            "unknown pool \"gpu\" (configured: default, io)"
        );
    }
}
