//! Where an attempt's log lives: `LOG_DIR/RUN.ATTEMPT.log`, one file per
//! attempt, in the state dir's `logs/` folder (docs/config.md, "Files and
//! their modes"). Every reader, writer, shipper and pruner of log files
//! finds them through here.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use ax_engine::RunId;

/// The log file of attempt `attempt` of run `run`.
pub fn log_path(log_dir: &Path, run: RunId, attempt: u32) -> PathBuf {
    log_dir.join(format!("{}.{}.log", run.0, attempt))
}

/// Whether a file of the log folder is an attempt's log (by its name).
pub(crate) fn is_log_file(name: &OsStr) -> bool {
    name.to_string_lossy().contains(".log")
}
