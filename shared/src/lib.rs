//! The domain model of ax, shared by every crate: DAGs, jobs and their
//! states (`model`), job-file parsing and validation (`jobfile`), cron
//! schedules (`cron`), durations (`duration`), timestamps (`time`),
//! environment files (`envfile`), text made safe to show (`visible`), the
//! rules a job's fields obey wherever the job comes from (`rules`), and
//! the names of users' own DAGs (`users`).
//! No I/O runtime: the protocol and its client live in
//! `ax-protocol`, the engine in `ax-engine`.

pub mod cron;
pub mod duration;
pub mod envfile;
pub mod jobfile;
pub mod model;
pub mod rules;
pub mod time;
pub mod users;
pub mod visible;

pub use model::*;
