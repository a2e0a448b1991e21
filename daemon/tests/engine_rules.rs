//! SPEC §4, rule by rule, on a virtual clock.

use std::time::Duration;

use ax_daemon::engine::*;
use ax_shared::*;
use ax_testkit::sim::*;

fn ids(spawns: &[SpawnOrder]) -> Vec<RunId> {
    spawns.iter().map(|s| s.run).collect()
}

fn weekly() -> std::sync::Arc<DagSpec> {
    let mut calc = job("calc");
    calc.deps = vec!["fetch_a".into(), "fetch_b".into(), "fetch_c".into()];
    let mut email = job("email");
    email.deps = vec!["calc".into()];
    dag(
        "weekly",
        vec![job("fetch_a"), job("fetch_b"), job("fetch_c"), calc, email],
    )
}

// ---- 4.1 dependencies ------------------------------------------------------

#[test]
fn all_mode_runs_in_dependency_order_with_parallel_fetches() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let r = sim.submit(weekly());
    assert_eq!(
        ids(&sim.take_spawns()),
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
    assert_eq!(ids(&sim.take_spawns()), vec![r[3]]);
    sim.exit(r[3], 0);
    assert_eq!(ids(&sim.take_spawns()), vec![r[4]]);
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
    assert_eq!(ids(&sim.take_spawns()), vec![r[2]]);

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
    assert_eq!(ids(&sim.take_spawns()), vec![waits]);
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
    assert_eq!(ids(&sim.take_spawns()), vec![low]);
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
        ids(&sim.take_spawns()),
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
        ids(&sim.take_spawns()),
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
    assert_eq!(ids(&sim.take_spawns()), vec![u]);
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

// ---- 4.5 timeouts, heartbeats -----------------------------------------------------

#[test]
fn timeout_kills_at_the_deadline_and_retry_policy_applies() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let mut j = job("slow");
    j.timeout = Timeout::After(Duration::from_secs(5));
    j.kill_grace = Duration::from_secs(2);
    j.retries = 1;
    let r = sim.submit(dag("t", vec![j]))[0];
    sim.take_spawns();
    sim.advance(4_999);
    assert!(sim.take_kills().is_empty());
    sim.advance(1);
    assert_eq!(sim.take_kills(), vec![(r, KillReason::Timeout)]);
    sim.die(r);
    assert_eq!(sim.state(r), RunState::Delayed);
    assert_eq!(
        sim.engine.run(r).unwrap().attempts[0].outcome,
        Some(Outcome::TimedOut)
    );
    sim.advance(1_000);
    assert_eq!(sim.take_spawns().len(), 1);
    sim.advance(5_000);
    sim.take_kills();
    sim.die(r);
    assert_eq!(
        sim.state(r),
        RunState::TimedOut,
        "last attempt timed out → timed_out"
    );
}

#[test]
fn default_timeout_and_none() {
    let mut c = cfg(8, &[("default", 8)]);
    c.default_timeout = Some(10_000);
    let mut sim = Sim::new(c);
    let mut never = job("never");
    never.timeout = Timeout::Never;
    let r = sim.submit(dag("t", vec![job("dflt"), never]));
    sim.advance(10_000);
    assert_eq!(sim.take_kills(), vec![(r[0], KillReason::Timeout)]);
    sim.advance(1_000_000);
    assert!(sim.take_kills().is_empty());
}

#[test]
fn heartbeat_silence_kills_as_stalled_and_output_counts() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let mut j = job("hb");
    j.heartbeat = Some(Duration::from_secs(10));
    let r = sim.submit(dag("h", vec![j]))[0];
    sim.advance(9_000);
    sim.input(Input::Output { run: r }).unwrap();
    sim.advance(9_000);
    sim.input(Input::Beat {
        run: r,
        message: Some("half way".into()),
        progress: Some(0.5),
    })
    .unwrap();
    assert_eq!(
        sim.engine.run(r).unwrap().message.as_deref(),
        Some("half way")
    );
    sim.advance(9_999);
    assert!(sim.take_kills().is_empty());
    sim.advance(1);
    assert_eq!(sim.take_kills(), vec![(r, KillReason::Stalled)]);
    sim.die(r);
    assert_eq!(
        sim.engine.run(r).unwrap().attempts[0].outcome,
        Some(Outcome::Stalled)
    );
    assert_eq!(sim.state(r), RunState::TimedOut);
}

