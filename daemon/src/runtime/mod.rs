//! The daemon's runtime: the machine's boot id (`boot`), start-up that blocks (`startup`), its restore
//! (`restore`) with the jobs an earlier life left running (`reattach`), every thread
//! and task as a service started in order and stopped in reverse
//! (`services`), running until shutdown (`daemon`, `shutdown`),
//! systemd's notifications (`systemd`), the state dir and its files (`state_dir`, `private`), the real clocks
//! (`time`), fencing a node out of its cluster (`fencing`) and
//! rate-limited log lines (`ratelog`).

pub mod boot;
pub mod daemon;
pub(crate) mod fencing;
pub(crate) mod private;
pub(crate) mod ratelog;
pub(crate) mod reattach;
pub(crate) mod restore;
pub(crate) mod services;
pub(crate) mod shutdown;
pub mod startup;
pub(crate) mod state_dir;
pub mod systemd;
pub(crate) mod time;
