//! A restore that takes over the attempts whose processes outlived the
//! daemon (`Engine::set_reattach`, docs/operations.md "Upgrade"): their
//! runs stay running on their slots, their timeouts count from the spawn,
//! an end that came while no daemon ran is recorded before any deadline
//! fires, and a start the earlier life never committed is taken over, not
//! run again.

use std::collections::HashMap;
use std::time::Duration;

use ax_engine::sim::*;
use ax_engine::*;
use ax_shared::{Outcome, RunState, Timeout};

/// One job with `timeout`, in a pool of one slot.
fn timed(name: &str, timeout_s: u64) -> std::sync::Arc<ax_shared::DagSpec> {
    let mut j = job("j");
    j.timeout = Timeout::After(Duration::from_secs(timeout_s));
    dag(name, vec![j])
}

/// The run as a store would give it back, from this life's engine.
fn stored(sim: &Sim, run: RunId) -> RestoredDagRun {
    let r = sim.engine.run(run).unwrap().clone();
    let mut d = stored_dag_run(r.dag_run, r.spec.clone(), r.created_at, vec![]);
    d.runs = vec![r];
    d
}

fn reattach_of(run: RunId, attempt: u32, re: Reattach) -> HashMap<(RunId, u32), Reattach> {
    HashMap::from([((run, attempt), re)])
}

fn reattached(effects: &[Effect]) -> Vec<RunId> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Reattach(o) => Some(o.run),
            _ => None,
        })
        .collect()
}

#[test]
fn a_reattached_attempt_keeps_its_slot_and_its_timeout_counts_from_the_spawn() {
    let mut sim = Sim::new(cfg(1, &[("default", 1)]));
    let r = sim.submit(timed("long", 10))[0];
    assert_eq!(sim.take_spawns().len(), 1);
    let spawned = sim.now;
    let mut next = Sim::new(cfg(1, &[("default", 1)]));
    next.now = spawned + 4_000;
    next.engine.set_reattach(reattach_of(
        r,
        1,
        Reattach {
            spawned,
            slot: 0,
            ended: None,
        },
    ));
    let effects = next.engine.restore(next.now, vec![stored(&sim, r)], 10, 10);
    assert_eq!(reattached(&effects), vec![r]);
    next.absorb(effects);
    assert_eq!(next.engine.reattached(), vec![(r, 1)]);
    assert_eq!(next.state(r), RunState::Running);
    assert_eq!(next.engine.run(r).unwrap().attempts.len(), 1);
    // Its slot is held: another run of the pool waits.
    let other = next.submit(dag("other", vec![job("o")]))[0];
    assert!(next.take_spawns().is_empty());
    assert_eq!(next.state(other), RunState::Ready);
    // The timeout falls 10 s after the spawn, not after the restore.
    next.advance(5_000);
    assert!(next.take_kills().is_empty(), "killed before its timeout");
    next.advance(1_100);
    assert_eq!(next.take_kills(), vec![(r, KillReason::Timeout)]);
}

#[test]
fn an_end_while_no_daemon_ran_is_recorded_before_its_timeout_fires() {
    let mut sim = Sim::new(cfg(1, &[("default", 1)]));
    let r = sim.submit(timed("quick", 5))[0];
    sim.take_spawns();
    let spawned = sim.now;
    let mut next = Sim::new(cfg(1, &[("default", 1)]));
    // Restored a minute later, well past the timeout; the job had exited
    // with 0 after 1 s.
    next.now = spawned + 60_000;
    next.engine.set_reattach(reattach_of(
        r,
        1,
        Reattach {
            spawned,
            slot: 0,
            ended: Some((spawned + 1_000, Some(0), None)),
        },
    ));
    let effects = next.engine.restore(next.now, vec![stored(&sim, r)], 10, 10);
    assert!(reattached(&effects).is_empty(), "nothing left to supervise");
    next.absorb(effects);
    assert_eq!(next.state(r), RunState::Success);
    let a = &next.engine.run(r).unwrap().attempts[0];
    assert_eq!(a.outcome, Some(Outcome::Success));
    assert_eq!(a.finished_at, Some(a.started_at + 1_000), "its real end");
    assert!(next.take_kills().is_empty());
}

#[test]
fn a_start_the_earlier_life_never_committed_is_taken_over_not_run_again() {
    let mut sim = Sim::new(cfg(1, &[("default", 1)]));
    let r = sim.submit(timed("job", 100))[0];
    sim.take_spawns();
    // The store still says `ready`, no attempt: the step that started it
    // was not committed when the daemon died.
    let mut d = stored(&sim, r);
    d.runs[0].state = RunState::Ready;
    d.runs[0].attempts.clear();
    d.runs[0].started_at = None;
    let mut next = Sim::new(cfg(1, &[("default", 1)]));
    next.now = sim.now + 500;
    next.engine.set_reattach(reattach_of(
        r,
        1,
        Reattach {
            spawned: sim.now,
            slot: 0,
            ended: None,
        },
    ));
    let effects = next.engine.restore(next.now, vec![d], 10, 10);
    assert_eq!(reattached(&effects), vec![r]);
    next.absorb(effects);
    assert!(next.take_spawns().is_empty(), "never started a second time");
    assert_eq!(next.state(r), RunState::Running);
    assert_eq!(next.engine.run(r).unwrap().attempts.len(), 1);
    next.exit(r, 0);
    assert_eq!(next.state(r), RunState::Success);
}

#[test]
fn an_attempt_no_keeper_holds_is_interrupted_and_run_again() {
    let mut sim = Sim::new(cfg(1, &[("default", 1)]));
    let r = sim.submit(timed("job", 100))[0];
    sim.take_spawns();
    let mut next = Sim::new(cfg(1, &[("default", 1)]));
    next.now = sim.now + 500;
    // Offered: another attempt of it (a record that does not match).
    next.engine.set_reattach(reattach_of(
        r,
        7,
        Reattach {
            spawned: sim.now,
            slot: 0,
            ended: None,
        },
    ));
    let effects = next.engine.restore(next.now, vec![stored(&sim, r)], 10, 10);
    next.absorb(effects);
    assert!(
        next.engine.reattached().is_empty(),
        "the offer was not taken"
    );
    let run = next.engine.run(r).unwrap();
    assert_eq!(run.attempts[0].outcome, Some(Outcome::Interrupted));
    assert_eq!(next.take_spawns().len(), 1, "run again");
}
