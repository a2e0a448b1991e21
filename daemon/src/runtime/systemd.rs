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

/// One notification to systemd (`sd_notify(3)`).
pub(crate) enum Notify<'a> {
    Ready,
    Stopping,
    Reloading,
    Status(&'a str),
    Watchdog,
}

/// What systemd told axd in its environment, read once at start
/// ([`take_from_env`]) and then removed from it, so that no job inherits
/// it: with `NOTIFY_SOCKET` a job could tell systemd axd is ready or
/// petted. The sd-notify crate is not used for this reason: it reads
/// `NOTIFY_SOCKET` from the environment at every call.
#[derive(Debug)]
struct FromSystemd {
    notify_socket: Option<std::ffi::OsString>,
    watchdog: Option<std::time::Duration>,
}

static FROM_SYSTEMD: std::sync::OnceLock<FromSystemd> = std::sync::OnceLock::new();

/// The variables systemd sets for its service, removed from axd's
/// environment at start.
const SYSTEMD_VARS: &[&str] = &[
    "NOTIFY_SOCKET",
    "WATCHDOG_USEC",
    "WATCHDOG_PID",
    "LISTEN_FDS",
    "LISTEN_PID",
    "LISTEN_FDNAMES",
    "INVOCATION_ID",
];

/// Reads systemd's variables and removes them from the environment.
///
/// # Safety
/// Must be called before any other thread exists (it changes the
/// environment, which other threads may be reading).
pub unsafe fn take_from_env() {
    let watchdog = std::env::var("WATCHDOG_USEC")
        .ok()
        .and_then(|us| us.parse::<u64>().ok())
        .filter(|&us| us > 0)
        .filter(|_| {
            // For axd, unless it names another process.
            std::env::var("WATCHDOG_PID")
                .ok()
                .and_then(|p| p.parse::<u32>().ok())
                .is_none_or(|p| p == std::process::id())
        })
        .map(std::time::Duration::from_micros);
    let found = FromSystemd {
        notify_socket: std::env::var_os("NOTIFY_SOCKET").filter(|s| !s.is_empty()),
        watchdog,
    };
    let _ = FROM_SYSTEMD.set(found);
    for var in SYSTEMD_VARS {
        // SAFETY: no other thread exists yet (this function's contract).
        unsafe { std::env::remove_var(var) };
    }
}

/// Whether systemd waits for notifications from axd.
pub(crate) fn under_systemd() -> bool {
    FROM_SYSTEMD
        .get()
        .is_some_and(|f| f.notify_socket.is_some())
}

/// Sends `states` as one datagram to systemd's notification socket (an
/// abstract one when its path starts with `@`); nothing outside systemd.
pub(crate) fn notify(states: &[Notify<'_>]) {
    use std::os::unix::ffi::OsStrExt;
    let Some(socket) = FROM_SYSTEMD.get().and_then(|f| f.notify_socket.as_ref()) else {
        return;
    };
    let mut message = String::new();
    for state in states {
        match state {
            Notify::Ready => message.push_str("READY=1\n"),
            Notify::Stopping => message.push_str("STOPPING=1\n"),
            Notify::Reloading => message.push_str("RELOADING=1\n"),
            Notify::Watchdog => message.push_str("WATCHDOG=1\n"),
            // One line: a newline in the status would start another field.
            Notify::Status(s) => {
                message.push_str("STATUS=");
                message.push_str(&s.replace('\n', " "));
                message.push('\n');
            }
        }
    }
    let Ok(sender) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let bytes = socket.as_bytes();
    let _ = match bytes.strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            std::os::unix::net::SocketAddr::from_abstract_name(name)
                .and_then(|addr| sender.send_to_addr(message.as_bytes(), &addr))
        }
        None => sender.send_to(message.as_bytes(), socket),
    };
}

/// Under systemd: `STATUS=` (what `systemctl status axd` shows) is
/// refreshed from the scheduler every few seconds, and the watchdog is
/// petted only while the scheduler answers.
pub(crate) async fn status_loop(handle: Handle) {
    let watchdog = FROM_SYSTEMD.get().and_then(|f| f.watchdog);
    let period = watchdog.map_or(STATUS_REFRESH, |w| (w / 2).min(STATUS_REFRESH));
    let peer = Peer::internal(Role::Owner, "systemd status");
    loop {
        if let Ok(status) = handle.ask(&peer, Status).await {
            let line = status_line(&status);
            let mut states = vec![Notify::Status(&line)];
            if watchdog.is_some() {
                states.push(Notify::Watchdog);
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
