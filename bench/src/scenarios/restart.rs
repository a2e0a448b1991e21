//! `ax-bench restart [N...]`: restart with N runs in the store: mostly
//! finished, 10% queued with dependencies, some `running` from a crash.
//!
//! The store is written by the real engine and the real SQLite store (no
//! processes: the bench feeds `Started`/`Exited` inputs itself, and commits
//! each step with the scheduler's own `commit_of`), so its rows, indexes
//! and events are what axd would have written. Then the real `axd` starts
//! on it: launch → first answered request, and launch → first job started
//! (an interrupted run resumed).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use ax_daemon::scheduler::commit_of;
use ax_daemon::store::Store;
use ax_daemon::store::sqlite::SqliteStore;
use ax_engine::{Effect, Engine, EngineConfig, Input, SpawnOrder, Submit};
use ax_shared::{DagSpec, Exec, JobSpec};
use serde_json::json;

use crate::axd;
use crate::measure::stats;

/// Slots of the `held` pool: the runs found running after the crash.
const RUNNING: u32 = 32;

fn job(id: &str, pool: &str, deps: &[&str]) -> JobSpec {
    let mut j = JobSpec::new(id, Exec::Shell("true".into()));
    j.pool = pool.into();
    j.deps = deps.iter().map(|d| d.to_string()).collect();
    j
}

/// The spawn orders among `effects`.
pub(crate) fn spawn_orders(effects: &[Effect]) -> Vec<SpawnOrder> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Spawn(o) => Some(o.clone()),
            _ => None,
        })
        .collect()
}

/// Writes a store of `n` runs: 90% finished, 10% queued in two-job chains
/// (`a` → `b`) of which RUNNING `a`s are running.
pub(crate) fn build_store(db: &std::path::Path, n: usize) -> anyhow::Result<()> {
    let mut store = SqliteStore::open(db, false)?;
    let cfg = EngineConfig {
        // Enough slots for a whole chunk of `done` runs at once.
        max_concurrency: 10_000 + RUNNING,
        pools: BTreeMap::from([("default".into(), 10_000), ("held".into(), RUNNING)]),
        default_timeout: None,
        pool_timeouts: Default::default(),
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(cfg, 1);
    let actor: Arc<str> = Arc::from("ax-bench");
    let done = Arc::new(DagSpec::adhoc("done", vec![job("done", "default", &[])]));
    let chain = Arc::new(DagSpec::adhoc(
        "chain",
        vec![job("a", "held", &[]), job("b", "held", &["a"])],
    ));
    let finished = n * 9 / 10;
    let chains = (n - finished) / 2;
    let now = chrono::Utc::now().timestamp_millis() - 3_600_000;
    let mut submitted = 0;
    let total = finished + chains;
    while submitted < total {
        let mut effects: Vec<Effect> = Vec::new();
        let chunk = 5_000.min(total - submitted);
        for i in submitted..submitted + chunk {
            let dag = if i < finished { &done } else { &chain };
            let step = engine.handle(
                now,
                Input::Submit(Submit {
                    dag: dag.clone(),
                    trigger: "bench".into(),
                    actor: actor.clone(),
                    unique: None,
                    after: vec![],
                }),
            );
            effects.extend(step.effects);
        }
        submitted += chunk;
        // Start every spawn order; finish those of the `done` DAG; the
        // chains' `a`s stay running (their daemon "crashed").
        for o in spawn_orders(&effects) {
            let started = engine.handle(
                now,
                Input::Started {
                    run: o.run,
                    attempt: o.attempt,
                    // A pid from a dead daemon's life: its start time never
                    // matches, so the start-up sweep kills nothing.
                    pid: 4_000_000,
                    pid_start: Some(1),
                },
            );
            effects.extend(started.effects);
            if &*o.dag == "done" {
                let exited = engine.handle(
                    now + 5,
                    Input::Exited {
                        run: o.run,
                        attempt: o.attempt,
                        code: Some(0),
                        signal: None,
                    },
                );
                effects.extend(exited.effects);
            }
        }
        store.commit(&commit_of(&engine, &effects).commit())?;
    }
    Ok(())
}

/// The config of the restarted axd: the `held` pool is where the runs
/// found running are.
fn config() -> String {
    format!(
        "max_concurrency = {}\n[pools.default]\nslots = 8\n[pools.held]\nslots = {RUNNING}\n",
        8 + RUNNING
    )
}

/// (launch → first answer, launch → first job started), in ms.
pub(crate) fn measure(n: usize, reps: usize) -> anyhow::Result<(Vec<f64>, Vec<f64>, u64)> {
    let template = tempfile::tempdir()?;
    std::fs::create_dir_all(template.path().join("state"))?;
    let built = Instant::now();
    build_store(&template.path().join("state/ax.db"), n)?;
    eprintln!(
        "  (store of {n} runs written in {:.1} s)",
        built.elapsed().as_secs_f64()
    );
    let size = std::fs::metadata(template.path().join("state/ax.db"))?.len();
    let (mut answer, mut started) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        // Each restart on a fresh copy: the one before resumed its runs.
        let mut d = axd::prepare(&config(), &[])?;
        std::fs::create_dir_all(d.path("state"))?;
        for f in ["ax.db", "ax.db-wal"] {
            let from = template.path().join("state").join(f);
            if from.exists() {
                std::fs::copy(&from, d.path("state").join(f))?;
            }
        }
        let t = Instant::now();
        let first_answer = d.spawn()?;
        answer.push(first_answer.as_secs_f64() * 1000.0);
        let mut c = axd::open(&d.socket)?;
        loop {
            let s = c.call("status", json!({}))?;
            let running = s["runs"]["running"].as_u64().unwrap_or(0);
            let success = s["runs"]["success"].as_u64().unwrap_or(0);
            // A resumed `a` is running, or has already finished.
            if running > 0 || success > (n * 9 / 10) as u64 {
                break;
            }
            if t.elapsed() > Duration::from_secs(120) {
                bail!("no job started within 120 s of the restart");
            }
        }
        started.push(t.elapsed().as_secs_f64() * 1000.0);
        d.stop();
    }
    Ok((answer, started, size))
}

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Runs in the store, one measurement series per size
    #[arg(default_values_t = [100_000, 1_000_000])]
    sizes: Vec<usize>,
}

/// Restarts measured per size.
const REPS: usize = 3;

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let (sizes, reps) = (&args.sizes, REPS);
    println!(
        "restart with N runs in the store (90% finished, 10% queued in a→b chains, {RUNNING} running from a crash)"
    );
    for &n in sizes {
        let (answer, started, size) = measure(n, reps)?;
        let (a50, alo, ahi) = stats(answer);
        let (s50, slo, shi) = stats(started);
        let target = if n <= 100_000 { 150 } else { 1500 };
        println!(
            "  {n:>9} runs ({:.0} MiB store): launch → first answer {a50:.0} ms ({alo:.0}–{ahi:.0}); → first job started {s50:.0} ms ({slo:.0}–{shi:.0}); target ≤ {target} ms",
            size as f64 / 1048576.0
        );
    }
    Ok(())
}
