//! Triggers against the real SQLite store across a restart
//! (docs/job-files.md, "Catch-up and overlap"): what a step decides is
//! committed as the daemon commits it (`scheduler::commit_of`), then a
//! fresh engine starts from what the store loads.

use std::sync::Arc;

use ax_daemon::scheduler::commit_of;
use ax_daemon::store::Store;
use ax_daemon::store::sqlite::SqliteStore;
use ax_engine::sim::*;
use ax_engine::*;
use ax_shared::*;
use chrono::DateTime;

fn at(s: &str) -> Millis {
    DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis()
}

fn every_minute_queued() -> Arc<DagSpec> {
    let mut slow = job("slow");
    slow.timeout = Timeout::Never;
    let mut d = DagSpec::adhoc("q", vec![slow]);
    d.schedule = Some("* * * * *".into());
    d.overlap = Overlap::Queue;
    Arc::new(d)
}

/// Commits the effects the Sim gathered since the last commit, as the
/// daemon's writer does after each step.
fn commit(sim: &mut Sim, store: &mut SqliteStore) {
    let c = commit_of(&sim.engine, &sim.effects);
    store.commit(&c.commit()).unwrap();
    sim.effects.clear();
}

/// A fresh engine on what the store holds, as axd starts.
fn restart(store: &mut SqliteStore, now: Millis, spec: Arc<DagSpec>) -> Sim {
    let loaded = store.load().unwrap();
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    sim.now = now;
    let effects = sim
        .engine
        .restore(now, loaded.dag_runs, loaded.next_run, loaded.next_dag_run);
    sim.absorb(effects);
    sim.engine.restore_trigger_queues(loaded.trigger_queues);
    let watermark = loaded.marks.slots.get("q").copied();
    sim.input(Input::DefineDag {
        spec,
        zone: chrono_tz::UTC,
        watermark,
        boots_seen: Vec::new(),
    })
    .unwrap();
    sim
}

/// A slot queued by `overlap = "queue"` survives a restart.
#[test]
fn a_queued_slot_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ax.db");
    let spec = every_minute_queued();
    let mut store = SqliteStore::open(&path, false).unwrap();
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    sim.now = at("2026-01-01T00:00:00Z");
    sim.input(Input::DefineDag {
        spec: spec.clone(),
        zone: chrono_tz::UTC,
        watermark: None,
        boots_seen: Vec::new(),
    })
    .unwrap();
    sim.advance(60_000);
    assert_eq!(sim.take_spawns().len(), 1, "00:01 runs");
    commit(&mut sim, &mut store);
    sim.advance(60_000);
    assert!(sim.take_spawns().is_empty(), "00:02 queued");
    assert_eq!(
        sim.engine.trigger_queue("q"),
        vec![Trigger::Slot(at("2026-01-01T00:02:00Z"))]
    );
    commit(&mut sim, &mut store);
    drop(sim);
    drop(store);

    // axd restarts 10 s later; no slot is due yet.
    let mut store = SqliteStore::open(&path, false).unwrap();
    let mut sim = restart(&mut store, at("2026-01-01T00:02:10Z"), spec);
    assert_eq!(
        sim.engine.trigger_queue("q"),
        vec![Trigger::Slot(at("2026-01-01T00:02:00Z"))],
        "the queue came back from the store"
    );
    let again = sim.take_spawns();
    assert_eq!(again.len(), 1, "the interrupted 00:01 run starts again");
    sim.exit(again[0].run, 0);
    let next = sim.take_spawns();
    assert_eq!(next.len(), 1, "the queued 00:02 slot starts after it");
    let dr = sim.engine.dag_run(next[0].dag_run).unwrap();
    assert_eq!(dr.trigger, "cron slot 2026-01-01T00:02:00Z (queued)");
    assert!(sim.engine.trigger_queue("q").is_empty());
    commit(&mut sim, &mut store);
    // The emptied queue is committed too: a second restart starts nothing more.
    let loaded = store.load().unwrap();
    assert!(
        loaded.trigger_queues.is_empty(),
        "{:?}",
        loaded.trigger_queues
    );
}

fn every_minute() -> Arc<DagSpec> {
    let mut d = DagSpec::adhoc("q", vec![job("j")]);
    d.schedule = Some("* * * * *".into());
    Arc::new(d)
}

/// DAG runs in the store or the engine created for one slot.
fn runs_for_slot(sim: &Sim, label: &str) -> usize {
    sim.engine
        .dag_runs()
        .filter(|d| d.unique_key.as_deref() == Some(&format!("q@{label}")))
        .count()
}

/// A slot fires at most once (docs/job-files.md, "Catch-up and overlap")
/// even when axd dies between deciding the slot's DAG run and committing
/// it. No process of a triggered DAG run exists before its trigger row is
/// committed, so a death before the commit leaves nothing behind, and the
/// next life fires the slot (once).
#[test]
fn a_triggered_run_starts_only_after_its_trigger_is_committed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ax.db");
    let spec = every_minute();
    let mut store = SqliteStore::open(&path, false).unwrap();
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    sim.hold_commits = true;
    sim.now = at("2026-01-01T00:00:00Z");
    sim.input(Input::DefineDag {
        spec: spec.clone(),
        zone: chrono_tz::UTC,
        watermark: None,
        boots_seen: Vec::new(),
    })
    .unwrap();
    // 00:01 fires, is committed, then starts.
    sim.advance(60_000);
    assert!(sim.take_spawns().is_empty(), "not before the commit");
    let run = sim.engine.runs().next().unwrap().id;
    assert_eq!(sim.state(run), RunState::Ready);
    assert_eq!(sim.why(run), "its trigger is being written to the store");
    commit(&mut sim, &mut store);
    sim.commit_triggers();
    let started = sim.take_spawns();
    assert_eq!(started.len(), 1, "started once the commit is acknowledged");
    sim.exit(started[0].run, 0);
    commit(&mut sim, &mut store);

    // 00:02 fires; axd dies before the step reaches the store.
    sim.advance(60_000);
    assert_eq!(runs_for_slot(&sim, "2026-01-01T00:02:00Z"), 1);
    assert!(
        sim.take_spawns().is_empty(),
        "no process exists for an uncommitted slot"
    );
    drop(sim);

    // The next life: the store knows 00:01 only, so 00:02 fires here, once.
    let mut sim = restart(&mut store, at("2026-01-01T00:02:05Z"), spec.clone());
    assert_eq!(
        runs_for_slot(&sim, "2026-01-01T00:01:00Z"),
        0,
        "00:01 finished"
    );
    assert_eq!(runs_for_slot(&sim, "2026-01-01T00:02:00Z"), 1);
    let started = sim.take_spawns();
    assert_eq!(started.len(), 1);
    commit(&mut sim, &mut store);
    drop(sim);

    // Dying after the commit: 00:02 is not fired again; its DAG run is
    // restored and its interrupted run starts again.
    let mut sim = restart(&mut store, at("2026-01-01T00:02:30Z"), spec);
    assert_eq!(runs_for_slot(&sim, "2026-01-01T00:02:00Z"), 1);
    assert_eq!(sim.take_spawns().len(), 1);
    assert_eq!(sim.engine.dag_runs().count(), 1);
}
