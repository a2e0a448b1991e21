//! Prometheus metrics (docs/operations.md, "Monitoring"), in the text
//! exposition format.
//!
//! Counters and histograms are fed from the effects of each scheduler step
//! (`observe`), and gauges are set from the state the scheduler already
//! holds when a scrape asks (`render`): a scrape never waits for the store
//! and never walks the runs. The store writer and the socket server update
//! their own metrics through the shared handles in `Shared`.

pub mod http;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use ax_shared::RunState;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use ax_engine::{DagRunState, Effect, Event, Millis};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabel {
    pool: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolStateLabel {
    pool: String,
    state: &'static str,
}

/// The `dag` label of every DAG that is not one of the jobs folder's.
pub const ADHOC_LABEL: &str = "(ad-hoc)";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DagLabel {
    dag: String,
}

/// A cron slot's fate: `fired` (it started or queued a DAG run) or
/// `skipped` (left out by `catchup`, or `overlap = "skip"`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CronSlotLabel {
    dag: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    dag: String,
    outcome: &'static str,
}

/// Why a mail was not sent (`crate::notifier::FailureKind`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MailFailureLabel {
    reason: &'static str,
}

type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

fn seconds_histogram() -> Histogram {
    // 1 ms … ~9 h in factors of 3.
    Histogram::new(exponential_buckets(0.001, 3.0, 17))
}

/// Metrics updated outside the scheduler thread (store writer, socket
/// server). Cloning shares them.
#[derive(Clone)]
pub struct Shared {
    pub store_commit_seconds: Histogram,
    pub store_write_errors: Counter,
    pub clients_connected: Gauge,
    pub subscribers_lagged: Counter,
    /// 1 while the scanner thread reads the jobs folder.
    pub jobs_scanning: Gauge,
    pub jobs_scan_seconds: Histogram,
}

impl Default for Shared {
    fn default() -> Shared {
        Shared {
            store_commit_seconds: Histogram::new(exponential_buckets(0.0001, 2.0, 16)),
            store_write_errors: Counter::default(),
            clients_connected: Gauge::default(),
            subscribers_lagged: Counter::default(),
            jobs_scanning: Gauge::default(),
            jobs_scan_seconds: seconds_histogram(),
        }
    }
}

/// What a scrape reads from the scheduler's state.
#[derive(Default)]
pub struct Snapshot {
    pub runs_by_state: Vec<(RunState, u64)>,
    pub pools: Vec<PoolStat>,
    pub burst_in_use: u32,
    pub burst_extra: u32,
    pub retry_tokens: f64,
    pub dags: Vec<DagStat>,
    pub job_file_errors: u64,
    /// Folders of the jobs folder its last scan could not read.
    pub jobs_folder_errors: u64,
    pub store_faulted: bool,
    /// How long the oldest store write under way has waited, in seconds.
    pub store_write_wait: f64,
}

pub struct PoolStat {
    pub name: String,
    pub slots: u32,
    pub running: u32,
    pub queued: u32,
}

pub struct DagStat {
    pub name: String,
    pub next_fire: Option<Millis>,
    pub paused: bool,
}

/// The last success and failure time of each DAG (ms), the figures a
/// "has not succeeded for a day" alert needs.
#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub struct DagHistory {
    pub last_success: Option<Millis>,
    pub last_failure: Option<Millis>,
}

pub struct Metrics {
    registry: Registry,
    runs: Family<StateLabel, Gauge>,
    pool_runs: Family<PoolStateLabel, Gauge>,
    pool_slots: Family<PoolLabel, Gauge>,
    burst_in_use: Gauge,
    burst_slots: Gauge,
    retry_tokens: FloatGauge,
    attempts_started: Family<PoolLabel, Counter>,
    attempt_outcomes: Family<OutcomeLabel, Counter>,
    queue_wait: Family<PoolLabel, Histogram>,
    run_time: Family<PoolLabel, Histogram>,
    dag_last_success: Family<DagLabel, FloatGauge>,
    dag_last_failure: Family<DagLabel, FloatGauge>,
    dag_next_fire: Family<DagLabel, FloatGauge>,
    dag_paused: Family<DagLabel, Gauge>,
    cron_slots: Family<CronSlotLabel, Counter>,
    job_file_errors: Gauge,
    jobs_folder_errors: Gauge,
    jobs_scans: Counter,
    jobs_scan_failures: Counter,
    store_faulted: Gauge,
    store_write_wait: FloatGauge,
    mails_sent: Counter,
    mail_failures: Family<MailFailureLabel, Counter>,
    dag_history: HashMap<Arc<str>, DagHistory>,
    /// When runs ended failed or timed out over the last hour, oldest
    /// first (for systemd's `STATUS=` and `ax status`).
    recent_failures: VecDeque<Millis>,
    pub shared: Shared,
}