// ---- 4.6 retries -----------------------------------------------------------------

#[test]
fn backoff_kinds_table() {
    // (kind, base ms, max ms, retries) -> expected delays between attempts
    let cases: &[(BackoffKind, u64, u64, u32, &[i64])] = &[
        (
            BackoffKind::Exponential,
            1000,
            30_000,
            4,
            &[1000, 2000, 4000, 8000],
        ),
        (
            BackoffKind::Exponential,
            1000,
            3_000,
            4,
            &[1000, 2000, 3000, 3000],
        ),
        (BackoffKind::Fixed, 1500, 30_000, 3, &[1500, 1500, 1500]),
        (BackoffKind::None, 1000, 30_000, 2, &[0, 0]),
    ];
    for (kind, base, max, retries, want) in cases {
        let mut sim = Sim::new(cfg(8, &[("default", 8)]));
        let mut j = job("flaky");
        j.retries = *retries;
        j.backoff = Backoff {
            kind: *kind,
            base: Duration::from_millis(*base),
            max: Duration::from_millis(*max),
            jitter: Duration::ZERO,
        };
        let r = sim.submit(dag("f", vec![j]))[0];
        let mut got = Vec::new();
        for _ in 0..*retries {
            sim.take_spawns();
            sim.exit(r, 1);
            let failed_at = sim.now;
            let next = sim.engine.run(r).unwrap().next_at.unwrap_or(sim.now);
            got.push(next - failed_at);
            sim.advance(next - failed_at);
            assert_eq!(sim.state(r), RunState::Running, "{kind:?}");
        }
        assert_eq!(&got, want, "{kind:?}");
        sim.exit(r, 1);
        assert_eq!(sim.state(r), RunState::Failed);
        assert_eq!(
            sim.engine.run(r).unwrap().attempts.len() as u32,
            retries + 1
        );
    }
}

#[test]
fn jitter_is_uniform_within_bounds_and_seeded() {
    let delays = |seed| {
        let mut sim = Sim::new(cfg(8, &[("default", 8)]));
        sim.engine = Engine::new(cfg(8, &[("default", 8)]), seed);
        let mut out = Vec::new();
        for i in 0..50 {
            let mut j = job(&format!("j{i}"));
            j.retries = 1;
            j.backoff.jitter = Duration::from_millis(500);
            let r = sim.submit(dag(&format!("d{i}"), vec![j]))[0];
            sim.exit(r, 1);
            out.push(sim.engine.run(r).unwrap().next_at.unwrap() - sim.now - 1000);
        }
        out
    };
    let a = delays(1);
    assert!(a.iter().all(|d| (0..=500).contains(d)), "{a:?}");
    assert!(
        a.iter().any(|d| *d > 250) && a.iter().any(|d| *d < 250),
        "spread: {a:?}"
    );
    assert_eq!(a, delays(1), "same seed, same jitter");
    assert_ne!(a, delays(2));
}

#[test]
fn retry_on_limits_retryable_exit_codes() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let mut j = job("picky");
    j.retries = 3;
    j.retry_on = Some(vec![75]);
    let r = sim.submit(dag("p", vec![j.clone()]))[0];
    sim.exit(r, 75);
    assert_eq!(sim.state(r), RunState::Delayed);
    let r2 = sim.submit(dag("p2", vec![j]))[0];
    sim.exit(r2, 2);
    assert_eq!(sim.state(r2), RunState::Failed);
    assert!(
        sim.engine
            .run(r2)
            .unwrap()
            .reason
            .contains("exit code not in retry_on")
    );
}

