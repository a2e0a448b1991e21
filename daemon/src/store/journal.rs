//! The ends journal: where the writer records what it could not commit
//! while the store refuses writes, so that the next start does not run
//! again the jobs that finished meanwhile (docs/operations.md, "Shutdown
//! while the store cannot write").
//!
//! `ax.journal` beside `ax.db` has a fixed size, allocated at start
//! (`JOURNAL_BYTES`), so that recording needs no free space: a full disk
//! refuses the store's writes but not these. It holds one JSON line per
//! held step (the rows of its runs and DAG runs as the engine has them,
//! and its events), zeros after the last. Each append is synced before
//! the writer goes on.
//!
//! At start, before the store is loaded, the lines are replayed into the
//! store: each DAG run they name is read back, the journal's later rows
//! replace its stored ones, and the result is committed; then the journal
//! is cleared. A line torn by a crash is not valid JSON and ends the read,
//! so a replay applies a prefix of what was recorded: any run it misses is
//! treated as interrupted, as without a journal (at least once).
//!
//! Invariants:
//! * rows are replayed only into DAG runs the store already holds (a DAG
//!   run created during the fault was never acknowledged);
//! * a row the store already has as journaled is not written again, and
//!   its events are not added twice (the writer may have committed the
//!   steps just before a crash kept it from clearing the journal).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use ax_shared::RunState;
use serde::{Deserialize, Serialize};

use crate::bus::Step;
use crate::store::{Commit, Store, StoreError};
use ax_engine::{Attempt, DagRun, DagRunId, DagRunState, Delay, Event, Millis, Run, RunId};

/// The journal's size: room for some thousands of run changes (a line is
/// a few hundred bytes a run), far more than a store fault holds while
/// new work is refused.
pub(crate) const JOURNAL_BYTES: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub(crate) enum JournalError {
    #[error("journal {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("journal {path} is full ({JOURNAL_BYTES} bytes)")]
    Full { path: PathBuf },
}

/// A run's row as a step left it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct RunRow {
    id: RunId,
    dag_run: DagRunId,
    state: RunState,
    counted_failures: u32,
    ready_at: Option<Millis>,
    started_at: Option<Millis>,
    finished_at: Option<Millis>,
    next_at: Option<Millis>,
    delay: Option<Delay>,
    reason: String,
    message: Option<String>,
    progress: Option<f64>,
    /// The attempts a commit writes (`store::attempts_to_write`).
    attempts: Vec<Attempt>,
}

impl RunRow {
    fn of(r: &Run) -> RunRow {
        RunRow {
            id: r.id,
            dag_run: r.dag_run,
            state: r.state,
            counted_failures: r.counted_failures,
            ready_at: r.ready_at,
            started_at: r.started_at,
            finished_at: r.finished_at,
            next_at: r.next_at,
            delay: r.delay,
            reason: r.reason.clone(),
            message: r.message.clone(),
            progress: r.progress,
            attempts: crate::store::attempts_to_write(r).cloned().collect(),
        }
    }

    /// Puts this row's fields into the stored run.
    fn apply(&self, r: &mut Run) {
        r.state = self.state;
        r.counted_failures = self.counted_failures;
        r.ready_at = self.ready_at;
        r.started_at = self.started_at;
        r.finished_at = self.finished_at;
        r.next_at = self.next_at;
        r.delay = self.delay;
        r.reason = self.reason.clone();
        r.message = self.message.clone();
        r.progress = self.progress;
        for a in &self.attempts {
            match r.attempts.iter_mut().find(|s| s.n == a.n) {
                Some(stored) => *stored = a.clone(),
                None => r.attempts.push(a.clone()),
            }
        }
        r.attempts.sort_by_key(|a| a.n);
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct DagRunRow {
    id: DagRunId,
    state: DagRunState,
    finished_at: Option<Millis>,
}

/// One held step's line.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Line {
    #[serde(default)]
    runs: Vec<RunRow>,
    #[serde(default)]
    dag_runs: Vec<DagRunRow>,
    #[serde(default)]
    events: Vec<Event>,
}

/// What a replay did, for the start-up log.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Replayed {
    /// Runs whose stored row the journal changed.
    pub runs: usize,
    /// Runs the journal names in DAG runs the store does not hold.
    pub unknown: usize,
}

