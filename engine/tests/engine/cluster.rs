//! The engine as one node of a cluster (docs/operations.md, "Cluster"), on a
//! virtual clock: ids by stride and offset, submitted DAG runs offered and
//! forgotten, claimed ones adopted, pool slots only when leased, cron only on
//! the leader.

use std::collections::HashMap;

use ax_engine::sim::*;
use ax_engine::*;
use ax_shared::*;

fn node(no: u64) -> Sim {
    let mut sim = Sim::new(cfg(8, &[("default", 4)]));
    sim.engine.set_ids(IdScheme {
        stride: 1024,
        offset: no,
    });
    sim.engine.set_offering(true);
    sim.engine.set_cron_leader(false);
    sim
}

fn slots(spawns: &[SpawnOrder]) -> Vec<u32> {
    spawns.iter().map(|s| s.slot).collect()
}

#[test]
fn a_submitted_dag_run_is_offered_with_node_ids_and_then_forgotten() {
    let mut sim = node(3);
    let r = sim.submit(dag("d", vec![job("a"), job("b")]));
    assert_eq!(r, vec![RunId(1024 + 3), RunId(2048 + 3)]);
    assert!(sim.take_spawns().is_empty(), "offered, never run here");
    let dr = sim.engine.run(r[0]).unwrap().dag_run;
    assert!(sim.engine.dag_run(dr).unwrap().offered);
    assert_eq!(
        sim.state(r[0]),
        RunState::Ready,
        "stored in its first state"
    );
    assert_eq!(sim.engine.forget_offered(), 1);
    assert!(sim.engine.run(r[0]).is_none() && sim.engine.dag_run(dr).is_none());
    assert_eq!(sim.engine.count(RunState::Ready), 0);
    assert_eq!(sim.engine.count(RunState::Waiting), 0);
    let next = sim.submit(dag("d", vec![job("a")]));
    assert_eq!(next, vec![RunId(3 * 1024 + 3)], "the counter goes on");
}

#[test]
fn an_adopted_dag_run_runs_here_and_an_interrupted_attempt_uses_no_retry() {
    let mut sim = node(0);
    let spec = dag("d", vec![job("a"), job("b")]);
    let running = Attempt {
        n: 1,
        started_at: sim.now - 5_000,
        finished_at: None,
        outcome: None,
        exit_code: None,
        signal: None,
        pid: Some(99_999),
        pid_start: None,
        slot: 0,
        error: None,
        node: Some("elsewhere".into()),
        log_lost: 0,
    };
    let stored = stored_dag_run(
        DagRunId(2049),
        spec,
        sim.now - 10_000,
        vec![
            (RunId(4097), RunState::Running, vec![running]),
            (RunId(5121), RunState::Ready, vec![]),
        ],
    );
    sim.input(Input::Adopt {
        dag_runs: vec![stored.clone()],
        external: vec![],
    })
    .unwrap();
    let spawned = sim.take_spawned_runs();
    assert_eq!(spawned, vec![RunId(4097), RunId(5121)]);
    let a = &sim.engine.run(RunId(4097)).unwrap().attempts;
    assert_eq!(a[0].outcome, Some(Outcome::Interrupted));
    assert_eq!(a.len(), 2);
    assert_eq!(sim.engine.run(RunId(4097)).unwrap().counted_failures, 0);
    // Adopting it again changes nothing.
    sim.input(Input::Adopt {
        dag_runs: vec![stored],
        external: vec![],
    })
    .unwrap();
    assert!(sim.take_spawns().is_empty());
}

#[test]
fn runs_start_only_on_leased_slots_and_a_shrink_stops_nothing() {
    let mut sim = Sim::new(cfg(8, &[("default", 4)]));
    sim.engine.set_leasing();
    let r = sim.submit(dag("d", vec![job("a"), job("b"), job("c")]));
    assert!(sim.take_spawns().is_empty(), "no slot leased yet");
    assert!(
        sim.why(r[0]).contains("no free slot leased"),
        "{}",
        sim.why(r[0])
    );
    let lease = |slots: Vec<u32>| Input::Leases {
        pool: "default".into(),
        slots,
    };
    sim.input(lease(vec![1, 3])).unwrap();
    assert_eq!(slots(&sim.take_spawns()), vec![1, 3]);
    let leases = sim.engine.pool_leases();
    assert_eq!(leases[0].queued, 1);
    assert_eq!(
        leases[0].held.iter().copied().collect::<Vec<_>>(),
        vec![1, 3]
    );
    // Slot 3 taken away: its run goes on; when it ends, 3 is not reused.
    sim.input(lease(vec![1])).unwrap();
    assert!(sim.take_kills().is_empty());
    sim.exit(r[1], 0);
    assert!(sim.take_spawns().is_empty());
    sim.exit(r[0], 0);
    assert_eq!(slots(&sim.take_spawns()), vec![1]);
}

