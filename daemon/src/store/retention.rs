//! The pruner thread (docs/config.md, "`[logs]`"; docs/job-files.md,
//! "`[history]`"): deletes finished DAG runs past `logs.retain` or beyond
//! their DAG's `history.keep_runs`, with their runs, attempts, events and
//! log files, on its own store connection.
//!
//! The scheduler sends an `Order` (what it may prune) and never waits for
//! the pruner; the pruner sends a `Report` per deleted batch so the
//! scheduler's run counts stay right, and measures the store and log
//! folder sizes for `ax status`. A DAG run is pruned only when it is
//! finished, finished before `held_before` (the engine no longer holds
//! it), and not pinned (loaded back into the engine by a retry).

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ax_shared::RunState;

use crate::runtime::shutdown::{Phase, Shutdown};
use crate::store::StoreError;
use crate::store::prune::{BeyondNewest, Prune, Pruned};
use ax_engine::{Millis, RunId};

/// DAG runs deleted per transaction: the writer thread waits for at most
/// one such batch.
pub(crate) const BATCH: usize = 500;

/// How often the sizes are measured again while no order comes.
const MEASURE_EVERY: Duration = Duration::from_secs(600);

/// What the scheduler allows the pruner to delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Order {
    /// Finished DAG runs that finished before this go (`logs.retain`,
    /// never later than `held_before`).
    pub age_before: Millis,
    /// The engine holds no finished DAG run that finished before this.
    pub held_before: Millis,
    /// Per DAG: keep its newest N DAG runs (`history.keep_runs`).
    pub keep_runs: Vec<(String, u32)>,
}

/// Runs deleted by one batch, by state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub runs: BTreeMap<RunState, u64>,
}

/// DAG run ids the pruner must not delete. The pruner holds the lock for
/// the whole of each delete transaction, so a DAG run pinned before it is
/// read back from the store is never deleted under the reader.
pub(crate) type Pins = Arc<Mutex<HashSet<u64>>>;

/// Sizes in bytes as last measured; `UNKNOWN` until measured.
#[derive(Debug)]
pub struct Sizes {
    store: AtomicU64,
    logs: AtomicU64,
}

const UNKNOWN: u64 = u64::MAX;

impl Default for Sizes {
    fn default() -> Sizes {
        Sizes {
            store: AtomicU64::new(UNKNOWN),
            logs: AtomicU64::new(UNKNOWN),
        }
    }
}

impl Sizes {
    pub fn store_bytes(&self) -> Option<u64> {
        Some(self.store.load(Ordering::Relaxed)).filter(|b| *b != UNKNOWN)
    }

    pub fn log_bytes(&self) -> Option<u64> {
        Some(self.logs.load(Ordering::Relaxed)).filter(|b| *b != UNKNOWN)
    }
}

/// The scheduler's end of the pruner's channels.
pub struct Link {
    pub orders: Sender<Order>,
    pub reports: Receiver<Report>,
    pub pins: Pins,
    pub sizes: Arc<Sizes>,
}

pub(crate) struct Pruner {
    store: Box<dyn Prune>,
    log_dir: PathBuf,
    pins: Pins,
    sizes: Arc<Sizes>,
    reports: Sender<Report>,
    shutdown: Shutdown,
}

/// Totals of one pruning pass.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Totals {
    pub dag_runs: u64,
    pub runs: u64,
    pub log_files: u64,
}

impl Pruner {
    /// A pruner on its own connection to the store, and the scheduler's
    /// link to it.
    pub(crate) fn new(
        store: Box<dyn Prune>,
        log_dir: &Path,
        shutdown: Shutdown,
    ) -> (Pruner, Link, Receiver<Order>) {
        let (orders, order_rx) = std::sync::mpsc::channel();
        let (report_tx, reports) = std::sync::mpsc::channel();
        let pins = Pins::default();
        let sizes = Arc::new(Sizes::default());
        let pruner = Pruner {
            store,
            log_dir: log_dir.to_path_buf(),
            pins: pins.clone(),
            sizes: sizes.clone(),
            reports: report_tx,
            shutdown,
        };
        let link = Link {
            orders,
            reports,
            pins,
            sizes,
        };
        (pruner, link, order_rx)
    }

