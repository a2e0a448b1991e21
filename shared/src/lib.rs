//! Shared pieces of ax: the data model, job-file parsing and validation,
//! cron schedules, time formats, and the JSON-RPC protocol with its client.

pub mod api;
pub mod client;
pub mod cron;
pub mod dagdraw;
pub mod duration;
pub mod envfile;
pub mod jobfile;
pub mod model;
pub mod protocol;
pub mod socket_dir;
pub mod time;
pub mod visible;

pub use model::*;