/// The window of `Metrics::failed_last_hour`.
pub(crate) const FAILURE_WINDOW_MS: Millis = 3_600_000;

impl Metrics {
    /// `history` seeds the per-DAG success/failure times from the store,
    /// so a restart does not reset the dead man's switch.
    pub fn new(shared: Shared, history: HashMap<String, DagHistory>) -> Metrics {
        let mut registry = Registry::with_prefix("ax");
        let m = Metrics {
            runs: Family::default(),
            pool_runs: Family::default(),
            pool_slots: Family::default(),
            burst_in_use: Gauge::default(),
            burst_slots: Gauge::default(),
            retry_tokens: FloatGauge::default(),
            attempts_started: Family::default(),
            attempt_outcomes: Family::default(),
            queue_wait: Family::new_with_constructor(seconds_histogram),
            run_time: Family::new_with_constructor(seconds_histogram),
            dag_last_success: Family::default(),
            dag_last_failure: Family::default(),
            dag_next_fire: Family::default(),
            dag_paused: Family::default(),
            cron_slots: Family::default(),
            job_file_errors: Gauge::default(),
            jobs_folder_errors: Gauge::default(),
            jobs_scans: Counter::default(),
            jobs_scan_failures: Counter::default(),
            store_faulted: Gauge::default(),
            store_write_wait: FloatGauge::default(),
            mails_sent: Counter::default(),
            mail_failures: Family::default(),
            dag_history: history
                .into_iter()
                .map(|(k, v)| (Arc::from(k), v))
                .collect(),
            recent_failures: VecDeque::new(),
            shared,
            registry: Registry::default(),
        };
        // Registration order is the order of the exposition.
        m.register_slots(&mut registry);
        m.register_attempts(&mut registry);
        m.register_dags(&mut registry);
        m.register_jobs_folder(&mut registry);
        m.register_store(&mut registry);
        m.register_clients(&mut registry);
        m.register_mail(&mut registry);
        Metrics { registry, ..m }
    }

    /// Runs by state, and the slots of pools and burst with the retry budget.
    fn register_slots(&self, r: &mut Registry) {
        r.register("runs", "Runs by state", self.runs.clone());
        r.register(
            "pool_runs",
            "Runs per pool: running, and ready runs queued for a slot",
            self.pool_runs.clone(),
        );
        r.register("pool_slots", "Slots per pool", self.pool_slots.clone());
        r.register(
            "burst_slots_in_use",
            "Global burst slots in use (runs beyond max_concurrency)",
            self.burst_in_use.clone(),
        );
        r.register(
            "burst_slots",
            "Global burst slots available to urgent runs",
            self.burst_slots.clone(),
        );
        r.register(
            "retry_tokens",
            "Retry budget tokens left",
            self.retry_tokens.clone(),
        );
    }

    /// Attempts: started, ended, their wait for a slot and their duration.
    fn register_attempts(&self, r: &mut Registry) {
        r.register(
            "attempts_started",
            "Attempts started, by pool",
            self.attempts_started.clone(),
        );
        r.register(
            "attempt_outcomes",
            "Attempts ended, by DAG and outcome",
            self.attempt_outcomes.clone(),
        );
        r.register(
            "queue_wait_seconds",
            "Time from ready to started, by pool",
            self.queue_wait.clone(),
        );
        r.register(
            "attempt_duration_seconds",
            "Time from an attempt's start to its end, by pool",
            self.run_time.clone(),
        );
    }

    /// Per DAG: last success and failure, next cron slot, paused, cron slots passed.
    fn register_dags(&self, r: &mut Registry) {
        r.register(
            "dag_last_success_timestamp_seconds",
            "When a DAG run of this DAG last succeeded",
            self.dag_last_success.clone(),
        );
        r.register(
            "dag_last_failure_timestamp_seconds",
            "When a DAG run of this DAG last failed or was cancelled",
            self.dag_last_failure.clone(),
        );
        r.register(
            "dag_next_fire_timestamp_seconds",
            "The DAG's next cron slot",
            self.dag_next_fire.clone(),
        );
        r.register(
            "dag_paused",
            "1 while the DAG is paused",
            self.dag_paused.clone(),
        );
        r.register(
            "cron_slots",
            "Cron slots passed, by DAG: fired, or skipped (catchup, overlap = skip)",
            self.cron_slots.clone(),
        );
    }

