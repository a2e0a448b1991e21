//! Chaos test of the engine: thousands of random jobs with random acyclic
//! deps, priorities, pools, outcomes, durations, timeouts, hangs and operator
//! actions, driven on a virtual clock until quiet. After every step the
//! scheduling rules are checked (no pool or the global limit exceeded, a run
//! ready only once its deps allow, failures cascading at once, a `why` for
//! every unfinished run that is not running), and every dispatch is compared
//! with a naive reference scheduler that scans all ready runs.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use ax_engine::sim::*;
use ax_engine::*;
use ax_shared::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// What a process does when spawned.
#[derive(Clone, Copy)]
struct Behaviour {
    /// `None` = hangs until killed.
    runs_for: Option<Millis>,
    exit_code: i32,
}

struct World {
    sim: Sim,
    rng: SmallRng,
    /// run → (attempt, when it exits, exit code or killed-by-signal)
    processes: BTreeMap<RunId, (u32, Millis, Option<i32>)>,
    /// Per run: manual retries issued (each resets the retry budget).
    manual_retries: HashMap<RunId, u32>,
    steps: usize,
}

fn random_dag(rng: &mut SmallRng, name: &str) -> Arc<DagSpec> {
    let n = rng.random_range(1..=8);
    let mut jobs = Vec::new();
    for i in 0..n {
        let mut j = JobSpec::new(format!("j{i}"), Exec::Shell("x".into()));
        j.priority = [10, 30, 50, 50, 70, 90, 95][rng.random_range(0..7)];
        j.pool = if rng.random_bool(0.3) {
            "io".into()
        } else {
            "default".into()
        };
        j.retries = rng.random_range(0..=2);
        j.backoff = Backoff {
            kind: [
                BackoffKind::Exponential,
                BackoffKind::Fixed,
                BackoffKind::None,
            ][rng.random_range(0..3)],
            base: Duration::from_millis(rng.random_range(0..2000)),
            max: Duration::from_millis(5000),
            jitter: Duration::from_millis(rng.random_range(0..300)),
        };
        j.timeout = if rng.random_bool(0.3) {
            Timeout::After(Duration::from_millis(rng.random_range(100..3000)))
        } else {
            Timeout::Default
        };
        if rng.random_bool(0.1) {
            j.heartbeat = Some(Duration::from_millis(rng.random_range(200..2000)));
        }
        j.kill_grace = Duration::from_millis(rng.random_range(0..500));
        j.preemptible = rng.random_bool(0.3);
        j.dep_mode = if rng.random_bool(0.2) {
            DepMode::Any
        } else {
            DepMode::All
        };
        for d in 0..i {
            if rng.random_bool(0.35) {
                j.deps.push(format!("j{d}"));
            }
        }
        if rng.random_bool(0.1) {
            j.retry_on = Some(vec![1]);
        }
        jobs.push(j);
    }
    Arc::new(DagSpec::adhoc(name, jobs))
}

impl World {
    fn step(&mut self, input: Input) {
        let start = self.sim.effects.len();
        let _ = self.sim.input(input);
        let new: Vec<Effect> = self.sim.effects.drain(start..).collect();
        self.steps += 1;
        check_step(&self.sim.engine, self.sim.now, &new);
        for e in &new {
            match e {
                Effect::Spawn(o) => {
                    let b = Behaviour {
                        runs_for: if self.rng.random_bool(0.08) {
                            None
                        } else {
                            Some(self.rng.random_range(0..4000))
                        },
                        exit_code: if self.rng.random_bool(0.3) {
                            [1, 2][self.rng.random_range(0..2)]
                        } else {
                            0
                        },
                    };
                    let exit_at = self.sim.now + b.runs_for.unwrap_or(Millis::MAX / 4);
                    self.processes
                        .insert(o.run, (o.attempt, exit_at, Some(b.exit_code)));
                }
                Effect::Kill { run, grace_ms, .. } => {
                    let Some(p) = self.processes.get_mut(run) else {
                        panic!(
                            "kill of a dead process: {e:?} state {:?} attempts {:?}",
                            self.sim.engine.run(*run).map(|r| r.state),
                            self.sim.engine.run(*run).map(|r| r.attempts.clone())
                        )
                    };
                    // dies within the grace period (TERM) or at its end (KILL)
                    let dies = self.sim.now + self.rng.random_range(0..=*grace_ms);
                    if dies < p.1 {
                        p.1 = dies;
                        p.2 = None;
                    }
                }
                _ => {}
            }
        }
    }