#[test]
fn global_retry_budget_delays_but_never_drops() {
    let mut c = cfg(8, &[("default", 8)]);
    c.retry_per_minute = 2;
    let mut sim = Sim::new(c);
    let mut jobs = Vec::new();
    for i in 0..3 {
        let mut j = job(&format!("j{i}"));
        j.retries = 1;
        j.backoff.kind = BackoffKind::None;
        jobs.push(j);
    }
    let r = sim.submit(dag("b", jobs));
    sim.take_spawns();
    for id in &r {
        sim.exit(*id, 1);
    }
    sim.advance(0);
    assert_eq!(sim.take_spawns().len(), 2, "two tokens in the bucket");
    assert_eq!(sim.state(r[2]), RunState::Delayed);
    assert!(
        sim.why(r[2]).starts_with("retry budget empty until"),
        "{}",
        sim.why(r[2])
    );
    sim.advance(29_999);
    assert!(sim.take_spawns().is_empty());
    sim.advance(1);
    assert_eq!(
        ids(&sim.take_spawns()),
        vec![r[2]],
        "a token every 30 s at 2/min"
    );
}

#[test]
fn manual_retry_revives_downstream_and_keeps_history() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let mut b = job("b");
    b.deps = vec!["a".into()];
    let mut c = job("c");
    c.deps = vec!["b".into()];
    let r = sim.submit(dag("m", vec![job("a"), b, c]));
    sim.exit(r[0], 1);
    assert_eq!(sim.state(r[2]), RunState::Cancelled);
    let err = sim
        .input(Input::Retry {
            run: r[1],
            actor: actor(),
        })
        .unwrap_err();
    assert!(
        err.to_string().contains("upstream a did not succeed"),
        "{err}"
    );
    sim.input(Input::Retry {
        run: r[0],
        actor: actor(),
    })
    .unwrap();
    assert_eq!(sim.state(r[0]), RunState::Running);
    assert_eq!(sim.state(r[1]), RunState::Waiting);
    assert_eq!(sim.state(r[2]), RunState::Waiting);
    assert_eq!(
        sim.engine.run(r[0]).unwrap().attempts.len(),
        2,
        "history kept"
    );
    sim.exit(r[0], 0);
    sim.exit(r[1], 0);
    sim.exit(r[2], 0);
    let dr = sim.engine.run(r[0]).unwrap().dag_run;
    assert_eq!(sim.engine.dag_run(dr).unwrap().state, DagRunState::Success);
    let err = sim.input(Input::Retry {
        run: r[0],
        actor: actor(),
    });
    assert!(err.is_ok(), "a succeeded run may be re-run");
}

// ---- 4.7 cancel ----------------------------------------------------------------------

#[test]
fn cancel_waiting_ready_and_running() {
    let mut sim = Sim::new(cfg(1, &[("default", 8)]));
    let r = sim.submit(weekly());
    sim.take_spawns();
    // fetch_a running, fetch_b/c ready (global 1), calc/email waiting
    sim.input(Input::Cancel {
        run: r[1],
        actor: actor(),
    })
    .unwrap();
    assert_eq!(sim.state(r[1]), RunState::Cancelled);
    assert_eq!(sim.state(r[3]), RunState::Cancelled, "downstream as in 4.1");
    sim.input(Input::Cancel {
        run: r[0],
        actor: actor(),
    })
    .unwrap();
    assert_eq!(sim.take_kills(), vec![(r[0], KillReason::Cancel)]);
    assert_eq!(sim.state(r[0]), RunState::Running, "until reaped");
    sim.die(r[0]);
    assert_eq!(sim.state(r[0]), RunState::Cancelled);
    let ev = sim.events();
    let last = ev.iter().rev().find(|e| e.run == Some(r[1])).unwrap();
    assert_eq!(&*last.actor, "uid 1000 via ax", "actor recorded");
    let err = sim
        .input(Input::Cancel {
            run: r[0],
            actor: actor(),
        })
        .unwrap_err();
    assert_eq!(err.code(), "invalid_state");
}

#[test]
fn cancel_dag_run_cancels_every_unfinished_run() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let r = sim.submit(weekly());
    sim.take_spawns();
    let dr = sim.engine.run(r[0]).unwrap().dag_run;
    sim.input(Input::CancelDagRun {
        dag_run: dr,
        actor: actor(),
    })
    .unwrap();
    assert_eq!(sim.take_kills().len(), 3);
    for id in &r[..3] {
        sim.die(*id);
    }
    for id in &r {
        assert_eq!(sim.state(*id), RunState::Cancelled);
    }
    assert_eq!(
        sim.engine.dag_run(dr).unwrap().state,
        DagRunState::Cancelled
    );
}

// ---- 4.9 unique ----------------------------------------------------------------------

