//! The exit codes of every command (`ax --help`, "Exit codes", in
//! docs/cli.md).

pub const OK: i32 = 0;
pub const FAILED: i32 = 1;
pub const USAGE: i32 = 2;
pub const UNREACHABLE: i32 = 3;
pub const NOT_FOUND: i32 = 4;
