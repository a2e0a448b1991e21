//! Running attempts as processes: the executor and its spawner threads
//! (`executor`), the process start without fork (`spawn`) and its child
//! before execve (`child`), what a killed job leaves behind (`reaper`) and
//! a job's secrets (`secrets`).

mod child;
pub(crate) mod executor;
pub mod reaper;
pub(crate) mod secrets;
pub(crate) mod spawn;