#[test]
fn cron_fires_only_on_the_leader_from_the_stored_mark() {
    let mut sim = node(1);
    let mut spec = DagSpec::adhoc("tick", vec![job("t")]);
    spec.schedule = Some("*/10 * * * * *".into());
    spec.catchup = Catchup::All;
    spec.overlap = Overlap::Allow;
    let at = sim.now;
    sim.input(Input::DefineDag {
        spec: std::sync::Arc::new(spec),
        zone: chrono_tz::UTC,
        watermark: None,
        boots_seen: Vec::new(),
    })
    .unwrap();
    assert_eq!(
        sim.engine.next_fire("tick"),
        None,
        "a follower arms nothing"
    );
    sim.advance(60_000);
    assert!(sim.take_spawns().is_empty());
    // Leader now; the old leader fired up to 30 s after `at`.
    let marks = TriggerMarks {
        slots: HashMap::from([("tick".to_string(), at + 30_000)]),
        boots: HashMap::new(),
    };
    sim.input(Input::Lead {
        leader: true,
        marks,
        active: vec![],
    })
    .unwrap();
    sim.commit_triggers();
    assert!(sim.take_spawns().is_empty(), "offered, not run here");
    assert_eq!(
        sim.engine.forget_offered(),
        3,
        "the slots at 40, 50 and 60 s, offered (overlap = allow)"
    );
    assert!(sim.engine.next_fire("tick").is_some());
    sim.input(Input::Lead {
        leader: false,
        marks: TriggerMarks::default(),
        active: vec![],
    })
    .unwrap();
    assert_eq!(sim.engine.next_fire("tick"), None);
}

/// A leader with DAGs under each overlap policy, defined.
fn leader_with(dags: &[(&str, Overlap)]) -> Sim {
    let mut sim = node(2);
    sim.engine.set_cron_leader(true);
    for (name, overlap) in dags {
        let mut spec = DagSpec::adhoc(*name, vec![job("t")]);
        spec.overlap = *overlap;
        sim.input(Input::DefineDag {
            spec: std::sync::Arc::new(spec),
            zone: chrono_tz::UTC,
            watermark: None,
            boots_seen: Vec::new(),
        })
        .unwrap();
    }
    sim
}

fn trigger(sim: &mut Sim, dag: &str) {
    sim.input(Input::Trigger {
        dag: dag.into(),
        actor: "test".into(),
        force: false,
    })
    .unwrap();
    sim.commit_triggers();
}

#[test]
fn triggered_dag_runs_are_offered_except_under_replace() {
    let mut sim = leader_with(&[
        ("free", Overlap::Allow),
        ("single", Overlap::Skip),
        ("line", Overlap::Queue),
        ("newest", Overlap::Replace),
    ]);
    for dag in ["free", "single", "line", "newest"] {
        trigger(&mut sim, dag);
    }
    let spawned = sim.take_spawned_runs();
    assert_eq!(spawned.len(), 1, "only `newest` runs here");
    assert_eq!(&*sim.engine.run(spawned[0]).unwrap().dag, "newest");
    assert_eq!(sim.engine.forget_offered(), 3);
    assert_eq!(
        sim.engine.watched_elsewhere().len(),
        2,
        "`single` and `line` are watched; `free` needs no watching"
    );
}

