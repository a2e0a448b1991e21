//! Running attempts as processes: the executor and its spawner threads
//! (`executor`), the process start without fork (`spawn`) and its child
//! before execve (`child`), what a killed job leaves behind (`reaper`) and
//! a job's secrets (`secrets`).

mod child;
pub mod executor;
pub mod reaper;
pub(crate) mod secrets;
// Two unsafe blocks in spawn.rs (the PATH search's `access` and
// `supervised`'s `from_raw_fd`) have no SAFETY comment of their own yet.
#[allow(clippy::undocumented_unsafe_blocks)]
pub mod spawn;
