//! The engine's two clocks on a virtual clock (docs/operations.md, "Clock
//! steps and suspend", "axd paused"): deadlines on the monotonic clock,
//! stamps and cron slots on the wall clock the test steps; and settling,
//! which applies what arrived in a pause before the deadlines that fell due
//! in it.

use std::sync::Arc;
use std::time::Duration;

use ax_engine::sim::*;
use ax_engine::*;
use ax_shared::*;
use chrono::DateTime;

const HOUR: Millis = 3_600_000;

fn at(s: &str) -> Millis {
    DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis()
}

fn per_minute(catchup: Catchup) -> Arc<DagSpec> {
    let mut d = DagSpec::adhoc("minutely", vec![job("m")]);
    d.schedule = Some("* * * * *".into());
    d.catchup = catchup;
    d.overlap = Overlap::Allow;
    Arc::new(d)
}

fn define(sim: &mut Sim, spec: Arc<DagSpec>) {
    sim.input(Input::DefineDag {
        spec,
        zone: chrono_tz::UTC,
        watermark: None,
        boots_seen: Vec::new(),
    })
    .unwrap();
}

/// The slots fired or queued so far (the DAG runs' triggers).
fn slot_runs(sim: &Sim) -> usize {
    sim.engine
        .dag_runs()
        .filter(|d| &*d.dag == "minutely")
        .count()
        + sim.engine.trigger_queue("minutely").len()
}

fn one(timeout: Option<Duration>, heartbeat: Option<Duration>) -> Arc<DagSpec> {
    let mut j = job("j");
    j.timeout = timeout.map_or(Timeout::Never, Timeout::After);
    j.heartbeat = heartbeat;
    j.kill_grace = Duration::from_secs(1);
    dag("one", vec![j])
}

fn started(sim: &mut Sim, spec: Arc<DagSpec>) -> RunId {
    let id = sim.submit(spec)[0];
    assert_eq!(sim.take_spawned_runs(), vec![id]);
    id
}

#[test]
fn a_forward_step_makes_the_jumped_slots_follow_catchup() {
    for (policy, want) in [
        (Catchup::None, 1),
        (Catchup::Latest, 1),
        (Catchup::All, 100),
    ] {
        let mut sim = Sim::new(cfg(8, &[("default", 8)]));
        sim.now = at("2026-03-01T00:00:30Z");
        define(&mut sim, per_minute(policy));
        sim.advance(40_000);
        assert_eq!(slot_runs(&sim), 1, "{policy:?}: the 00:01 slot");
        // +2 h at 00:01:10: 120 slots jumped over, the last (02:01) on time.
        sim.step_wall(2 * HOUR);
        assert_eq!(slot_runs(&sim), 1 + want, "{policy:?}");
        assert_eq!(
            sim.engine.watermark("minutely"),
            Some(at("2026-03-01T02:01:00Z")),
            "{policy:?}"
        );
        assert_eq!(
            sim.engine.next_fire("minutely"),
            Some(at("2026-03-01T02:02:00Z"))
        );
        // The next slot's timer is 50 s away on the engine's clock.
        assert_eq!(
            sim.engine.next_wakeup(),
            Some(sim.now + 50_000),
            "{policy:?}"
        );
    }
}

#[test]
fn a_backward_step_fires_no_slot_twice_and_loses_none() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    sim.now = at("2026-03-01T00:00:30Z");
    define(&mut sim, per_minute(Catchup::All));
    sim.advance(40_000);
    assert_eq!(slot_runs(&sim), 1);
    // -2 h at 00:01:10: the wall clock reads 22:01:10 of the day before.
    sim.step_wall(-2 * HOUR);
    // Two hours and 40 s later the wall clock reads 00:01:50 again.
    sim.advance(2 * HOUR + 40_000);
    assert_eq!(
        slot_runs(&sim),
        1,
        "slots up to 00:01 fired already; none fires again"
    );
    // The wall clock reaches 00:02 again: that slot fires, once.
    sim.advance(10_000);
    assert_eq!(slot_runs(&sim), 2);
    assert_eq!(
        sim.engine.watermark("minutely"),
        Some(at("2026-03-01T00:02:00Z"))
    );
    let keys: Vec<_> = sim
        .engine
        .dag_runs()
        .map(|d| d.unique_key.clone().unwrap())
        .collect();
    assert_eq!(
        keys,
        [
            "minutely@2026-03-01T00:01:00Z",
            "minutely@2026-03-01T00:02:00Z"
        ]
    );
}

