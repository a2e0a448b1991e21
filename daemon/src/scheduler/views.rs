//! The API's views of the daemon, runs, DAGs and DAG runs. Runs the engine
//! holds are shown from the engine (live `why`, effective priority, and the
//! state this very step has reached); others from the store.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use ax_protocol::api::{
    AttemptView, ClusterView, DagRunJob, DagRunView, DagRunViewState, DagView, EventView,
    JobsFolderView, MetricsText, PoolView, RunView, StatusView,
};
use ax_protocol::{Changed, Notification, RpcError, codes};
use ax_shared::time::Timestamp;
use ax_shared::{DagSpec, RunState};

use super::Scheduler;
use super::handlers::store_err;
use crate::jobs_folder::scan::DagEntry;
use crate::metrics::{DagStat, PoolStat, Snapshot};
use crate::store::{LastDagRun, RunQuery};
use ax_engine::{DagRunId, Millis, RunId};

fn dag_run_state(s: ax_engine::DagRunState) -> DagRunViewState {
    match s {
        ax_engine::DagRunState::Active => DagRunViewState::Active,
        ax_engine::DagRunState::Success => DagRunViewState::Success,
        ax_engine::DagRunState::Failed => DagRunViewState::Failed,
        ax_engine::DagRunState::Cancelled => DagRunViewState::Cancelled,
    }
}

impl Scheduler {
    /// Events another node committed, announced to this node's
    /// subscribers as its own are, with this node's status.
    pub(super) fn announce_remote(&self, now: Millis, events: Vec<EventView>) {
        if self.notify.receiver_count() == 0 {
            return;
        }
        let note = Notification::Changed(Changed {
            events,
            progress: Vec::new(),
            status: Box::new(self.status(now)),
        });
        let _ = self.notify.send(Arc::from(note.to_line()));
    }

    /// `status`: the counts and the config in force. Notifications carry
    /// the counts only (the config changes with a reload, not per step).
    pub(super) fn status_with_config(&self, now: Millis) -> StatusView {
        StatusView {
            config: Some(Box::new(self.cfg.view(self.config_path.as_deref()))),
            ..self.status(now)
        }
    }

    /// `metrics`: the exposition, gauges from the state held now.
    pub(super) fn metrics_text(&self, now: Millis) -> MetricsText {
        let queued: HashMap<String, u32> = self.engine.pool_queued().into_iter().collect();
        let snapshot = Snapshot {
            runs_by_state: self.run_counts().collect(),
            pools: self
                .engine
                .pool_usage()
                .into_iter()
                .map(|(name, slots, running)| PoolStat {
                    queued: queued.get(&name).copied().unwrap_or(0),
                    name,
                    slots,
                    running,
                })
                .collect(),
            burst_in_use: self.engine.burst_in_use(),
            burst_extra: self.cfg.burst_extra,
            retry_tokens: self.engine.retry_tokens(now),
            dags: self
                .registry
                .names()
                .into_iter()
                .map(|name| DagStat {
                    next_fire: self.engine.next_fire(&name),
                    paused: self.engine.is_paused(&name),
                    name,
                })
                .collect(),
            job_file_errors: self.registry.file_errors() as u64,
            jobs_folder_errors: self.registry.folder_errors() as u64,
            store_faulted: self.store_fault().is_some(),
            store_write_wait: self.fault.write_wait().as_secs_f64(),
        };
        MetricsText {
            text: self.metrics.render(&snapshot),
        }
    }

