//! The daemon under test: the `axd` built next to this binary, on the
//! bench's config (durable unless `AX_BENCH_SYNC` says otherwise, retries
//! never rate-limited), through the testkit harness.

use std::path::{Path, PathBuf};

use anyhow::bail;
use ax_testkit::{Conn, Daemon};

/// The name this bench's connections give in `hello`.
pub(crate) const CLIENT: &str = "ax-bench";

/// A binary built next to this one (`axd`, `ax`).
pub(crate) fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let path = std::env::current_exe()?.with_file_name(name);
    if !path.exists() {
        bail!(
            "{} not found: run `cargo build --release` first",
            path.display()
        );
    }
    Ok(path)
}

/// The bench's config around `pools` (which also holds `max_concurrency`).
fn config(pools: &str) -> String {
    format!(
        "synchronous = \"{}\"\n{pools}[retry]\nrate = \"100000/min\"\n",
        std::env::var("AX_BENCH_SYNC").unwrap_or_else(|_| "full".into())
    )
}

/// A temp dir for axd on `config` as given (the harness puts the file
/// locations ahead of it); axd not started.
pub(crate) fn prepare(config: &str, jobs: &[(&str, &str)]) -> anyhow::Result<Daemon> {
    let mut daemon = Daemon::prepare(sibling("axd")?, config, jobs)?;
    daemon.set_log_level("warn");
    Ok(daemon)
}

/// A serving axd on the bench's config, with `pools` given as TOML.
pub(crate) fn start_pools(pools: &str, jobs: &[(&str, &str)]) -> anyhow::Result<Daemon> {
    let mut daemon = prepare(&config(pools), jobs)?;
    daemon.spawn()?;
    Ok(daemon)
}

/// A serving axd with one pool of `slots`, and as many slots in all.
pub(crate) fn start(slots: u32, jobs: &[(&str, &str)]) -> anyhow::Result<Daemon> {
    start_pools(
        &format!("max_concurrency = {slots}\n[pools.default]\nslots = {slots}\n"),
        jobs,
    )
}

/// A connection that has said `hello`.
pub(crate) fn open(socket: &Path) -> anyhow::Result<Conn> {
    Ok(Conn::open(socket, CLIENT)?)
}

/// axd's pid, which a started daemon has.
pub(crate) fn pid(daemon: &Daemon) -> anyhow::Result<u32> {
    match daemon.pid() {
        Some(pid) => Ok(pid),
        None => bail!("axd is not running"),
    }
}

/// A thread that asks `status` every 2 ms until `stop` is set, handing
/// `record` when each call started and how long it took (ms); it ends at
/// the first failed call.
pub(crate) fn sample_status(
    socket: &Path,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    mut record: impl FnMut(std::time::Instant, f64) + Send + 'static,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let mut c = open(socket)?;
    Ok(std::thread::spawn(move || {
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let t = std::time::Instant::now();
            if c.call("status", serde_json::json!({})).is_err() {
                return;
            }
            record(t, t.elapsed().as_secs_f64() * 1000.0);
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
    }))
}
