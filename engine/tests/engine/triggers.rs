//! Cron and `after` triggers through the engine, on a virtual clock.

use std::sync::Arc;

use ax_engine::sim::*;
use ax_engine::*;
use ax_shared::*;
use chrono::DateTime;

fn at(s: &str) -> Millis {
    DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis()
}

fn scheduled(
    name: &str,
    expr: &str,
    catchup: Catchup,
    overlap: Overlap,
    cmd_job: JobSpec,
) -> Arc<DagSpec> {
    let mut d = DagSpec::adhoc(name, vec![cmd_job]);
    d.schedule = Some(expr.into());
    d.catchup = catchup;
    d.overlap = overlap;
    Arc::new(d)
}

fn define(sim: &mut Sim, spec: Arc<DagSpec>, zone: chrono_tz::Tz, watermark: Option<Millis>) {
    sim.input(Input::DefineDag {
        spec,
        zone,
        watermark,
        boots_seen: Vec::new(),
    })
    .unwrap();
}

fn fired(sim: &Sim) -> Vec<(String, Millis)> {
    sim.effects
        .iter()
        .filter_map(|e| match e {
            Effect::CronMark { dag, slot, .. } => Some((dag.clone(), *slot)),
            _ => None,
        })
        .collect()
}

fn dag_runs_of(sim: &Sim, dag: &str) -> usize {
    sim.engine.dag_runs().filter(|d| &*d.dag == dag).count()
}

#[test]
fn every_second_fires_on_time_once_per_slot_and_stops_when_paused() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    sim.now = at("2026-01-01T00:00:00.000Z");
    define(
        &mut sim,
        scheduled(
            "tick",
            "* * * * * *",
            Catchup::Latest,
            Overlap::Allow,
            job("t"),
        ),
        chrono_tz::UTC,
        None,
    );
    assert_eq!(
        sim.engine.next_wakeup(),
        Some(at("2026-01-01T00:00:01Z")),
        "the cron slot is the next wakeup"
    );
    let mut spawn_times = Vec::new();
    for _ in 0..10 {
        let next = sim.engine.next_wakeup().unwrap();
        sim.advance(next - sim.now);
        for s in sim.take_spawns() {
            spawn_times.push(sim.now);
            sim.exit(s.run, 0);
        }
    }
    let want: Vec<Millis> = (1..=10)
        .map(|i| at("2026-01-01T00:00:00Z") + i * 1000)
        .collect();
    assert_eq!(spawn_times, want, "one run per second, exactly at the slot");
    assert_eq!(dag_runs_of(&sim, "tick"), 10);
    sim.input(Input::Pause { dag: "tick".into() }).unwrap();
    sim.advance(5_000);
    assert_eq!(dag_runs_of(&sim, "tick"), 10, "paused: no triggers");
    assert_eq!(sim.engine.next_fire("tick"), None);
}

#[test]
fn catchup_policies_after_downtime() {
    for (policy, want) in [(Catchup::None, 0), (Catchup::Latest, 1), (Catchup::All, 2)] {
        let mut sim = Sim::new(cfg(8, &[("default", 8)]));
        // Last fired 10:00; daemon back at 12:30 → slots 11:00 and 12:00 missed.
        sim.now = at("2026-01-01T12:30:00Z");
        define(
            &mut sim,
            scheduled("hourly", "0 * * * *", policy, Overlap::Allow, job("h")),
            chrono_tz::UTC,
            Some(at("2026-01-01T10:00:00Z")),
        );
        assert_eq!(dag_runs_of(&sim, "hourly"), want, "{policy:?}");
        assert_eq!(
            sim.engine.watermark("hourly"),
            Some(at("2026-01-01T12:00:00Z")),
            "watermark advances even when skipping"
        );
        assert_eq!(
            sim.engine.next_fire("hourly"),
            Some(at("2026-01-01T13:00:00Z"))
        );
    }
}