    fn run_until_quiet(&mut self, operator_actions: bool) {
        loop {
            let next_exit = self.processes.values().map(|p| p.1).min();
            let next_timer = self.sim.engine.next_wakeup();
            let next = match (next_exit, next_timer) {
                (None, None) => break,
                (a, b) => a.unwrap_or(Millis::MAX).min(b.unwrap_or(Millis::MAX)),
            };
            assert!(
                next < Millis::MAX / 8,
                "only hung processes and no timer: stuck"
            );
            self.sim.now = self.sim.now.max(next);
            let exiting: Vec<RunId> = self
                .processes
                .iter()
                .filter(|(_, p)| p.1 <= self.sim.now)
                .map(|(r, _)| *r)
                .collect();
            for run in exiting {
                let (attempt, _, code) = self.processes.remove(&run).unwrap();
                self.step(Input::Exited {
                    run,
                    attempt,
                    code,
                    signal: if code.is_none() { Some(15) } else { None },
                });
            }
            self.step(Input::Tick);
            if operator_actions && self.rng.random_bool(0.02) {
                let mut all: Vec<RunId> = self.sim.engine.runs().map(|r| r.id).collect();
                all.sort();
                let pick = all[self.rng.random_range(0..all.len())];
                let state = self.sim.engine.run(pick).unwrap().state;
                if state.is_terminal() && state != RunState::Success && self.rng.random_bool(0.5) {
                    let before = self.sim.engine.run(pick).unwrap().state;
                    self.step(Input::Retry {
                        run: pick,
                        actor: actor(),
                    });
                    if self.sim.engine.run(pick).unwrap().state != before {
                        *self.manual_retries.entry(pick).or_default() += 1;
                    }
                } else if !state.is_terminal() {
                    self.step(Input::Cancel {
                        run: pick,
                        actor: actor(),
                    });
                }
            }
        }
    }
}

/// Reference dispatcher: scans every ready run, with the rules written
/// plainly. Returns the order in which it would start runs.
fn reference_dispatch(
    e: &Engine,
    now: Millis,
    ready: &[RunId],
    mut running: BTreeMap<String, u32>,
    mut total: u32,
) -> Vec<RunId> {
    let cfg = e.config();
    let mut ready: Vec<RunId> = ready.to_vec();
    let mut order = Vec::new();
    loop {
        let mut best: Option<(i64, std::cmp::Reverse<Millis>, std::cmp::Reverse<RunId>)> = None;
        for &id in &ready {
            let r = e.run(id).unwrap();
            let pool_ok = running[r.pool()] < cfg.pools[r.pool()];
            let global_ok = total < cfg.max_concurrency
                || (total < cfg.max_concurrency + cfg.burst_extra
                    && r.priority() >= cfg.burst_priority);
            if !pool_ok || !global_ok {
                continue;
            }
            let at = r.ready_at.unwrap();
            // The aging rule of docs/config.md, "`[aging]`", written out,
            // independent of the engine's Aging
            let p = i64::from(r.priority());
            let cap = i64::from(cfg.aging.cap);
            let eff = if p >= cap {
                p
            } else {
                (p + (now - at) / cfg.aging.every).min(cap)
            };
            let key = (eff, std::cmp::Reverse(at), std::cmp::Reverse(id));
            if best.is_none_or(|b| key > b) {
                best = Some(key);
            }
        }
        let Some((_, _, std::cmp::Reverse(id))) = best else {
            break;
        };
        let pool = e.run(id).unwrap().pool().to_string();
        *running.get_mut(&pool).unwrap() += 1;
        total += 1;
        ready.retain(|r| *r != id);
        order.push(id);
    }
    order
}

