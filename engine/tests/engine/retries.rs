//! The `timeout`, `heartbeat` and retry rules, one by one, on a virtual clock
//! (docs/job-files.md, "Job fields" and "Retries"; docs/config.md,
//! "`[retry]`"): timeouts, heartbeats, backoff, jitter, retry budgets and
//! manual retries.

use std::time::Duration;

use ax_engine::sim::*;
use ax_engine::*;
use ax_shared::*;

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
fn no_timeout_unless_asked() {
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let r = sim.submit(dag("t", vec![job("long")]));
    sim.advance(30 * 24 * 3_600_000);
    assert!(sim.take_kills().is_empty(), "a job with no timeout runs on");
    assert_eq!(sim.engine.run(r[0]).unwrap().state, RunState::Running);
}

#[test]
fn a_pool_timeout_stands_in_for_the_default() {
    let mut c = cfg(8, &[("default", 8), ("io", 8), ("open", 8)]);
    c.default_timeout = Some(10_000);
    c.pool_timeouts = [("io".to_string(), Some(5_000)), ("open".to_string(), None)].into();
    let mut sim = Sim::new(c);
    let mut io = job("io");
    io.pool = "io".into();
    let mut open = job("open");
    open.pool = "open".into();
    let mut own = job("own");
    own.pool = "io".into();
    own.timeout = Timeout::After(Duration::from_secs(20));
    let r = sim.submit(dag("t", vec![io, open, own, job("dflt")]));
    sim.advance(5_000);
    assert_eq!(sim.take_kills(), vec![(r[0], KillReason::Timeout)]);
    sim.advance(5_000);
    assert_eq!(sim.take_kills(), vec![(r[3], KillReason::Timeout)]);
    sim.advance(10_000);
    assert_eq!(sim.take_kills(), vec![(r[2], KillReason::Timeout)]);
    sim.advance(1_000_000);
    assert!(
        sim.take_kills().is_empty(),
        "`timeout = \"none\"` on the pool: no limit"
    );
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
        sim.take_spawned_runs(),
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
