//! Running attempts as processes: the executor and its spawner threads
//! (`executor`), the process start without fork (`spawn`), what a killed
//! job leaves behind (`reaper`) and a job's secrets (`secrets`).

pub mod executor;
pub mod reaper;
pub mod secrets;
pub mod spawn;
