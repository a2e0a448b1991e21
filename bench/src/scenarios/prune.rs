//! `ax-bench prune N` (retention, docs/config.md, "`[logs]`"): axd starts on a
//! store of N finished runs, 90% of them past `logs.retain`, each attempt with
//! its log file; the pruner deletes them in the background while a client
//! submits a no-op job every few ms. Reported: the submit → answer latency
//! (max and p99) while the pruner works, measured on the client. A
//! submission's answer waits for its step's commit, so it covers both a
//! scheduler step and the writer's wait for a pruning batch; a `status` read
//! between submissions covers the scheduler step alone. The pruner's debug log
//! gives each delete transaction's length: the longest the writer can wait for
//! it.
//!
//! The store is written by the real engine and store (`commit_of`), as in
//! the `restart` scenario.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use ax_daemon::scheduler::commit_of;
use ax_daemon::store::Store;
use ax_daemon::store::sqlite::SqliteStore;
use ax_engine::{Effect, Engine, EngineConfig, Input, Submit};
use ax_shared::{DagSpec, Exec, JobSpec};
use serde_json::json;

use crate::axd;
use crate::measure::percentile;
use crate::scenarios::restart::spawn_orders;

const DAY_MS: i64 = 86_400_000;

/// Runs per engine step while the store is built.
const CHUNK: usize = 5_000;

/// Pause between the client's submissions.
const TRICKLE: Duration = Duration::from_millis(5);