    /// The jobs folder: files that fail to load and its scans.
    fn register_jobs_folder(&self, r: &mut Registry) {
        r.register(
            "job_file_errors",
            "Job files that fail to load",
            self.job_file_errors.clone(),
        );
        r.register(
            "jobs_folder_errors",
            "Folders of the jobs folder the last scan could not read (their DAGs stay as last loaded)",
            self.jobs_folder_errors.clone(),
        );
        r.register(
            "jobs_scans",
            "Scans of the jobs folder put in force",
            self.jobs_scans.clone(),
        );
        r.register(
            "jobs_scan_failures",
            "Scans of the jobs folder that could not read some folder",
            self.jobs_scan_failures.clone(),
        );
        r.register(
            "jobs_scanning",
            "1 while the jobs folder is being scanned",
            self.shared.jobs_scanning.clone(),
        );
        r.register(
            "jobs_scan_seconds",
            "Time to read, parse and validate the jobs folder",
            self.shared.jobs_scan_seconds.clone(),
        );
    }

    /// The store: faults, waiting writes, commits.
    fn register_store(&self, r: &mut Registry) {
        r.register(
            "store_faulted",
            "1 while the store refuses writes or a write waits longer than a heartbeat",
            self.store_faulted.clone(),
        );
        r.register(
            "store_write_wait_seconds",
            "How long the oldest store write under way (commit, cluster heartbeat) has waited",
            self.store_write_wait.clone(),
        );
        r.register(
            "store_commit_seconds",
            "Time to write one group commit",
            self.shared.store_commit_seconds.clone(),
        );
        r.register(
            "store_write_errors",
            "Store commits that failed",
            self.shared.store_write_errors.clone(),
        );
    }

    /// Socket clients and subscribers.
    fn register_clients(&self, r: &mut Registry) {
        r.register(
            "clients_connected",
            "Socket clients connected",
            self.shared.clients_connected.clone(),
        );
        r.register(
            "subscribers_lagged",
            "Subscribers dropped for not reading",
            self.shared.subscribers_lagged.clone(),
        );
    }

    /// Mail about DAG runs (`crate::notifier`).
    fn register_mail(&self, r: &mut Registry) {
        r.register(
            "mails_sent",
            "Mails about DAG runs that mail_command accepted",
            self.mails_sent.clone(),
        );
        r.register(
            "mail_failures",
            "Mails about DAG runs not sent, by reason: start (mail_command could not run), exit (it failed), timeout, queue_full",
            self.mail_failures.clone(),
        );
    }

    /// Counts a DAG run's mail: sent, or why not.
    pub fn mailed(&self, result: Result<(), crate::notifier::FailureKind>) {
        match result {
            Ok(()) => {
                self.mails_sent.inc();
            }
            Err(kind) => {
                self.mail_failures
                    .get_or_create(&MailFailureLabel {
                        reason: kind.as_str(),
                    })
                    .inc();
            }
        }
    }

    /// Counts a scan of the jobs folder put in force; `failed` if it could
    /// not read some folder.
    pub fn scan_applied(&self, failed: bool) {
        self.jobs_scans.inc();
        if failed {
            self.jobs_scan_failures.inc();
        }
    }

    /// Scans of the jobs folder put in force since start.
    pub fn scans(&self) -> u64 {
        self.jobs_scans.get()
    }

    /// Counts what one scheduler step decided at `now`, with the wall clock
    /// equal to the engine's clock (as on the virtual clock of tests).
    /// `from_folder` says whether a DAG is one of the jobs folder's: every
    /// other one (an ad-hoc or submitted DAG, named by its client) is
    /// counted under the one label [`ADHOC_LABEL`], so clients cannot grow
    /// the label set.
    pub fn observe(&mut self, now: Millis, effects: &[Effect], from_folder: impl Fn(&str) -> bool) {
        self.observe_at(now, now, effects, from_folder);
    }

