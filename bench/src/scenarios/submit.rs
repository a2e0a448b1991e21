//! Scenario 3: submission. `ax-bench submit [N] [REPS]` runs 3b alone: N
//! runs streamed over one connection behind a paused DAG (durable), with
//! axd's RSS growth per queued run. 3a, `ax submit` as separate processes,
//! runs in the suite.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::bail;
use ax_testkit::{Conn, Daemon};
use serde_json::json;

use crate::axd;
use crate::measure::{fmt3f, stats};
use crate::procfs::rss_kib;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Runs per measurement
    #[arg(default_value_t = 100_000)]
    n: usize,
    /// Measurements
    #[arg(default_value_t = 3)]
    reps: usize,
}

/// The job file of the DAG `hold`, paused so that its runs stay queued.
pub(crate) const HOLD: (&str, &str) = ("hold.toml", "command = \"true\"\n");

/// What queueing cost.
pub(crate) struct Queued {
    pub seconds: f64,
    pub rss_before_kib: u64,
    pub rss_after_kib: u64,
}

impl Queued {
    pub(crate) fn bytes_per_run(&self, n: usize) -> f64 {
        self.rss_after_kib.saturating_sub(self.rss_before_kib) as f64 * 1024.0 / n as f64
    }
}

/// Pauses `hold`, then streams `n` triggers of it over `c`: the seconds
/// until the last was answered, and axd's RSS around them.
pub(crate) fn queue_behind_paused(d: &Daemon, c: &mut Conn, n: usize) -> anyhow::Result<Queued> {
    let pid = axd::pid(d)?;
    c.call("pause", json!({"dag": "hold"}))?;
    std::thread::sleep(Duration::from_millis(200));
    let rss_before_kib = rss_kib(pid);
    let t = Instant::now();
    c.stream(n, &|_| ("trigger".into(), json!({"dag": "hold"})))?;
    let seconds = t.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(300));
    Ok(Queued {
        seconds,
        rss_before_kib,
        rss_after_kib: rss_kib(pid),
    })
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let n = args.n;
    let mut secs = Vec::new();
    for _ in 0..args.reps {
        let d = axd::start(8, &[HOLD])?;
        let mut c = axd::open(&d.socket)?;
        let queued = queue_behind_paused(&d, &mut c, n)?;
        secs.push(queued.seconds);
        println!(
            "  RSS growth {:.0} B per queued run",
            queued.bytes_per_run(n)
        );
    }
    println!("{n} runs pipelined (durable): {} s", fmt3f(stats(secs), ""));
    Ok(())
}

/// `ax submit` as separate processes: the mean ms per call of the first
/// and of the last 100 of `n` calls.
pub(crate) fn ax_submit_calls(n: usize) -> anyhow::Result<(f64, f64)> {
    let d = axd::start(8, &[HOLD])?;
    let ax = axd::sibling("ax")?;
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        let st = Command::new(&ax)
            .arg("--socket")
            .arg(&d.socket)
            .args(["submit", "--name", &format!("s{i}"), "--", "true"])
            .stdout(Stdio::null())
            .status()?;
        if !st.success() {
            bail!("ax submit failed");
        }
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let k = 100.min(n / 2).max(1);
    let first: f64 = times[..k].iter().sum::<f64>() / k as f64;
    let last: f64 = times[n - k..].iter().sum::<f64>() / k as f64;
    Ok((first, last))
}
