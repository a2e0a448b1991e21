//! The ax daemon: the scheduling engine and (later) the runtime around it.

pub mod engine;
pub mod config;
pub mod store;
pub mod time;
pub mod executor;
pub mod dags;
pub mod scheduler;
pub mod server;
pub mod daemon;
