//! One module per scenario; each that runs alone has its own arguments
//! (`Args`) and `run`.

pub mod access;
pub mod all;
pub mod cluster;
pub mod crashloop;
pub mod dag;
pub mod hostile;
pub mod jobsdir;
pub mod latency;
pub mod logview;
pub mod proctree;
pub mod prune;
pub mod pueue;
pub mod queued;
pub mod restart;
pub mod shutdown;
pub mod submit;
pub mod throughput;
pub mod wal;
