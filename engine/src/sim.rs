//! A driver for the engine on a virtual clock: no sleeps, no processes.
//! Time moves only through [`Sim::advance`], so timer rules are tested
//! against exact instants.

use std::sync::Arc;
use std::time::Duration;

use crate::*;
use ax_shared::*;

pub struct Sim {
    pub engine: Engine,
    pub now: Millis,
    pub effects: Vec<Effect>,
    pub last: Option<Result<Reply, EngineError>>,
    /// `false` (the default): every step is committed at once, so DAG runs
    /// created by triggers are acknowledged in the same `input` call, as
    /// the daemon does once the writer has committed their step. `true`:
    /// they wait in `uncommitted` until `commit_triggers`.
    pub hold_commits: bool,
    pub uncommitted: Vec<DagRunId>,
    /// The wall clock's offset from `now` (the engine's monotonic clock),
    /// moved by [`Sim::step_wall`].
    pub wall_offset: Millis,
}

pub fn job(id: &str) -> JobSpec {
    let mut j = JobSpec::new(id, Exec::Shell("true".into()));
    j.backoff.jitter = Duration::ZERO;
    j
}

pub fn dag(name: &str, jobs: Vec<JobSpec>) -> Arc<DagSpec> {
    Arc::new(DagSpec::adhoc(name, jobs))
}

/// The weekly report DAG: three fetches, `calc` after all of them,
/// `email` after `calc`.
pub fn weekly() -> Arc<DagSpec> {
    let mut calc = job("calc");
    calc.deps = vec!["fetch_a".into(), "fetch_b".into(), "fetch_c".into()];
    let mut email = job("email");
    email.deps = vec!["calc".into()];
    dag(
        "weekly",
        vec![job("fetch_a"), job("fetch_b"), job("fetch_c"), calc, email],
    )
}

pub fn cfg(max: u32, pools: &[(&str, u32)]) -> EngineConfig {
    EngineConfig {
        max_concurrency: max,
        pools: pools.iter().map(|(n, s)| (n.to_string(), *s)).collect(),
        ..EngineConfig::default()
    }
}

pub fn actor() -> Arc<str> {
    Arc::from("uid 1000 via ax")
}

impl Sim {
    pub fn new(cfg: EngineConfig) -> Sim {
        Sim {
            engine: Engine::new(cfg, 7),
            now: 1_700_000_000_000,
            effects: Vec::new(),
            last: None,
            hold_commits: false,
            uncommitted: Vec::new(),
            wall_offset: 0,
        }
    }

    pub fn input(&mut self, input: Input) -> Result<Reply, EngineError> {
        let step = self.engine.handle(self.now, input);
        self.last = Some(step.reply.clone());
        self.absorb(step.effects);
        step.reply
    }

    /// Keeps a step's effects and acknowledges the commit of the DAG runs
    /// it created by trigger (unless `hold_commits`).
    pub fn absorb(&mut self, effects: Vec<Effect>) {
        for e in &effects {
            if let Effect::Triggered { dag_run } = e {
                self.uncommitted.push(*dag_run);
            }
        }
        self.effects.extend(effects);
        if !self.hold_commits && !self.uncommitted.is_empty() {
            self.commit_triggers();
        }
    }

    /// The steps that created the waiting triggered DAG runs are committed.
    pub fn commit_triggers(&mut self) {
        let dag_runs = std::mem::take(&mut self.uncommitted);
        let step = self
            .engine
            .handle(self.now, Input::TriggerDurable { dag_runs });
        self.absorb(step.effects);
    }

    pub fn submit(&mut self, dag: Arc<DagSpec>) -> Vec<RunId> {
        self.submit_with(dag, None, vec![])
    }

    pub fn submit_with(
        &mut self,
        dag: Arc<DagSpec>,
        unique: Option<Unique>,
        after: Vec<RunId>,
    ) -> Vec<RunId> {
        match self.input(Input::Submit(Submit {
            dag,
            trigger: "test".into(),
            actor: actor(),
            unique,
            after,
        })) {
            Ok(Reply::Submitted { runs, .. }) => runs,
            other => panic!("submit failed: {other:?}"),
        }
    }

