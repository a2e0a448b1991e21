//! `ax-bench latency`: latency, measured by the jobs themselves.
//!
//! Each sample is a two-job DAG, `a` → `b`, both `date +%s%N` (argv, no
//! shell), in a pool of their own so that under load they never queue
//! behind the load's runs. From the printed wall-clock nanoseconds:
//!
//! * submit → started = `a`'s print − the client's clock just before
//!   `submit`;
//! * parent exit → child started = `b`'s print − `a`'s print (`a` exits
//!   right after printing).
//!
//! Both include starting `date` (exec, dynamic loading) up to its print.
//! The same span for a process this bench spawns itself (clock read →
//! spawn → print) is measured in the same run as the raw baseline.
//!
//! Load: scenario 1's — no-op runs at 8 slots, kept topped up.
//!
//! `ax-bench latency [N]` runs it alone: N samples idle and under load.

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use serde_json::json;

use crate::axd;
use crate::measure::p50_p99;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Samples of each
    #[arg(default_value_t = 300)]
    n: usize,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let show = |name: &str, v: Vec<f64>| {
        let (p50, p99) = p50_p99(&v);
        println!("{name:<44} p50 {p50:.2} ms  p99 {p99:.2} ms");
    };
    show("raw: clock → spawn date → print", raw(args.n)?);
    for (load, label) in [(false, "idle"), (true, "under load")] {
        let (ss, es) = ax(args.n, load)?;
        show(&format!("submit→started, {label}"), ss);
        show(&format!("parent exit→child started, {label}"), es);
    }
    Ok(())
}

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

/// Clock read → spawn `date` → its print, for a process spawned here.
pub(crate) fn raw(samples: usize) -> anyhow::Result<Vec<f64>> {
    let mut v = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t0 = now_ns();
        let out = Command::new("date").arg("+%s%N").output()?;
        let printed: i128 = String::from_utf8_lossy(&out.stdout).trim().parse()?;
        v.push((printed - t0) as f64 / 1e6);
    }
    Ok(v)
}

const LAT_DAG: &str = r#"
[[job]]
id = "a"
argv = ["date", "+%s%N"]
pool = "lat"
[[job]]
id = "b"
argv = ["date", "+%s%N"]
pool = "lat"
deps = ["a"]
"#;

fn printed(c: &mut ax_testkit::Conn, run: u64) -> anyhow::Result<i128> {
    let v = c.call("logs", json!({"run": run}))?;
    let text = v["data"].as_str().unwrap_or_default().trim().to_string();
    text.parse()
        .with_context(|| format!("run {run} printed {text:?}"))
}

/// (submit → started, parent exit → child started), in ms.
pub(crate) fn ax(samples: usize, under_load: bool) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let d = axd::start_pools(
        "max_concurrency = 10\n[pools.default]\nslots = 8\n[pools.lat]\nslots = 2\n",
        &[],
    )?;
    let stop = Arc::new(AtomicBool::new(false));
    let loader = if under_load {
        let mut c = axd::open(&d.socket)?;
        let stop = stop.clone();
        Some(std::thread::spawn(move || -> anyhow::Result<()> {
            while !stop.load(Ordering::Relaxed) {
                let queued = c.count("ready")?;
                if queued < 2_000 {
                    c.pipeline(2_000, 500, &|_| {
                        ("submit".into(), json!({"command": "true", "name": "load"}))
                    })?;
                } else {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            Ok(())
        }))
    } else {
        None
    };
    if under_load {
        // Let the load reach its steady state.
        std::thread::sleep(Duration::from_millis(500));
    }
    let mut c = axd::open(&d.socket)?;
    let (mut submit_started, mut exit_started) = (Vec::new(), Vec::new());
    for i in 0..samples {
        let t_submit = now_ns();
        let r = c.call(
            "submit",
            json!({"toml": LAT_DAG, "name": format!("lat{i}")}),
        )?;
        let ids = ax_testkit::run_ids(&r);
        let [a, b] = ids[..] else {
            bail!("expected two runs, got {r}");
        };
        let t = Instant::now();
        loop {
            let v = c.call("get_run", json!({"id": b}))?;
            if v["state"] == "success" {
                break;
            }
            if t.elapsed() > Duration::from_secs(30) {
                bail!("latency sample {i} did not finish: {v}");
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let (pa, pb) = (printed(&mut c, a)?, printed(&mut c, b)?);
        submit_started.push((pa - t_submit) as f64 / 1e6);
        exit_started.push((pb - pa) as f64 / 1e6);
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(l) = loader {
        let _ = l.join();
    }
    Ok((submit_started, exit_started))
}
