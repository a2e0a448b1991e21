//! The engine's life, on a virtual clock: cancel, unique keys, pause, removal,
//! shutdown, spawn errors, bad inputs, wake-ups and eviction from memory.

use std::time::Duration;

use ax_engine::sim::*;
use ax_engine::*;
use ax_shared::*;

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
    assert_eq!(sim.take_spawned_runs(), vec![r]);
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