#[test]
fn timeouts_run_on_the_monotonic_clock_whatever_the_wall_clock_does() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let healthy = started(&mut sim, one(Some(Duration::from_secs(30)), None));
    sim.advance(1_000);
    sim.step_wall(2 * HOUR);
    sim.advance(10_000);
    assert!(sim.take_kills().is_empty(), "+2 h killed nothing");
    sim.exit(healthy, 0);
    assert_eq!(sim.state(healthy), RunState::Success);

    let bounded = started(&mut sim, one(Some(Duration::from_secs(3)), None));
    sim.advance(1_000);
    sim.step_wall(-2 * HOUR);
    sim.advance(1_999);
    assert!(sim.take_kills().is_empty());
    sim.advance(1);
    assert_eq!(sim.take_kills(), vec![(bounded, KillReason::Timeout)]);
}

#[test]
fn backoff_and_heartbeats_ignore_wall_steps_and_stamps_follow_them() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let mut j = job("j");
    j.retries = 1;
    j.backoff.base = Duration::from_secs(10);
    j.backoff.kind = BackoffKind::Fixed;
    j.heartbeat = Some(Duration::from_secs(5));
    let id = started(&mut sim, dag("b", vec![j]));
    sim.advance(4_000);
    sim.step_wall(HOUR);
    sim.advance(999);
    assert!(sim.take_kills().is_empty(), "+1 h is no silence");
    sim.exit(id, 1);
    let r = sim.engine.run(id).unwrap();
    assert_eq!(r.state, RunState::Delayed);
    // Shown in wall time: the retry is 10 s after the stepped wall clock.
    assert_eq!(r.next_at, Some(sim.wall() + 10_000));
    assert_eq!(r.attempts[0].finished_at, Some(sim.wall()));
    assert_eq!(
        sim.events().last().map(|e| e.at),
        Some(sim.wall()),
        "events are stamped in wall time"
    );
    sim.step_wall(-3 * HOUR);
    sim.advance(9_999);
    assert_eq!(
        sim.state(id),
        RunState::Delayed,
        "-3 h did not shorten the backoff"
    );
    sim.advance(1);
    assert_eq!(sim.take_spawned_runs(), vec![id], "nor lengthen it");
}

/// axd stopped from 1 s to 9 s; the job (timeout 6 s) exited 0 at 2 s. On
/// resume the daemon settles, and the exit it then reads comes first.
#[test]
fn an_exit_read_while_settling_beats_the_deadline_that_fell_due_in_the_pause() {
    for settle in [false, true] {
        let mut sim = Sim::new(cfg(8, &[("default", 8)]));
        let id = started(&mut sim, one(Some(Duration::from_secs(6)), None));
        let t0 = sim.now;
        sim.now = t0 + 9_000;
        if settle {
            sim.input(Input::Settle { until: t0 + 11_000 }).unwrap();
            assert_eq!(sim.engine.next_wakeup(), Some(t0 + 11_000));
        }
        sim.now = t0 + 9_050;
        sim.exit(id, 0);
        let r = sim.engine.run(id).unwrap();
        let outcome = r.attempts[0].outcome;
        if settle {
            assert_eq!(r.state, RunState::Success);
            assert_eq!(outcome, Some(Outcome::Success));
            assert!(sim.take_kills().is_empty());
        } else {
            // Without settling, the deadline is older than the exit.
            assert_eq!(outcome, Some(Outcome::TimedOut));
        }
    }
}

