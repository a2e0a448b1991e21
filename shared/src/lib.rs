//! The domain model of ax, shared by every crate: DAGs, jobs and their
//! states, job-file parsing and validation, cron schedules, durations and
//! timestamps. No I/O runtime: the protocol and its client live in
//! `ax-protocol`, the engine in `ax-engine`.

pub mod cron;
pub mod duration;
pub mod envfile;
pub mod jobfile;
pub mod model;
pub mod time;
pub mod visible;

pub use model::*;
