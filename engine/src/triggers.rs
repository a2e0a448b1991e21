//! DAG triggers inside the engine (docs/job-files.md, "Catch-up and overlap"
//! and the `after` field of "DAG fields"): cron slots with catch-up and
//! overlap policies, and DAG-to-DAG `after` triggers.
//!
//! Cron deadlines are engine timers like any other, so `next_wakeup()`
//! covers them and the daemon never polls. Slots and watermarks are
//! wall-clock instants; a slot's timer sits on the engine's clock where the
//! wall clock is expected to reach the slot, and moves when the wall clock
//! is stepped (`set_wall`). Every fired slot advances the
//! DAG's watermark, emitted as `Effect::CronMark` and committed in the same
//! transaction as the DAG run it created: after a restart, catch-up starts
//! strictly after the watermark, so a slot fires at most once.

use std::collections::VecDeque;
use std::sync::Arc;

use ax_shared::cron::Schedule;
use ax_shared::{Catchup, DagSpec, Overlap};
use chrono::{DateTime, Utc};

use super::*;

/// Most slots `catchup = "all"` (or a queue) will run.
pub(crate) const CATCHUP_CAP: usize = 100;

pub(super) struct DagDef {
    pub spec: Arc<DagSpec>,
    pub zone: chrono_tz::Tz,
    pub schedule: Option<Schedule>,
    /// The last slot fired (or skipped on purpose).
    pub watermark: Millis,
    /// `@reboot` only: the boots it fired in or was first defined in, on
    /// any node (a cluster's leaders each have their machine's boot).
    pub boots_seen: Vec<Arc<str>>,
    pub next_fire: Option<Millis>,
    pub key: u32,
    /// Triggers waiting for the active run to end (`overlap = "queue"`,
    /// and missed slots caught up one at a time), oldest first.
    pub queued: VecDeque<Trigger>,
}

/// What starts a run of a defined DAG, now or once its active run ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    /// A cron slot, by its time.
    Slot(Millis),
    /// A DAG run of `dag`, which this DAG runs `after`, succeeded.
    After { dag: String, dag_run: DagRunId },
    /// `ax trigger` by `actor`.
    Manual { actor: String },
    /// `@reboot`: the machine booted as `boot` (its boot id).
    Boot { boot: String },
}

/// What the store remembers of each DAG's triggers, by DAG name: the last
/// cron slot fired, and for `@reboot` DAGs the boot last seen.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TriggerMarks {
    pub slots: HashMap<String, Millis>,
    pub boots: HashMap<String, Vec<Arc<str>>>,
}

/// What a trigger did about the DAG's overlap policy.
#[derive(Clone, Debug, PartialEq)]
pub enum Fired {
    /// A DAG run was created (after cancelling `replaced`, for
    /// `overlap = "replace"`; empty otherwise).
    Started {
        reply: Reply,
        replaced: Vec<DagRunId>,
    },
    /// The trigger waits behind the active DAG run (`overlap = "queue"`).
    Queued { behind: DagRunId },
    /// Nothing was started: a DAG run is active (`overlap = "skip"`).
    Skipped { active: DagRunId },
    /// The DAG could not start a run; an event says why.
    Failed(EngineError),
}

impl Trigger {
    /// How the trigger reads in events and in the DAG run's `trigger`.
    fn describe(&self) -> String {
        match self {
            Trigger::Slot(slot) => format!("cron slot {}", slot_label(*slot)),
            Trigger::After { dag, dag_run } => format!("after {dag} (DAG run {dag_run})"),
            Trigger::Manual { actor } => format!("manual trigger by {actor}"),
            Trigger::Boot { boot } => format!("boot {boot}"),
        }
    }

    /// Who acts for the trigger in events and on the DAG run: the schedule
    /// (`cron`, also for `@reboot`), the DAG it runs after (`after etl`),
    /// or who asked.
    fn actor(&self, cron_actor: &Arc<str>) -> Arc<str> {
        match self {
            Trigger::Manual { actor } => Arc::from(actor.as_str()),
            Trigger::After { dag, .. } => Arc::from(format!("after {dag}")),
            Trigger::Slot(_) | Trigger::Boot { .. } => cron_actor.clone(),
        }
    }

    /// A slot's unique key `<dag>@<slot>`: one DAG run per slot, so a slot
    /// fires at most once (docs/job-files.md, "Catch-up and overlap").
    fn unique_key(&self, dag: &str) -> Option<String> {
        match self {
            Trigger::Slot(slot) => Some(format!("{dag}@{}", slot_label(*slot))),
            Trigger::Boot { boot } => Some(format!("{dag}@boot:{boot}")),
            Trigger::After { .. } | Trigger::Manual { .. } => None,
        }
    }
}