#[test]
fn unique_keys_deduplicate() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let key = |within| {
        Some(Unique {
            key: "k".into(),
            within,
            stored: None,
        })
    };
    let a = sim.submit_with(dag("u", vec![job("u")]), key(None), vec![]);
    let b = sim.input(Input::Submit(Submit {
        dag: dag("u", vec![job("u")]),
        trigger: "test".into(),
        actor: actor(),
        unique: key(None),
        after: vec![],
    }));
    match b.unwrap() {
        Reply::Submitted {
            runs, deduplicated, ..
        } => {
            assert!(deduplicated);
            assert_eq!(runs, a);
        }
        other => panic!("{other:?}"),
    }
    sim.exit(a[0], 0);
    let c = sim.submit_with(dag("u", vec![job("u")]), key(None), vec![]);
    assert_ne!(c, a, "finished: a new run");
    sim.exit(c[0], 0);
    sim.now += 60_000;
    let d = sim.input(Input::Submit(Submit {
        dag: dag("u", vec![job("u")]),
        trigger: "test".into(),
        actor: actor(),
        unique: key(Some(3_600_000)),
        after: vec![],
    }));
    assert!(
        matches!(
            d.unwrap(),
            Reply::Submitted {
                deduplicated: true,
                ..
            }
        ),
        "within the window"
    );
}

// ---- pause, removal, shutdown, spawn errors -----------------------------------------

#[test]
fn paused_dag_holds_ready_runs_with_a_reason() {
    let mut sim = Sim::new(cfg(1, &[("default", 8)]));
    let blocker = sim.submit(dag("other", vec![job("x")]))[0];
    let r = sim.submit(dag("p", vec![job("a")]))[0];
    sim.input(Input::Pause { dag: "p".into() }).unwrap();
    assert_eq!(sim.why(r), "DAG paused");
    sim.take_spawns();
    sim.exit(blocker, 0);
    assert!(sim.take_spawns().is_empty());
    sim.input(Input::Resume { dag: "p".into() }).unwrap();
    assert_eq!(ids(&sim.take_spawns()), vec![r]);
}

#[test]
fn removing_a_dag_cancels_only_its_unstarted_runs() {
    let mut sim = Sim::new(cfg(1, &[("default", 8)]));
    let r = sim.submit(dag("gone", vec![job("a"), job("b")]));
    let other = sim.submit(dag("stays", vec![job("c")]))[0];
    sim.input(Input::RemoveDag {
        dag: "gone".into(),
        actor: "watcher".into(),
    })
    .unwrap();
    assert_eq!(sim.state(r[0]), RunState::Running, "running ones finish");
    assert_eq!(sim.state(r[1]), RunState::Cancelled);
    assert_eq!(sim.engine.run(r[1]).unwrap().reason, "definition removed");
    assert_eq!(sim.state(other), RunState::Ready);
}

#[test]
fn shutdown_interrupts_without_consuming_retries() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let r = sim.submit(dag("s", vec![job("a"), job("b")]));
    sim.take_spawns();
    sim.input(Input::Shutdown).unwrap();
    let kills = sim.take_kills();
    assert_eq!(kills.len(), 2);
    assert!(kills.iter().all(|k| k.1 == KillReason::Shutdown));
    sim.die(r[0]);
    assert_eq!(sim.state(r[0]), RunState::Ready);
    assert_eq!(
        sim.engine.run(r[0]).unwrap().attempts[0].outcome,
        Some(Outcome::Interrupted)
    );
    assert!(sim.take_spawns().is_empty(), "no new starts after shutdown");
    assert_eq!(sim.why(r[0]), "daemon shutting down");
}

#[test]
fn spawn_errors_follow_the_retry_policy() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let mut j = job("nope");
    j.retries = 1;
    let r = sim.submit(dag("s", vec![j]))[0];
    sim.input(Input::SpawnFailed {
        run: r,
        attempt: 1,
        error: "No such file".into(),
    })
    .unwrap();
    assert_eq!(sim.state(r), RunState::Delayed);
    assert_eq!(
        sim.engine.run(r).unwrap().attempts[0].outcome,
        Some(Outcome::SpawnError)
    );
}