pub(crate) struct Journal {
    path: PathBuf,
    file: std::fs::File,
    /// Bytes of lines from the start of the file.
    used: u64,
}

impl Journal {
    /// Opens (creating) the journal at `path` and reads the lines it holds.
    pub(crate) fn open(path: &Path) -> Result<(Journal, Vec<String>), JournalError> {
        let io = |source| JournalError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
        let mut lines = Vec::new();
        let mut used = 0;
        for line in bytes[..end].split_inclusive(|b| *b == b'\n') {
            // A line without its newline was cut short.
            let Some(text) = line.strip_suffix(b"\n") else {
                break;
            };
            let Ok(text) = std::str::from_utf8(text) else {
                break;
            };
            lines.push(text.to_string());
            used += line.len() as u64;
        }
        // A line cut short is never replayed: zeros over it, so that later
        // appends do not run into it.
        if (end as u64) > used {
            let zeros = vec![0u8; end - used as usize];
            file.write_all_at(&zeros, used).map_err(io)?;
        }
        let journal = Journal {
            path: path.to_path_buf(),
            file,
            used,
        };
        Ok((journal, lines))
    }

    /// Gives the file its whole size now, so appends need no free space
    /// later (`fallocate`, zeros written where it is not supported).
    pub(crate) fn reserve(&self) -> Result<(), JournalError> {
        use std::os::fd::AsRawFd;
        let io = |source| JournalError::Io {
            path: self.path.clone(),
            source,
        };
        let fd = self.file.as_raw_fd();
        // SAFETY: `fd` is this journal's open file for the whole call.
        let rc = unsafe { libc::fallocate(fd, 0, 0, JOURNAL_BYTES as libc::off_t) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EOPNOTSUPP) {
                return Err(io(e));
            }
            let len = self.file.metadata().map_err(io)?.len();
            if len < JOURNAL_BYTES {
                let zeros = vec![0u8; (JOURNAL_BYTES - len) as usize];
                self.file.write_all_at(&zeros, len).map_err(io)?;
            }
        }
        self.file.sync_all().map_err(io)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Records held steps (their runs, DAG runs and events), synced.
    /// Steps that change no run or DAG run are not recorded.
    pub(crate) fn append(&mut self, steps: &[Step]) -> Result<(), JournalError> {
        let mut text = String::new();
        for step in steps {
            if step.changes.runs.is_empty() && step.changes.dag_runs.is_empty() {
                continue;
            }
            let line = Line {
                runs: step.changes.runs.iter().map(RunRow::of).collect(),
                dag_runs: step
                    .changes
                    .dag_runs
                    .iter()
                    .map(|d| DagRunRow {
                        id: d.id,
                        state: d.state,
                        finished_at: d.finished_at,
                    })
                    .collect(),
                events: step.changes.events.clone(),
            };
            // Serializing plain data into a string cannot fail.
            text.push_str(&serde_json::to_string(&line).unwrap_or_default());
            text.push('\n');
        }
        if text.is_empty() {
            return Ok(());
        }
        if self.used + text.len() as u64 > JOURNAL_BYTES {
            return Err(JournalError::Full {
                path: self.path.clone(),
            });
        }
        let io = |source| JournalError::Io {
            path: self.path.clone(),
            source,
        };
        self.file
            .write_all_at(text.as_bytes(), self.used)
            .map_err(io)?;
        self.file.sync_data().map_err(io)?;
        self.used += text.len() as u64;
        Ok(())
    }

    /// Empties the journal (its lines are committed): zeros over them,
    /// synced, the file's size kept.
    pub(crate) fn clear(&mut self) -> Result<(), JournalError> {
        if self.used == 0 {
            return Ok(());
        }
        let io = |source| JournalError::Io {
            path: self.path.clone(),
            source,
        };
        let zeros = vec![0u8; self.used as usize];
        self.file.write_all_at(&zeros, 0).map_err(io)?;
        self.file.sync_data().map_err(io)?;
        self.used = 0;
        Ok(())
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.used == 0
    }
}

