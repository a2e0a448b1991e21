//! The jobs folder (docs/job-files.md): the scan that reads it into DAGs
//! (`scan`), which of its files are trusted
//! (`trust`), the watcher and scanner threads (`watcher`), and the DAG
//! registry the scheduler puts scans in force through (`registry`).

pub(crate) mod registry;
pub mod scan;
pub mod trust;
pub(crate) mod watcher;
