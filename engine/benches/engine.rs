//! Engine micro-benchmark (not a timed test): dispatch decisions per second,
//! and the cost of one completion with 1k, 100k and 1M runs in the system.
//!
//!     cargo bench -p ax-daemon --bench engine            # full sizes
//!     cargo bench -p ax-daemon --bench engine -- --quick # CI smoke run
//!
//! Each figure is the median of several runs, printed with min–max.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ax_engine::*;
use ax_shared::{DagSpec, Exec, JobSpec};

fn config(max: u32) -> EngineConfig {
    EngineConfig {
        max_concurrency: max,
        pools: [("default".to_string(), max), ("io".to_string(), 8)]
            .into_iter()
            .collect(),
        default_timeout: None,
        pool_timeouts: Default::default(),
        ..EngineConfig::default()
    }
}

fn single(name: &str, priority: u8) -> Arc<DagSpec> {
    let mut j = JobSpec::new("j", Exec::Shell("true".into()));
    j.priority = priority;
    Arc::new(DagSpec::adhoc(name, vec![j]))
}

fn submit(e: &mut Engine, now: Millis, dag: Arc<DagSpec>) -> Vec<RunId> {
    match e
        .handle(
            now,
            Input::Submit(Submit {
                dag,
                trigger: "bench".into(),
                actor: Arc::from("bench"),
                unique: None,
                after: vec![],
            }),
        )
        .reply
    {
        Ok(Reply::Submitted { runs, .. }) => runs,
        other => panic!("{other:?}"),
    }
}

/// A chain DAG: each job depends on the previous one.
fn chain(name: &str, n: usize) -> Arc<DagSpec> {
    let jobs = (0..n)
        .map(|i| {
            let mut j = JobSpec::new(format!("j{i}"), Exec::Shell("true".into()));
            if i > 0 {
                j.deps = vec![format!("j{}", i - 1)];
            }
            j
        })
        .collect();
    Arc::new(DagSpec::adhoc(name, jobs))
}

/// Pure dispatch decisions per second: `held` ready runs of a paused DAG
/// are released at once with unlimited slots, so one step chooses and
/// starts every one of them in priority order.
fn pure_dispatch_rate(held: usize) -> f64 {
    let mut cfg = config(u32::MAX / 2);
    cfg.pools.insert("default".into(), u32::MAX / 2);
    let mut e = Engine::new(cfg, 1);
    e.handle(0, Input::Pause { dag: "held".into() });
    let priorities = [10u8, 50, 90, 70, 30];
    let shared: Vec<Arc<DagSpec>> = priorities
        .iter()
        .map(|p| {
            let mut j = JobSpec::new("j", Exec::Shell("true".into()));
            j.priority = *p;
            Arc::new(DagSpec::adhoc("held", vec![j]))
        })
        .collect();
    for i in 0..held {
        submit(&mut e, i as Millis, shared[i % shared.len()].clone());
    }
    let start = Instant::now();
    let step = e.handle(held as Millis, Input::Resume { dag: "held".into() });
    let elapsed = start.elapsed();
    let spawned = step
        .effects
        .iter()
        .filter(|x| matches!(x, Effect::Spawn(_)))
        .count();
    assert_eq!(spawned, held);
    held as f64 / elapsed.as_secs_f64()
}

/// Completions handled per second with a deep ready queue: every `Exited`
/// frees a slot and the engine decides which run takes it.
fn dispatch_rate(queued: usize, completions: usize) -> f64 {
    let mut e = Engine::new(config(64), 1);
    let mut now = 0;
    let shared = [
        single("p10", 10),
        single("p50", 50),
        single("p90", 90),
        single("p70", 70),
    ];
    let mut running = std::collections::VecDeque::new();
    for i in 0..queued {
        let step = e.handle(
            now,
            Input::Submit(Submit {
                dag: shared[i % 4].clone(),
                trigger: "bench".into(),
                actor: Arc::from("bench"),
                unique: None,
                after: vec![],
            }),
        );
        for eff in step.effects {
            if let Effect::Spawn(o) = eff {
                running.push_back((o.run, o.attempt));
            }
        }
    }
    let start = Instant::now();
    for _ in 0..completions {
        now += 1;
        let (run, attempt) = running.pop_front().expect("something runs");
        let step = e.handle(
            now,
            Input::Exited {
                run,
                attempt,
                code: Some(0),
                signal: None,
            },
        );
        for eff in step.effects {
            if let Effect::Spawn(o) = eff {
                running.push_back((o.run, o.attempt));
            }
        }
    }
    completions as f64 / start.elapsed().as_secs_f64()
}