    /// Runs per state over the whole store: held by the engine, evicted
    /// this life, or only stored, less what the pruner deleted.
    fn run_counts(&self) -> impl Iterator<Item = (RunState, u64)> + '_ {
        RunState::ALL.into_iter().map(|s| {
            let n = self.engine.count(s)
                + self.engine.evicted_count(s)
                + self.stored_terminal.get(&s).copied().unwrap_or(0);
            (
                s,
                n.saturating_sub(self.pruned.get(&s).copied().unwrap_or(0)),
            )
        })
    }

    pub(super) fn status(&self, now: Millis) -> StatusView {
        let queued: HashMap<String, u32> = self.engine.pool_queued().into_iter().collect();
        let runs: BTreeMap<String, u64> = self
            .run_counts()
            .map(|(s, n)| (s.as_str().into(), n))
            .collect();
        StatusView {
            version: env!("CARGO_PKG_VERSION").into(),
            uptime_s: self.started.elapsed().as_secs(),
            pools: self
                .engine
                .pool_usage()
                .into_iter()
                .map(|(name, slots, running)| PoolView {
                    queued: Some(queued.get(&name).copied().unwrap_or(0)),
                    cluster_running: self.nodes.as_ref().and_then(|n| n.pool_running(&name)),
                    name,
                    slots,
                    running,
                })
                .collect(),
            max_concurrency: self.cfg.max_concurrency,
            burst_in_use: self.engine.burst_in_use(),
            burst_extra: self.cfg.burst_extra,
            runs,
            failed_last_hour: self.metrics.failed_last_hour(now),
            errors: self.registry.errors(),
            jobs_folder: JobsFolderView {
                scans: self.metrics.scans(),
                scanning: self.metrics.shared.jobs_scanning.get() != 0,
            },
            store_error: self.store_fault(),
            store_bytes: self.retention.sizes.store_bytes(),
            log_bytes: self.retention.sizes.log_bytes(),
            config: None,
            cluster: self
                .nodes
                .as_ref()
                .and_then(|n| Some((n.view()?, n.runs())))
                .map(|(nodes, runs)| Box::new(ClusterView { nodes, runs })),
        }
    }

    /// A run as the API shows it: `v` (from the store) unless the engine
    /// holds the run.
    pub(super) fn live(&self, v: RunView, now: Millis) -> RunView {
        let Some(r) = self.engine.run(RunId(v.id)) else {
            return v;
        };
        let t = |ms: Option<Millis>| ms.map(Timestamp::from_millis);
        RunView {
            id: r.id.0,
            dag: r.dag.to_string(),
            job: r.job().id.clone(),
            dag_run: r.dag_run.0,
            state: r.state,
            priority: r.priority(),
            effective_priority: self
                .engine
                .effective_priority(r.id, now)
                .unwrap_or(r.priority()),
            pool: r.pool().into(),
            attempts: r
                .attempts
                .iter()
                .map(|a| AttemptView {
                    n: a.n,
                    started_at: Some(Timestamp::from_millis(a.started_at)),
                    finished_at: t(a.finished_at),
                    outcome: a.outcome,
                    exit_code: a.exit_code,
                    signal: a.signal,
                    node: a.node.clone(),
                    log_lost: a.log_lost,
                })
                .collect(),
            retries: r.job().retries,
            created_at: Some(Timestamp::from_millis(r.created_at)),
            ready_at: t(r.ready_at),
            started_at: t(r.started_at),
            finished_at: t(r.finished_at),
            next_at: t(r.next_at),
            reason: Some(r.reason.clone()),
            why: self.engine.why(r.id, now),
            message: r.message.clone(),
            progress: r.progress,
            events: None,
            user: Some(job_user(r.job())),
        }
    }

    /// When each DAG's active DAG runs started: the newest per DAG.
    pub(super) fn active_since(&self) -> HashMap<Arc<str>, Millis> {
        let mut out: HashMap<Arc<str>, Millis> = HashMap::new();
        for dr in self
            .engine
            .dag_runs()
            .filter(|d| d.state == ax_engine::DagRunState::Active)
        {
            let t = out.entry(dr.dag.clone()).or_insert(dr.created_at);
            *t = (*t).max(dr.created_at);
        }
        out
    }

    /// `last`: each DAG's newest DAG run, as the store has it (any node's,
    /// in a cluster); `active`: from `active_since`.
    pub(super) fn dag_view(
        &self,
        now: Millis,
        name: &str,
        entry: &DagEntry,
        last: &HashMap<String, LastDagRun>,
        active: &HashMap<Arc<str>, Millis>,
        versions: Option<&crate::cluster::nodes::Versions>,
    ) -> DagView {
        let last = last.get(name);
        let last_run_state = last.map(|l| dag_run_state(l.state));
        // An active DAG run shows when it started; an ended one when it
        // ended. One this engine holds is newer than what the store has.
        let last_run_at = match last_run_state {
            Some(DagRunViewState::Active) => active.get(name).copied().or(last.map(|l| l.at)),
            Some(_) => last.map(|l| l.at),
            None => None,
        };
        let spec = entry.spec.as_deref();
        // The zone the schedule is planned in, `local` resolved to its
        // name as axd resolves it.
        let tz = spec
            .and_then(|s| s.timezone.clone())
            .unwrap_or_else(|| self.cfg.timezone.clone());
        let tz = ax_shared::cron::parse_zone(&tz).map_or(tz, |z| z.name().to_string());
        DagView {
            name: name.into(),
            file: entry.file.display().to_string(),
            jobs: spec
                .map(|s| s.jobs.iter().map(|j| j.id.clone()).collect())
                .unwrap_or_default(),
            schedule: spec.and_then(|s| s.schedule.clone()),
            timezone: spec.map(|_| tz),
            next_fire: self.engine.next_slot(name, now).map(Timestamp::from_millis),
            jitter: spec
                .and_then(|s| s.jitter)
                .map(ax_shared::duration::format_duration),
            planned_start: self.engine.planned_start(name).map(Timestamp::from_millis),
            paused: self.engine.is_paused(name),
            last_run_state,
            last_run_at: last_run_at.map(Timestamp::from_millis),
            error: entry.error.clone(),
            deps: spec
                .map(|s| {
                    s.jobs
                        .iter()
                        .map(|j| (j.id.clone(), j.deps.clone()))
                        .collect()
                })
                .unwrap_or_default(),
            versions: versions.map(|v| v.of(name, entry.version.as_deref())),
        }
    }

    /// A DAG run with its jobs' deps and states (for drawing it).
    pub(super) fn dag_run_view(&mut self, now: Millis, id: u64) -> Result<DagRunView, RpcError> {
        let (spec, state, runs): (Arc<DagSpec>, DagRunViewState, Vec<RunView>) =
            match self.engine.dag_run(DagRunId(id)) {
                Some(dr) => {
                    let views = dr
                        .runs
                        .iter()
                        .map(|r| {
                            let stub = RunView {
                                id: r.0,
                                ..RunView::default()
                            };
                            self.live(stub, now)
                        })
                        .collect();
                    (dr.spec.clone(), dag_run_state(dr.state), views)
                }
                None => {
                    let spec =
                        self.store
                            .dag_run_spec(id)
                            .map_err(store_err)?
                            .ok_or_else(|| {
                                RpcError::new(codes::NOT_FOUND, format!("DAG run {id} not found"))
                            })?;
                    let q = RunQuery {
                        dag_run: Some(id),
                        limit: 10_000,
                        ..RunQuery::default()
                    };
                    let views = self.store.list_runs(&q).map_err(store_err)?;
                    (spec, DagRunViewState::Finished, views)
                }
            };
        let jobs = spec
            .jobs
            .iter()
            .map(|j| {
                let run = runs.iter().find(|r| r.job == j.id);
                DagRunJob {
                    id: j.id.clone(),
                    deps: j.deps.clone(),
                    run: run.map(|r| r.id),
                    state: run.map(|r| r.state),
                }
            })
            .collect();
        Ok(DagRunView {
            id,
            dag: spec.name.clone(),
            state,
            jobs,
        })
    }
}

/// Who a job runs as: its `user`, else axd's own user.
pub(super) fn job_user(job: &ax_shared::JobSpec) -> String {
    job.user
        .clone()
        .unwrap_or_else(|| crate::accounts::user_name(nix::unistd::getuid().as_raw()))
}