fn slot_label(ms: Millis) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

impl Engine {
    /// Installs or replaces a DAG definition. `watermark` is the last slot
    /// fired in an earlier life (from the store); without one, the DAG's
    /// schedule starts now.
    pub(super) fn define_dag(
        &mut self,
        now: Millis,
        spec: Arc<DagSpec>,
        zone: chrono_tz::Tz,
        watermark: Option<Millis>,
        boots_seen: Vec<Arc<str>>,
    ) {
        let schedule = spec
            .schedule
            .as_deref()
            .and_then(|s| Schedule::parse(s).ok());
        let name = spec.name.clone();
        let key = match self.dag_keys.get(&name) {
            Some(k) => *k,
            None => {
                let k = self.dag_names.len() as u32;
                self.dag_names.push(name.clone());
                self.dag_keys.insert(name.clone(), k);
                k
            }
        };
        let previous = self.dags.remove(&name);
        let same_timing = previous.as_ref().is_some_and(|p| {
            p.spec.schedule == spec.schedule && p.zone == zone && p.spec.enabled == spec.enabled
        });
        let wall = self.wall(now);
        let watermark = watermark
            .or(previous.as_ref().map(|p| p.watermark))
            .unwrap_or(wall);
        let mut boots_seen = boots_seen;
        for boot in previous.iter().flat_map(|p| &p.boots_seen) {
            if !boots_seen.contains(boot) {
                boots_seen.push(boot.clone());
            }
        }
        let queued = previous
            .map(|p| p.queued)
            .or_else(|| self.stored_queues.remove(&name).map(VecDeque::from))
            .unwrap_or_default();
        if let Some(old) = self.dag_timers.remove(&key) {
            self.timers.remove(&(old, Timer::Cron(key)));
        }
        self.dags.insert(
            name.clone(),
            DagDef {
                spec,
                zone,
                schedule,
                watermark,
                boots_seen,
                next_fire: None,
                key,
                queued,
            },
        );
        if same_timing {
            self.arm_cron(&name, watermark.max(wall));
        } else {
            // A new or changed schedule: catch up what the store says was
            // missed, then arm the next slot.
            self.catch_up(now, &name);
        }
        // A queue restored from the store whose DAG has no active run left
        // (it ended in the life that queued them) starts now.
        self.start_queued(now, &name);
    }

    /// Queues of triggers committed in an earlier life, by DAG name; each
    /// is given back to its DAG when the jobs folder defines it.
    pub fn restore_trigger_queues(&mut self, queues: HashMap<String, Vec<Trigger>>) {
        self.stored_queues = queues;
    }