#[test]
fn catchup_all_is_capped_at_100() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    sim.now = at("2026-01-10T00:00:30Z");
    define(
        &mut sim,
        scheduled("m", "* * * * *", Catchup::All, Overlap::Allow, job("m")),
        chrono_tz::UTC,
        Some(at("2026-01-01T00:00:00Z")),
    );
    assert_eq!(dag_runs_of(&sim, "m"), 100);
}

#[test]
fn a_restart_never_fires_a_slot_twice() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    sim.now = at("2026-01-01T00:00:00Z");
    let spec = scheduled("h", "0 * * * *", Catchup::All, Overlap::Allow, job("h"));
    define(&mut sim, spec.clone(), chrono_tz::UTC, None);
    sim.advance(3_600_000);
    let marks = fired(&sim);
    assert_eq!(marks, vec![("h".to_string(), at("2026-01-01T01:00:00Z"))]);
    // "restart": a fresh engine with the committed watermark, same instant
    let mut again = Sim::new(cfg(8, &[("default", 8)]));
    again.now = sim.now + 10;
    define(&mut again, spec, chrono_tz::UTC, Some(marks[0].1));
    assert_eq!(dag_runs_of(&again, "h"), 0, "01:00 already fired");
}

#[test]
fn overlap_policies() {
    let slow = || {
        let mut j = job("slow");
        j.timeout = Timeout::Never;
        j
    };
    // skip: the slot is recorded as skipped
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    sim.now = at("2026-01-01T00:00:00Z");
    define(
        &mut sim,
        scheduled("s", "* * * * *", Catchup::Latest, Overlap::Skip, slow()),
        chrono_tz::UTC,
        None,
    );
    sim.advance(60_000);
    sim.advance(60_000);
    sim.advance(60_000);
    assert_eq!(dag_runs_of(&sim, "s"), 1);
    let skipped = sim
        .events()
        .iter()
        .filter(|e| e.reason.contains("skipped") && e.reason.contains("overlap = skip"))
        .count();
    assert_eq!(skipped, 2);
    // queue: starts after the active one ends
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    sim.now = at("2026-01-01T00:00:00Z");
    define(
        &mut sim,
        scheduled("q", "* * * * *", Catchup::Latest, Overlap::Queue, slow()),
        chrono_tz::UTC,
        None,
    );
    sim.advance(60_000);
    let first = sim.take_spawns();
    sim.advance(60_000);
    assert!(sim.take_spawns().is_empty(), "queued behind the active run");
    sim.exit(first[0].run, 0);
    assert_eq!(
        sim.take_spawns().len(),
        1,
        "the queued slot starts when the first ends"
    );
    // replace: the active one is cancelled
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    sim.now = at("2026-01-01T00:00:00Z");
    define(
        &mut sim,
        scheduled("r", "* * * * *", Catchup::Latest, Overlap::Replace, slow()),
        chrono_tz::UTC,
        None,
    );
    sim.advance(60_000);
    let first = sim.take_spawns();
    sim.advance(60_000);
    assert_eq!(sim.take_kills(), vec![(first[0].run, KillReason::Cancel)]);
    // allow: both run
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    sim.now = at("2026-01-01T00:00:00Z");
    define(
        &mut sim,
        scheduled("a", "* * * * *", Catchup::Latest, Overlap::Allow, slow()),
        chrono_tz::UTC,
        None,
    );
    sim.advance(120_000);
    assert_eq!(sim.take_spawns().len(), 2);
}

#[test]
fn paused_slots_follow_catchup_on_resume() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    sim.now = at("2026-01-01T00:00:00Z");
    define(
        &mut sim,
        scheduled("p", "0 * * * *", Catchup::All, Overlap::Allow, job("p")),
        chrono_tz::UTC,
        None,
    );
    sim.input(Input::Pause { dag: "p".into() }).unwrap();
    sim.advance(3 * 3_600_000 + 1000);
    assert_eq!(dag_runs_of(&sim, "p"), 0);
    sim.input(Input::Resume { dag: "p".into() }).unwrap();
    assert_eq!(
        dag_runs_of(&sim, "p"),
        3,
        "catchup = all runs the 3 slots missed while paused"
    );
}