fn check_step(e: &Engine, now: Millis, effects: &[Effect]) {
    let cfg = e.config();
    // limits
    let mut running: BTreeMap<String, u32> = cfg.pools.keys().map(|k| (k.clone(), 0)).collect();
    for r in e.runs().filter(|r| r.state == RunState::Running) {
        *running.get_mut(r.pool()).unwrap() += 1;
    }
    for (pool, n) in &running {
        assert!(
            *n <= cfg.pools[pool],
            "pool {pool} runs {n} > {}",
            cfg.pools[pool]
        );
    }
    let total: u32 = running.values().sum();
    assert!(
        total <= cfg.max_concurrency + cfg.burst_extra,
        "global {total}"
    );
    assert_eq!(total, e.running_total());

    // deps allow every start; failures cascade at once
    for ev in effects.iter().filter_map(|x| match x {
        Effect::Event(ev) => Some(ev),
        _ => None,
    }) {
        let Some(id) = ev.run else { continue };
        let r = e.run(id).unwrap();
        if ev.to == Some(RunState::Ready) && ev.from == Some(RunState::Waiting) {
            let ups: Vec<RunState> = r
                .upstream
                .iter()
                .map(|u| e.run(*u).unwrap().state)
                .collect();
            let ok = match r.job().dep_mode {
                DepMode::All => ups.iter().all(|s| *s == RunState::Success),
                DepMode::Any => ups.is_empty() || ups.contains(&RunState::Success),
            };
            assert!(ok, "run {id} ready with upstream {ups:?}");
        }
    }
    for r in e.runs() {
        if r.state == RunState::Waiting && r.job().dep_mode == DepMode::All {
            for u in &r.upstream {
                let s = e.run(*u).unwrap().state;
                assert!(
                    !s.is_terminal() || s == RunState::Success,
                    "run {} waits on ended upstream {u} ({s})",
                    r.id
                );
            }
        }
        // every unfinished run that is not running can say why
        if !r.state.is_terminal() && r.state != RunState::Running {
            let why = e.why(r.id, now).unwrap_or_default();
            assert!(!why.is_empty(), "run {} ({}) has no why", r.id, r.state);
        }
    }

    // dispatch equals the reference scheduler's choice
    let spawned: Vec<RunId> = effects
        .iter()
        .filter_map(|x| match x {
            Effect::Spawn(o) => Some(o.run),
            _ => None,
        })
        .collect();
    let mut before_running = running.clone();
    for id in &spawned {
        *before_running.get_mut(e.run(*id).unwrap().pool()).unwrap() -= 1;
    }
    let mut ready: Vec<RunId> = e
        .runs()
        .filter(|r| r.state == RunState::Ready)
        .map(|r| r.id)
        .collect();
    ready.extend(spawned.iter().copied());
    let want = reference_dispatch(e, now, &ready, before_running, total - spawned.len() as u32);
    assert_eq!(
        spawned, want,
        "dispatch differs from the reference at {now}"
    );
}

fn chaos(seed: u64, dags: usize, operator_actions: bool) -> (usize, usize) {
    let mut rng = SmallRng::seed_from_u64(seed);
    let cfg = EngineConfig {
        max_concurrency: rng.random_range(1..=6),
        pools: BTreeMap::from([
            ("default".to_string(), rng.random_range(1..=5)),
            ("io".to_string(), rng.random_range(1..=3)),
        ]),
        burst_extra: rng.random_range(0..=2),
        retry_per_minute: if rng.random_bool(0.5) { 30 } else { 1000 },
        aging: Aging {
            every: rng.random_range(500..5000),
            cap: 90,
        },
        default_timeout: Some(20_000),
        pool_timeouts: Default::default(),
        ..EngineConfig::default()
    };
    let mut sim = Sim::new(cfg);
    sim.engine = Engine::new(sim.engine.config().clone(), seed);
    let mut world = World {
        sim,
        rng,
        processes: BTreeMap::new(),
        manual_retries: HashMap::new(),
        steps: 0,
    };
    let mut jobs = 0;
    for i in 0..dags {
        let d = random_dag(&mut world.rng, &format!("dag{i}"));
        jobs += d.jobs.len();
        world.step(Input::Submit(Submit {
            dag: d,
            trigger: "chaos".into(),
            actor: actor(),
            unique: None,
            after: vec![],
        }));
        if world.rng.random_bool(0.2) {
            world.sim.now += world.rng.random_range(0..1000);
            world.step(Input::Tick);
        }
    }
    world.run_until_quiet(operator_actions);

    let e = &world.sim.engine;
    for r in e.runs() {
        assert!(
            r.state.is_terminal(),
            "run {} ended {} when quiet",
            r.id,
            r.state
        );
        let counted = r
            .attempts
            .iter()
            .filter(|a| a.outcome.is_some_and(|o| o.counts_against_retries()))
            .count() as u32;
        let budgets = 1 + world.manual_retries.get(&r.id).copied().unwrap_or(0);
        assert!(
            counted <= (r.job().retries + 1) * budgets,
            "run {} had {counted} counted attempts",
            r.id
        );
        // downstream of a failure is cancelled
        if r.job().dep_mode == DepMode::All {
            let failed_up = r.upstream.iter().any(|u| {
                let s = e.run(*u).unwrap().state;
                s != RunState::Success
            });
            if failed_up {
                assert_eq!(
                    r.state,
                    RunState::Cancelled,
                    "run {} ran despite a failed upstream",
                    r.id
                );
            }
        }
    }
    for d in e.dag_runs() {
        assert_ne!(d.state, DagRunState::Active);
    }
    (jobs, world.steps)
}

#[test]
fn chaos_invariants_hold_across_seeds() {
    let mut total_jobs = 0;
    for seed in 0..40 {
        let (jobs, _) = chaos(seed, 30, seed % 2 == 0);
        total_jobs += jobs;
    }
    assert!(total_jobs > 2000, "thousands of jobs: {total_jobs}");
}

#[test]
fn chaos_large_single_run() {
    let (jobs, steps) = chaos(99, 500, true);
    assert!(jobs > 1500 && steps > jobs, "{jobs} jobs, {steps} steps");
}
