//! `ax-tui`, the operations console (SPEC §7).
//!
//! One event enum (`state::Event`) merges terminal input, daemon
//! notifications and a clock tick; `App::update` changes the state and
//! returns requests for the daemon tasks (`net`); `ui::render` draws the
//! state and nothing else; key bindings are data (`keymap`).

pub mod action;
pub mod keymap;
pub mod net;
pub mod run;
pub mod state;
pub mod ui;