/// Mean cost of one completion that makes a downstream run ready and starts
/// it, with `system` runs in the engine: half in long waiting chains, half
/// ready in a pool with no slots (so they stay queued).
fn completion_cost(system: usize, completions: usize) -> Duration {
    let mut cfg = config(8);
    cfg.pools.insert("parked".into(), 0);
    let mut e = Engine::new(cfg, 1);
    let now = 0;
    let parked = |mut j: JobSpec| {
        j.pool = "parked".into();
        j
    };
    let chains = system / 2 / 1000;
    for c in 0..chains {
        let mut d = (*chain(&format!("bg{c}"), 1000)).clone();
        d.jobs = d.jobs.into_iter().map(parked).collect();
        submit(&mut e, now, Arc::new(d));
    }
    let single = Arc::new(DagSpec::adhoc(
        "single",
        vec![parked(JobSpec::new("q", Exec::Shell("true".into())))],
    ));
    for _ in 0..(system / 2) {
        submit(&mut e, now, single.clone());
    }
    // The measured work: a chain in the default pool, completed step by step.
    let runs = submit(&mut e, now, chain("measured", completions + 1));
    let mut now = 1;
    let start = Instant::now();
    for run in runs.iter().take(completions) {
        now += 1;
        let step = e.handle(
            now,
            Input::Exited {
                run: *run,
                attempt: 1,
                code: Some(0),
                signal: None,
            },
        );
        assert!(
            step.reply.is_ok(),
            "the measured chain runs: {:?}",
            step.reply
        );
    }
    start.elapsed() / completions as u32
}

fn median<T: PartialOrd + Copy>(mut v: Vec<T>) -> (T, T, T) {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let reps = if quick { 1 } else { 5 };
    let (queued, completions) = if quick {
        (10_000, 10_000)
    } else {
        (200_000, 200_000)
    };
    let rates: Vec<f64> = (0..reps).map(|_| pure_dispatch_rate(queued)).collect();
    let (med, lo, hi) = median(rates);
    println!(
        "dispatch decisions/s ({queued} ready runs released at once): median {med:.0}  (min {lo:.0}, max {hi:.0})"
    );
    let rates: Vec<f64> = (0..reps)
        .map(|_| dispatch_rate(queued, completions))
        .collect();
    let (med, lo, hi) = median(rates);
    println!(
        "completion→next start cycles/s (deep queue of {queued}, 64 slots): median {med:.0}  (min {lo:.0}, max {hi:.0})"
    );

    let sizes: &[usize] = if quick {
        &[1_000, 10_000]
    } else {
        &[1_000, 100_000, 1_000_000]
    };
    let mut base = None;
    for &size in sizes {
        let costs: Vec<Duration> = (0..reps).map(|_| completion_cost(size, 5_000)).collect();
        let (med, lo, hi) = median(costs);
        let ratio = base
            .map(|b: Duration| med.as_secs_f64() / b.as_secs_f64())
            .unwrap_or(1.0);
        base.get_or_insert(med);
        println!(
            "per-completion cost with {size:>9} runs in the system: median {:>6.2} µs  (min {:.2}, max {:.2})  ratio vs 1k: {ratio:.2}",
            med.as_secs_f64() * 1e6,
            lo.as_secs_f64() * 1e6,
            hi.as_secs_f64() * 1e6
        );
    }
}