    /// Counts what one scheduler step decided at `now` (the engine's
    /// monotonic clock, for the failure window), when the wall clock read
    /// `wall` (for the timestamps it exports); `from_folder` as in
    /// [`Metrics::observe`].
    pub fn observe_at(
        &mut self,
        now: Millis,
        wall: Millis,
        effects: &[Effect],
        from_folder: impl Fn(&str) -> bool,
    ) {
        while self
            .recent_failures
            .front()
            .is_some_and(|&t| t < now - FAILURE_WINDOW_MS)
        {
            self.recent_failures.pop_front();
        }
        for e in effects {
            match e {
                Effect::Event(Event {
                    run: Some(_),
                    to: Some(RunState::Failed | RunState::TimedOut),
                    ..
                }) => self.recent_failures.push_back(now),
                Effect::Spawn(o) => {
                    let pool = PoolLabel {
                        pool: o.job().pool.clone(),
                    };
                    self.attempts_started.get_or_create(&pool).inc();
                    self.queue_wait
                        .get_or_create(&pool)
                        .observe(o.waited_ms.max(0) as f64 / 1000.0);
                }
                Effect::AttemptEnded {
                    dag,
                    spec,
                    job_index,
                    outcome,
                    ran_ms,
                } => {
                    let pool = PoolLabel {
                        pool: spec.jobs[*job_index as usize].pool.clone(),
                    };
                    self.run_time
                        .get_or_create(&pool)
                        .observe(*ran_ms.max(&0) as f64 / 1000.0);
                    let dag = if from_folder(dag) { dag } else { ADHOC_LABEL };
                    self.attempt_outcomes
                        .get_or_create(&OutcomeLabel {
                            dag: dag.to_string(),
                            outcome: outcome.as_str(),
                        })
                        .inc();
                }
                Effect::DagRunFinished { dag, state, .. } if from_folder(dag) => {
                    let h = self.dag_history.entry(dag.clone()).or_default();
                    match state {
                        DagRunState::Success => h.last_success = Some(wall),
                        DagRunState::Failed | DagRunState::Cancelled => h.last_failure = Some(wall),
                        DagRunState::Active => {}
                    }
                }
                Effect::CronMark {
                    dag,
                    fired,
                    skipped,
                    ..
                } => {
                    for (result, n) in [("fired", fired), ("skipped", skipped)] {
                        if *n > 0 {
                            self.cron_slots
                                .get_or_create(&CronSlotLabel {
                                    dag: dag.clone(),
                                    result,
                                })
                                .inc_by(u64::from(*n));
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// Failures the store holds from before this axd started (their end
    /// times, oldest first, on the engine's clock), so the hour's count
    /// survives a restart.
    pub fn seed_failures(&mut self, ended: impl IntoIterator<Item = Millis>) {
        let mut all: Vec<Millis> = ended.into_iter().collect();
        all.extend(self.recent_failures.drain(..));
        all.sort_unstable();
        self.recent_failures = all.into();
    }

    /// Runs that ended failed or timed out in the hour before `now`: those
    /// of the store's last hour at start-up, then those this axd ended.
    pub fn failed_last_hour(&self, now: Millis) -> u64 {
        let since = now - FAILURE_WINDOW_MS;
        self.recent_failures
            .iter()
            .rev()
            .take_while(|&&t| t >= since)
            .count() as u64
    }

    /// The text exposition, with gauges taken from `snap`.
    pub fn render(&self, snap: &Snapshot) -> String {
        self.runs.clear();
        for (state, n) in &snap.runs_by_state {
            self.runs
                .get_or_create(&StateLabel {
                    state: state.as_str(),
                })
                .set(*n as i64);
        }
        self.pool_runs.clear();
        self.pool_slots.clear();
        for p in &snap.pools {
            for (state, n) in [("running", p.running), ("ready", p.queued)] {
                self.pool_runs
                    .get_or_create(&PoolStateLabel {
                        pool: p.name.clone(),
                        state,
                    })
                    .set(i64::from(n));
            }
            self.pool_slots
                .get_or_create(&PoolLabel {
                    pool: p.name.clone(),
                })
                .set(i64::from(p.slots));
        }
        self.burst_in_use.set(i64::from(snap.burst_in_use));
        self.burst_slots.set(i64::from(snap.burst_extra));
        self.retry_tokens.set(snap.retry_tokens.floor());
        self.job_file_errors.set(snap.job_file_errors as i64);
        self.jobs_folder_errors.set(snap.jobs_folder_errors as i64);
        self.store_faulted.set(i64::from(snap.store_faulted));
        self.store_write_wait.set(snap.store_write_wait);
        for family in [
            &self.dag_last_success,
            &self.dag_last_failure,
            &self.dag_next_fire,
        ] {
            family.clear();
        }
        self.dag_paused.clear();
        let seconds = |ms: Millis| ms as f64 / 1000.0;
        for d in &snap.dags {
            let label = DagLabel {
                dag: d.name.clone(),
            };
            self.dag_paused
                .get_or_create(&label)
                .set(i64::from(d.paused));
            if let Some(at) = d.next_fire {
                self.dag_next_fire.get_or_create(&label).set(seconds(at));
            }
            if let Some(h) = self.dag_history.get(d.name.as_str()) {
                if let Some(at) = h.last_success {
                    self.dag_last_success.get_or_create(&label).set(seconds(at));
                }
                if let Some(at) = h.last_failure {
                    self.dag_last_failure.get_or_create(&label).set(seconds(at));
                }
            }
        }
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry)
            .expect("writing to a String cannot fail");
        out
    }
}