/// Writes `n` finished one-job DAG runs, all but the newest tenth
/// finished 30 days ago, and a log file for every attempt.
fn build_store(state: &std::path::Path, n: usize) -> anyhow::Result<()> {
    let mut store = SqliteStore::open(&state.join("ax.db"), false)?;
    let logs = state.join("logs");
    std::fs::create_dir_all(&logs)?;
    let mut engine = Engine::new(
        EngineConfig {
            max_concurrency: CHUNK as u32,
            pools: BTreeMap::from([("default".into(), CHUNK as u32)]),
            default_timeout: None,
            pool_timeouts: Default::default(),
            ..EngineConfig::default()
        },
        1,
    );
    let actor: Arc<str> = Arc::from("ax-bench");
    let spec = Arc::new(DagSpec::adhoc(
        "old",
        vec![JobSpec::new("noop", Exec::Shell("true".into()))],
    ));
    let today = chrono::Utc::now().timestamp_millis();
    let old = n * 9 / 10;
    let mut written = 0;
    while written < n {
        let (at, end) = if written < old {
            (today - 30 * DAY_MS, old)
        } else {
            (today - 3_600_000, n)
        };
        let chunk = CHUNK.min(end - written);
        let mut effects: Vec<Effect> = Vec::new();
        for _ in 0..chunk {
            let submit = Input::Submit(Submit {
                dag: spec.clone(),
                trigger: "bench".into(),
                actor: actor.clone(),
                unique: None,
                after: vec![],
            });
            effects.extend(engine.handle(at, submit).effects);
        }
        let mut finished = 0;
        // Every run starts and exits in the step that dispatched it;
        // exits free slots for the runs still ready.
        while finished < chunk {
            let orders = spawn_orders(&effects);
            if orders.is_empty() {
                bail!("{} runs of a chunk never dispatched", chunk - finished);
            }
            store.commit(&commit_of(&engine, &effects).commit())?;
            effects.clear();
            for o in orders {
                let (run, attempt) = (o.run, o.attempt);
                let started = Input::Started {
                    run,
                    attempt,
                    pid: 4_000_000,
                    pid_start: Some(1),
                };
                effects.extend(engine.handle(at, started).effects);
                let exited = Input::Exited {
                    run,
                    attempt,
                    code: Some(0),
                    signal: None,
                };
                effects.extend(engine.handle(at + 5, exited).effects);
                std::fs::write(logs.join(format!("{}.{attempt}.log", run.0)), b"ok\n")?;
                finished += 1;
            }
        }
        store.commit(&commit_of(&engine, &effects).commit())?;
        engine.evict_finished(at + 10);
        written += chunk;
    }
    Ok(())
}

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Finished runs in the store
    #[arg(default_value_t = 100_000)]
    n: usize,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let n = args.n;
    let mut d = axd::prepare(
        "synchronous = \"full\"\nmax_concurrency = 4\n[pools.default]\nslots = 4\n[logs]\nretain = \"7d\"\n",
        &[],
    )?;
    // The pruner logs each transaction's duration at debug level.
    d.set_log_level("warn,ax_daemon::store::retention=debug");
    let state = d.path("state");
    std::fs::create_dir_all(&state)?;
    let built = Instant::now();
    build_store(&state, n)?;
    let size = std::fs::metadata(state.join("ax.db"))?.len();
    eprintln!(
        "  (store of {n} runs, {:.0} MiB, written in {:.1} s)",
        size as f64 / 1048576.0,
        built.elapsed().as_secs_f64()
    );
    let kept = (n - n * 9 / 10) as u64;
    // The first scheduler step orders the pruning: it begins as axd starts.
    d.spawn()?;
    let t = Instant::now();
    let mut c = axd::open(&d.socket)?;
    let (mut submits, mut reads) = (Vec::new(), Vec::new());
    let mut submitted = 0u64;
    let pruned_after = loop {
        let s0 = Instant::now();
        c.call("submit", json!({"command": "true", "name": "trickle"}))?;
        submits.push(s0.elapsed().as_secs_f64() * 1000.0);
        submitted += 1;
        let r0 = Instant::now();
        let status = c.call("status", json!({}))?;
        reads.push(r0.elapsed().as_secs_f64() * 1000.0);
        let success = status["runs"]["success"].as_u64().unwrap_or(u64::MAX);
        // Done once only the kept runs and the trickle's are left.
        if success <= kept + submitted {
            break t.elapsed();
        }
        if t.elapsed() > Duration::from_secs(600) {
            bail!("pruning not done within 600 s (success = {success})");
        }
        std::thread::sleep(TRICKLE);
    };
    // The pruner measures the sizes right after its pass.
    std::thread::sleep(Duration::from_millis(500));
    let status = c.call("status", json!({}))?;
    d.stop();
    let logs_left = std::fs::read_dir(state.join("logs"))?.count();
    let runs_left: i64 = rusqlite::Connection::open(state.join("ax.db"))?.query_row(
        "SELECT COUNT(*) FROM runs",
        [],
        |r| r.get(0),
    )?;
    let log = std::fs::read_to_string(d.path("axd.log"))?;
    let transactions: Vec<f64> = log
        .lines()
        .filter_map(|l| {
            l.split_once("pruning transaction of ")?
                .1
                .split_once(" took ")
        })
        .filter_map(|(_, t)| t.trim_end_matches(" ms").trim().parse().ok())
        .collect();
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let (submit_max, read_max) = (max(&submits), max(&reads));
    let submit_p50 = percentile(&mut submits, 0.5);
    let submit_p99 = percentile(&mut submits, 0.99);
    let read_p99 = percentile(&mut reads, 0.99);
    println!(
        "prune: {n} finished runs, {} past logs.retain, pruned in {:.1} s ({runs_left} runs and {logs_left} log files left; store {} B, logs {} B after)",
        n * 9 / 10,
        pruned_after.as_secs_f64(),
        status["store_bytes"],
        status["log_bytes"],
    );
    println!(
        "  {} submissions meanwhile: submit→answer max {submit_max:.1} ms, p99 {submit_p99:.1} ms, p50 {submit_p50:.1} ms; status max {read_max:.1} ms, p99 {read_p99:.1} ms; target: no step over 50 ms",
        submits.len()
    );
    println!(
        "  {} pruning transactions (the writer's longest wait): max {:.1} ms",
        transactions.len(),
        max(&transactions)
    );
    Ok(())
}
