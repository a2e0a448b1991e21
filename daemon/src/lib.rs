//! The ax daemon: the runtime around the engine (`ax-engine`), one folder
//! per concern:
//!
//! * `runtime`: start-up, signals, shutdown, the state dir, the real
//!   clocks, fencing.
//! * `bus`: the messages the daemon's threads send each other (`Msg`,
//!   `Handle`, the writer's `Step`, the shared store `Fault`).
//! * `scheduler`: the scheduler thread, owner of the engine.
//! * `jobs_folder`: the scan, the watcher and the DAG registry.
//! * `execution`: running attempts as processes (executor, spawn, reaper,
//!   secrets).
//! * `logs`: attempt log files (their paths, reading, shipping) and axd's
//!   own log format.
//! * `server`: the Unix socket (bind, access, connections).
//! * `accounts`: users and groups from the password and group databases.
//! * `cluster`: the node registry and lease, the claimer, the feed.
//! * `store`: SQLite and PostgreSQL, the writer thread, its journal,
//!   retention.
//! * `metrics`: the counters and their HTTP endpoint.
//! * `notifier`: mail about finished DAG runs (`[notify]`, `mail_command`).
//! * `user_dags`: users' own DAGs, their files under the state dir and
//!   their rules.

pub mod accounts;
pub(crate) mod bus;
pub(crate) mod cluster;
pub mod config;
pub mod execution;
pub mod jobs_folder;
pub mod keeper;
pub mod logs;
pub mod metrics;
pub mod notifier;
pub mod runtime;
pub mod scheduler;
pub(crate) mod server;
pub mod store;
pub mod user_dags;
