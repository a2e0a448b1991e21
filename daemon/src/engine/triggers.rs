//! DAG triggers inside the engine (SPEC §4.8, §2 `after`): cron slots with
//! catch-up and overlap policies, and DAG-to-DAG `after` triggers.
//!
//! Cron deadlines are engine timers like any other, so `next_wakeup()`
//! covers them and the daemon never polls. Every fired slot advances the
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
pub const CATCHUP_CAP: usize = 100;

pub(super) struct DagDef {
    pub spec: Arc<DagSpec>,
    pub zone: chrono_tz::Tz,
    pub schedule: Option<Schedule>,
    /// The last slot fired (or skipped on purpose).
    pub watermark: Millis,
    pub next_fire: Option<Millis>,
    pub key: u32,
    /// Slots waiting for the active run to end (`overlap = "queue"`).
    pub queued: VecDeque<Millis>,
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
        let watermark = watermark
            .or(previous.as_ref().map(|p| p.watermark))
            .unwrap_or(now);
        let queued = previous.map(|p| p.queued).unwrap_or_default();
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
                next_fire: None,
                key,
                queued,
            },
        );
        if same_timing {
            self.arm_cron(&name, watermark.max(now));
        } else {
            // A new or changed schedule: catch up what the store says was
            // missed, then arm the next slot.
            self.catch_up(now, &name);
        }
    }

    pub(super) fn undefine_dag(&mut self, dag: &str) {
        if let Some(def) = self.dags.remove(dag)
            && let Some(old) = self.dag_timers.remove(&def.key)
        {
            self.timers.remove(&(old, Timer::Cron(def.key)));
        }
    }

    /// Arms the DAG's timer for its first slot after `after`.
    fn arm_cron(&mut self, dag: &str, after: Millis) {
        let Some(def) = self.dags.get_mut(dag) else {
            return;
        };
        if let Some(old) = self.dag_timers.remove(&def.key) {
            self.timers.remove(&(old, Timer::Cron(def.key)));
        }
        def.next_fire = None;
        if !def.spec.enabled || self.paused.contains(dag) {
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
            self.dag_timers.insert(def.key, at);
            self.timers.insert((at, Timer::Cron(def.key)));
        }
    }

    /// The DAG's timer fired (or it was resumed / defined / restored):
    /// applies the catch-up policy to every slot in (watermark, now].
    pub(super) fn catch_up(&mut self, now: Millis, dag: &str) {
        let Some(def) = self.dags.get(dag) else {
            return;
        };
        if !def.spec.enabled || self.paused.contains(dag) {
            return;
        }
        let Some(schedule) = def.schedule.clone() else {
            return;
        };
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
            if at > now {
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
            let on_time = now - latest <= 60_000;
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
            for slot in fire {
                self.fire_slot(now, dag, slot);
            }
            if let Some(def) = self.dags.get_mut(dag) {
                def.watermark = latest;
            }
            self.effects.push(Effect::CronMark {
                dag: dag.to_string(),
                slot: latest,
            });
        }
        let after = self
            .dags
            .get(dag)
            .map(|d| d.watermark.max(now))
            .unwrap_or(now);
        self.arm_cron(dag, after);
    }

    /// One cron slot, subject to the DAG's overlap policy.
    fn fire_slot(&mut self, now: Millis, dag: &str, slot: Millis) {
        let Some(def) = self.dags.get(dag) else {
            return;
        };
        let spec = def.spec.clone();
        let label = slot_label(slot);
        let active: Vec<DagRunId> = self
            .active_dag_runs
            .get(dag)
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default();
        let actor = self.cron_actor.clone();
        if !active.is_empty() {
            match spec.overlap {
                Overlap::Allow => {}
                Overlap::Skip => {
                    self.dag_event(now, active[0], format!("cron slot {label} skipped: DAG run {} is still active (overlap = skip)", active[0]), &actor);
                    return;
                }
                Overlap::Queue => {
                    let def = self.dags.get_mut(dag).expect("exists");
                    if def.queued.len() < CATCHUP_CAP {
                        def.queued.push_back(slot);
                        self.dag_event(
                            now,
                            active[0],
                            format!(
                                "cron slot {label} queued behind DAG run {} (overlap = queue)",
                                active[0]
                            ),
                            &actor,
                        );
                    } else {
                        self.dag_event(
                            now,
                            active[0],
                            format!(
                                "cron slot {label} dropped: {CATCHUP_CAP} slots already queued"
                            ),
                            &actor,
                        );
                    }
                    return;
                }
                Overlap::Replace => {
                    for dr in active {
                        self.dag_event(
                            now,
                            dr,
                            format!(
                                "DAG run {dr} replaced by cron slot {label} (overlap = replace)"
                            ),
                            &actor,
                        );
                        let _ = self.apply(
                            now,
                            Input::CancelDagRun {
                                dag_run: dr,
                                actor: actor.clone(),
                            },
                        );
                    }
                }
            }
        }
        self.start_triggered(
            now,
            spec,
            format!("cron slot {label}"),
            Some(format!("{dag}@{label}")),
        );
    }

    fn start_triggered(
        &mut self,
        now: Millis,
        spec: Arc<DagSpec>,
        trigger: String,
        unique: Option<String>,
    ) {
        let actor = self.cron_actor.clone();
        let submit = Submit {
            dag: spec,
            trigger,
            actor,
            unique: unique.map(|key| Unique {
                key,
                within: None,
                stored: None,
            }),
            after: Vec::new(),
        };
        if let Err(e) = self.submit(now, submit) {
            let actor = self.cron_actor.clone();
            self.dag_event(now, DagRunId(0), format!("trigger failed: {e}"), &actor);
        }
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
        let idle = self.active_dag_runs.get(dag).is_none_or(|s| s.is_empty());
        if idle
            && let Some(def) = self.dags.get_mut(dag)
            && let Some(slot) = def.queued.pop_front()
        {
            let spec = def.spec.clone();
            let label = slot_label(slot);
            self.start_triggered(
                now,
                spec,
                format!("cron slot {label} (queued)"),
                Some(format!("{dag}@{label}")),
            );
        }
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
            let name = spec.name.clone();
            let active = self
                .active_dag_runs
                .get(name.as_str())
                .is_some_and(|s| !s.is_empty());
            if active && spec.overlap == Overlap::Skip {
                let actor = self.cron_actor.clone();
                self.dag_event(
                    now,
                    dag_run,
                    format!("after-trigger of {name} skipped: it is still active (overlap = skip)"),
                    &actor,
                );
                continue;
            }
            self.start_triggered(now, spec, format!("after {dag} (DAG run {dag_run})"), None);
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
        let failed: Vec<String> = dr
            .runs
            .iter()
            .filter_map(|r| self.runs.get(r))
            .filter(|r| matches!(r.state, RunState::Failed | RunState::TimedOut))
            .map(|r| r.job().id.clone())
            .collect();
        let mut job = ax_shared::JobSpec::new(which, ax_shared::Exec::Shell(command));
        job.env.insert("AX_DAG".into(), dag.to_string());
        job.env.insert("AX_DAG_RUN".into(), dag_run.0.to_string());
        job.env
            .insert("AX_STATE".into(), format!("{state:?}").to_lowercase());
        job.env.insert("AX_FAILED_JOBS".into(), failed.join(","));
        job.timeout = ax_shared::Timeout::After(std::time::Duration::from_secs(300));
        if !self.pools.contains_key(&job.pool) {
            return;
        }
        let spec = Arc::new(DagSpec::adhoc(format!("{dag}:{which}"), vec![job]));
        self.start_triggered(
            now,
            spec,
            format!("{which} hook of DAG run {dag_run}"),
            None,
        );
    }

    /// Next fire time of a DAG, if scheduled and armed.
    pub fn next_fire(&self, dag: &str) -> Option<Millis> {
        self.dags.get(dag).and_then(|d| d.next_fire)
    }

    /// Last fired slot of a DAG (its watermark).
    pub fn watermark(&self, dag: &str) -> Option<Millis> {
        self.dags.get(dag).map(|d| d.watermark)
    }

    pub(super) fn dag_name_of_key(&self, key: u32) -> Option<String> {
        self.dag_names.get(key as usize).cloned()
    }
}