#[test]
fn stale_or_bogus_inputs_are_errors_not_panics() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let r = sim.submit(dag("s", vec![job("a")]))[0];
    assert!(
        sim.input(Input::Exited {
            run: r,
            attempt: 7,
            code: Some(0),
            signal: None
        })
        .is_err()
    );
    assert!(
        sim.input(Input::Exited {
            run: RunId(999),
            attempt: 1,
            code: Some(0),
            signal: None
        })
        .is_err()
    );
    assert!(
        sim.input(Input::Cancel {
            run: RunId(999),
            actor: actor()
        })
        .is_err()
    );
    assert!(
        sim.input(Input::Beat {
            run: RunId(999),
            message: None,
            progress: None
        })
        .is_err()
    );
    let mut bad = job("x");
    bad.pool = "nope".into();
    let err = sim.input(Input::Submit(Submit {
        dag: dag("b", vec![bad]),
        trigger: "t".into(),
        actor: actor(),
        unique: None,
        after: vec![],
    }));
    assert_eq!(err.unwrap_err().code(), "invalid_params");
    let mut cyc_a = job("a");
    cyc_a.deps = vec!["b".into()];
    let mut cyc_b = job("b");
    cyc_b.deps = vec!["a".into()];
    let err = sim.input(Input::Submit(Submit {
        dag: dag("c", vec![cyc_a, cyc_b]),
        trigger: "t".into(),
        actor: actor(),
        unique: None,
        after: vec![],
    }));
    assert!(err.unwrap_err().to_string().contains("cycle"));
}

#[test]
fn next_wakeup_is_the_earliest_deadline() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    assert_eq!(
        sim.engine.next_wakeup(),
        None,
        "idle: sleep until a message"
    );
    let mut j = job("t");
    j.timeout = Timeout::After(Duration::from_secs(30));
    let mut h = job("h");
    h.heartbeat = Some(Duration::from_secs(5));
    h.timeout = Timeout::Never;
    sim.submit(dag("w", vec![j, h]));
    assert_eq!(sim.engine.next_wakeup(), Some(sim.now + 5_000));
}

// ---- memory: finished DAG runs leave the engine ---------------------------------------

#[test]
fn finished_dag_runs_are_evicted_and_can_be_loaded_back_for_a_retry() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let r = sim.submit(dag("old", vec![job("a")]))[0];
    let dep = sim.submit_with(dag("next", vec![job("b")]), None, vec![r])[0];
    sim.exit(r, 1);
    assert_eq!(sim.state(dep), RunState::Cancelled);
    let old_dr = sim.engine.run(r).unwrap().dag_run;
    let snapshot = sim.engine.run(r).unwrap().clone();
    sim.now += 1000;
    assert_eq!(sim.engine.evict_finished(sim.now - 10_000), 0, "too recent");
    assert_eq!(sim.engine.evict_finished(sim.now + 1), 2);
    assert!(sim.engine.run(r).is_none());
    assert_eq!(sim.engine.count(RunState::Failed), 0);
    assert_eq!(sim.engine.evicted_count(RunState::Failed), 1);
    // --after on the evicted run still resolves (its final state is kept)
    let later = sim.submit_with(dag("later", vec![job("c")]), None, vec![r])[0];
    assert_eq!(sim.state(later), RunState::Cancelled);
    // load the DAG run back (as the daemon does from the store) and retry
    let mut restored = stored_dag_run(
        old_dr,
        snapshot.spec.clone(),
        snapshot.created_at,
        vec![(r, RunState::Failed, snapshot.attempts.clone())],
    );
    restored.state = DagRunState::Failed;
    let run = &mut restored.runs[0];
    run.counted_failures = 1;
    run.ready_at = snapshot.ready_at;
    run.started_at = snapshot.started_at;
    run.finished_at = snapshot.finished_at;
    run.reason = snapshot.reason.clone();
    sim.engine.restore(sim.now, vec![restored], 0, 0);
    sim.input(Input::Retry {
        run: r,
        actor: actor(),
    })
    .unwrap();
    assert_eq!(sim.state(r), RunState::Running);
    assert_eq!(sim.engine.run(r).unwrap().attempts.len(), 2, "history kept");
}

