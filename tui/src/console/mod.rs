//! `ax-tui`, the operations console (docs/console.md).
//!
//! One event enum (`event::Event`) merges terminal input, daemon
//! notifications and a clock tick; `App::on_daemon`/`on_tick`/`update`
//! change the state and return requests for the daemon tasks (`net`);
//! `ui::render` draws the state and nothing else; key bindings are data
//! (`keymap`). Lists are views of resources (runs, DAGs, pools, events,
//! nodes), k9s style: each view in `views/` owns its state, what its
//! actions do to it and its render. Colours and time formats are in
//! `theme`, which depends on nothing else here, so imports go one way:
//! `ui` → `state` → `views` → `theme`.

mod action;
pub mod columns;
mod event;
pub mod keymap;
pub mod logbuf;
pub mod net;
mod prompt;
pub mod run;
pub mod state;
mod theme;
pub mod ui;
mod update;
pub mod views;

/// Whether to use colour: not when `NO_COLOR` is set to anything but the
/// empty string (<https://no-color.org>).
pub fn colour_allowed(no_color: Option<std::ffi::OsString>) -> bool {
    no_color.is_none_or(|v| v.is_empty())
}
