//! One module per scenario; each that runs alone has its own arguments
//! (`Args`) and `run`.

pub(crate) mod access;
pub(crate) mod all;
pub(crate) mod cluster;
pub(crate) mod crashloop;
pub(crate) mod dag;
pub(crate) mod hostile;
pub(crate) mod jobsdir;
pub(crate) mod latency;
pub(crate) mod logview;
pub(crate) mod proctree;
pub(crate) mod prune;
pub(crate) mod pueue;
pub(crate) mod queued;
pub(crate) mod restart;
pub(crate) mod shutdown;
pub(crate) mod submit;
pub(crate) mod throughput;
pub(crate) mod wal;
