//! The row model both stores share: how a stored value becomes a Rust
//! value, the columns each read selects (in order), and what a set of
//! rows becomes (the engine's restored DAG runs, the protocol's views).
//!
//! A backend writes only its SQL (the `FROM … WHERE …` around these
//! column lists) and its column getters ([`Columns`]). Every numeric
//! column is range-checked into its Rust type, and every encoded column
//! (a state, an outcome, a delay) must hold one of its type's codes: a
//! value that does not fit is a corrupt row, named by its column.

use std::collections::HashMap;
use std::sync::Arc;

use ax_engine::{
    Attempt, DagRunId, DagRunState, Delay, RestoredDagRun, Run, RunId, Trigger, TriggerMarks,
};
use ax_protocol::api::{AttemptView, EventView, RunView};
use ax_shared::time::Timestamp;
use ax_shared::{DagSpec, Outcome, RunState};

use super::specs::parse_spec;
use super::{Loaded, StoreError, parse_trigger_queue};

/// Maps keyed by our own sequential ids: no need for SipHash.
type IdMap<K, V> = HashMap<K, V, std::hash::BuildHasherDefault<ax_engine::IdHasher>>;

/// A type stored as a text code: `code` writes it, `from_code` reads it
/// back (`None` for text that is no code of the type).
pub(crate) trait Code: Sized + Copy {
    fn code(self) -> &'static str;
    fn from_code(text: &str) -> Option<Self>;
}

impl Code for RunState {
    fn code(self) -> &'static str {
        self.as_str()
    }
    fn from_code(text: &str) -> Option<RunState> {
        RunState::parse(text)
    }
}

impl Code for Outcome {
    fn code(self) -> &'static str {
        self.as_str()
    }
    fn from_code(text: &str) -> Option<Outcome> {
        Outcome::parse(text)
    }
}

impl Code for DagRunState {
    fn code(self) -> &'static str {
        match self {
            DagRunState::Active => "active",
            DagRunState::Success => "success",
            DagRunState::Failed => "failed",
            DagRunState::Cancelled => "cancelled",
        }
    }
    fn from_code(text: &str) -> Option<DagRunState> {
        [
            DagRunState::Active,
            DagRunState::Success,
            DagRunState::Failed,
            DagRunState::Cancelled,
        ]
        .into_iter()
        .find(|s| s.code() == text)
    }
}

impl Code for Delay {
    fn code(self) -> &'static str {
        match self {
            Delay::Backoff => "backoff",
            Delay::RetryBudget => "retry_budget",
            Delay::Jitter => "jitter",
        }
    }
    fn from_code(text: &str) -> Option<Delay> {
        [Delay::Backoff, Delay::RetryBudget, Delay::Jitter]
            .into_iter()
            .find(|d| d.code() == text)
    }
}

/// `text`, a value of `column`, as a `T`.
pub(crate) fn decode<T: Code>(column: &'static str, text: &str) -> Result<T, StoreError> {
    T::from_code(text).ok_or_else(|| StoreError::Unknown {
        column,
        value: text.to_string(),
    })
}

/// `value`, a value of `column`, as a `T` (a narrower or unsigned integer).
pub(crate) fn fit<T: TryFrom<i64>>(column: &'static str, value: i64) -> Result<T, StoreError> {
    T::try_from(value).map_err(|_| StoreError::OutOfRange { column, value })
}

/// One result row, as a backend reads its columns (by position; `column`
/// names it in errors). SQL NULL is `None`.
pub(crate) trait Columns {
    fn opt_i64(&self, i: usize) -> Result<Option<i64>, StoreError>;
    fn opt_str(&self, i: usize) -> Result<Option<&str>, StoreError>;
    fn opt_f64(&self, i: usize) -> Result<Option<f64>, StoreError>;