#[test]
fn after_chain_runs_in_order_and_only_on_success() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let first = Arc::new(DagSpec::adhoc("first", vec![job("a")]));
    let mut second = DagSpec::adhoc("second", vec![job("b")]);
    second.after = vec!["first".into()];
    define(&mut sim, first.clone(), chrono_tz::UTC, None);
    define(&mut sim, Arc::new(second), chrono_tz::UTC, None);
    let a = sim.submit(first.clone())[0];
    assert_eq!(dag_runs_of(&sim, "second"), 0);
    sim.exit(a, 0);
    assert_eq!(
        dag_runs_of(&sim, "second"),
        1,
        "success triggers the follower"
    );
    let a2 = sim.submit(first)[0];
    sim.exit(a2, 1);
    assert_eq!(dag_runs_of(&sim, "second"), 1, "failure does not");
    // The follower's DAG run is credited to what triggered it, not cron.
    let created = sim
        .events()
        .into_iter()
        .find(|e| e.run.is_none() && e.reason.starts_with("DAG run created by after first"))
        .expect("the follower's creation event");
    assert_eq!(&*created.actor, "after first");
}

#[test]
fn a_hook_acts_as_the_hook_not_as_cron() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let mut flaky = DagSpec::adhoc("flaky", vec![job("a")]);
    flaky.on_failure = Some("echo hook".into());
    let flaky = Arc::new(flaky);
    define(&mut sim, flaky.clone(), chrono_tz::UTC, None);
    let a = sim.submit(flaky)[0];
    sim.exit(a, 1);
    let hook = sim
        .events()
        .into_iter()
        .find(|e| e.run.is_none() && e.reason.contains("on_failure hook of DAG run"))
        .expect("the hook's creation event");
    assert_eq!(&*hook.actor, "on_failure hook");
    assert!(
        sim.events().iter().all(|e| &*e.actor != "cron"),
        "{:#?}",
        sim.events()
    );
}

#[test]
fn disabled_dags_trigger_nothing() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    sim.now = at("2026-01-01T00:00:00Z");
    let mut d = (*scheduled("off", "* * * * *", Catchup::All, Overlap::Allow, job("x"))).clone();
    d.enabled = false;
    define(&mut sim, Arc::new(d), chrono_tz::UTC, None);
    sim.advance(600_000);
    assert_eq!(dag_runs_of(&sim, "off"), 0);
    assert_eq!(sim.engine.next_wakeup(), None);
}

#[test]
fn dst_rules_through_the_engine() {
    // New York, spring forward 2025-03-09: 02:30 does not exist; a fixed-time
    // job fires once at 03:00 EDT (07:00Z). Fall back 2025-11-02: a wildcard
    // hour fires in both passes of 01:30.
    let ny = chrono_tz::America::New_York;
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    sim.now = at("2025-03-08T12:00:00Z");
    define(
        &mut sim,
        scheduled(
            "fixed",
            "30 2 * * *",
            Catchup::Latest,
            Overlap::Allow,
            job("f"),
        ),
        ny,
        None,
    );
    assert_eq!(
        sim.engine.next_fire("fixed"),
        Some(at("2025-03-09T07:00:00Z"))
    );
    sim.advance(at("2025-03-09T07:00:00Z") - sim.now);
    assert_eq!(
        fired(&sim),
        vec![("fixed".to_string(), at("2025-03-09T07:00:00Z"))]
    );

    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    sim.now = at("2025-11-02T04:00:00Z");
    define(
        &mut sim,
        scheduled("wild", "30 * * * *", Catchup::All, Overlap::Allow, job("w")),
        ny,
        None,
    );
    sim.advance(4 * 3_600_000);
    let slots: Vec<Millis> = fired(&sim).into_iter().map(|(_, s)| s).collect();
    assert_eq!(
        slots,
        vec![
            at("2025-11-02T04:30:00Z"),
            at("2025-11-02T05:30:00Z"),
            at("2025-11-02T06:30:00Z"),
            at("2025-11-02T07:30:00Z")
        ]
    );
}