#[test]
fn watched_dag_runs_hold_skip_and_queue_until_they_end_elsewhere() {
    let mut sim = leader_with(&[("single", Overlap::Skip), ("line", Overlap::Queue)]);
    trigger(&mut sim, "single");
    trigger(&mut sim, "line");
    sim.engine.forget_offered();
    let watched = sim.engine.watched_elsewhere();
    assert_eq!(watched.len(), 2);
    // Both DAGs have a DAG run active on another node.
    trigger(&mut sim, "single");
    trigger(&mut sim, "line");
    assert_eq!(sim.engine.forget_offered(), 0, "skipped and queued");
    assert_eq!(sim.engine.trigger_queue("line").len(), 1);
    sim.input(Input::EndedElsewhere {
        dag_runs: watched.clone(),
    })
    .unwrap();
    sim.commit_triggers();
    assert_eq!(
        sim.engine.forget_offered(),
        1,
        "the queued trigger of `line` starts, offered again"
    );
    assert!(sim.engine.trigger_queue("line").is_empty());
    assert_eq!(sim.engine.watched_elsewhere().len(), 1);
    trigger(&mut sim, "single");
    assert_eq!(sim.engine.forget_offered(), 1, "`single` fires again");
}

#[test]
fn a_new_leader_counts_dag_runs_active_anywhere() {
    let mut sim = leader_with(&[("single", Overlap::Skip), ("free", Overlap::Allow)]);
    sim.input(Input::Lead {
        leader: true,
        marks: TriggerMarks::default(),
        active: vec![
            ("single".into(), DagRunId(7 * 1024 + 1)),
            ("free".into(), DagRunId(8 * 1024 + 1)),
        ],
    })
    .unwrap();
    assert_eq!(sim.engine.watched_elsewhere(), vec![DagRunId(7 * 1024 + 1)]);
    trigger(&mut sim, "single");
    assert_eq!(
        sim.engine.forget_offered(),
        0,
        "skipped: active on another node"
    );
    trigger(&mut sim, "free");
    assert_eq!(sim.engine.forget_offered(), 1);
}

#[test]
fn ids_skip_past_what_other_nodes_stored_and_keep_their_offset() {
    let mut sim = node(3);
    assert_eq!(sim.submit(dag("d", vec![job("a")])), vec![RunId(1024 + 3)]);
    sim.engine.skip_ids_past(50_000, 20_000);
    let r = sim.submit(dag("d", vec![job("a")]));
    assert!(r[0].0 > 50_000 && r[0].0 % 1024 == 3, "{r:?}");
    let dr = sim.engine.run(r[0]).unwrap().dag_run;
    assert!(dr.0 > 20_000 && dr.0 % 1024 == 3, "{dr:?}");
    sim.engine.skip_ids_past(10, 10);
    let again = sim.submit(dag("d", vec![job("a")]));
    assert_eq!(again[0].0, r[0].0 + 1024, "never back");
}

#[test]
fn a_follower_shows_the_next_slot_the_leader_will_fire() {
    let mut sim = node(1);
    let mut spec = DagSpec::adhoc("tick", vec![job("t")]);
    spec.schedule = Some("*/10 * * * * *".into());
    sim.input(Input::DefineDag {
        spec: std::sync::Arc::new(spec),
        zone: chrono_tz::UTC,
        watermark: None,
        boots_seen: Vec::new(),
    })
    .unwrap();
    assert_eq!(sim.engine.next_fire("tick"), None, "nothing armed");
    let next = sim.engine.next_slot("tick", sim.now).expect("a slot");
    assert!(next > sim.now && next - sim.now <= 10_000 && next % 10_000 == 0);
    sim.input(Input::Pause { dag: "tick".into() }).unwrap();
    assert_eq!(sim.engine.next_slot("tick", sim.now), None, "paused");
}

#[test]
fn every_watched_dag_run_that_ended_is_let_go_at_once() {
    let mut sim = leader_with(&[("single", Overlap::Skip)]);
    let (a, b) = (DagRunId(7 * 1024 + 1), DagRunId(8 * 1024 + 1));
    sim.input(Input::Lead {
        leader: true,
        marks: TriggerMarks::default(),
        active: vec![("single".into(), a), ("single".into(), b)],
    })
    .unwrap();
    assert_eq!(sim.engine.watched_elsewhere().len(), 2);
    sim.input(Input::EndedElsewhere {
        dag_runs: vec![a, b],
    })
    .unwrap();
    assert!(sim.engine.watched_elsewhere().is_empty());
    trigger(&mut sim, "single");
    assert_eq!(sim.engine.forget_offered(), 1, "fires: nothing active");
}
