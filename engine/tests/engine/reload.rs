//! A reloaded config changes the live engine (docs/config.md, "Reload"): pools
//! appear, grow and shrink, the global limit and the retry rate change, and no
//! running run is ever stopped by it.

use ax_engine::sim::*;
use ax_engine::*;
use ax_shared::*;

fn in_pool(id: &str, pool: &str) -> JobSpec {
    let mut j = job(id);
    j.pool = pool.into();
    j
}

fn many(dag_name: &str, n: usize, pool: &str) -> std::sync::Arc<DagSpec> {
    dag(
        dag_name,
        (0..n).map(|i| in_pool(&format!("j{i}"), pool)).collect(),
    )
}

fn running(sim: &Sim) -> Vec<RunId> {
    let mut r: Vec<RunId> = sim
        .engine
        .runs()
        .filter(|r| r.state == RunState::Running)
        .map(|r| r.id)
        .collect();
    r.sort();
    r
}

fn slots_in_use(sim: &Sim) -> Vec<u32> {
    let mut s: Vec<u32> = sim
        .engine
        .runs()
        .filter(|r| r.state == RunState::Running)
        .filter_map(|r| r.slot())
        .collect();
    s.sort();
    s
}

#[test]
fn a_shrunk_pool_lets_running_runs_finish_and_starts_nothing_until_under_the_limit() {
    let mut sim = Sim::new(cfg(16, &[("default", 8), ("io", 4)]));
    let runs = sim.submit(many("d", 6, "io"));
    assert_eq!(running(&sim).len(), 4);
    sim.take_spawns();
    sim.input(Input::Reconfigure(cfg(16, &[("default", 8), ("io", 2)])))
        .unwrap();
    assert!(sim.take_kills().is_empty(), "shrinking never kills");
    assert_eq!(running(&sim).len(), 4);
    assert_eq!(sim.why(runs[4]), "pool io full (4/2)");
    // Two ends: still at the limit, nothing starts.
    sim.exit(runs[0], 0);
    sim.exit(runs[1], 0);
    assert!(sim.take_spawns().is_empty());
    // A third end: under the limit, one starts, on a slot index below 2.
    sim.exit(runs[2], 0);
    let started = sim.take_spawns();
    assert_eq!(started.len(), 1);
    assert!(started[0].slot < 2, "slot {}", started[0].slot);
    sim.exit(runs[3], 0);
    assert_eq!(sim.take_spawns().len(), 1);
    let used = slots_in_use(&sim);
    assert_eq!(used, vec![0, 1], "AX_SLOT stays unique and in range");
}

#[test]
fn a_grown_pool_and_a_new_pool_start_queued_work_at_once() {
    let mut sim = Sim::new(cfg(16, &[("default", 8), ("io", 1)]));
    let runs = sim.submit(many("d", 3, "io"));
    sim.take_spawns();
    assert_eq!(running(&sim), vec![runs[0]]);
    // A DAG naming a pool the config does not have yet is refused.
    assert!(matches!(
        sim.input(Input::Submit(Submit {
            dag: many("gpu-work", 1, "gpu"),
            trigger: "test".into(),
            actor: actor(),
            unique: None,
            after: vec![],
        })),
        Err(EngineError::Invalid(_))
    ));
    sim.input(Input::Reconfigure(cfg(
        16,
        &[("default", 8), ("io", 3), ("gpu", 1)],
    )))
    .unwrap();
    assert_eq!(sim.take_spawns().len(), 2, "the grown pool starts both");
    assert_eq!(slots_in_use(&sim), vec![0, 1, 2]);
    let gpu = sim.submit(many("gpu-work", 1, "gpu"));
    assert_eq!(sim.state(gpu[0]), RunState::Running);
}

#[test]
fn a_lower_global_limit_waits_for_running_runs_to_end() {
    let mut sim = Sim::new(cfg(4, &[("default", 8)]));
    let mut c = cfg(2, &[("default", 8)]);
    c.burst_extra = 0;
    let runs = sim.submit(many("d", 6, "default"));
    assert_eq!(running(&sim).len(), 4);
    sim.input(Input::Reconfigure(c)).unwrap();
    assert!(sim.take_kills().is_empty());
    sim.take_spawns();
    sim.exit(runs[0], 0);
    sim.exit(runs[1], 0);
    assert!(sim.take_spawns().is_empty(), "2 running = the new limit");
    sim.exit(runs[2], 0);
    assert_eq!(sim.take_spawns().len(), 1);
}

#[test]
fn removing_a_pool_in_use_is_refused_and_changes_nothing() {
    let mut sim = Sim::new(cfg(8, &[("default", 8), ("io", 2)]));
    let runs = sim.submit(many("d", 3, "io"));
    let err = sim
        .input(Input::Reconfigure(cfg(2, &[("default", 8)])))
        .unwrap_err();
    assert!(err.to_string().contains("pool \"io\""), "{err}");
    assert_eq!(sim.engine.config().max_concurrency, 8, "nothing applied");
    for r in &runs {
        sim.exit(*r, 0);
        sim.take_spawns();
    }
    for r in &runs {
        if sim.state(*r) == RunState::Running {
            sim.exit(*r, 0);
        }
    }
    sim.input(Input::Reconfigure(cfg(2, &[("default", 8)])))
        .unwrap();
    assert_eq!(sim.engine.config().max_concurrency, 2);
    assert!(sim.engine.pool_usage().iter().all(|(n, _, _)| n != "io"));
}

#[test]
fn a_higher_retry_rate_brings_waiting_retries_forward() {
    let mut c = cfg(8, &[("default", 8)]);
    c.retry_per_minute = 1;
    let mut sim = Sim::new(c.clone());
    let mut flaky = job("f");
    flaky.retries = 3;
    flaky.backoff.kind = BackoffKind::None;
    let a = sim.submit(dag("a", vec![flaky.clone()]))[0];
    let b = sim.submit(dag("b", vec![flaky]))[0];
    sim.exit(a, 1);
    sim.exit(b, 1);
    sim.advance(1);
    sim.take_spawns();
    // One token a minute: one of them waits for the budget.
    let waiting: Vec<RunId> = [a, b]
        .into_iter()
        .filter(|r| sim.why(*r).starts_with("retry budget empty"))
        .collect();
    assert_eq!(waiting.len(), 1, "{} / {}", sim.why(a), sim.why(b));
    // At 600 a minute the next token is 100 ms away, not a minute.
    c.retry_per_minute = 600;
    sim.input(Input::Reconfigure(c)).unwrap();
    assert_eq!(sim.engine.next_wakeup(), Some(sim.now + 100));
    sim.advance(100);
    assert_eq!(sim.state(waiting[0]), RunState::Running);
}
