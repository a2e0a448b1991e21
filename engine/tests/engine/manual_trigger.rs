//! `ax trigger` against the DAG's overlap policy (docs/cli.md, "`ax
//! trigger`"): a manual trigger follows `overlap` like a cron slot and says
//! what it did; `force` starts a DAG run whatever the policy.

use std::sync::Arc;

use ax_engine::sim::*;
use ax_engine::*;
use ax_shared::*;

/// A DAG with one long job and the given overlap policy, defined in a Sim.
fn sim_with(overlap: Overlap) -> Sim {
    let mut slow = job("slow");
    slow.timeout = Timeout::Never;
    let mut d = DagSpec::adhoc("d", vec![slow]);
    d.overlap = overlap;
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    sim.input(Input::DefineDag {
        spec: Arc::new(d),
        zone: chrono_tz::UTC,
        watermark: None,
        boots_seen: Vec::new(),
    })
    .unwrap();
    sim
}

fn trigger(sim: &mut Sim, force: bool) -> Fired {
    match sim.input(Input::Trigger {
        dag: "d".into(),
        actor: actor(),
        force,
    }) {
        Ok(Reply::Triggered(fired)) => *fired,
        other => panic!("trigger answered {other:?}"),
    }
}

fn started(fired: &Fired) -> (DagRunId, Vec<RunId>, Vec<DagRunId>) {
    match fired {
        Fired::Started {
            reply: Reply::Submitted { dag_run, runs, .. },
            replaced,
        } => (*dag_run, runs.clone(), replaced.clone()),
        other => panic!("expected a started DAG run, got {other:?}"),
    }
}

#[test]
fn manual_trigger_with_nothing_active_starts_and_records_the_actor() {
    let mut sim = sim_with(Overlap::Skip);
    let (dag_run, runs, replaced) = started(&trigger(&mut sim, false));
    assert!(replaced.is_empty());
    assert_eq!(sim.take_spawns().len(), 1);
    let dr = sim.engine.dag_run(dag_run).expect("DAG run held");
    assert_eq!(dr.trigger, format!("manual trigger by {}", actor()));
    assert_eq!(sim.state(runs[0]), RunState::Running);
}

#[test]
fn manual_trigger_is_skipped_while_a_run_is_active_with_overlap_skip() {
    let mut sim = sim_with(Overlap::Skip);
    let (first, _, _) = started(&trigger(&mut sim, false));
    sim.take_spawns();
    assert_eq!(trigger(&mut sim, false), Fired::Skipped { active: first });
    assert!(sim.take_spawns().is_empty(), "nothing new starts");
    assert!(
        sim.events()
            .iter()
            .any(|e| e.reason.contains("manual trigger") && e.reason.contains("skipped")),
        "the skip is an event"
    );
}

#[test]
fn manual_trigger_queues_behind_the_active_run_with_overlap_queue() {
    let mut sim = sim_with(Overlap::Queue);
    let (first, runs, _) = started(&trigger(&mut sim, false));
    sim.take_spawns();
    assert_eq!(trigger(&mut sim, false), Fired::Queued { behind: first });
    assert_eq!(
        sim.engine.trigger_queue("d"),
        vec![Trigger::Manual {
            actor: actor().to_string()
        }]
    );
    sim.exit(runs[0], 0);
    assert_eq!(sim.take_spawns().len(), 1, "the queued trigger starts next");
    assert!(sim.engine.trigger_queue("d").is_empty());
}

#[test]
fn manual_trigger_replaces_the_active_run_with_overlap_replace() {
    let mut sim = sim_with(Overlap::Replace);
    let (first, old_runs, _) = started(&trigger(&mut sim, false));
    sim.take_spawns();
    let (second, _, replaced) = started(&trigger(&mut sim, false));
    assert_ne!(second, first);
    assert_eq!(replaced, vec![first]);
    assert_eq!(sim.take_kills(), vec![(old_runs[0], KillReason::Cancel)]);
}

#[test]
fn forced_manual_trigger_starts_beside_the_active_run() {
    for overlap in [Overlap::Skip, Overlap::Queue, Overlap::Replace] {
        let mut sim = sim_with(overlap);
        let (first, _, _) = started(&trigger(&mut sim, false));
        sim.take_spawns();
        let (second, _, replaced) = started(&trigger(&mut sim, true));
        assert_ne!(second, first, "{overlap:?}");
        assert!(replaced.is_empty(), "{overlap:?}: force replaces nothing");
        assert_eq!(sim.take_spawns().len(), 1, "{overlap:?}: starts now");
        assert!(sim.take_kills().is_empty(), "{overlap:?}: kills nothing");
        assert!(sim.engine.trigger_queue("d").is_empty(), "{overlap:?}");
    }
}

#[test]
fn manual_trigger_of_an_undefined_dag_is_not_found() {
    let mut sim = sim_with(Overlap::Allow);
    let r = sim.input(Input::Trigger {
        dag: "nosuch".into(),
        actor: actor(),
        force: false,
    });
    assert!(matches!(r, Err(EngineError::NotFound(_))), "{r:?}");
}
