//! `ax-bench wal [RUNS]`: the store's WAL stays bounded under steady load with
//! a subscriber reading every notification.
//!
//! RUNS no-op runs (default 100,000: an hour at 28 runs/s, the rate of the
//! system ax descends from) are submitted in batches of 100 while they
//! run; a subscriber reads every notification, and `list_runs`/`get_run`
//! readers query the store throughout. The WAL file's size is sampled
//! every 50 ms.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use ax_testkit::Conn;
use serde_json::json;

use crate::axd;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// No-op runs
    #[arg(default_value_t = 100_000)]
    runs: usize,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let runs = args.runs;
    let d = axd::start(64, &[])?;
    let wal = d.path("state/ax.db-wal");
    let stop = Arc::new(AtomicBool::new(false));

    // The subscriber, reading everything.
    let notes = Arc::new(AtomicU64::new(0));
    let sub = {
        let mut s = Conn::open(&d.socket, "wal-sub")?;
        s.send("subscribe", json!({}))?;
        let (notes, stop) = (notes.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match s.read_line() {
                    Ok(None) | Err(_) => return,
                    Ok(Some(_)) => {
                        notes.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        })
    };
    // A reader of the store.
    let reader = {
        let mut c = axd::open(&d.socket)?;
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if c.call("list_runs", json!({"limit": 50})).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    // The sampler.
    let samples = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sampler = {
        let (samples, stop, wal) = (samples.clone(), stop.clone(), wal.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let size = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
                samples.lock().unwrap().push(size);
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };

    let t = Instant::now();
    let mut c = axd::open(&d.socket)?;
    c.pipeline(runs, 100, &|_| {
        (
            "submit".into(),
            json!({"command": "true", "name": "steady"}),
        )
    })?;
    c.wait_count("success", runs as u64, Duration::from_secs(3600))?;
    let took = t.elapsed();
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let _ = reader.join();
    let end_size = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    drop(d);
    let _ = sub.join();

    let samples = samples.lock().unwrap().clone();
    if samples.is_empty() {
        bail!("no samples");
    }
    let max = *samples.iter().max().unwrap();
    let last_quarter = &samples[samples.len() * 3 / 4..];
    let max_late = *last_quarter.iter().max().unwrap_or(&0);
    let store = end_size;
    println!(
        "WAL under steady load: {runs} runs in {:.1} s, a subscriber reading ({} notifications), a store reader every 20 ms",
        took.as_secs_f64(),
        notes.load(Ordering::Relaxed)
    );
    println!(
        "  WAL size: max {:.1} MiB over {} samples; max in the last quarter {:.1} MiB; at the end {:.1} MiB",
        max as f64 / 1048576.0,
        samples.len(),
        max_late as f64 / 1048576.0,
        store as f64 / 1048576.0
    );
    Ok(())
}
