//! Inputs that once reached an `expect` on the engine's tables: every id
//! a held run links to must be held too, whatever left memory meanwhile.

use ax_engine::sim::*;
use ax_engine::*;
use ax_shared::*;

/// `ax submit --after X` on a long X, cancel the new run, let its DAG run
/// leave memory, then let X end: X's end walks its downstream links.
#[test]
fn an_upstream_ends_after_its_cancelled_downstream_left_memory() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let x = sim.submit(dag("long", vec![job("x")]))[0];
    assert_eq!(sim.state(x), RunState::Running);
    let y = sim.submit_with(dag("follower", vec![job("y")]), None, vec![x])[0];
    sim.input(Input::Cancel {
        run: y,
        actor: actor(),
    })
    .unwrap();
    assert_eq!(sim.state(y), RunState::Cancelled);
    sim.advance(60_000);
    assert_eq!(
        sim.engine.evict_finished(sim.now),
        1,
        "the follower's DAG run"
    );
    assert!(sim.engine.run(y).is_none());

    sim.exit(x, 0);
    assert_eq!(sim.state(x), RunState::Success);
    let x_dag_run = sim.engine.run(x).unwrap().dag_run;
    assert_eq!(
        sim.engine.dag_run(x_dag_run).unwrap().state,
        DagRunState::Success
    );
}

/// A retried upstream revives the downstream runs it cancelled: those that
/// left memory are not among them (they stay cancelled in the store).
#[test]
fn a_retry_walks_only_downstream_runs_still_held() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    // `b` keeps the upstream's DAG run active while the follower's ends.
    let ids = sim.submit(dag("old", vec![job("a"), job("b")]));
    let (a, b) = (ids[0], ids[1]);
    let y = sim.submit_with(dag("follower", vec![job("y")]), None, vec![a])[0];
    sim.exit(a, 1);
    assert_eq!(sim.state(y), RunState::Cancelled, "upstream_failed");
    sim.advance(60_000);
    assert_eq!(sim.engine.evict_finished(sim.now), 1);
    assert!(sim.engine.run(y).is_none());

    sim.input(Input::Retry {
        run: a,
        actor: actor(),
    })
    .unwrap();
    assert_eq!(sim.state(a), RunState::Running);
    sim.exit(a, 0);
    sim.exit(b, 0);
    assert_eq!(sim.state(a), RunState::Success);
}

fn in_pool(name: &str, pool: &str) -> std::sync::Arc<DagSpec> {
    let mut j = job("j");
    j.pool = pool.into();
    dag(name, vec![j])
}

fn restored_dag_run(
    id: u64,
    spec: std::sync::Arc<DagSpec>,
    state: RunState,
    attempts: Vec<Attempt>,
) -> RestoredDagRun {
    stored_dag_run(
        DagRunId(id),
        spec,
        1_700_000_000_000,
        vec![(RunId(id), state, attempts)],
    )
}

/// A restart after a pool left `axd.toml`: every unfinished run of that
/// pool ends with the reason, whatever state it was stored in.
#[test]
fn restored_runs_of_a_removed_pool_end_with_a_reason() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let attempt = Attempt {
        n: 1,
        started_at: sim.now - 1000,
        finished_at: None,
        outcome: None,
        exit_code: None,
        signal: None,
        pid: Some(4242),
        pid_start: None,
        slot: 0,
        error: None,
        node: None,
        log_lost: 0,
    };
    let mut delayed = restored_dag_run(
        3,
        in_pool("gone_delayed", "gone"),
        RunState::Delayed,
        vec![],
    );
    delayed.runs[0].next_at = Some(sim.now + 1000);
    let stored = vec![
        restored_dag_run(
            1,
            in_pool("gone_running", "gone"),
            RunState::Running,
            vec![attempt],
        ),
        restored_dag_run(
            2,
            in_pool("gone_waiting", "gone"),
            RunState::Waiting,
            vec![],
        ),
        delayed,
    ];
    let now = sim.now;
    sim.engine.restore(now, stored, 4, 4);
    sim.advance(5_000);
    for id in [1, 2, 3] {
        let run = sim.engine.run(RunId(id)).unwrap();
        assert_eq!(run.state, RunState::Failed, "run {id}");
        assert_eq!(run.reason, "pool \"gone\" no longer exists");
    }
    let interrupted = &sim.engine.run(RunId(1)).unwrap().attempts[0];
    assert_eq!(interrupted.outcome, Some(Outcome::Interrupted));
}

/// `ax retry` of a run loaded back from the store whose pool is gone.
#[test]
fn a_retry_into_a_removed_pool_is_refused() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let mut dr = restored_dag_run(1, in_pool("old", "gone"), RunState::Failed, vec![]);
    dr.runs[0].finished_at = Some(sim.now - 1000);
    dr.state = DagRunState::Failed;
    let now = sim.now;
    sim.engine.restore(now, vec![dr], 2, 2);
    let err = sim
        .input(Input::Retry {
            run: RunId(1),
            actor: actor(),
        })
        .unwrap_err();
    assert_eq!(err.code(), "invalid_state");
    assert!(err.to_string().contains("no longer exists"), "{err}");
    assert_eq!(sim.state(RunId(1)), RunState::Failed);
}