/// A run interrupted by shutdown keeps its place in the queue, before the
/// runs that queued after it, in this life and in the next (restore).
#[test]
fn interrupted_runs_keep_their_place_in_the_queue() {
    let mut sim = Sim::new(cfg(1, &[("default", 1)]));
    let first = sim.submit(dag("first", vec![job("a")]))[0];
    assert_eq!(sim.take_spawns().len(), 1);
    sim.now += 1000;
    let later = sim.submit(dag("later", vec![job("b")]))[0];
    sim.input(Input::Shutdown).unwrap();
    sim.die(first);
    assert_eq!(sim.state(first), RunState::Ready);
    let (a, b) = (
        sim.engine.run(first).unwrap().clone(),
        sim.engine.run(later).unwrap().clone(),
    );
    assert!(
        a.ready_at < b.ready_at,
        "interrupted run queued at its old place: {:?} vs {:?}",
        a.ready_at,
        b.ready_at
    );
    // The next life: both loaded back as the store has them; the
    // interrupted run starts first.
    let restored = |r: &Run, id: u64| {
        let name = if id == first.0 { "first" } else { "later" };
        let mut d = stored_dag_run(
            r.dag_run,
            dag(name, vec![job("a")]),
            r.created_at,
            vec![(RunId(id), r.state, r.attempts.clone())],
        );
        d.runs[0].ready_at = r.ready_at;
        d.runs[0].started_at = r.started_at;
        d
    };
    let mut next = Sim::new(cfg(1, &[("default", 1)]));
    next.now = sim.now + 5000;
    let effects = next.engine.restore(
        next.now,
        vec![restored(&b, later.0), restored(&a, first.0)],
        10,
        10,
    );
    next.effects.extend(effects);
    next.input(Input::Tick).unwrap();
    let spawns = next.take_spawns();
    assert_eq!(spawns.len(), 1);
    assert_eq!(spawns[0].run, first, "the interrupted run resumes first");
}

/// A started attempt's pid is written at once (`Persist`), not only when
/// the run ends: after a crash, the restart needs it to find the job's
/// process group.
#[test]
fn a_started_attempts_pid_is_persisted() {
    let mut sim = Sim::new(cfg(1, &[("default", 1)]));
    let r = sim.submit(dag("d", vec![job("a")]))[0];
    let spawn = sim.take_spawns().remove(0);
    sim.effects.clear();
    sim.input(Input::Started {
        run: r,
        attempt: spawn.attempt,
        pid: 4242,
        pid_start: Some(99),
    })
    .unwrap();
    assert!(
        sim.effects
            .iter()
            .any(|e| matches!(e, Effect::Persist { run } if *run == r)),
        "effects: {:?}",
        sim.effects
    );
    let attempt = sim.engine.run(r).unwrap().attempts.last().unwrap().clone();
    assert_eq!((attempt.pid, attempt.pid_start), (Some(4242), Some(99)));
}

#[test]
fn unique_window_spans_eviction_through_the_stored_holder() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let first = sim.submit_with(
        dag("u", vec![job("u")]),
        Some(Unique {
            key: "k".into(),
            within: Some(3_600_000),
            stored: None,
        }),
        vec![],
    );
    sim.exit(first[0], 0);
    sim.now += 20 * 60_000;
    assert!(sim.engine.evict_finished(sim.now - 10 * 60_000) > 0);
    assert!(!sim.engine.holds_unique_key("k"));
    let stored = Some(UniqueHolder {
        dag_run: DagRunId(1),
        created_at: sim.now - 20 * 60_000,
        runs: first.clone(),
    });
    let submit = |within, stored| {
        Input::Submit(Submit {
            dag: dag("u", vec![job("u")]),
            trigger: "test".into(),
            actor: actor(),
            unique: Some(Unique {
                key: "k".into(),
                within: Some(within),
                stored,
            }),
            after: vec![],
        })
    };
    match sim.input(submit(3_600_000, stored.clone())).unwrap() {
        Reply::Submitted {
            runs, deduplicated, ..
        } => {
            assert!(deduplicated, "created 20 minutes ago, window 1 h");
            assert_eq!(runs, first);
        }
        other => panic!("{other:?}"),
    }
    match sim.input(submit(10 * 60_000, stored)).unwrap() {
        Reply::Submitted { deduplicated, .. } => {
            assert!(!deduplicated, "older than a 10 min window")
        }
        other => panic!("{other:?}"),
    }
}