    fn int<T: TryFrom<i64>>(&self, i: usize, column: &'static str) -> Result<T, StoreError> {
        fit(column, required(self.opt_i64(i)?, column)?)
    }
    fn opt_int<T: TryFrom<i64>>(
        &self,
        i: usize,
        column: &'static str,
    ) -> Result<Option<T>, StoreError> {
        self.opt_i64(i)?.map(|v| fit(column, v)).transpose()
    }
    fn str(&self, i: usize, column: &'static str) -> Result<&str, StoreError> {
        required(self.opt_str(i)?, column)
    }
    fn string(&self, i: usize, column: &'static str) -> Result<String, StoreError> {
        Ok(self.str(i, column)?.to_string())
    }
    fn opt_string(&self, i: usize) -> Result<Option<String>, StoreError> {
        Ok(self.opt_str(i)?.map(str::to_string))
    }
    fn code<T: Code>(&self, i: usize, column: &'static str) -> Result<T, StoreError> {
        decode(column, self.str(i, column)?)
    }
    fn opt_code<T: Code>(&self, i: usize, column: &'static str) -> Result<Option<T>, StoreError> {
        self.opt_str(i)?.map(|t| decode(column, t)).transpose()
    }
    /// A time in ms since the epoch.
    fn time(&self, i: usize) -> Result<Option<Timestamp>, StoreError> {
        Ok(self.opt_i64(i)?.map(Timestamp::from_millis))
    }
}

fn required<T>(value: Option<T>, column: &'static str) -> Result<T, StoreError> {
    value.ok_or_else(|| StoreError::Corrupt(format!("{column} is NULL")))
}

impl Columns for rusqlite::Row<'_> {
    fn opt_i64(&self, i: usize) -> Result<Option<i64>, StoreError> {
        Ok(self.get(i)?)
    }
    fn opt_str(&self, i: usize) -> Result<Option<&str>, StoreError> {
        self.get_ref(i)?
            .as_str_or_null()
            .map_err(|e| StoreError::Corrupt(e.to_string()))
    }
    fn opt_f64(&self, i: usize) -> Result<Option<f64>, StoreError> {
        Ok(self.get(i)?)
    }
}

impl Columns for tokio_postgres::Row {
    fn opt_i64(&self, i: usize) -> Result<Option<i64>, StoreError> {
        Ok(self.try_get(i)?)
    }
    fn opt_str(&self, i: usize) -> Result<Option<&str>, StoreError> {
        Ok(self.try_get(i)?)
    }
    fn opt_f64(&self, i: usize) -> Result<Option<f64>, StoreError> {
        Ok(self.try_get(i)?)
    }
}

/// The reads of a load, in the order [`Assemble`] takes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    /// The DAG runs, read as [`DagRunRow`].
    DagRuns,
    /// Their attempts, read as [`AttemptRow`].
    Attempts,
    /// Their runs, read as [`RunRow`].
    Runs,
    /// The paused DAGs.
    Paused,
    /// Each DAG's last cron slot fired.
    CronMarks,
    /// Each `@reboot` DAG's last boot seen.
    BootMarks,
    /// Each DAG's queued triggers (JSON).
    TriggerQueues,
}

impl Part {
    /// DAG runs with their attempts and runs.
    pub(crate) const DAG_RUNS: [Part; 3] = [Part::DagRuns, Part::Attempts, Part::Runs];
    /// Everything a start-up loads.
    pub(crate) const ALL: [Part; 7] = [
        Part::DagRuns,
        Part::Attempts,
        Part::Runs,
        Part::Paused,
        Part::CronMarks,
        Part::BootMarks,
        Part::TriggerQueues,
    ];

    /// Whether `sql` holds the filter (and so takes its parameters).
    pub(crate) fn filtered(self) -> bool {
        Part::DAG_RUNS.contains(&self)
    }