    /// The DAG's queued triggers, oldest first.
    pub fn trigger_queue(&self, dag: &str) -> Vec<Trigger> {
        self.dags
            .get(dag)
            .map(|d| d.queued.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Records the DAG's queue as it is now, for the store.
    fn queue_changed(&mut self, dag: &str) {
        let queue = self.trigger_queue(dag);
        self.effects.push(Effect::TriggerQueue {
            dag: dag.to_string(),
            queue,
        });
    }

    pub(super) fn undefine_dag(&mut self, dag: &str) {
        let Some(def) = self.dags.remove(dag) else {
            return;
        };
        if let Some(old) = self.dag_timers.remove(&def.key) {
            self.timers.remove(&(old, Timer::Cron(def.key)));
        }
        if !def.queued.is_empty() {
            self.effects.push(Effect::TriggerQueue {
                dag: dag.to_string(),
                queue: Vec::new(),
            });
        }
    }

    /// Forgets the DAG's definition and cancels its runs that have not
    /// started; running ones finish.
    pub(super) fn remove_dag(&mut self, now: Millis, dag: &str, actor: &Arc<str>) {
        self.undefine_dag(dag);
        let ids = self.unfinished_runs_of(dag);
        for id in ids {
            let r = &self.runs[&id];
            if matches!(
                r.state,
                RunState::Waiting | RunState::Ready | RunState::Delayed
            ) {
                self.end_unstarted(
                    now,
                    id,
                    RunState::Cancelled,
                    "definition removed".into(),
                    actor,
                );
            }
        }
    }

    /// The store committed these triggered DAG runs: their ready runs may
    /// queue.
    pub(super) fn trigger_durable(&mut self, dag_runs: &[DagRunId]) {
        for dag_run in dag_runs {
            // A DAG run may have ended and left memory meanwhile.
            let Some(dr) = self.dag_runs.get(dag_run) else {
                continue;
            };
            for id in dr.runs.clone() {
                let r = self.runs.get_mut(&id).expect("a DAG run's runs are held");
                if std::mem::take(&mut r.awaits_commit) && r.state == RunState::Ready {
                    self.queue_ready(id);
                }
            }
        }
    }

    /// Arms the DAG's timer for its first slot after `after` (wall time).
    fn arm_cron(&mut self, dag: &str, after: Millis) {
        let offset = self.wall_offset;
        let Some(def) = self.dags.get_mut(dag) else {
            return;
        };
        if let Some(old) = self.dag_timers.remove(&def.key) {
            self.timers.remove(&(old, Timer::Cron(def.key)));
        }
        def.next_fire = None;
        if !def.spec.enabled || self.paused.contains(dag) || !self.cron_leader {
            return;
        }
        let Some(schedule) = &def.schedule else {
            return;
        };
        let Some(from) = DateTime::<Utc>::from_timestamp_millis(after) else {
            return;
        };
        if let Some(next) = schedule.next_after(from, &def.zone) {
            let at = next.timestamp_millis();
            def.next_fire = Some(at);
            let due = at.saturating_sub(offset);
            self.dag_timers.insert(def.key, due);
            self.timers.insert((due, Timer::Cron(def.key)));
        }
    }

    /// The DAG's timer fired (or it was resumed / defined / restored, or
    /// the wall clock was stepped): applies the catch-up policy to every
    /// slot in (watermark, wall-clock now].
    pub(super) fn catch_up(&mut self, now: Millis, dag: &str) {
        let wall = self.wall(now);
        let Some(def) = self.dags.get(dag) else {
            return;
        };
        if !def.spec.enabled || self.paused.contains(dag) || !self.cron_leader {
            return;
        }
        let Some(schedule) = def.schedule.clone() else {
            return;
        };
        if schedule.is_at_boot() {
            self.fire_at_boot(now, dag);
            return;
        }
        let zone = def.zone;
        let mut slots = Vec::new();
        let mut cursor = def.watermark;
        // At most CATCHUP_CAP + 1 slots are looked at; older ones are
        // dropped (recorded below), so a long downtime costs nothing.
        let mut dropped = 0u64;
        while let Some(t) = DateTime::<Utc>::from_timestamp_millis(cursor)
            .and_then(|c| schedule.next_after(c, &zone))
        {
            let at = t.timestamp_millis();
            if at > wall {
                break;
            }
            slots.push(at);
            if slots.len() > CATCHUP_CAP {
                slots.remove(0);
                dropped += 1;
            }
            cursor = at;
            if dropped > 1_000_000 {
                break;
            }
        }
        let policy = def.spec.catchup;
        if let Some(&latest) = slots.last() {
            // A slot that is due right now is not "missed": it fires under
            // every policy. Older ones follow `catchup`.
            let on_time = wall - latest <= 60_000;
            let fire: Vec<Millis> = match policy {
                Catchup::All => slots.clone(),
                Catchup::Latest => vec![latest],
                Catchup::None if on_time => vec![latest],
                Catchup::None => Vec::new(),
            };
            let skipped = slots.len() - fire.len() + dropped as usize;
            if skipped > 0 {
                let actor = self.cron_actor.clone();
                self.dag_event(
                    now,
                    DagRunId(0),
                    format!("cron: {dag}: {skipped} missed slot(s) skipped (catchup = {policy:?})")
                        .to_lowercase(),
                    &actor,
                );
            }
            // Missed slots are never skipped or replaced by overlap: unless
            // overlap is allowed, they join the DAG's slot queue and run one
            // after another in slot order.
            let overlap = self.dags.get(dag).map(|d| d.spec.overlap);
            let (mut fired, mut skipped) = (0u32, skipped as u32);
            if fire.len() > 1 && overlap != Some(Overlap::Allow) {
                for slot in fire {
                    let why = "(catch-up runs missed slots one at a time)";
                    self.queue_trigger(now, dag, Trigger::Slot(slot), why);
                    fired += 1;
                }
                self.start_queued(now, dag);
            } else {
                for slot in fire {
                    // What happened is recorded as events; the metrics
                    // count it.
                    match self.fire(now, dag, Trigger::Slot(slot)) {
                        Fired::Started { .. } | Fired::Queued { .. } => fired += 1,
                        Fired::Skipped { .. } | Fired::Failed(_) => skipped += 1,
                    }
                }
            }
            if let Some(def) = self.dags.get_mut(dag) {
                def.watermark = latest;
            }
            self.effects.push(Effect::CronMark {
                dag: dag.to_string(),
                slot: latest,
                fired,
                skipped,
            });
        }
        let after = self
            .dags
            .get(dag)
            .map(|d| d.watermark.max(wall))
            .unwrap_or(wall);
        self.arm_cron(dag, after);
    }

    /// `ax trigger`: a manual trigger follows the DAG's overlap policy
    /// like any other, unless `force`, which starts a DAG run beside the
    /// active ones.
    pub(super) fn trigger_manual(
        &mut self,
        now: Millis,
        dag: &str,
        actor: &Arc<str>,
        force: bool,
    ) -> Result<Fired, EngineError> {
        if !self.dags.contains_key(dag) {
            return Err(EngineError::NotFound(format!("DAG {dag:?}")));
        }
        let trigger = Trigger::Manual {
            actor: actor.to_string(),
        };
        if force {
            return Ok(match self.start_trigger(now, dag, trigger, false) {
                Ok(reply) => Fired::Started {
                    reply,
                    replaced: Vec::new(),
                },
                Err(e) => Fired::Failed(e),
            });
        }
        Ok(self.fire(now, dag, trigger))
    }

    /// Starts a run of `dag` for `trigger`, subject to the DAG's overlap
    /// policy while a run of it is active.
    pub(super) fn fire(&mut self, now: Millis, dag: &str, trigger: Trigger) -> Fired {
        let Some(def) = self.dags.get(dag) else {
            return Fired::Failed(EngineError::NotFound(format!("DAG {dag:?}")));
        };
        let overlap = def.spec.overlap;
        let what = trigger.describe();
        let held: Vec<DagRunId> = self
            .active_dag_runs
            .get(dag)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default();
        // `replace` cancels what it counts, so it counts only what this
        // node holds (its DAG runs are never offered).
        let mut active = held;
        if overlap != Overlap::Replace {
            active.extend(self.active_elsewhere(dag));
        }
        let actor = trigger.actor(&self.cron_actor);
        let mut replaced = Vec::new();
        if let Some(&first) = active.first() {
            match overlap {
                Overlap::Allow => {}
                Overlap::Skip => {
                    self.dag_event(
                        now,
                        first,
                        format!("{what} skipped: DAG run {first} is still active (overlap = skip)"),
                        &actor,
                    );
                    return Fired::Skipped { active: first };
                }
                Overlap::Queue => {
                    let why = format!("behind DAG run {first} (overlap = queue)");
                    self.queue_trigger(now, dag, trigger, &why);
                    return Fired::Queued { behind: first };
                }
                Overlap::Replace => {
                    // The queue waits for the replacing run, not for the
                    // cancelled one.
                    self.replacing = Some(dag.to_string());
                    for dr in active {
                        self.dag_event(
                            now,
                            dr,
                            format!("DAG run {dr} replaced by {what} (overlap = replace)"),
                            &actor,
                        );
                        let _ = self.apply(
                            now,
                            Input::CancelDagRun {
                                dag_run: dr,
                                actor: actor.clone(),
                            },
                        );
                        replaced.push(dr);
                    }
                    self.replacing = None;
                }
            }
        }
        match self.start_trigger(now, dag, trigger, false) {
            Ok(reply) => Fired::Started { reply, replaced },
            Err(e) => Fired::Failed(e),
        }
    }

    /// Appends a trigger to the DAG's queue (at most CATCHUP_CAP wait),
    /// with an event saying why it waits.
    fn queue_trigger(&mut self, now: Millis, dag: &str, trigger: Trigger, why: &str) {
        let Some(def) = self.dags.get_mut(dag) else {
            return;
        };
        let what = trigger.describe();
        let trigger_actor = trigger.actor(&self.cron_actor);
        let reason = if def.queued.len() < CATCHUP_CAP {
            def.queued.push_back(trigger);
            self.queue_changed(dag);
            format!("{what} queued {why}")
        } else {
            format!("{what} dropped: {CATCHUP_CAP} triggers already queued")
        };
        let at = self
            .active_dag_runs
            .get(dag)
            .and_then(|s| s.first().copied())
            .or_else(|| self.active_elsewhere(dag).next())
            .unwrap_or(DagRunId(0));
        let actor = trigger_actor;
        self.dag_event(now, at, reason, &actor);
    }

    /// Starts the DAG's queued triggers while it has no active run: the
    /// first one that creates a DAG run stops the loop.
    pub(super) fn start_queued(&mut self, now: Millis, dag: &str) {
        while self.active_dag_runs.get(dag).is_none_or(|s| s.is_empty())
            && self.active_elsewhere(dag).next().is_none()
            && self.replacing.as_deref() != Some(dag)
            && let Some(def) = self.dags.get_mut(dag)
            && let Some(trigger) = def.queued.pop_front()
        {
            self.queue_changed(dag);
            // A failure is recorded as an event by `start_trigger`.
            let _ = self.start_trigger(now, dag, trigger, true);
        }
    }

    /// A DAG run of a defined DAG for `trigger`; a failure is also
    /// recorded as an event, since no one may be waiting for the answer.
    fn start_trigger(
        &mut self,
        now: Millis,
        dag: &str,
        trigger: Trigger,
        queued: bool,
    ) -> Result<Reply, EngineError> {
        let Some(def) = self.dags.get(dag) else {
            return Err(EngineError::NotFound(format!("DAG {dag:?}")));
        };
        let spec = def.spec.clone();
        let not_before = self.draw_planned_start(now, spec.jitter, &trigger);
        let what = trigger.describe();
        let text = if queued {
            format!("{what} (queued)")
        } else {
            what
        };
        let actor = trigger.actor(&self.cron_actor);
        let submit = Submit {
            dag: spec,
            trigger: text,
            actor: actor.clone(),
            unique: trigger.unique_key(dag).map(|key| Unique {
                key,
                within: None,
                stored: None,
            }),
            after: Vec::new(),
        };
        let created = self.create(now, submit, true, not_before);
        if let Err(e) = &created {
            self.dag_event(now, DagRunId(0), format!("trigger failed: {e}"), &actor);
        }
        created
    }

    /// When a DAG run created for `trigger` may start, under the DAG's
    /// `jitter`: its slot (for `@reboot`, now) plus a random delay in
    /// [0, jitter]; `None` when that is not in the future (no jitter, a
    /// manual or `after` trigger, a slot caught up late).
    fn draw_planned_start(
        &mut self,
        now: Millis,
        jitter: Option<std::time::Duration>,
        trigger: &Trigger,
    ) -> Option<Millis> {
        let jitter = Millis::try_from(jitter?.as_millis()).unwrap_or(Millis::MAX);
        let wall = self.wall(now);
        let base = match trigger {
            Trigger::Slot(slot) => *slot,
            Trigger::Boot { .. } => wall,
            Trigger::After { .. } | Trigger::Manual { .. } => return None,
        };
        let at = base.saturating_add(self.rng.random_range(0..=jitter));
        (at > wall).then_some(at)
    }

    /// A DAG run ended: start the next queued slot, and the DAGs that run
    /// `after` this one when it succeeded.
    pub(super) fn on_dag_run_finished(
        &mut self,
        now: Millis,
        dag: &str,
        dag_run: DagRunId,
        state: DagRunState,
    ) {
        self.run_hook(now, dag, dag_run, state);
        self.start_queued(now, dag);
        if state != DagRunState::Success {
            return;
        }
        let followers: Vec<Arc<DagSpec>> = self
            .dags
            .values()
            .filter(|d| {
                d.spec.enabled
                    && d.spec.after.iter().any(|a| a == dag)
                    && !self.paused.contains(&d.spec.name)
            })
            .map(|d| d.spec.clone())
            .collect();
        for spec in followers {
            let trigger = Trigger::After {
                dag: dag.to_string(),
                dag_run,
            };
            let _ = self.fire(now, &spec.name, trigger);
        }
    }

    /// `on_success` / `on_failure` of the finished DAG run's spec, as a DAG
    /// run of its own (`<dag>:on_failure`), so the hook's output and outcome
    /// are recorded like any run's. The hook sees the DAG run's result in
    /// `AX_DAG`, `AX_DAG_RUN`, `AX_STATE` and `AX_FAILED_JOBS`; its own
    /// failure is only recorded.
    fn run_hook(&mut self, now: Millis, dag: &str, dag_run: DagRunId, state: DagRunState) {
        let Some(dr) = self.dag_runs.get(&dag_run) else {
            return;
        };
        let (which, command) = match state {
            DagRunState::Success => ("on_success", dr.spec.on_success.clone()),
            DagRunState::Failed | DagRunState::Cancelled => {
                ("on_failure", dr.spec.on_failure.clone())
            }
            DagRunState::Active => return,
        };
        let Some(command) = command.filter(|c| !c.trim().is_empty()) else {
            return;
        };
        let (failed_jobs, failed_runs): (Vec<String>, Vec<String>) = dr
            .runs
            .iter()
            .filter_map(|r| self.runs.get(r))
            .filter(|r| matches!(r.state, RunState::Failed | RunState::TimedOut))
            .map(|r| (r.job().id.clone(), r.id.0.to_string()))
            .unzip();
        let mut job = ax_shared::JobSpec::new(which, ax_shared::Exec::Shell(command));
        job.env.insert("AX_DAG".into(), dag.to_string());
        job.env.insert("AX_DAG_RUN".into(), dag_run.0.to_string());
        job.env
            .insert("AX_STATE".into(), format!("{state:?}").to_lowercase());
        job.env
            .insert("AX_FAILED_JOBS".into(), failed_jobs.join(","));
        job.env
            .insert("AX_FAILED_RUNS".into(), failed_runs.join(","));
        job.timeout = ax_shared::Timeout::After(std::time::Duration::from_secs(300));
        // The hook runs as the DAG's jobs do when they all run as one user
        // (always so for a user's own DAG): a hook must never give a DAG's
        // author more than its jobs have. A system DAG whose jobs run as
        // several users runs its hook as axd's user, who wrote the file
        // (docs/users.md, "Who a job runs as").
        if let Some(first) = dr.spec.jobs.first()
            && dr
                .spec
                .jobs
                .iter()
                .all(|j| j.user == first.user && j.group == first.group)
        {
            job.user = first.user.clone();
            job.group = first.group.clone();
            job.umask = first.umask;
            job.shell = first.shell.clone();
        }
        if !self.pools.contains_key(&job.pool) {
            return;
        }
        let spec = Arc::new(DagSpec::adhoc(format!("{dag}:{which}"), vec![job]));
        // The hook acts, not the schedule: `ax events --actor cron` lists
        // what cron started, not what the DAG's end did.
        let actor: Arc<str> = Arc::from(format!("{which} hook"));
        let submit = Submit {
            dag: spec,
            trigger: format!("{which} hook of DAG run {dag_run}"),
            actor: actor.clone(),
            unique: None,
            after: Vec::new(),
        };
        match self.create(now, submit, true, None) {
            Ok(Reply::Submitted { dag_run: hook, .. }) => {
                if let Some(h) = self.dag_runs.get_mut(&hook) {
                    h.hook_of = Some(dag_run);
                }
            }
            Ok(_) => {}
            Err(e) => self.dag_event(now, DagRunId(0), format!("trigger failed: {e}"), &actor),
        }
    }

    /// When the earliest of the DAG's runs waiting out its `jitter` starts
    /// (wall time).
    pub fn planned_start(&self, dag: &str) -> Option<Millis> {
        self.active_by_dag
            .get(dag)?
            .iter()
            .filter_map(|id| self.runs.get(id))
            .filter(|r| r.delay == Some(Delay::Jitter))
            .filter_map(|r| r.next_at)
            .min()
    }

    /// Next fire time of a DAG, if scheduled and armed.
    pub fn next_fire(&self, dag: &str) -> Option<Millis> {
        self.dags.get(dag).and_then(|d| d.next_fire)
    }

    /// When the DAG's next slot fires: the armed time here, or, on a
    /// cluster's follower (which arms nothing), the slot after `now` the
    /// leader will fire.
    pub fn next_slot(&self, dag: &str, now: Millis) -> Option<Millis> {
        let def = self.dags.get(dag)?;
        if def.next_fire.is_some() || self.cron_leader {
            return def.next_fire;
        }
        if !def.spec.enabled || self.paused.contains(dag) {
            return None;
        }
        let from = DateTime::<Utc>::from_timestamp_millis(self.wall(now).max(def.watermark))?;
        let next = def.schedule.as_ref()?.next_after(from, &def.zone)?;
        Some(next.timestamp_millis())
    }

    /// Last fired slot of a DAG (its watermark).
    pub fn watermark(&self, dag: &str) -> Option<Millis> {
        self.dags.get(dag).map(|d| d.watermark)
    }

    pub(super) fn dag_name_of_key(&self, key: u32) -> Option<String> {
        self.dag_names.get(key as usize).cloned()
    }
}
