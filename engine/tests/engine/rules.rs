//! The scheduling rules, one by one, on a virtual clock: dependencies
//! (docs/job-files.md, "Dependencies and failures"), priority and aging,
//! slots, pools and burst, preemption (docs/config.md, "`[aging]`",
//! "`[burst]`", "`[pools.NAME]`").

use ax_engine::sim::*;
use ax_engine::*;
use ax_shared::*;

// ---- 4.1 dependencies ------------------------------------------------------

#[test]
fn all_mode_runs_in_dependency_order_with_parallel_fetches() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let r = sim.submit(weekly());
    assert_eq!(
        sim.take_spawned_runs(),
        vec![r[0], r[1], r[2]],
        "three fetches start together"
    );
    assert_eq!(sim.state(r[3]), RunState::Waiting);
    assert_eq!(sim.why(r[3]), "waiting for fetch_a (running) and 2 more");
    sim.exit(r[0], 0);
    sim.exit(r[1], 0);
    assert!(sim.take_spawns().is_empty());
    assert_eq!(sim.why(r[3]), "waiting for fetch_c (running)");
    sim.exit(r[2], 0);
    assert_eq!(sim.take_spawned_runs(), vec![r[3]]);
    sim.exit(r[3], 0);
    assert_eq!(sim.take_spawned_runs(), vec![r[4]]);
    sim.exit(r[4], 0);
    let finished: Vec<_> = sim
        .effects
        .iter()
        .filter_map(|e| match e {
            Effect::DagRunFinished { state, .. } => Some(*state),
            _ => None,
        })
        .collect();
    assert_eq!(finished, vec![DagRunState::Success]);
}

#[test]
fn all_mode_failure_cancels_downstream_at_once() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let r = sim.submit(weekly());
    sim.take_spawns();
    sim.exit(r[1], 3);
    assert_eq!(sim.state(r[1]), RunState::Failed);
    assert_eq!(sim.state(r[3]), RunState::Cancelled);
    assert_eq!(
        sim.engine.run(r[3]).unwrap().reason,
        "upstream_failed: fetch_b"
    );
    assert_eq!(
        sim.state(r[4]),
        RunState::Cancelled,
        "cascades down the graph"
    );
    assert_eq!(
        sim.engine.run(r[4]).unwrap().reason,
        "upstream_failed: calc"
    );
    assert_eq!(sim.state(r[0]), RunState::Running, "siblings keep running");
}

#[test]
fn any_mode_ready_on_first_success_cancelled_when_all_fail() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let mut c = job("c");
    c.deps = vec!["a".into(), "b".into()];
    c.dep_mode = DepMode::Any;
    let r = sim.submit(dag("any", vec![job("a"), job("b"), c.clone()]));
    sim.take_spawns();
    assert_eq!(sim.why(r[2]), "waiting for any of a (running), b (running)");
    sim.exit(r[0], 1);
    assert_eq!(
        sim.state(r[2]),
        RunState::Waiting,
        "one failure is not enough"
    );
    sim.exit(r[1], 0);
    assert_eq!(sim.take_spawned_runs(), vec![r[2]]);

    let r = sim.submit(dag("any2", vec![job("a"), job("b"), c]));
    sim.take_spawns();
    sim.exit(r[0], 1);
    sim.exit(r[1], 1);
    assert_eq!(sim.state(r[2]), RunState::Cancelled);
    assert!(
        sim.engine
            .run(r[2])
            .unwrap()
            .reason
            .starts_with("upstream_failed")
    );
}