    /// This read, of the DAG runs matching `filter` (SQL over `dag_runs
    /// d`) if `filtered`; `node` is the SQL of an attempt's node (`a.node`,
    /// or `NULL` where one node alone runs everything).
    pub(crate) fn sql(self, filter: &str, node: &str) -> String {
        match self {
            Part::DagRuns => format!(
                "SELECT {DAG_RUN_COLUMNS}
                 FROM dag_runs d JOIN specs s ON s.hash = d.spec_hash WHERE {filter} ORDER BY d.id"
            ),
            Part::Attempts => format!(
                "SELECT {ATTEMPT_COLUMNS}, {node}
                 FROM attempts a JOIN runs r ON r.id = a.run JOIN dag_runs d ON d.id = r.dag_run
                 WHERE {filter} ORDER BY a.run, a.n"
            ),
            Part::Runs => format!(
                "SELECT {RUN_COLUMNS}
                 FROM runs r JOIN dag_runs d ON d.id = r.dag_run WHERE {filter} ORDER BY r.id"
            ),
            Part::Paused => "SELECT dag FROM paused".into(),
            Part::CronMarks => "SELECT dag, last_slot FROM cron_marks".into(),
            Part::BootMarks => "SELECT dag, boot_id FROM boot_marks".into(),
            Part::TriggerQueues => "SELECT dag, queue FROM trigger_queues".into(),
        }
    }
}

/// [`DagRunRow`]'s columns, in the order it reads them (the same holds
/// for each column list below and its reader).
const DAG_RUN_COLUMNS: &str =
    "d.id, d.spec_hash, s.spec, d.state, d.created_at, d.trigger, d.unique_key";

/// [`AttemptRow`]'s columns but the last, the node.
const ATTEMPT_COLUMNS: &str = "a.run, a.n, a.started_at, a.finished_at, a.outcome, a.exit_code, a.signal, a.pid, a.pid_start, a.slot, a.error, a.log_lost";

/// [`RunRow`]'s columns.
const RUN_COLUMNS: &str = "r.id, r.dag_run, r.job_index, r.state, r.counted_failures, r.created_at, r.ready_at, r.started_at,
     r.finished_at, r.next_at, r.delay, r.reason, r.message, r.progress, r.upstream";

/// A run as `list_runs` shows it: `RUN_VIEW_COLUMNS` over `runs`.
pub(crate) const RUN_VIEW_COLUMNS: &str = "id, dag, job, dag_run, state, pool, priority, retries, created_at, ready_at, started_at, finished_at, next_at, reason, message, progress";

/// An attempt as a run view shows it: `ATTEMPT_VIEW_COLUMNS` over
/// `attempts`, then the node (`node`, or `NULL`).
pub(crate) const ATTEMPT_VIEW_COLUMNS: &str =
    "run, n, started_at, finished_at, outcome, exit_code, signal, log_lost";

/// An event: `EVENT_COLUMNS` over `events`.
pub(crate) const EVENT_COLUMNS: &str = "seq, at, run, dag_run, from_state, to_state, reason, actor";

/// A row of `Part::DagRuns`. The spec's text is borrowed from the row:
/// it is parsed once per distinct hash, not once per row.
struct DagRunRow<'r> {
    pub id: u64,
    pub spec_hash: &'r str,
    pub spec: &'r str,
    pub state: DagRunState,
    pub created_at: i64,
    pub trigger: String,
    pub unique_key: Option<String>,
}