#[test]
fn hooks_run_as_recorded_dag_runs_with_the_result() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let mut d = DagSpec::adhoc("nightly", vec![job("load"), job("check")]);
    d.on_failure = Some("notify failed".into());
    d.on_success = Some("notify ok".into());
    let d = Arc::new(d);
    let r = sim.submit(d.clone());
    sim.exit(r[0], 0);
    sim.exit(r[1], 4);
    let hook = sim
        .engine
        .dag_runs()
        .find(|x| &*x.dag == "nightly:on_failure")
        .expect("hook DAG run");
    let run = sim.engine.run(hook.runs[0]).unwrap();
    assert_eq!(run.job().exec, Exec::Shell("notify failed".into()));
    assert_eq!(run.job().env["AX_DAG"], "nightly");
    assert_eq!(run.job().env["AX_STATE"], "failed");
    assert_eq!(run.job().env["AX_FAILED_JOBS"], "check");
    assert_eq!(run.state, RunState::Running);
    let ok = sim.submit(d);
    sim.exit(ok[0], 0);
    sim.exit(ok[1], 0);
    assert!(
        sim.engine
            .dag_runs()
            .any(|x| &*x.dag == "nightly:on_success")
    );
    assert!(
        !sim.engine
            .dag_runs()
            .any(|x| &*x.dag == "nightly:on_success:on_success"),
        "hooks have no hooks"
    );
}

#[test]
fn a_hook_runs_as_its_dags_jobs_when_they_share_one_user() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let as_user = |id: &str, user: &str| {
        let mut j = job(id);
        j.user = Some(user.into());
        j.umask = Some(0o077);
        j
    };
    let mut d = DagSpec::adhoc(
        "@alice/x",
        vec![as_user("a", "alice"), as_user("b", "alice")],
    );
    d.on_failure = Some("notify".into());
    let r = sim.submit(Arc::new(d));
    sim.exit(r[0], 1);
    sim.exit(r[1], 0);
    let hook_job = |sim: &Sim, dag: &str| {
        let hook = sim.engine.dag_runs().find(|x| &*x.dag == dag).unwrap();
        sim.engine.run(hook.runs[0]).unwrap().job().clone()
    };
    let j = hook_job(&sim, "@alice/x:on_failure");
    assert_eq!((j.user.as_deref(), j.umask), (Some("alice"), Some(0o077)));
    let mut mixed = DagSpec::adhoc("mixed", vec![as_user("a", "alice"), as_user("b", "bob")]);
    mixed.on_failure = Some("notify".into());
    let r = sim.submit(Arc::new(mixed));
    sim.exit(r[0], 1);
    sim.exit(r[1], 0);
    assert_eq!(
        hook_job(&sim, "mixed:on_failure").user,
        None,
        "axd's own user"
    );
}

/// The triggers of a DAG's runs, oldest DAG run first.
fn triggers_of(sim: &Sim, dag: &str) -> Vec<String> {
    let mut runs: Vec<&DagRun> = sim.engine.dag_runs().filter(|d| &*d.dag == dag).collect();
    runs.sort_by_key(|d| d.id);
    runs.iter().map(|d| d.trigger.clone()).collect()
}

/// Runs every spawned attempt to success until nothing more starts.
fn drain(sim: &mut Sim) {
    loop {
        let spawns = sim.take_spawns();
        if spawns.is_empty() {
            return;
        }
        for s in spawns {
            sim.exit(s.run, 0);
        }
    }
}