    /// Spawn orders issued since the last call, in order.
    pub fn take_spawns(&mut self) -> Vec<SpawnOrder> {
        let mut out = Vec::new();
        self.effects.retain(|e| match e {
            Effect::Spawn(o) => {
                out.push(o.clone());
                false
            }
            _ => true,
        });
        out
    }

    /// The runs of the spawn orders issued since the last call, in order.
    pub fn take_spawned_runs(&mut self) -> Vec<RunId> {
        self.take_spawns().iter().map(|s| s.run).collect()
    }

    pub fn take_kills(&mut self) -> Vec<(RunId, KillReason)> {
        let mut out = Vec::new();
        self.effects.retain(|e| match e {
            Effect::Kill { run, reason, .. } => {
                out.push((*run, *reason));
                false
            }
            _ => true,
        });
        out
    }

    pub fn events(&self) -> Vec<Event> {
        self.effects
            .iter()
            .filter_map(|e| match e {
                Effect::Event(ev) => Some(ev.clone()),
                _ => None,
            })
            .collect()
    }

    pub fn exit(&mut self, run: RunId, code: i32) {
        let attempt = self.engine.run(run).unwrap().attempts.len() as u32;
        self.input(Input::Exited {
            run,
            attempt,
            code: Some(code),
            signal: None,
        })
        .unwrap();
    }

    /// A killed process dies of SIGTERM.
    pub fn die(&mut self, run: RunId) {
        let attempt = self.engine.run(run).unwrap().attempts.len() as u32;
        self.input(Input::Exited {
            run,
            attempt,
            code: None,
            signal: Some(15),
        })
        .unwrap();
    }

    /// Steps the wall clock by `ms` (negative: back) and tells the engine,
    /// as the daemon does when it sees the wall clock move; the engine's
    /// clock (`now`) does not move.
    pub fn step_wall(&mut self, ms: Millis) {
        self.wall_offset += ms;
        let wall = self.now + self.wall_offset;
        self.input(Input::WallClock { wall }).unwrap();
    }

    /// The wall clock now.
    pub fn wall(&self) -> Millis {
        self.now + self.wall_offset
    }

    /// Advances the virtual clock to `now + ms`, ticking at every deadline
    /// the engine asks for on the way, as the daemon's loop does.
    pub fn advance(&mut self, ms: Millis) {
        let target = self.now + ms;
        while let Some(at) = self.engine.next_wakeup() {
            if at > target {
                break;
            }
            self.now = self.now.max(at);
            self.input(Input::Tick).unwrap();
        }
        self.now = target;
        self.input(Input::Tick).unwrap();
    }

    pub fn state(&self, run: RunId) -> RunState {
        self.engine.run(run).unwrap().state
    }

    pub fn why(&self, run: RunId) -> String {
        self.engine.why(run, self.now).unwrap_or_default()
    }
}

/// An active DAG run of `spec` as the store reads it back: one stored run
/// per job in order, given as (id, state, attempts), created and made
/// ready at `created_at`. Callers set the other stored fields they test.
pub fn stored_dag_run(
    id: DagRunId,
    spec: Arc<DagSpec>,
    created_at: Millis,
    runs: Vec<(RunId, RunState, Vec<Attempt>)>,
) -> RestoredDagRun {
    let dag: Arc<str> = Arc::from(spec.name.as_str());
    let runs = runs
        .into_iter()
        .enumerate()
        .map(|(i, (run, state, attempts))| {
            let mut r = Run::waiting(
                run,
                id,
                dag.clone(),
                spec.clone(),
                i as u32,
                created_at,
                vec![],
            );
            r.state = state;
            r.attempts = attempts;
            r.ready_at = Some(created_at);
            r.reason = "stored".into();
            r
        })
        .collect();
    RestoredDagRun {
        id,
        dag,
        spec,
        state: DagRunState::Active,
        created_at,
        trigger: "test".into(),
        unique_key: None,
        runs,
    }
}
