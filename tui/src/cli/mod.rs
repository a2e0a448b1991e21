//! `ax`: its command line (`args`), the commands that need no daemon
//! (`offline`), the converters of other schedulers' files (`import`), those that talk to it (`remote`), the generated reference
//! (`reference`) and the exit codes (`exit`); docs/cli.md is the user's
//! reference.

pub mod args;
pub mod exit;
pub mod import;
pub mod offline;
pub mod reference;
pub mod remote;
