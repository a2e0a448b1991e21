//! The daemon's runtime: start-up and shutdown (`daemon`, `shutdown`),
//! the state dir and its files (`state_dir`, `private`), the real clocks
//! (`time`), fencing a node out of its cluster (`fencing`) and
//! rate-limited log lines (`ratelog`).

pub mod daemon;
pub mod fencing;
pub mod private;
pub mod ratelog;
pub mod shutdown;
pub mod state_dir;
pub mod time;
