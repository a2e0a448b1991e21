//! `ax`: commands, output formats and exit codes of SPEC §6.

pub mod offline;
pub mod reference;
pub mod remote;

/// Exit codes of SPEC §6.
pub mod exit {
    pub const OK: i32 = 0;
    pub const FAILED: i32 = 1;
    pub const USAGE: i32 = 2;
    pub const UNREACHABLE: i32 = 3;
    pub const NOT_FOUND: i32 = 4;
}

/// RFC 3339 UTC with milliseconds, the format of every time ax prints in JSON.
pub fn rfc3339_ms(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
}
