//! Logs: where an attempt's log file lives (`paths`), reading one for
//! `logs` from the file or the store (`read`), waking follows when it
//! grows (`follow`), shipping it to the store
//! in a cluster (`ship`), and how axd's own log lines show their fields
//! (`format`).

pub mod follow;
pub mod format;
pub mod paths;
pub mod read;
pub mod ship;
