//! The metrics count a known workload exactly, and the exposition parses
//! as Prometheus text (docs/operations.md, "Monitoring").

use std::collections::HashMap;

use ax_daemon::metrics::{DagHistory, DagStat, Metrics, Shared, Snapshot};
use ax_engine::sim::*;
use ax_engine::*;
use ax_shared::*;
use prometheus_parse::{Scrape, Value};

use crate::parse_prometheus;

fn value(s: &Scrape, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    s.samples
        .iter()
        .find(|x| x.metric == metric && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .map(|x| match &x.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            Value::Histogram(b) => b.last().map(|c| c.count).unwrap_or(0.0),
            Value::Summary(_) => f64::NAN,
        })
}

#[test]
fn a_known_workload_is_counted_exactly() {
    let mut sim = Sim::new(cfg(32, &[("default", 32)]));
    let mut metrics = Metrics::new(Shared::default(), HashMap::new());
    let mut observe = |sim: &mut Sim| {
        let effects = std::mem::take(&mut sim.effects);
        metrics.observe(sim.now, &effects, |_| true);
    };
    // 10 successes.
    for i in 0..10 {
        let r = sim.submit(dag(&format!("ok{i}"), vec![job("a")]))[0];
        sim.now += 1000;
        sim.exit(r, 0);
    }
    observe(&mut sim);
    // 3 failures without retries.
    for i in 0..3 {
        let r = sim.submit(dag("bad", vec![job(&format!("b{i}"))]))[0];
        sim.exit(r, 1);
    }
    // 2 retries: fails twice, then succeeds.
    let mut flaky = job("f");
    flaky.retries = 2;
    flaky.backoff.kind = BackoffKind::None;
    let f = sim.submit(dag("flaky", vec![flaky]))[0];
    sim.exit(f, 1);
    sim.advance(1);
    sim.exit(f, 1);
    sim.advance(1);
    sim.exit(f, 0);
    // 1 cancel of a running run.
    let c = sim.submit(dag("cancelled", vec![job("c")]))[0];
    sim.input(Input::Cancel {
        run: c,
        actor: actor(),
    })
    .unwrap();
    sim.die(c);
    observe(&mut sim);

    let text = metrics.render(&Snapshot {
        runs_by_state: vec![(RunState::Success, 11), (RunState::Failed, 3)],
        dags: vec![
            DagStat {
                name: "flaky".into(),
                next_fire: Some(1_700_000_900_000),
                paused: false,
            },
            DagStat {
                name: "bad".into(),
                next_fire: None,
                paused: true,
            },
        ],
        ..Snapshot::default()
    });
    let s = parse_prometheus(&text);
    let started = value(&s, "ax_attempts_started_total", &[("pool", "default")]);
    assert_eq!(started, Some(17.0), "10 + 3 + 3 + 1 attempts\n{text}");
    let outcome = |dag: &str, outcome: &str| {
        value(
            &s,
            "ax_attempt_outcomes_total",
            &[("dag", dag), ("outcome", outcome)],
        )
    };
    assert_eq!(outcome("ok3", "success"), Some(1.0));
    assert_eq!(outcome("bad", "failed"), Some(3.0));
    assert_eq!(outcome("flaky", "failed"), Some(2.0));
    assert_eq!(outcome("flaky", "success"), Some(1.0));
    assert_eq!(outcome("cancelled", "cancelled"), Some(1.0));
    assert_eq!(value(&s, "ax_runs", &[("state", "success")]), Some(11.0));
    assert_eq!(
        value(
            &s,
            "ax_dag_next_fire_timestamp_seconds",
            &[("dag", "flaky")]
        ),
        Some(1_700_000_900.0)
    );
    assert_eq!(value(&s, "ax_dag_paused", &[("dag", "bad")]), Some(1.0));
    assert!(
        value(
            &s,
            "ax_dag_last_success_timestamp_seconds",
            &[("dag", "flaky")]
        )
        .is_some(),
        "{text}"
    );
    assert!(
        value(
            &s,
            "ax_dag_last_failure_timestamp_seconds",
            &[("dag", "bad")]
        )
        .is_some()
    );
    assert_eq!(
        value(
            &s,
            "ax_dag_last_success_timestamp_seconds",
            &[("dag", "bad")]
        ),
        None,
        "never succeeded"
    );
}

#[test]
fn dag_history_from_the_store_survives_a_restart() {
    let metrics = Metrics::new(
        Shared::default(),
        HashMap::from([(
            "nightly".to_string(),
            DagHistory {
                last_success: Some(1_600_000_000_000),
                last_failure: None,
            },
        )]),
    );
    let text = metrics.render(&Snapshot {
        dags: vec![DagStat {
            name: "nightly".into(),
            next_fire: None,
            paused: false,
        }],
        ..Snapshot::default()
    });
    let s = parse_prometheus(&text);
    assert_eq!(
        value(
            &s,
            "ax_dag_last_success_timestamp_seconds",
            &[("dag", "nightly")]
        ),
        Some(1_600_000_000.0)
    );
}

/// Cron slots are counted by what became of them: a slot that starts a DAG
/// run is `fired`; one left out by `catchup` or by `overlap = "skip"` is
/// `skipped`.
#[test]
fn cron_slots_are_counted_fired_and_skipped() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let mut metrics = Metrics::new(Shared::default(), HashMap::new());
    sim.now = 1_767_225_600_000; // 2026-01-01T00:00:00Z
    let scheduled = |name: &str, catchup: Catchup, overlap: Overlap| {
        let mut j = job("j");
        j.timeout = Timeout::Never;
        let mut d = DagSpec::adhoc(name, vec![j]);
        d.schedule = Some("* * * * *".into());
        d.catchup = catchup;
        d.overlap = overlap;
        std::sync::Arc::new(d)
    };
    // Its one run never ends: of three slots, one fires, two are skipped.
    sim.input(Input::DefineDag {
        spec: scheduled("busy", Catchup::Latest, Overlap::Skip),
        zone: chrono_tz::UTC,
        watermark: None,
        boots_seen: Vec::new(),
    })
    .unwrap();
    // Down for five minutes: of the six slots from then to now, both
    // included, `catchup = "latest"` fires the newest and skips five.
    sim.input(Input::DefineDag {
        spec: scheduled("late", Catchup::Latest, Overlap::Allow),
        zone: chrono_tz::UTC,
        watermark: Some(sim.now - 5 * 60_000 - 1),
        boots_seen: Vec::new(),
    })
    .unwrap();
    for _ in 0..3 {
        sim.advance(60_000);
    }
    metrics.observe(sim.now, &std::mem::take(&mut sim.effects), |_| true);
    let text = metrics.render(&Snapshot::default());
    let s = parse_prometheus(&text);
    let slots = |dag: &str, result: &str| {
        value(
            &s,
            "ax_cron_slots_total",
            &[("dag", dag), ("result", result)],
        )
    };
    assert_eq!(slots("busy", "fired"), Some(1.0), "{text}");
    assert_eq!(slots("busy", "skipped"), Some(2.0), "{text}");
    // The catch-up at definition (1 fired, 5 skipped) and 3 slots on time.
    assert_eq!(slots("late", "fired"), Some(4.0), "{text}");
    assert_eq!(slots("late", "skipped"), Some(5.0), "{text}");
}
