//! Scenario 1: no-op throughput through axd against the machine's limit
//! (this process spawning and reaping the same command with tokio at the
//! same concurrency, and `xargs -P` doing the same). `ax-bench throughput
//! [N] [REPS]` runs it alone, raw, xargs and ax in turn, with the CPU time
//! of axd and its keeper (the process that spawns its jobs) and axd's
//! context switches per run.

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

/// The shell's way to run `n` no-ops at `conc`: `xargs -P CONC -n 1 sh -c
/// true`, fed `n` lines; runs/s.
pub(crate) fn xargs_rate(n: usize, conc: usize) -> anyhow::Result<f64> {
    use std::io::Write;
    let t = Instant::now();
    let mut child = std::process::Command::new("xargs")
        .args(["-P", &conc.to_string(), "-n", "1", "/bin/sh", "-c", "true"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()?;
    {
        let mut stdin = child.stdin.take().expect("piped");
        let lines = "x\n".repeat(n);
        stdin.write_all(lines.as_bytes())?;
    }
    let status = child.wait()?;
    anyhow::ensure!(status.success(), "xargs: {status}");
    Ok(n as f64 / t.elapsed().as_secs_f64())
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
    // The keeper spawns and reaps the jobs: its CPU is axd's cost too.
    let keepers = d.keepers();
    let keeper_cpu = || -> f64 { keepers.iter().map(|k| cpu_and_switches(*k as u32).0).sum() };
    let (cpu0, sw0) = cpu_and_switches(pid);
    let kcpu0 = keeper_cpu();
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
    let kcpu1 = keeper_cpu();
    Ok((
        rate,
        (cpu1 - cpu0 + kcpu1 - kcpu0) / n as f64,
        (sw1 - sw0) as f64 / n as f64,
    ))
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let n = args.n;
    for slots in [8u32, 64] {
        let (mut raw, mut ax, mut cpu, mut sw) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut raw_cpu, mut xargs, mut vs_xargs) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..args.reps {
            let (c0, _) = cpu_and_switches(std::process::id());
            raw.push(raw_spawn_rate(n, slots as usize)?);
            raw_cpu.push((cpu_and_switches(std::process::id()).0 - c0) / n as f64);
            let x = xargs_rate(n, slots as usize)?;
            xargs.push(x);
            let (rate, c, s) = ax_noop_profile(n, slots)?;
            // Pair by pair: the machine's speed drifts between reps.
            vs_xargs.push(rate / x);
            ax.push(rate);
            cpu.push(c);
            sw.push(s);
        }
        let (r, a) = (stats(raw), stats(ax));
        println!(
            "{slots:>3} slots: raw {} /s ({:.0} µs CPU/run), xargs -P{slots} {} /s, ax {} /s, ax/raw {:.0}%, ax/xargs {:.2}× (median of pairs); axd and keeper per run: {:.0} µs CPU, axd {:.1} context switches",
            fmt3(r, ""),
            stats(raw_cpu).0,
            fmt3(stats(xargs), ""),
            fmt3(a, ""),
            a.0 / r.0 * 100.0,
            stats(vs_xargs).0,
            stats(cpu).0,
            stats(sw).0,
        );
    }
    Ok(())
}
