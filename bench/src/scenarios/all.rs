//! `ax-bench all`: the suite. Each scenario several times, side by side
//! with its baseline in the same run; prints a table of medians (min–max)
//! and ratios, and writes the figures as JSON.
//!
//! Sizes can be overridden: `AX_BENCH_N`, `AX_BENCH_PUEUE_N`,
//! `AX_BENCH_CALLS`, `AX_BENCH_DAG=a,b`, `AX_BENCH_QUEUED=a,b`.

use std::path::PathBuf;

use anyhow::Context;
use serde_json::{Value, json};

use crate::measure::{Report, fmt3, fmt3f, p50_p99, stats};
use crate::scenarios::dag::{Shape, dag_scale};
use crate::scenarios::throughput::{ax_noop_rate, raw_spawn_rate};
use crate::scenarios::{latency, pueue, queued, submit};

#[derive(clap::Args)]
pub(crate) struct Args {
    /// The CI smoke sizes (tiny: the figures mean nothing)
    #[arg(long)]
    quick: bool,
    /// Measurements of each scenario [default: 3, or 1 with --quick]
    #[arg(long)]
    reps: Option<usize>,
    /// Where the JSON goes
    #[arg(long, default_value = "bench-results.json")]
    json: PathBuf,
}

fn env_n(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn env_list(key: &str, default: Vec<usize>) -> Vec<usize> {
    std::env::var(key)
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or(default)
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let quick = args.quick;
    let reps = args.reps.unwrap_or(if quick { 1 } else { 3 });
    let mut report = Report::default();
    println!("{:<58} {:<34} note", "scenario", "median (min–max)");
    throughput(quick, reps, &mut report)?;
    latencies(quick, &mut report)?;
    let calls = env_n("AX_BENCH_CALLS", if quick { 40 } else { 10_000 });
    let (first, last) = submit::ax_submit_calls(calls)?;
    report.add(
        &format!("`ax submit` per call, first vs last 100 of {calls}"),
        format!("{first:.2} / {last:.2} ms"),
        format!("last/first {:.2} (target ≤ 1.2)", last / first),
        json!({"first_ms": first, "last_ms": last}),
    );
    let sizes = if quick {
        vec![200]
    } else {
        vec![10_000, 100_000]
    };
    for size in env_list("AX_BENCH_DAG", sizes) {
        dag_shapes(size, &mut report)?;
    }
    let sizes = if quick {
        vec![2_000]
    } else {
        vec![100_000, 1_000_000]
    };
    for n in env_list("AX_BENCH_QUEUED", sizes) {
        queued::run(n, &mut report)?;
    }
    std::fs::write(&args.json, serde_json::to_string_pretty(&report.json)?)
        .context("writing JSON")?;
    println!("\nJSON: {}", args.json.display());
    Ok(())
}

/// Scenario 1: raw, ax and (at 8 slots) pueue.
fn throughput(quick: bool, reps: usize, report: &mut Report) -> anyhow::Result<()> {
    let n = env_n("AX_BENCH_N", if quick { 300 } else { 10_000 });
    for slots in [8u32, 64] {
        let raw: Vec<f64> = (0..reps)
            .map(|_| raw_spawn_rate(n, slots as usize))
            .collect::<anyhow::Result<_>>()?;
        let ax: Vec<f64> = (0..reps)
            .map(|_| ax_noop_rate(n, slots))
            .collect::<anyhow::Result<_>>()?;
        let (rs, xs) = (stats(raw.clone()), stats(ax.clone()));
        report.add(
            &format!("raw tokio spawn+reap `sh -c true`, {n} at {slots}"),
            fmt3(rs, " /s"),
            "the machine's limit".into(),
            json!({"runs_per_s": raw}),
        );
        report.add(
            &format!("axd no-op throughput, {n} runs at {slots} slots"),
            fmt3(xs, " /s"),
            format!("{:.0}% of raw (target ≥ 80%)", 100.0 * xs.0 / rs.0),
            json!({"runs_per_s": ax}),
        );
        if slots != 8 {
            continue;
        }
        match pueue::pueue_dir() {
            Some(dir) => {
                let pn = env_n("AX_BENCH_PUEUE_N", if quick { 50 } else { 500 });
                let p: Vec<f64> = (0..reps)
                    .map(|_| pueue::pueue_rate(&dir, pn, slots))
                    .collect::<anyhow::Result<_>>()?;
                let ps = stats(p.clone());
                report.add(
                    &format!("pueue no-op throughput, {pn} tasks at {slots} parallel"),
                    fmt3f(ps, " /s"),
                    format!("ax is {:.0}× pueue (target ≥ 50×)", xs.0 / ps.0),
                    json!({"runs_per_s": p}),
                );
            }
            None => report.add(
                "pueue no-op throughput",
                "skipped".into(),
                "pueue not installed (cargo install pueue --locked --root DIR; AX_BENCH_PUEUE_DIR=DIR/bin)".into(),
                Value::Null,
            ),
        }
    }
    Ok(())
}

/// Scenario 2: the raw floor, then axd idle and under scenario 1's load.
fn latencies(quick: bool, report: &mut Report) -> anyhow::Result<()> {
    let samples = if quick { 20 } else { 300 };
    let raw = p50_p99(&latency::raw(samples)?);
    report.add(
        "raw: clock → spawn `date` → its print (p50 / p99)",
        format!("{:.2} / {:.2} ms", raw.0, raw.1),
        "the floor both latencies below include".into(),
        json!({"p50_ms": raw.0, "p99_ms": raw.1}),
    );
    for (load, label) in [(false, "idle"), (true, "under scenario-1 load")] {
        let (ss, es) = latency::ax(samples, load)?;
        for (what, v) in [("submit→started", ss), ("parent exit→child started", es)] {
            let (p50, p99) = p50_p99(&v);
            report.add(
                &format!("{what}, {label} (p50 / p99)"),
                format!("{p50:.2} / {p99:.2} ms"),
                format!("raw floor {:.2} ms; target p50 ≤ 2, p99 ≤ 10 idle", raw.0),
                json!({"p50_ms": p50, "p99_ms": p99}),
            );
        }
    }
    Ok(())
}

/// Scenario 4 at `size`: independent, then each shape against it.
fn dag_shapes(size: usize, report: &mut Report) -> anyhow::Result<()> {
    let indep = dag_scale(size, Shape::Independent)?;
    report.add(
        &format!("DAG of {size} no-op jobs: independent (no deps)"),
        format!("{indep:.2} s ({:.1} µs per run)", indep * 1e6 / size as f64),
        "the baseline of the shapes below".into(),
        json!({"seconds": indep}),
    );
    for shape in Shape::AFTER_INDEPENDENT {
        let s = dag_scale(size, shape)?;
        let note = if shape == Shape::Chain {
            // A chain runs one job at a time: its floor is serial
            // spawning, measured here.
            let serial = raw_spawn_rate(size.min(20_000), 1)?;
            format!(
                "{:.2}× independent; serial floor {:.2} s (raw, 1 at a time) → {:.2}× the floor",
                s / indep,
                size as f64 / serial,
                s / (size as f64 / serial)
            )
        } else {
            format!("{:.2}× independent (target ≤ 1.2×)", s / indep)
        };
        report.add(
            &format!("DAG of {size} no-op jobs: {shape}"),
            format!("{s:.2} s ({:.1} µs per run)", s * 1e6 / size as f64),
            note,
            json!({"seconds": s, "independent": indep}),
        );
    }
    Ok(())
}