    /// The thread body: measures, then obeys orders until the scheduler
    /// drops its end.
    pub(crate) fn run(mut self, orders: Receiver<Order>) {
        self.measure();
        loop {
            match orders.recv_timeout(MEASURE_EVERY) {
                Ok(order) => {
                    match self.prune(&order) {
                        Ok(t) if t.dag_runs > 0 => tracing::info!(
                            "pruned {} DAG runs ({} runs, {} log files)",
                            t.dag_runs,
                            t.runs,
                            t.log_files
                        ),
                        Ok(_) => {}
                        Err(e) => tracing::warn!("pruning old runs failed: {e}"),
                    }
                    self.measure();
                }
                Err(RecvTimeoutError::Timeout) => self.measure(),
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    /// One pass: DAG runs past `logs.retain`, then those beyond each DAG's
    /// `keep_runs`, a batch per transaction; stops between batches once
    /// shutdown begins.
    pub(crate) fn prune(&mut self, order: &Order) -> Result<Totals, StoreError> {
        let mut totals = Totals::default();
        let age_before = order.age_before.min(order.held_before);
        let mut after = 0;
        while self.serving() {
            let ids = self.store.finished_before(age_before, after, BATCH)?;
            let Some(&last) = ids.last() else { break };
            after = last;
            self.delete(&ids, age_before, &mut totals)?;
        }
        for (dag, keep) in &order.keep_runs {
            while self.serving() {
                let ids = self.store.beyond_newest(&BeyondNewest {
                    dag,
                    keep: *keep,
                    before: order.held_before,
                    limit: BATCH,
                })?;
                if ids.is_empty() {
                    break;
                }
                // Pinned candidates stay; stop rather than select them again.
                if self.delete(&ids, order.held_before, &mut totals)? == 0 {
                    break;
                }
            }
        }
        if totals.dag_runs > 0 {
            self.store.delete_unused_specs()?;
        }
        Ok(totals)
    }

    /// Deletes one batch and its log files; returns how many DAG runs went.
    fn delete(
        &mut self,
        ids: &[u64],
        before: Millis,
        totals: &mut Totals,
    ) -> Result<u64, StoreError> {
        let pruned = {
            let pins = self.pins.lock().unwrap_or_else(|e| e.into_inner());
            let ids: Vec<u64> = ids
                .iter()
                .copied()
                .filter(|id| !pins.contains(id))
                .collect();
            if ids.is_empty() {
                return Ok(0);
            }
            let started = std::time::Instant::now();
            let pruned = self.store.delete_dag_runs(&ids, before)?;
            // `ax-bench prune` reads this line.
            tracing::debug!(
                "pruning transaction of {} DAG runs took {:.1} ms",
                pruned.dag_runs,
                started.elapsed().as_secs_f64() * 1000.0
            );
            pruned
        };
        let Pruned {
            dag_runs,
            runs,
            attempts,
        } = pruned;
        for (run, attempt) in &attempts {
            let path = crate::logs::paths::log_path(&self.log_dir, RunId(*run), *attempt);
            if std::fs::remove_file(path).is_ok() {
                totals.log_files += 1;
            }
        }
        totals.dag_runs += dag_runs;
        totals.runs += runs.values().sum::<u64>();
        if !runs.is_empty() {
            // The scheduler is gone at exit: nobody counts any more.
            let _ = self.reports.send(Report { runs });
        }
        Ok(dag_runs)
    }

    fn serving(&self) -> bool {
        self.shutdown.phase() == Phase::Serving
    }

    /// Measures the store and the log folder.
    pub(crate) fn measure(&mut self) {
        let store = self.store.store_bytes().unwrap_or(UNKNOWN);
        self.sizes.store.store(store, Ordering::Relaxed);
        self.sizes
            .logs
            .store(folder_bytes(&self.log_dir), Ordering::Relaxed);
    }
}

/// Bytes of the regular files in `dir` and below.
fn folder_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            match entry.metadata() {
                Ok(m) if m.is_dir() => stack.push(entry.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

#[cfg(test)]
#[path = "retention_tests.rs"]
mod tests;
