//! The `ax` CLI and the `ax-tui` console, and the DAG drawing both use
//! (`dagdraw`).

pub mod cli;
pub mod console;
pub mod dagdraw;