/// docs/job-files.md, "Catch-up and overlap": missed slots are never skipped
/// by overlap; under `skip` (the default), `queue` and `replace` they run one
/// after another in slot order.
#[test]
fn catchup_all_runs_every_missed_slot_in_order_whatever_the_overlap() {
    for overlap in [Overlap::Skip, Overlap::Queue, Overlap::Replace] {
        let mut sim = Sim::new(cfg(8, &[("default", 8)]));
        // Last fired 09:00; back at 12:30 → 10:00, 11:00 and 12:00 missed.
        sim.now = at("2026-01-01T12:30:00Z");
        define(
            &mut sim,
            scheduled("hourly", "0 * * * *", Catchup::All, overlap, job("h")),
            chrono_tz::UTC,
            Some(at("2026-01-01T09:00:00Z")),
        );
        let first = sim.take_spawns();
        assert_eq!(first.len(), 1, "{overlap:?}: one at a time");
        assert_eq!(sim.engine.dag_runs().count(), 1, "{overlap:?}");
        sim.exit(first[0].run, 0);
        drain(&mut sim);
        assert_eq!(
            triggers_of(&sim, "hourly"),
            vec![
                "cron slot 2026-01-01T10:00:00Z (queued)".to_string(),
                "cron slot 2026-01-01T11:00:00Z (queued)".to_string(),
                "cron slot 2026-01-01T12:00:00Z (queued)".to_string(),
            ],
            "{overlap:?}: every missed slot, in slot order"
        );
        assert!(
            !sim.events().iter().any(|e| e.reason.contains("skipped")),
            "{overlap:?}: nothing skipped"
        );
    }
}

/// `first` and a `second` that runs after it under `overlap`, with a job
/// that runs until told.
fn after_pair(sim: &mut Sim, overlap: Overlap) -> Arc<DagSpec> {
    let first = Arc::new(DagSpec::adhoc("first", vec![job("a")]));
    let mut slow = job("b");
    slow.timeout = Timeout::Never;
    let mut second = DagSpec::adhoc("second", vec![slow]);
    second.after = vec!["first".into()];
    second.overlap = overlap;
    define(sim, first.clone(), chrono_tz::UTC, None);
    define(sim, Arc::new(second), chrono_tz::UTC, None);
    first
}

/// Succeeds one run of `first`; returns the spawns of `second` it caused.
fn first_succeeds(sim: &mut Sim, first: &Arc<DagSpec>) -> Vec<SpawnOrder> {
    let a = sim.submit(first.clone())[0];
    sim.take_spawns(); // `a` itself
    sim.exit(a, 0);
    sim.take_spawns()
}

/// `after`-triggered runs honour `overlap = "queue"` as cron runs do.
#[test]
fn after_triggers_queue_behind_the_active_run() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let first = after_pair(&mut sim, Overlap::Queue);
    let b1 = first_succeeds(&mut sim, &first);
    assert_eq!(b1.len(), 1);
    assert!(
        first_succeeds(&mut sim, &first).is_empty(),
        "queued behind the active run of second"
    );
    assert_eq!(dag_runs_of(&sim, "second"), 1);
    sim.exit(b1[0].run, 0);
    let b2 = sim.take_spawns();
    assert_eq!(b2.len(), 1, "the queued trigger starts when the first ends");
    let triggers = triggers_of(&sim, "second");
    assert_eq!(triggers.len(), 2);
    assert!(
        triggers[1].starts_with("after first (DAG run ") && triggers[1].ends_with("(queued)"),
        "{triggers:?}"
    );
}

/// `after`-triggered runs honour `overlap = "replace"` as cron runs do.
#[test]
fn after_triggers_replace_the_active_run() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let first = after_pair(&mut sim, Overlap::Replace);
    let b1 = first_succeeds(&mut sim, &first);
    assert_eq!(b1.len(), 1);
    let b2 = first_succeeds(&mut sim, &first);
    assert_eq!(sim.take_kills(), vec![(b1[0].run, KillReason::Cancel)]);
    assert_eq!(b2.len(), 1, "the replacing run starts at once");
    assert_eq!(dag_runs_of(&sim, "second"), 2);
    sim.die(b1[0].run);
    assert_eq!(sim.state(b1[0].run), RunState::Cancelled);
    assert_eq!(sim.state(b2[0].run), RunState::Running);
}

// ---- @reboot ----------------------------------------------------------------------

