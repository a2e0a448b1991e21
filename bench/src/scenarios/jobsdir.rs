//! `ax-bench jobsdir [--files N] [--mib M]`: scans of the jobs folder
//! against the scheduler. One real axd; a probe client measures `status`
//! round trips on a kept-open connection the whole time. Phases:
//!
//! 1. N small job files (default 5,000, 100 to a folder) moved in at once
//!    (one `rename` of the folder holding them): one scan;
//! 2. `reload` with nothing changed: a rescan of the same N files;
//! 3. one job file of M MiB (default 10; a chain of ~70,000 jobs per
//!    10 MiB) renamed in: one scan.
//!
//! Figures per phase: the scan's own time (`ax_jobs_scan_seconds`), the
//! time until the result was in force, and the probe's p50/p99/max during
//! it. Scans run off the scheduler thread, so the probe should stay near
//! its idle figure.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ax_testkit::Conn;
use serde_json::{Value, json};

use crate::axd;
use crate::measure::percentile;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Small job files in phases 1 and 2
    #[arg(long, default_value_t = 5_000)]
    files: usize,
    /// Size of the one big job file of phase 3, in MiB
    #[arg(long, default_value_t = 10)]
    mib: usize,
}

/// `status` round trips (ms) since start, with the time each was asked.
struct Probe {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<(Instant, f64)>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Probe {
    fn start(socket: &Path) -> anyhow::Result<Probe> {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let v = samples.clone();
        let thread = axd::sample_status(socket, stop.clone(), move |t, ms| {
            v.lock().unwrap().push((t, ms));
        })?;
        Ok(Probe {
            stop,
            samples,
            thread: Some(thread),
        })
    }

    /// (p50, p99, max, count) of the round trips asked in `from..to`.
    fn between(&self, from: Instant, to: Instant) -> (f64, f64, f64, usize) {
        let mut v: Vec<f64> = self
            .samples
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| *t >= from && *t <= to)
            .map(|(_, ms)| *ms)
            .collect();
        if v.is_empty() {
            return (0.0, 0.0, 0.0, 0);
        }
        let max = v.iter().copied().fold(0.0, f64::max);
        (
            percentile(&mut v, 0.5),
            percentile(&mut v, 0.99),
            max,
            v.len(),
        )
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Scans put in force, and the scan time histogram's sum (s).
fn scan_figures(c: &mut Conn) -> anyhow::Result<(u64, f64)> {
    let status = c.call("status", json!({}))?;
    let scans = status["jobs_folder"]["scans"]
        .as_u64()
        .context("status has no jobs_folder.scans: is this axd older than the bench?")?;
    let metrics = c.call("metrics", json!({}))?;
    let text = metrics["text"].as_str().unwrap_or_default();
    let sum = text
        .lines()
        .find_map(|l| l.strip_prefix("ax_jobs_scan_seconds_sum ")?.parse().ok())
        .unwrap_or(0.0);
    Ok((scans, sum))
}

/// Waits until more than `scans` scans are in force; returns when.
fn wait_scan(c: &mut Conn, scans: u64, limit: Duration) -> anyhow::Result<Instant> {
    let started = Instant::now();
    loop {
        let s = c.call("status", json!({}))?;
        if s["jobs_folder"]["scans"].as_u64().unwrap_or(0) > scans
            && s["jobs_folder"]["scanning"] == Value::Bool(false)
        {
            return Ok(Instant::now());
        }
        if started.elapsed() > limit {
            bail!("no scan in force within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs `change`, then waits for the scan it starts; prints the figures.
fn phase(
    name: &str,
    c: &mut Conn,
    probe: &Probe,
    change: impl FnOnce(&mut Conn) -> anyhow::Result<()>,
) -> anyhow::Result<Value> {
    let (scans, sum) = scan_figures(c)?;
    let t0 = Instant::now();
    change(c)?;
    let done = wait_scan(c, scans, Duration::from_secs(3600))?;
    let (_, sum_after) = scan_figures(c)?;
    let scan_s = sum_after - sum;
    let in_force_s = (done - t0).as_secs_f64();
    let (p50, p99, max, n) = probe.between(t0, done);
    println!(
        "{name:<44} scan {scan_s:>7.3} s, in force after {in_force_s:>7.3} s; \
         status p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.1} ms ({n} probes)"
    );
    Ok(
        json!({"phase": name, "scan_s": scan_s, "in_force_s": in_force_s,
        "status_ms": {"p50": p50, "p99": p99, "max": max, "n": n}}),
    )
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let d = axd::start(8, &[])?;
    let jobs = d.path("jobs.d");
    let mut c = axd::open(&d.socket)?;
    let probe = Probe::start(&d.socket)?;
    std::thread::sleep(Duration::from_millis(500));
    let idle = probe.between(Instant::now() - Duration::from_millis(500), Instant::now());
    println!(
        "{:<44} status p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} probes)",
        "idle", idle.0, idle.1, idle.2, idle.3
    );

    // Staged outside the folder, moved in with one rename.
    let stage = d.path("stage");
    for (name, text) in ax_testkit::jobfiles::many_small(args.files) {
        let path = stage.join(name);
        std::fs::create_dir_all(path.parent().unwrap_or(&stage))?;
        std::fs::write(path, text)?;
    }
    let files = args.files;
    let mut rows = vec![phase(
        &format!("{files} files moved in"),
        &mut c,
        &probe,
        |_| Ok(std::fs::rename(&stage, jobs.join("many"))?),
    )?];
    rows.push(phase(
        &format!("{files} files, reload (nothing changed)"),
        &mut c,
        &probe,
        |c| {
            c.call("reload", json!({}))?;
            Ok(())
        },
    )?);
    let (text, n) = ax_testkit::jobfiles::chain_of_bytes(args.mib << 20);
    let tmp = jobs.join(".big.toml.tmp");
    std::fs::write(&tmp, text)?;
    rows.push(phase(
        &format!("one {} MiB file ({n} jobs)", args.mib),
        &mut c,
        &probe,
        |_| Ok(std::fs::rename(&tmp, jobs.join("big.toml"))?),
    )?);
    let status = c.call("status", json!({}))?;
    if status["errors"].as_array().is_some_and(|e| !e.is_empty()) {
        bail!("job file errors: {}", status["errors"]);
    }
    println!(
        "{}",
        json!({"scenario": "jobsdir", "idle_status_ms": {"p50": idle.0, "p99": idle.1, "max": idle.2}, "phases": rows})
    );
    Ok(())
}
