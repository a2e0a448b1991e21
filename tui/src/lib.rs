//! The `ax` CLI and the `ax-tui` console.

pub mod cli;
pub mod console;
pub mod dagdraw;