fn define_marked(sim: &mut Sim, spec: Arc<DagSpec>, boot_mark: Option<&str>) {
    sim.input(Input::DefineDag {
        spec,
        zone: chrono_tz::UTC,
        watermark: None,
        boots_seen: boot_mark.into_iter().map(Arc::from).collect(),
    })
    .unwrap();
}

fn boot_marks(sim: &Sim) -> Vec<(String, String, bool)> {
    sim.effects
        .iter()
        .filter_map(|e| match e {
            Effect::BootMark { dag, boot, fired } => Some((dag.clone(), boot.to_string(), *fired)),
            _ => None,
        })
        .collect()
}

fn at_boot(name: &str) -> Arc<DagSpec> {
    scheduled(name, "@reboot", Catchup::None, Overlap::Skip, job("warm"))
}

#[test]
fn reboot_fires_once_per_boot_never_on_a_restart_within_it() {
    // A new @reboot DAG takes the current boot as seen: it fires at the next.
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    sim.engine.set_boot(Some(Arc::from("boot-a")));
    define_marked(&mut sim, at_boot("warm"), None);
    assert_eq!(dag_runs_of(&sim, "warm"), 0);
    assert_eq!(
        boot_marks(&sim),
        vec![("warm".into(), "boot-a".into(), false)]
    );
    assert_eq!(sim.engine.next_fire("warm"), None, "no time of day");

    // axd restarts in the same boot: the store's mark says it was seen.
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    sim.engine.set_boot(Some(Arc::from("boot-a")));
    define_marked(&mut sim, at_boot("warm"), Some("boot-a"));
    assert_eq!(dag_runs_of(&sim, "warm"), 0);
    assert!(boot_marks(&sim).is_empty());

    // The machine rebooted: one DAG run, marked in the same step.
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    sim.engine.set_boot(Some(Arc::from("boot-b")));
    define_marked(&mut sim, at_boot("warm"), Some("boot-a"));
    assert_eq!(dag_runs_of(&sim, "warm"), 1);
    assert_eq!(
        boot_marks(&sim),
        vec![("warm".into(), "boot-b".into(), true)]
    );
    let dr = sim.engine.dag_runs().next().unwrap();
    assert_eq!(dr.trigger, "boot boot-b");
    assert_eq!(dr.unique_key.as_deref(), Some("warm@boot:boot-b"));
    // A reload of the same file, a wall-clock step: nothing more.
    define_marked(&mut sim, at_boot("warm"), None);
    sim.step_wall(3_600_000);
    sim.advance(86_400_000);
    assert_eq!(dag_runs_of(&sim, "warm"), 1);
}

#[test]
fn reboot_waits_while_paused_and_fires_without_a_boot_id_never() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    sim.engine.set_boot(None);
    define_marked(&mut sim, at_boot("warm"), Some("boot-a"));
    assert_eq!(
        dag_runs_of(&sim, "warm"),
        0,
        "an unknown boot fires nothing"
    );
    assert!(boot_marks(&sim).is_empty());

    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    sim.engine.set_boot(Some(Arc::from("boot-b")));
    sim.input(Input::Pause { dag: "warm".into() }).unwrap();
    define_marked(&mut sim, at_boot("warm"), Some("boot-a"));
    assert_eq!(dag_runs_of(&sim, "warm"), 0, "paused");
    sim.input(Input::Resume { dag: "warm".into() }).unwrap();
    assert_eq!(
        dag_runs_of(&sim, "warm"),
        1,
        "resumed in the boot it missed"
    );
}

// ---- jitter -----------------------------------------------------------------------

