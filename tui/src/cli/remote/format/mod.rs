//! The text of the remote commands' answers: tables, run and event lines,
//! sizes, ages and states, one file per kind of answer. Each function
//! returns lines; the commands print them through `say!`, which escapes
//! what came from the daemon.

pub(super) mod cells;
pub(super) mod cluster;
pub(super) mod dags;
pub(super) mod runs;
pub(super) mod status;
pub(super) mod why;