impl<'r> DagRunRow<'r> {
    fn read(r: &'r impl Columns) -> Result<DagRunRow<'r>, StoreError> {
        Ok(DagRunRow {
            id: r.int(0, "dag_runs.id")?,
            spec_hash: r.str(1, "dag_runs.spec_hash")?,
            spec: r.str(2, "specs.spec")?,
            state: r.code(3, "dag_runs.state")?,
            created_at: r.int(4, "dag_runs.created_at")?,
            trigger: r.string(5, "dag_runs.trigger")?,
            unique_key: r.opt_string(6)?,
        })
    }
}

/// A row of `Part::Attempts`.
struct AttemptRow {
    pub run: u64,
    pub attempt: Attempt,
}

impl AttemptRow {
    fn read(r: &impl Columns) -> Result<AttemptRow, StoreError> {
        Ok(AttemptRow {
            run: r.int(0, "attempts.run")?,
            attempt: Attempt {
                n: r.int(1, "attempts.n")?,
                started_at: r.int(2, "attempts.started_at")?,
                finished_at: r.opt_int(3, "attempts.finished_at")?,
                outcome: r.opt_code(4, "attempts.outcome")?,
                exit_code: r.opt_int(5, "attempts.exit_code")?,
                signal: r.opt_int(6, "attempts.signal")?,
                pid: r.opt_int(7, "attempts.pid")?,
                pid_start: r.opt_int(8, "attempts.pid_start")?,
                slot: r.int(9, "attempts.slot")?,
                error: r.opt_string(10)?,
                log_lost: r.int(11, "attempts.log_lost")?,
                node: r.opt_string(12)?,
            },
        })
    }
}

/// A row of `Part::Runs`.
struct RunRow {
    pub id: u64,
    pub dag_run: u64,
    pub job_index: u32,
    pub state: RunState,
    pub counted_failures: u32,
    pub created_at: i64,
    pub ready_at: Option<i64>,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub next_at: Option<i64>,
    pub delay: Option<Delay>,
    pub reason: String,
    pub message: Option<String>,
    pub progress: Option<f64>,
    pub upstream: Vec<RunId>,
}

impl RunRow {
    fn read(r: &impl Columns) -> Result<RunRow, StoreError> {
        let id = r.int(0, "runs.id")?;
        // Most runs have no upstream: skip the JSON parser for "[]".
        let text = r.str(14, "runs.upstream")?;
        let upstream = if text == "[]" {
            Vec::new()
        } else {
            serde_json::from_str(text)
                .map_err(|e| StoreError::Corrupt(format!("run {id} upstream: {e}")))?
        };
        Ok(RunRow {
            id,
            dag_run: r.int(1, "runs.dag_run")?,
            job_index: r.int(2, "runs.job_index")?,
            state: r.code(3, "runs.state")?,
            counted_failures: r.int(4, "runs.counted_failures")?,
            created_at: r.int(5, "runs.created_at")?,
            ready_at: r.opt_int(6, "runs.ready_at")?,
            started_at: r.opt_int(7, "runs.started_at")?,
            finished_at: r.opt_int(8, "runs.finished_at")?,
            next_at: r.opt_int(9, "runs.next_at")?,
            delay: r.opt_code(10, "runs.delay")?,
            reason: r.string(11, "runs.reason")?,
            message: r.opt_string(12)?,
            progress: r.opt_f64(13)?,
            upstream,
        })
    }
}

/// DAG runs put together from their rows: fed each [`Part`] in turn (a
/// run takes the attempts read before it).
#[derive(Default)]
pub(crate) struct Assemble {
    specs: HashMap<String, Arc<DagSpec>>,
    dag_runs: Vec<RestoredDagRun>,
    index: IdMap<u64, usize>,
    attempts: IdMap<u64, Vec<Attempt>>,
    orphans: Vec<(u32, Option<u64>)>,
    upstream: Vec<u64>,
    paused: Vec<String>,
    marks: TriggerMarks,
    trigger_queues: HashMap<String, Vec<Trigger>>,
}

/// What [`Assemble`] made.
pub(crate) struct Assembled {
    pub dag_runs: Vec<RestoredDagRun>,
    /// Runs the loaded runs depend on that are not among them (`--after`
    /// links): their states are read apart.
    pub outside: Vec<u64>,
    /// Attempts found running: (pid, pid start time) to sweep.
    pub orphans: Vec<(u32, Option<u64>)>,
    pub paused: Vec<String>,
    pub marks: TriggerMarks,
    pub trigger_queues: HashMap<String, Vec<Trigger>>,
}

impl Assembled {
    /// What start-up needs: these rows, the states of the runs `outside`
    /// (`external`) and the next ids.
    pub(crate) fn loaded(
        self,
        external: Vec<(RunId, RunState)>,
        next_run: u64,
        next_dag_run: u64,
    ) -> Loaded {
        Loaded {
            dag_runs: self.dag_runs,
            external,
            next_run,
            next_dag_run,
            paused: self.paused,
            marks: self.marks,
            trigger_queues: self.trigger_queues,
            orphans: self.orphans,
        }
    }
}

impl Assemble {
    /// One row of `part`.
    pub(crate) fn add(&mut self, part: Part, r: &impl Columns) -> Result<(), StoreError> {
        match part {
            Part::DagRuns => self.dag_run(DagRunRow::read(r)?)?,
            Part::Attempts => self.attempt(AttemptRow::read(r)?),
            Part::Runs => self.run(RunRow::read(r)?),
            Part::Paused => self.paused.push(r.string(0, "paused.dag")?),
            Part::CronMarks => {
                let slot = r.int(1, "cron_marks.last_slot")?;
                self.marks
                    .slots
                    .insert(r.string(0, "cron_marks.dag")?, slot);
            }
            Part::BootMarks => {
                let boot = Arc::from(r.str(1, "boot_marks.boot_id")?);
                self.marks
                    .boots
                    .entry(r.string(0, "boot_marks.dag")?)
                    .or_default()
                    .push(boot);
            }
            Part::TriggerQueues => {
                let dag = r.string(0, "trigger_queues.dag")?;
                let queue = parse_trigger_queue(&dag, r.str(1, "trigger_queues.queue")?)?;
                self.trigger_queues.insert(dag, queue);
            }
        }
        Ok(())
    }

