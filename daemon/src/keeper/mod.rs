//! The keeper: the process that is the parent of every job, so that jobs
//! outlive axd (docs/architecture.md, "Jobs that outlive axd").
//!
//! axd prepares each attempt (its account, environment, log, pipe) and asks
//! its keeper to spawn it; the keeper is the job's parent and reaper, and
//! tells axd of its exit. When axd stops or dies, the keeper goes on:
//! it copies the jobs' output into their logs and keeps their exit
//! statuses, until the next axd takes the attempts over (`Take`) and has
//! recorded their ends (`Forget`).
//!
//! * `serve`: the keeper process itself (`axd --keeper DIR`).
//! * `client`: axd's connection to a keeper.
//! * `launch`: starting a keeper, and finding the ones an earlier axd left.
//! * `wire`: the frames between them.

pub(crate) mod client;
pub(crate) mod launch;
pub mod serve;
pub(crate) mod wire;
