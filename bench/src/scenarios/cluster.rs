//! `ax-bench cluster [N] [REPS] [--latency RUNS]`: no-op throughput of 1, 2
//! and 3 axd nodes sharing one PostgreSQL database, beside one axd on SQLite,
//! each node with 8 slots; then the claim latency: runs submitted one at a
//! time to node A of two, from the run's creation on A to its attempt's start,
//! split by the node that claimed it. All nodes run on this machine and share
//! its cores, so more nodes add claimers, not CPU.
//!
//! The database is a fresh one per measurement on the server of
//! `AX_TEST_PG` (default `postgres://postgres@127.0.0.1:5432/test`),
//! dropped afterwards.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use ax_testkit::Daemon;
use ax_testkit::pg::TestDb;
use serde_json::json;

use crate::axd;
use crate::measure::{fmt3, percentile, stats};
use crate::scenarios::throughput::ax_noop_rate;

/// Slots of each node (its `max_concurrency`; the pool's are the sum).
const SLOTS_PER_NODE: u32 = 8;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// No-op runs per throughput measurement
    #[arg(default_value_t = 3000)]
    n: usize,
    /// Measurements of each setup
    #[arg(default_value_t = 3)]
    reps: usize,
    /// Runs submitted one at a time for the claim latency
    #[arg(long, default_value_t = 300)]
    latency: usize,
}

fn database(hint: &str) -> anyhow::Result<TestDb> {
    TestDb::create(hint).context("no PostgreSQL server (set AX_TEST_PG to one's URL)")
}

/// `nodes` serving axd on `db`, the pool's slots the cluster's total.
fn start_nodes(db: &TestDb, nodes: usize) -> anyhow::Result<Vec<Daemon>> {
    let config = format!(
        "store = \"{}\"\nmax_concurrency = {SLOTS_PER_NODE}\n[pools.default]\nslots = {}\n\
         [retry]\nrate = \"100000/min\"\n[cluster]\nheartbeat = \"1s\"\n",
        db.url,
        SLOTS_PER_NODE * nodes as u32
    );
    (0..nodes)
        .map(|_| {
            let mut d = axd::prepare(&config, &[])?;
            d.spawn()?;
            Ok(d)
        })
        .collect()
}

fn count(db: &TestDb, sql: &str) -> anyhow::Result<u64> {
    let rows = db.query(sql).map_err(anyhow::Error::msg)?;
    Ok(rows[0][0].parse()?)
}

fn wait_success(db: &TestDb, n: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    while count(db, "SELECT count(*) FROM runs WHERE state = 'success'")? < n as u64 {
        if Instant::now() > deadline {
            bail!("{n} runs did not succeed within 600 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Runs/s of `n` no-op runs submitted evenly to `nodes` nodes (one
/// pipelined client each), until the last one succeeded.
fn cluster_rate(nodes: usize, n: usize) -> anyhow::Result<f64> {
    let db = database("bench_cluster")?;
    let daemons = start_nodes(&db, nodes)?;
    let mut conns = daemons
        .iter()
        .map(|d| axd::open(&d.socket))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let t = Instant::now();
    std::thread::scope(|s| -> anyhow::Result<()> {
        let handles: Vec<_> = conns
            .iter_mut()
            .enumerate()
            .map(|(k, c)| {
                let share = n / nodes + usize::from(k < n % nodes);
                s.spawn(move || {
                    c.pipeline(share, 1000, &|i| {
                        (
                            "submit".into(),
                            json!({"command": "true", "name": format!("c{k}-{i}")}),
                        )
                    })
                })
            })
            .collect();
        for h in handles {
            h.join().expect("submitter")?;
        }
        Ok(())
    })?;
    wait_success(&db, n)?;
    Ok(n as f64 / t.elapsed().as_secs_f64())
}

/// Submit→start latencies in ms of `runs` runs sent one at a time to node
/// A of two: (claimed by A, claimed by B).
fn claim_latency(runs: usize) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    let db = database("bench_claim")?;
    let daemons = start_nodes(&db, 2)?;
    let a_id = std::fs::read_to_string(daemons[0].path("state/node-id"))?;
    let mut c = axd::open(&daemons[0].socket)?;
    for i in 0..runs {
        c.call(
            "submit",
            json!({"command": "true", "name": format!("l{i}")}),
        )?;
        // Paced: each run meets idle nodes, as a claim after a quiet spell.
        std::thread::sleep(Duration::from_millis(20));
    }
    wait_success(&db, runs)?;
    let rows = db
        .query(
            "SELECT a.started_at - r.created_at, a.node FROM runs r \
             JOIN attempts a ON a.run = r.id AND a.n = 1",
        )
        .map_err(anyhow::Error::msg)?;
    let (mut on_a, mut on_b) = (Vec::new(), Vec::new());
    for row in rows {
        let ms: f64 = row[0].parse()?;
        if row[1] == a_id.trim() {
            on_a.push(ms);
        } else {
            on_b.push(ms);
        }
    }
    Ok((on_a, on_b))
}

fn describe(name: &str, v: &mut [f64]) -> String {
    if v.is_empty() {
        return format!("{name}: no runs");
    }
    format!(
        "{name}: {} runs, p50 {:.1} ms, p99 {:.1} ms",
        v.len(),
        percentile(v, 0.5),
        percentile(v, 0.99)
    )
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let mut sqlite = Vec::new();
    let mut by_nodes: Vec<Vec<f64>> = vec![Vec::new(); 3];
    // Interleaved, so that a slow minute of the machine hits every setup.
    for rep in 0..args.reps {
        sqlite.push(ax_noop_rate(args.n, SLOTS_PER_NODE)?);
        for (k, rates) in by_nodes.iter_mut().enumerate() {
            rates.push(cluster_rate(k + 1, args.n)?);
        }
        eprintln!("rep {} of {} done", rep + 1, args.reps);
    }
    let base = stats(sqlite.clone()).0;
    println!(
        "no-op throughput, {} runs, {SLOTS_PER_NODE} slots per node, median (min–max) of {}:",
        args.n, args.reps
    );
    println!("  SQLite, 1 node:     {}", fmt3(stats(sqlite), " runs/s"));
    for (k, rates) in by_nodes.into_iter().enumerate() {
        let s = stats(rates);
        println!(
            "  PostgreSQL, {} node{}: {}  ({:.0}% of SQLite)",
            k + 1,
            if k == 0 { " " } else { "s" },
            fmt3(s, " runs/s"),
            s.0 / base * 100.0
        );
    }
    let (mut on_a, mut on_b) = claim_latency(args.latency)?;
    println!(
        "claim latency, {} runs submitted one at a time to node A of 2 (created on A → attempt started):",
        args.latency
    );
    println!("  {}", describe("started on A", &mut on_a));
    println!("  {}", describe("claimed by B", &mut on_b));
    Ok(())
}
