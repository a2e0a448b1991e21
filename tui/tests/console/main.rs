//! The `ax-tui` console and the DAG drawing it shows: rendered with
//! ratatui's TestBackend (insta snapshots in `snapshots/`), its keymap
//! against docs/console.md, and in a real terminal (tmux). One test binary,
//! a module per concern; `support` holds the shared fixtures.

mod cluster;
mod dagdraw;
mod dagdraw_shapes;
mod readings;
mod reference;
mod screen;
mod support;
mod tmux_e2e;
mod views;
