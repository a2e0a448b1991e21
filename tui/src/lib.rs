//! The `ax` CLI and the `ax-tui` console.

pub mod cli;
