//! One real `axd` at a time per test, on SQLite in a temp dir, driven
//! through its socket, its jobs folder, its signals and the faults of its
//! machine (disk, descriptors, clock, other users): one test binary, a
//! module per concern.

#[path = "../support/mod.rs"]
mod support;

mod console_data;
mod crash_paths;
mod cron_features;
mod daemon_e2e;
mod disk_full;
mod faults_fds;
mod faults_time;
mod hostile_clients;
mod jobs_folder;
mod jobs_folder_faults;
mod local_users;
mod mail;
mod metrics;
mod metrics_e2e;
mod operator_reads;
mod outlive;
mod protocol;
mod reload;
mod roles;
mod run_as;
mod secrets;
mod state_dir_faults;
mod store_faults;
mod systemd_status;
mod systemd_units;
mod trust;

/// A run's or attempt's time in milliseconds; fails the test when unset.
pub(crate) fn ms(t: &Option<ax_shared::time::Timestamp>) -> i64 {
    t.expect("time set").millis()
}

/// A free TCP port on the loopback address.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `text` parsed as the Prometheus exposition format; fails the test
/// when it is not.
pub(crate) fn parse_prometheus(text: &str) -> prometheus_parse::Scrape {
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("Prometheus text")
}

/// Waits until run `id` failed without its job ever starting
/// (`spawn_error`); returns the reason given.
pub(crate) async fn wait_spawn_error(
    c: &mut ax_protocol::client::Client,
    id: u64,
    secs: u64,
) -> String {
    let r = support::wait_state(c, id, "failed", secs).await;
    assert_eq!(
        r.attempts[0].outcome.map(|o| o.as_str()),
        Some("spawn_error"),
        "{r:?}"
    );
    r.reason.unwrap_or_default()
}