#[test]
fn jitter_delays_each_slot_holding_no_slot_and_overlap_counts_the_slot() {
    let mut sim = Sim::new(cfg(1, &[("default", 1)]));
    sim.now = at("2026-01-01T00:00:00.000Z");
    let mut spec = DagSpec::adhoc("renew", vec![job("certbot")]);
    spec.schedule = Some("0 */12 * * *".into());
    spec.overlap = Overlap::Skip;
    spec.jitter = Some(std::time::Duration::from_secs(12 * 3600));
    define(&mut sim, Arc::new(spec), chrono_tz::UTC, None);
    // Another job takes the one slot meanwhile and gets it: the delayed run
    // does not hold it.
    sim.advance(12 * 3_600_000);
    let dr = sim.engine.dag_runs().find(|d| &*d.dag == "renew").unwrap();
    let run = dr.runs[0];
    assert_eq!(sim.state(run), RunState::Delayed);
    let planned = sim.engine.run(run).unwrap().next_at.unwrap();
    let slot = at("2026-01-01T12:00:00.000Z");
    assert!(
        planned > slot && planned <= slot + 12 * 3_600_000,
        "{planned}"
    );
    assert!(sim.why(run).contains("planned start"), "{}", sim.why(run));
    assert_eq!(sim.engine.planned_start("renew"), Some(planned));
    let other = sim.submit(dag("other", vec![job("x")]))[0];
    assert_eq!(
        sim.take_spawned_runs(),
        vec![other],
        "the delayed run holds no slot"
    );
    sim.exit(other, 0);
    // The next slot comes while the delayed DAG run is active: skip.
    let wait = planned - sim.wall();
    sim.advance(wait - 1);
    assert!(sim.take_spawned_runs().is_empty());
    sim.advance(1);
    assert_eq!(
        sim.take_spawned_runs(),
        vec![run],
        "starts at its planned start"
    );
    assert_eq!(sim.state(run), RunState::Running);
    assert_eq!(sim.engine.planned_start("renew"), None);
}

#[test]
fn jitter_never_delays_a_slot_caught_up_late_or_a_manual_trigger() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    sim.now = at("2026-01-02T12:00:00.000Z");
    let mut spec = DagSpec::adhoc("renew", vec![job("certbot")]);
    spec.schedule = Some("0 0 * * *".into());
    spec.catchup = Catchup::Latest;
    spec.overlap = Overlap::Allow;
    spec.jitter = Some(std::time::Duration::from_secs(60));
    // Missed midnight by 12 h: its planned start has passed, it starts now.
    define(
        &mut sim,
        Arc::new(spec),
        chrono_tz::UTC,
        Some(at("2026-01-01T00:00:00.000Z")),
    );
    assert_eq!(sim.take_spawned_runs().len(), 1);
    sim.input(Input::Trigger {
        dag: "renew".into(),
        actor: actor(),
        force: false,
    })
    .unwrap();
    assert_eq!(
        sim.take_spawned_runs().len(),
        1,
        "a manual trigger starts now"
    );
}

#[test]
fn reboot_fires_once_per_machine_boot_when_cron_leadership_moves() {
    use std::collections::HashMap;
    // Node A leads in boot a and fires (the DAG had seen boot old).
    let lead = |sim: &mut Sim, boots: &[&str]| {
        let marks = TriggerMarks {
            slots: HashMap::new(),
            boots: HashMap::from([(
                "warm".to_string(),
                boots.iter().map(|b| Arc::from(*b)).collect(),
            )]),
        };
        sim.input(Input::Lead {
            leader: true,
            marks,
            active: vec![],
        })
        .unwrap();
    };
    let follower = |boot: &str| {
        let mut sim = Sim::new(cfg(8, &[("default", 8)]));
        sim.engine.set_boot(Some(Arc::from(boot)));
        sim.engine.set_cron_leader(false);
        define_marked(&mut sim, at_boot("warm"), None);
        sim
    };
    let mut a = follower("boot-a");
    lead(&mut a, &["boot-old"]);
    assert_eq!(dag_runs_of(&a, "warm"), 1);
    // B takes over: its machine's boot has not fired.
    let mut b = follower("boot-b");
    lead(&mut b, &["boot-old", "boot-a"]);
    assert_eq!(dag_runs_of(&b, "warm"), 1);
    // Back to A, still in boot a: nothing more.
    let mut a = follower("boot-a");
    lead(&mut a, &["boot-old", "boot-a", "boot-b"]);
    assert_eq!(dag_runs_of(&a, "warm"), 0);
}
