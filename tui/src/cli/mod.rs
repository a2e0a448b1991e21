//! `ax`: commands, output formats and exit codes (docs/cli.md).

pub mod access;
pub mod nodes;
pub mod offline;
pub mod reference;
pub mod remote;

/// Exit codes of `ax` (docs/cli.md, "ax").
pub mod exit {
    pub const OK: i32 = 0;
    pub const FAILED: i32 = 1;
    pub const USAGE: i32 = 2;
    pub const UNREACHABLE: i32 = 3;
    pub const NOT_FOUND: i32 = 4;
}