#[test]
fn after_dependencies_on_existing_runs() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let ok = sim.submit(dag("a", vec![job("ok")]))[0];
    let bad = sim.submit(dag("b", vec![job("bad")]))[0];
    let running = sim.submit(dag("c", vec![job("slow")]))[0];
    sim.take_spawns();
    sim.exit(ok, 0);
    sim.exit(bad, 1);
    let satisfied = sim.submit_with(dag("x", vec![job("x")]), None, vec![ok])[0];
    assert_eq!(
        sim.state(satisfied),
        RunState::Running,
        "already succeeded → satisfied"
    );
    let doomed = sim.submit_with(dag("y", vec![job("y")]), None, vec![bad])[0];
    assert_eq!(
        sim.state(doomed),
        RunState::Cancelled,
        "already failed → cancelled at once"
    );
    let waits = sim.submit_with(dag("z", vec![job("z")]), None, vec![running])[0];
    assert_eq!(sim.state(waits), RunState::Waiting);
    assert_eq!(
        sim.why(waits),
        format!("waiting for run {running} (c/slow) (running)")
    );
    sim.take_spawns();
    sim.exit(running, 0);
    assert_eq!(sim.take_spawned_runs(), vec![waits]);
    let missing = sim.input(Input::Submit(Submit {
        dag: dag("w", vec![job("w")]),
        trigger: "test".into(),
        actor: actor(),
        unique: None,
        after: vec![RunId(9999)],
    }));
    assert_eq!(missing.unwrap_err().code(), "not_found");
}

// ---- 4.2 priority and aging ---------------------------------------------------

#[test]
fn one_slot_pool_starts_strictly_by_priority_then_fifo_then_id() {
    let mut sim = Sim::new(cfg(8, &[("default", 8), ("one", 1)]));
    let mut blocker = job("blocker");
    blocker.pool = "one".into();
    let b = sim.submit(dag("b", vec![blocker]))[0];
    let mut order = Vec::new();
    for (name, prio) in [
        ("p10", 10),
        ("p90", 90),
        ("p50a", 50),
        ("p50b", 50),
        ("p70", 70),
    ] {
        let mut j = job(name);
        j.pool = "one".into();
        j.priority = prio;
        order.push((name, sim.submit(dag(name, vec![j]))[0]));
        sim.now += 1;
    }
    sim.take_spawns();
    assert_eq!(sim.why(order[0].1), "pool one full (1/1)");
    let mut started = Vec::new();
    let mut current = b;
    for _ in 0..5 {
        sim.exit(current, 0);
        let s = sim.take_spawns();
        assert_eq!(s.len(), 1);
        current = s[0].run;
        started.push(order.iter().find(|(_, id)| *id == current).unwrap().0);
    }
    assert_eq!(started, vec!["p90", "p70", "p50a", "p50b", "p10"]);
}

#[test]
fn aging_lets_old_low_priority_runs_through() {
    let mut c = cfg(8, &[("default", 8), ("one", 1)]);
    c.aging = Aging {
        every: 60_000,
        cap: 90,
    };
    let mut sim = Sim::new(c);
    let mut blocker = job("blocker");
    blocker.pool = "one".into();
    let b = sim.submit(dag("b", vec![blocker]))[0];
    let mut low = job("low");
    low.pool = "one".into();
    low.priority = 40;
    let low = sim.submit(dag("low", vec![low]))[0];
    sim.now += 11 * 60_000; // low has aged to 51
    let mut high = job("high");
    high.pool = "one".into();
    high.priority = 50;
    let high = sim.submit(dag("high", vec![high]))[0];
    assert_eq!(sim.engine.effective_priority(low, sim.now), Some(51));
    assert_eq!(sim.engine.effective_priority(high, sim.now), Some(50));
    sim.take_spawns();
    sim.exit(b, 0);
    assert_eq!(sim.take_spawned_runs(), vec![low]);
    // cap: after a very long time a priority-40 run is 90, not more
    sim.now += 1000 * 60_000;
    assert_eq!(sim.engine.effective_priority(high, sim.now), Some(90));
}

// ---- 4.3 slots, pools, burst ----------------------------------------------------