/// Replays journal lines into the store (see the module's comment).
pub(crate) fn replay(store: &mut dyn Store, lines: &[String]) -> Result<Replayed, StoreError> {
    let mut runs: BTreeMap<RunId, RunRow> = BTreeMap::new();
    let mut dag_runs: BTreeMap<DagRunId, DagRunRow> = BTreeMap::new();
    let mut events: Vec<Event> = Vec::new();
    for (i, text) in lines.iter().enumerate() {
        let line: Line = match serde_json::from_str(text) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(
                    "journal line {} is unreadable ({e}); replaying the lines before it",
                    i + 1
                );
                break;
            }
        };
        // Later lines hold later versions of a row.
        for r in line.runs {
            runs.insert(r.id, r);
        }
        for d in line.dag_runs {
            dag_runs.insert(d.id, d);
        }
        events.extend(line.events);
    }
    let named: BTreeSet<DagRunId> = runs
        .values()
        .map(|r| r.dag_run)
        .chain(dag_runs.keys().copied())
        .collect();
    let mut done = Replayed::default();
    let mut changed_runs: Vec<Run> = Vec::new();
    let mut changed_dag_runs: Vec<DagRun> = Vec::new();
    let mut touched: BTreeSet<DagRunId> = BTreeSet::new();
    for id in named {
        let Some(mut stored) = store.load_dag_run(id.0)? else {
            done.unknown += runs.values().filter(|r| r.dag_run == id).count();
            continue;
        };
        for r in &mut stored.runs {
            if let Some(row) = runs.get(&r.id)
                && RunRow::of(r) != *row
            {
                row.apply(r);
                changed_runs.push(r.clone());
                touched.insert(id);
            }
        }
        if let Some(row) = dag_runs.get(&id)
            && (stored.state != row.state)
        {
            changed_dag_runs.push(stored.row_with(row.state, row.finished_at));
            touched.insert(id);
        }
    }
    done.runs = changed_runs.len();
    if touched.is_empty() {
        return Ok(done);
    }
    let changed: BTreeSet<RunId> = changed_runs.iter().map(|r| r.id).collect();
    let events: Vec<&Event> = events
        .iter()
        .filter(|e| match e.run {
            Some(r) => changed.contains(&r),
            None => touched.contains(&e.dag_run),
        })
        .collect();
    let commit = Commit {
        dag_runs: changed_dag_runs.iter().collect(),
        runs: changed_runs.iter().collect(),
        events,
        ..Commit::default()
    };
    store.commit(&commit)?;
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_torn_line_ends_the_read_and_is_cleared_with_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ax.journal");
        let mut bytes = b"{\"runs\":[]}\n{\"dag_runs\":[]}\n{\"runs\":[{\"id".to_vec();
        bytes.resize(4096, 0);
        std::fs::write(&path, &bytes).unwrap();
        let (mut journal, lines) = Journal::open(&path).unwrap();
        assert_eq!(lines, ["{\"runs\":[]}", "{\"dag_runs\":[]}"]);
        // The torn line is zeroed at once; the whole lines when cleared.
        let on_disk = std::fs::read(&path).unwrap();
        let whole = "{\"runs\":[]}\n{\"dag_runs\":[]}\n".len();
        assert_eq!(&on_disk[..whole], &bytes[..whole]);
        assert!(
            on_disk[whole..].iter().all(|b| *b == 0),
            "the torn line is left"
        );
        assert!(!journal.is_empty());
        journal.clear().unwrap();
        assert!(std::fs::read(&path).unwrap().iter().all(|b| *b == 0));
        let (journal, lines) = Journal::open(&path).unwrap();
        assert!(lines.is_empty() && journal.is_empty());
        journal.reserve().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), JOURNAL_BYTES);
    }
}