    fn dag_run(&mut self, row: DagRunRow<'_>) -> Result<(), StoreError> {
        let spec = match self.specs.get(row.spec_hash) {
            Some(s) => s.clone(),
            None => {
                let hash = row.spec_hash.to_string();
                let spec = Arc::new(parse_spec(row.spec, &format!("spec {hash}"))?);
                self.specs.insert(hash, spec.clone());
                spec
            }
        };
        self.index.insert(row.id, self.dag_runs.len());
        self.dag_runs.push(RestoredDagRun {
            id: DagRunId(row.id),
            dag: Arc::from(spec.name.as_str()),
            spec,
            state: row.state,
            created_at: row.created_at,
            trigger: row.trigger,
            unique_key: row.unique_key,
            runs: Vec::new(),
        });
        Ok(())
    }

    fn attempt(&mut self, row: AttemptRow) {
        let a = row.attempt;
        if a.outcome.is_none()
            && let Some(pid) = a.pid
        {
            self.orphans.push((pid, a.pid_start));
        }
        self.attempts.entry(row.run).or_default().push(a);
    }

    fn run(&mut self, row: RunRow) {
        self.upstream.extend(row.upstream.iter().map(|u| u.0));
        let Some(&i) = self.index.get(&row.dag_run) else {
            return;
        };
        let owner = &self.dag_runs[i];
        let mut run = Run::waiting(
            RunId(row.id),
            owner.id,
            owner.dag.clone(),
            owner.spec.clone(),
            row.job_index,
            row.created_at,
            row.upstream,
        );
        run.state = row.state;
        run.attempts = self.attempts.remove(&row.id).unwrap_or_default();
        run.counted_failures = row.counted_failures;
        run.ready_at = row.ready_at;
        run.started_at = row.started_at;
        run.finished_at = row.finished_at;
        run.next_at = row.next_at;
        run.delay = row.delay;
        run.reason = row.reason;
        run.message = row.message;
        run.progress = row.progress;
        self.dag_runs[i].runs.push(run);
    }

