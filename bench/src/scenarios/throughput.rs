//! Scenario 1: no-op throughput through axd against the machine's limit
//! (this process spawning and reaping the same command with tokio at the
//! same concurrency). `ax-bench throughput [N] [REPS]` runs it alone, raw
//! and ax alternating, with axd's CPU time and context switches per run.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::axd;
use crate::measure::{fmt3, stats};
use crate::procfs::cpu_and_switches;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Runs per measurement
    #[arg(default_value_t = 10_000)]
    n: usize,
    /// Measurements of each, at 8 and at 64 slots
    #[arg(default_value_t = 3)]
    reps: usize,
}

/// The physical limit: spawn and reap `sh -c true` with tokio at `conc`
/// concurrency; runs/s.
pub(crate) fn raw_spawn_rate(n: usize, conc: usize) -> anyhow::Result<f64> {
    let rt = ax_testkit::runtime()?;
    Ok(rt.block_on(async {
        let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(conc));
        let t = Instant::now();
        let mut handles = Vec::with_capacity(n);
        for _ in 0..n {
            let Ok(permit) = sem.clone().acquire_owned().await else {
                break;
            };
            handles.push(tokio::spawn(async move {
                let _ = tokio::process::Command::new("/bin/sh")
                    .arg("-c")
                    .arg("true")
                    .status()
                    .await;
                drop(permit);
            }));
        }
        for h in handles {
            let _ = h.await;
        }
        n as f64 / t.elapsed().as_secs_f64()
    }))
}

/// No-op throughput through the daemon: `n` runs submitted in one pipelined
/// batch, runs/s until the last one succeeded.
pub(crate) fn ax_noop_rate(n: usize, slots: u32) -> anyhow::Result<f64> {
    Ok(ax_noop_profile(n, slots)?.0)
}

/// The same, with axd's own CPU µs and context switches per run.
fn ax_noop_profile(n: usize, slots: u32) -> anyhow::Result<(f64, f64, f64)> {
    let d = axd::start(slots, &[])?;
    let pid = axd::pid(&d)?;
    let mut c = axd::open(&d.socket)?;
    let (cpu0, sw0) = cpu_and_switches(pid);
    let t = Instant::now();
    c.pipeline(n, 1000, &|i| {
        (
            "submit".into(),
            json!({"command": "true", "name": format!("n{i}")}),
        )
    })?;
    c.wait_count("success", n as u64, Duration::from_secs(600))?;
    let rate = n as f64 / t.elapsed().as_secs_f64();
    let (cpu1, sw1) = cpu_and_switches(pid);
    Ok((
        rate,
        (cpu1 - cpu0) / n as f64,
        (sw1 - sw0) as f64 / n as f64,
    ))
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let n = args.n;
    for slots in [8u32, 64] {
        let (mut raw, mut ax, mut cpu, mut sw) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut raw_cpu = Vec::new();
        for _ in 0..args.reps {
            let (c0, _) = cpu_and_switches(std::process::id());
            raw.push(raw_spawn_rate(n, slots as usize)?);
            raw_cpu.push((cpu_and_switches(std::process::id()).0 - c0) / n as f64);
            let (rate, c, s) = ax_noop_profile(n, slots)?;
            ax.push(rate);
            cpu.push(c);
            sw.push(s);
        }
        let (r, a) = (stats(raw), stats(ax));
        println!(
            "{slots:>3} slots: raw {} /s ({:.0} µs CPU/run), ax {} /s, ax/raw {:.0}%; axd per run: {:.0} µs CPU, {:.1} context switches",
            fmt3(r, ""),
            stats(raw_cpu).0,
            fmt3(a, ""),
            a.0 / r.0 * 100.0,
            stats(cpu).0,
            stats(sw).0,
        );
    }
    Ok(())
}
