//! `ax-tui`, the operations console (docs/console.md).
//!
//! One event enum (`state::Event`) merges terminal input, daemon
//! notifications and a clock tick; `App::on_daemon`/`on_tick`/`update`
//! change the state and return requests for the daemon tasks (`net`);
//! `ui::render` draws the state and nothing else; key bindings are data
//! (`keymap`). Lists are views of resources (runs, DAGs, pools, events,
//! nodes), k9s style.

pub mod action;
pub mod columns;
pub mod keymap;
pub mod logbuf;
pub mod net;
pub mod run;
pub mod state;
pub mod ui;
pub mod update;
pub mod views;

/// Whether to use colour: not when `NO_COLOR` is set to anything but the
/// empty string (<https://no-color.org>).
pub fn colour_allowed(no_color: Option<std::ffi::OsString>) -> bool {
    no_color.is_none_or(|v| v.is_empty())
}
