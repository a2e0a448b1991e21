//! The process groups of attempts, as /proc shows them: whether a group
//! still has live members, the start-up sweep of an earlier life's
//! attempts, and the list of supervised groups that `kill_all` ends.

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// The start time of a process in clock ticks since boot (field 22 of
/// /proc/PID/stat), to recognise a pid after a restart.
pub(crate) fn process_start_time(pid: u32) -> Option<u64> {
    // One read into a buffer (the line is far below 1 KiB; `comm` is at
    // most 16 bytes): read_to_string would also stat the file, for every
    // job started.
    let mut buf = [0u8; 1024];
    let n = std::io::Read::read(
        &mut std::fs::File::open(format!("/proc/{pid}/stat")).ok()?,
        &mut buf,
    )
    .ok()?;
    crate::execution::spawn::start_time_of_stat(&buf[..n])
}

/// Whether any live (non-zombie) process is left in the group. `kill(0)`
/// alone would count zombies that an init without reaping leaves behind.
pub(super) fn group_alive(pgid: i32) -> bool {
    if killpg(Pid::from_raw(pgid), None).is_err() {
        return false;
    }
    // Unreadable /proc: assume members remain rather than free the slot early.
    any_process(|fields| live(fields) && pgrp(fields) == Some(pgid)).unwrap_or(true)
}

/// Whether some process satisfies `matches`, given the fields of its
/// `/proc/PID/stat` after the command name (the state first); `None` when
/// `/proc` cannot be read.
fn any_process(matches: impl Fn(&[&str]) -> bool) -> Option<bool> {
    let entries = std::fs::read_dir("/proc").ok()?;
    Some(entries.flatten().any(|e| {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            return false;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        let Some(close) = stat.rfind(')') else {
            return false;
        };
        let fields: Vec<&str> = stat[close + 2..].split_whitespace().collect();
        matches(&fields)
    }))
}

/// Not a zombie and not dead (`/proc/PID/stat` fields as `any_process` gives them).
fn live(fields: &[&str]) -> bool {
    !matches!(fields.first(), Some(&"Z") | Some(&"X"))
}

/// The process group (`/proc/PID/stat` fields as `any_process` gives them).
fn pgrp(fields: &[&str]) -> Option<i32> {
    fields.get(2).and_then(|p| p.parse().ok())
}

/// Start-up sweep: kill the process group of an attempt from an earlier
/// life if, and only if, the pid still names the same process; or, when
/// that process is gone (the job's shell died with the axd that started
/// it and was reaped), if live members of its group remain that started
/// no earlier than it did. Linux does not give a pid out again while a
/// process group of that id has members, so those are what is left of
/// the attempt.
pub(crate) fn sweep_orphan(pid: u32, pid_start: Option<u64>) -> bool {
    match (pid_start, process_start_time(pid)) {
        (Some(want), Some(have)) if want == have => {
            let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
            true
        }
        (Some(want), None) if group_left_since(pid as i32, want) => {
            let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
            true
        }
        _ => false,
    }
}

/// Whether a live process of group `pgid` started at or after `since`
/// (clock ticks after boot, as `/proc/PID/stat` counts).
fn group_left_since(pgid: i32, since: u64) -> bool {
    // Unreadable /proc: nothing is known to be left, so nothing is killed.
    any_process(|fields| {
        let start = fields.get(19).and_then(|s| s.parse::<u64>().ok());
        live(fields) && pgrp(fields) == Some(pgid) && start.is_some_and(|s| s >= since)
    })
    .unwrap_or(false)
}

/// The process groups of attempts being supervised, for `kill_all`.
static LIVE_GROUPS: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

/// A supervised group, listed in `LIVE_GROUPS` while it lives.
pub(super) struct LiveGroup(i32);

impl LiveGroup {
    pub(super) fn enter(pgid: i32) -> LiveGroup {
        LIVE_GROUPS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(pgid);
        LiveGroup(pgid)
    }
}

impl Drop for LiveGroup {
    fn drop(&mut self) {
        LIVE_GROUPS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|g| *g != self.0);
    }
}

/// SIGKILL to the process group of every attempt still supervised: axd
/// is about to exit without a shutdown (a fenced cluster node), and no
/// job of it may run on.
pub(crate) fn kill_all() -> usize {
    let groups = LIVE_GROUPS.lock().unwrap_or_else(|e| e.into_inner());
    for pgid in groups.iter() {
        let _ = killpg(Pid::from_raw(*pgid), Signal::SIGKILL);
    }
    groups.len()
}