#[test]
fn heartbeats_read_while_settling_keep_the_job_alive_and_silence_still_kills() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let id = started(&mut sim, one(None, Some(Duration::from_secs(2))));
    let t0 = sim.now;
    sim.advance(500);
    sim.input(Input::Output { run: id }).unwrap();
    // Stopped from 0.6 s to 5.6 s; the beats that waited arrive at 5.7 s.
    sim.now = t0 + 5_600;
    sim.input(Input::Settle { until: t0 + 7_600 }).unwrap();
    sim.now = t0 + 5_700;
    sim.input(Input::Output { run: id }).unwrap();
    sim.advance(1_900);
    assert!(sim.take_kills().is_empty(), "alive: beat at 5.7 s");
    // Then silence: stalled 2 s after the last beat.
    sim.advance(100);
    assert_eq!(sim.take_kills(), vec![(id, KillReason::Stalled)]);
    assert_eq!(sim.now, t0 + 7_700);
}

/// Deadlines that fall due while settling fire when it ends, in order,
/// and settling holds no input back.
#[test]
fn settling_delays_deadlines_only_until_its_end() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let stuck = started(&mut sim, one(Some(Duration::from_secs(1)), None));
    let t0 = sim.now;
    sim.now = t0 + 5_000;
    sim.input(Input::Settle { until: t0 + 6_000 }).unwrap();
    let other = sim.submit(one(None, None))[0];
    assert_eq!(sim.take_spawned_runs(), vec![other], "dispatch goes on");
    sim.advance(999);
    assert!(sim.take_kills().is_empty());
    sim.advance(1);
    assert_eq!(sim.take_kills(), vec![(stuck, KillReason::Timeout)]);
}

/// An attempt that waits for the daemon's descriptors to start
/// (`SpawnWaiting`) has no deadline until it starts; then its timeout
/// counts from the start. A cancel while it waits ends it cancelled, with
/// no retry used.
#[test]
fn an_attempt_waiting_for_resources_is_timed_from_its_start() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let id = started(&mut sim, one(Some(Duration::from_secs(3)), None));
    sim.input(Input::SpawnWaiting {
        run: id,
        attempt: 1,
        error: "pipe: EMFILE: Too many open files".into(),
    })
    .unwrap();
    assert_eq!(sim.engine.next_wakeup(), None, "no deadline while it waits");
    sim.advance(10_000);
    assert!(sim.take_kills().is_empty());
    sim.input(Input::Started {
        run: id,
        attempt: 1,
        pid: 4242,
        pid_start: None,
    })
    .unwrap();
    let r = sim.engine.run(id).unwrap();
    assert_eq!(
        r.attempts[0].started_at,
        sim.wall(),
        "started when it started"
    );
    sim.advance(2_999);
    assert!(sim.take_kills().is_empty());
    sim.advance(1);
    assert_eq!(sim.take_kills(), vec![(id, KillReason::Timeout)]);

    let mut j = job("w");
    j.retries = 3;
    let waiting = started(&mut sim, dag("w", vec![j]));
    sim.input(Input::SpawnWaiting {
        run: waiting,
        attempt: 1,
        error: "EMFILE".into(),
    })
    .unwrap();
    sim.input(Input::Cancel {
        run: waiting,
        actor: actor(),
    })
    .unwrap();
    assert_eq!(sim.take_kills(), vec![(waiting, KillReason::Cancel)]);
    sim.input(Input::SpawnFailed {
        run: waiting,
        attempt: 1,
        error: "not started: EMFILE (stopped while waiting for resources)".into(),
    })
    .unwrap();
    let r = sim.engine.run(waiting).unwrap();
    assert_eq!(r.state, RunState::Cancelled);
    assert_eq!(r.attempts[0].outcome, Some(Outcome::Cancelled));
}
