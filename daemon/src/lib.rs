//! The ax daemon: the runtime around the engine (`ax-engine`): store,
//! writer, executor, socket server, jobs-folder watcher and, in a cluster,
//! the node registry, claimer, feed and log shipper.

pub mod claimer;
pub mod cluster;
pub mod config;
pub mod daemon;
pub mod dags;
pub mod executor;
pub mod feed;
pub mod journal;
pub mod log_format;
pub mod logship;
pub mod metrics;
pub mod metrics_http;
pub mod private;
pub mod ratelog;
pub mod reaper;
pub mod retention;
pub mod scheduler;
pub mod secrets;
pub mod server;
mod server_logs;
pub mod shutdown;
pub mod spawn;
pub mod state_dir;
pub mod store;
pub mod time;
pub mod watcher;
pub mod writer;
