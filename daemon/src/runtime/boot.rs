//! The machine's boot id: the kernel's random id of this boot, which
//! changes at every reboot and at nothing else. `@reboot` schedules fire
//! once per boot id, and a process recorded under another boot id cannot
//! be alive any more.

use std::fmt;
use std::path::PathBuf;

/// Where the kernel publishes the boot id.
const KERNEL_BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// Names a file read instead of the kernel's, so a test can simulate a
/// reboot by changing the file's content between two starts of axd.
pub const BOOT_ID_FILE_ENV: &str = "AX_BOOT_ID_FILE";

/// The id of one boot of the machine, as the kernel prints it (a UUID).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BootId(String);

impl BootId {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A boot id as stored earlier (in the store or a state file).
    pub fn from_stored(text: &str) -> BootId {
        BootId(text.trim().to_string())
    }
}

impl fmt::Display for BootId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[derive(Debug, thiserror::Error)]
#[error("cannot read the boot id from {path}: {reason}")]
pub struct BootIdError {
    path: String,
    reason: String,
}

/// Reads this boot's id, from `AX_BOOT_ID_FILE` when set, else the kernel.
pub fn current_boot_id() -> Result<BootId, BootIdError> {
    let path = std::env::var_os(BOOT_ID_FILE_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(KERNEL_BOOT_ID));
    let text = std::fs::read_to_string(&path).map_err(|e| BootIdError {
        path: path.display().to_string(),
        reason: e.to_string(),
    })?;
    let id = text.trim();
    if id.is_empty() {
        return Err(BootIdError {
            path: path.display().to_string(),
            reason: "the file is empty".to_string(),
        });
    }
    Ok(BootId(id.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_boot_id_reads_as_a_uuid() {
        let id = current_boot_id().expect("boot id");
        assert_eq!(id.as_str().len(), 36, "{id}");
        assert_eq!(id.as_str().matches('-').count(), 4, "{id}");
    }
}
