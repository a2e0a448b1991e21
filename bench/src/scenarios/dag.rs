//! Scenario 4: one DAG run of N no-op jobs in a shape, against N
//! independent runs. `ax-bench dag SIZE SHAPE...` runs each shape once, in
//! order.

use std::time::{Duration, Instant};

use clap::ValueEnum;
use serde_json::json;

use crate::axd;

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Shape {
    /// No dependencies
    Independent,
    /// Each job after the one before
    Chain,
    /// Every job after the first
    Fanout,
    /// The last job after all others
    Fanin,
    /// Each job after 1–3 random earlier ones
    Random,
}

impl Shape {
    /// The shapes the suite measures against `Independent`, in its order.
    pub(crate) const AFTER_INDEPENDENT: [Shape; 4] =
        [Shape::Chain, Shape::Fanout, Shape::Fanin, Shape::Random];
}

/// The name on the command line.
impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.to_possible_value() {
            Some(value) => f.write_str(value.get_name()),
            None => Ok(()),
        }
    }
}

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Jobs in the DAG
    #[arg(default_value_t = 10_000)]
    size: usize,
    /// Shapes to run, each once, in order
    #[arg(value_enum)]
    shapes: Vec<Shape>,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let size = args.size;
    for &shape in &args.shapes {
        let s = dag_scale(size, shape)?;
        println!(
            "{size} {shape}: {s:.2} s ({:.1} µs per run)",
            s * 1e6 / size as f64
        );
    }
    Ok(())
}

/// The job file of a DAG of `n` no-op jobs of `shape`.
fn job_file(n: usize, shape: Shape) -> String {
    let mut toml = String::with_capacity(n * 48);
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = |k: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % k as u64) as usize
    };
    for i in 0..n {
        toml.push_str(&format!("[[job]]\nid = \"j{i}\"\ncommand = \"true\"\n"));
        let deps: Vec<String> = match shape {
            Shape::Chain if i > 0 => vec![format!("j{}", i - 1)],
            Shape::Fanout if i > 0 => vec!["j0".into()],
            Shape::Fanin if i == n - 1 => (0..n - 1).map(|k| format!("j{k}")).collect(),
            Shape::Random if i > 0 => {
                let mut d: Vec<String> = (0..1 + rnd(3)).map(|_| format!("j{}", rnd(i))).collect();
                d.sort();
                d.dedup();
                d
            }
            _ => vec![],
        };
        if !deps.is_empty() {
            toml.push_str(&format!("deps = {deps:?}\n"));
        }
    }
    toml
}

/// A DAG of `n` no-op jobs of `shape`, dropped into the jobs folder as a
/// job file (a 100k-job DAG is ~5 MiB, beyond the 1 MiB socket frame) and
/// triggered: seconds from the trigger to the last success.
pub(crate) fn dag_scale(n: usize, shape: Shape) -> anyhow::Result<f64> {
    let toml = job_file(n, shape);
    let d = axd::start(8, &[("big.toml", &toml)])?;
    let mut c = axd::open(&d.socket)?;
    let t0 = Instant::now();
    loop {
        match c.call("trigger", json!({"dag": "big"})) {
            Ok(_) => break,
            // Not loaded yet: the watcher picks the file up shortly.
            Err(_) if t0.elapsed() < Duration::from_secs(120) => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e.into()),
        }
    }
    let t = Instant::now();
    c.wait_count("success", n as u64, Duration::from_secs(3600))?;
    Ok(t.elapsed().as_secs_f64())
}