#[test]
fn pools_and_global_limit() {
    let mut sim = Sim::new(cfg(3, &[("default", 8), ("io", 2)]));
    let mut jobs = Vec::new();
    for i in 0..3 {
        let mut j = job(&format!("io{i}"));
        j.pool = "io".into();
        jobs.push(j);
    }
    let io = sim.submit(dag("io", jobs));
    assert_eq!(sim.take_spawns().len(), 2, "a 2-slot pool never runs 3");
    assert_eq!(sim.why(io[2]), "pool io full (2/2)");
    let d = sim.submit(dag("d", vec![job("d1"), job("d2")]));
    assert_eq!(
        sim.take_spawned_runs(),
        vec![d[0]],
        "a full pool does not block another pool"
    );
    assert_eq!(sim.why(d[1]), "global slots full (3/3)");
    assert_eq!(sim.engine.running_total(), 3);
    // AX_SLOT indices are the lowest free ones
    sim.exit(io[0], 0);
    let s = sim.take_spawns();
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].slot, 0);
}

#[test]
fn burst_slots_for_urgent_runs_only() {
    let mut c = cfg(2, &[("default", 8)]);
    c.burst_extra = 1;
    let mut sim = Sim::new(c);
    sim.submit(dag("fill", vec![job("a"), job("b")]));
    assert_eq!(sim.take_spawns().len(), 2);
    let normal = sim.submit(dag("n", vec![job("n")]))[0];
    assert!(sim.take_spawns().is_empty());
    let mut u1 = job("u1");
    u1.priority = 95;
    let mut u2 = job("u2");
    u2.priority = 90;
    let u = sim.submit(dag("u", vec![u1, u2]));
    assert_eq!(
        sim.take_spawned_runs(),
        vec![u[0]],
        "one burst slot, highest first"
    );
    assert_eq!(sim.engine.burst_in_use(), 1);
    assert_eq!(sim.why(normal), "global slots full (2/2)");
    assert_eq!(
        sim.why(u[1]),
        "global slots full (2/2) and burst full (1/1)"
    );
}

#[test]
fn burst_respects_pool_limits() {
    let mut c = cfg(1, &[("default", 8), ("one", 1)]);
    c.burst_extra = 5;
    let mut sim = Sim::new(c);
    let mut a = job("a");
    a.pool = "one".into();
    let mut b = job("b");
    b.pool = "one".into();
    b.priority = 99;
    sim.submit(dag("x", vec![a, b]));
    assert_eq!(sim.take_spawns().len(), 1);
}

// ---- 4.4 preemption ---------------------------------------------------------------

#[test]
fn urgent_run_preempts_lowest_preemptible_without_consuming_a_retry() {
    let mut c = cfg(2, &[("default", 8)]);
    c.burst_extra = 0;
    let mut sim = Sim::new(c);
    let mut low = job("low");
    low.priority = 10;
    low.preemptible = true;
    let mut mid = job("mid");
    mid.priority = 30;
    mid.preemptible = true;
    let r = sim.submit(dag("bg", vec![low, mid]));
    sim.take_spawns();
    let mut urgent = job("urgent");
    urgent.priority = 95;
    let u = sim.submit(dag("u", vec![urgent]))[0];
    assert_eq!(
        sim.take_kills(),
        vec![(r[0], KillReason::Preempt)],
        "lowest priority victim"
    );
    assert!(
        sim.take_spawns().is_empty(),
        "the slot is free only after reaping"
    );
    sim.advance(1000);
    assert!(sim.take_kills().is_empty(), "one victim per urgent run");
    sim.die(r[0]);
    assert_eq!(sim.take_spawned_runs(), vec![u]);
    let low = sim.engine.run(r[0]).unwrap();
    assert_eq!(low.state, RunState::Ready);
    assert_eq!(low.attempts[0].outcome, Some(Outcome::Preempted));
    assert_eq!(low.counted_failures, 0);
}

#[test]
fn never_preempts_equal_or_higher_priority_or_non_preemptible() {
    let mut c = cfg(2, &[("default", 8)]);
    c.burst_extra = 0;
    let mut sim = Sim::new(c);
    let mut a = job("a");
    a.priority = 95;
    a.preemptible = true;
    let b = job("b"); // not preemptible
    sim.submit(dag("bg", vec![a, b]));
    sim.take_spawns();
    let mut urgent = job("urgent");
    urgent.priority = 95;
    sim.submit(dag("u", vec![urgent]));
    assert!(sim.take_kills().is_empty());
}