    pub(crate) fn finish(self) -> Assembled {
        let loaded: std::collections::HashSet<u64> = self
            .dag_runs
            .iter()
            .flat_map(|d| d.runs.iter().map(|r| r.id.0))
            .collect();
        let mut outside = self.upstream;
        outside.retain(|u| !loaded.contains(u));
        Assembled {
            dag_runs: self.dag_runs,
            outside,
            orphans: self.orphans,
            paused: self.paused,
            marks: self.marks,
            trigger_queues: self.trigger_queues,
        }
    }
}

/// A row of `RUN_VIEW_COLUMNS` (its attempts are added apart).
pub(crate) fn run_view(r: &impl Columns) -> Result<RunView, StoreError> {
    let priority: u8 = r.int(6, "runs.priority")?;
    Ok(RunView {
        id: r.int(0, "runs.id")?,
        dag: r.string(1, "runs.dag")?,
        job: r.string(2, "runs.job")?,
        dag_run: r.int(3, "runs.dag_run")?,
        state: r.code(4, "runs.state")?,
        pool: r.string(5, "runs.pool")?,
        priority,
        effective_priority: priority,
        retries: r.int(7, "runs.retries")?,
        created_at: r.time(8)?,
        ready_at: r.time(9)?,
        started_at: r.time(10)?,
        finished_at: r.time(11)?,
        next_at: r.time(12)?,
        reason: r.opt_string(13)?,
        message: r.opt_string(14)?,
        progress: r.opt_f64(15)?,
        ..RunView::default()
    })
}

/// A row of `ATTEMPT_VIEW_COLUMNS` and the node: (run, attempt).
pub(crate) fn attempt_view(r: &impl Columns) -> Result<(u64, AttemptView), StoreError> {
    let view = AttemptView {
        n: r.int(1, "attempts.n")?,
        started_at: r.time(2)?,
        finished_at: r.time(3)?,
        outcome: r.opt_code(4, "attempts.outcome")?,
        exit_code: r.opt_int(5, "attempts.exit_code")?,
        signal: r.opt_int(6, "attempts.signal")?,
        log_lost: r.int(7, "attempts.log_lost")?,
        node: r.opt_string(8)?,
    };
    Ok((r.int(0, "attempts.run")?, view))
}

/// Gives each view its attempts (`attempt_view` rows, in order).
pub(crate) fn attach_attempts(views: &mut [RunView], attempts: Vec<(u64, AttemptView)>) {
    let mut by_run: IdMap<u64, Vec<AttemptView>> = IdMap::default();
    for (run, a) in attempts {
        by_run.entry(run).or_default().push(a);
    }
    for v in views {
        v.attempts = by_run.remove(&v.id).unwrap_or_default();
    }
}

/// A row of `EVENT_COLUMNS`.
pub(crate) fn event_view(r: &impl Columns) -> Result<EventView, StoreError> {
    Ok(EventView {
        seq: r.int(0, "events.seq")?,
        time: Timestamp::from_millis(r.int(1, "events.at")?),
        run: r.opt_int(2, "events.run")?,
        dag_run: r.int(3, "events.dag_run")?,
        from: r.opt_code(4, "events.from_state")?,
        to: r.opt_code(5, "events.to_state")?,
        reason: r.string(6, "events.reason")?,
        actor: r.string(7, "events.actor")?,
    })
}

/// A row of (`dag_runs.dag`, `dag_runs.state`, a time in ms): a DAG and
/// its newest DAG run.
pub(crate) fn last_dag_run(r: &impl Columns) -> Result<(String, super::LastDagRun), StoreError> {
    let last = super::LastDagRun {
        state: r.code(1, "dag_runs.state")?,
        at: r.int(2, "dag_runs.finished_at")?,
    };
    Ok((r.string(0, "dag_runs.dag")?, last))
}

/// A row of (`dag_runs.dag`, last success, last failure), times in ms.
pub(crate) fn dag_history(
    r: &impl Columns,
) -> Result<(String, crate::metrics::DagHistory), StoreError> {
    let history = crate::metrics::DagHistory {
        last_success: r.opt_i64(1)?,
        last_failure: r.opt_i64(2)?,
    };
    Ok((r.string(0, "dag_runs.dag")?, history))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_reads_back_and_unknown_text_names_its_column() {
        for s in RunState::ALL {
            assert_eq!(RunState::from_code(s.code()), Some(s));
        }
        for o in Outcome::ALL {
            assert_eq!(Outcome::from_code(o.code()), Some(o));
        }
        for s in ["active", "success", "failed", "cancelled"] {
            assert_eq!(DagRunState::from_code(s).map(Code::code), Some(s));
        }
        for d in ["backoff", "retry_budget"] {
            assert_eq!(Delay::from_code(d).map(Code::code), Some(d));
        }
        let e = decode::<DagRunState>("dag_runs.state", "activ").unwrap_err();
        assert!(matches!(
            e,
            StoreError::Unknown {
                column: "dag_runs.state",
                ..
            }
        ));
        assert!(e.to_string().contains("\"activ\""), "{e}");
        let e = fit::<u32>("attempts.slot", -1).unwrap_err();
        assert!(e.to_string().contains("attempts.slot"), "{e}");
        assert_eq!(fit::<u8>("runs.priority", 100).unwrap(), 100);
    }
}
