//! systemd: the notifications axd sends (`READY=1`, `STOPPING=1`,
//! `RELOADING=1`), and the status loop that refreshes `STATUS=` and pets
//! the watchdog.

use ax_protocol::api::Role;
use ax_protocol::request::Status;

use crate::bus::{Handle, Peer};

/// How often `STATUS=` is refreshed under systemd.
const STATUS_REFRESH: std::time::Duration = std::time::Duration::from_secs(2);

/// The one line systemd shows for axd: runs running, ready runs waiting
/// for a slot, runs that failed or timed out in the last hour, and a
/// store fault while there is one.
pub(crate) fn status_line(s: &ax_protocol::api::StatusView) -> String {
    let running: u32 = s.pools.iter().map(|p| p.running).sum();
    let queued = s.runs.get("ready").copied().unwrap_or(0);
    let mut line = format!(
        "{running} running, {queued} queued, {} failed in the last hour",
        s.failed_last_hour
    );
    if let Some(e) = &s.store_error {
        line.push_str("; STORE FAULT: ");
        line.push_str(e);
    }
    line
}

pub(crate) fn notify(state: &[sd_notify::NotifyState]) {
    let _ = sd_notify::notify(state);
}

/// Under systemd: `STATUS=` (what `systemctl status axd` shows) is
/// refreshed from the scheduler every few seconds, and the watchdog is
/// petted only while the scheduler answers.
pub(crate) async fn status_loop(handle: Handle) {
    let watchdog = sd_notify::watchdog_enabled();
    let period = watchdog.map_or(STATUS_REFRESH, |w| (w / 2).min(STATUS_REFRESH));
    let peer = Peer::internal(Role::Owner, "systemd status");
    loop {
        if let Ok(status) = handle.ask(&peer, Status).await {
            let line = status_line(&status);
            let mut states = vec![sd_notify::NotifyState::Status(&line)];
            if watchdog.is_some() {
                states.push(sd_notify::NotifyState::Watchdog);
            }
            notify(&states);
        }
        tokio::time::sleep(period).await;
    }
}

#[cfg(test)]
mod tests {
    use super::status_line;

    #[test]
    fn the_systemd_status_line_names_a_store_fault() {
        let mut s = ax_protocol::api::StatusView::default();
        assert_eq!(
            status_line(&s),
            "0 running, 0 queued, 0 failed in the last hour"
        );
        s.store_error = Some("a commit has waited 3.0 s for the store".into());
        assert_eq!(
            status_line(&s),
            "0 running, 0 queued, 0 failed in the last hour; STORE FAULT: a commit has waited 3.0 s for the store"
        );
    }
}
