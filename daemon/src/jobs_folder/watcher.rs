//! Watches the jobs folder (docs/job-files.md) with `notify`, debounced by
//! `notify-debouncer-full` (200 ms), so an editor's write-temp-then-rename or
//! a burst of 1,000 files becomes one scan; and the scanner thread that
//! reads, parses and validates the folder off the scheduler thread.
//!
//! Only events that can change what a scan reads start one: a file or
//! folder created, written, renamed, removed or given other permissions
//! or another owner (the trust check reads both: docs/users.md).
//! Opening, reading and closing after reading do not: a scan opens every
//! file, so counting those would make every scan start the next. A batch
//! whose paths all lie below a name starting with `.` (which the walk
//! skips) starts none either. Watch errors, the kernel queue overflowing
//! among them, start a full scan; a scan compares content hashes, so
//! unchanged DAGs are untouched.

use std::path::Path;
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecommendedWatcher, RecursiveMode};
use notify_debouncer_full::{DebounceEventResult, DebouncedEvent, NoCache, new_debouncer_opt};

use crate::bus::Msg;
use crate::jobs_folder::scan::JobsFolder;
use crate::metrics::Shared;

pub(crate) const DEBOUNCE: Duration = Duration::from_millis(200);

/// Keeps the watch alive while held.
pub(crate) struct Watch {
    _debouncer: Box<dyn std::any::Any + Send>,
}

pub(crate) fn watch(dir: &Path, on_change: impl Fn() + Send + 'static) -> notify::Result<Watch> {
    let root = dir.to_path_buf();
    // Links to folders are not watched, as the walk does not enter them.
    let config = notify::Config::default().with_follow_symlinks(false);
    let handler = move |result: DebounceEventResult| match result {
        Ok(events) => {
            // The kernel queue overflowed (IN_Q_OVERFLOW): events were
            // lost, which the full scan makes up for.
            if events.iter().any(|e| e.need_rescan()) {
                tracing::warn!("jobs folder watch: event queue overflow; full rescan");
            }
            if events.iter().any(|e| changes_content(&root, e)) {
                on_change();
            }
        }
        Err(errors) => {
            for e in errors {
                tracing::warn!("jobs folder watch: {e}; rescanning");
            }
            on_change();
        }
    };
    let mut debouncer = new_debouncer_opt::<_, RecommendedWatcher, NoCache>(
        DEBOUNCE, None, handler, NoCache, config,
    )?;
    debouncer.watch(dir, RecursiveMode::Recursive)?;
    Ok(Watch {
        _debouncer: Box::new(debouncer),
    })
}

/// Whether `event` may change what a scan of `root` reads.
fn changes_content(root: &Path, event: &DebouncedEvent) -> bool {
    if event.need_rescan() {
        return true;
    }
    let kind = match event.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        // Open, read, close after reading.
        EventKind::Access(_) => false,
        // Data, names (renames) and metadata (permissions, owner).
        EventKind::Create(_) | EventKind::Remove(_) | EventKind::Modify(_) => true,
        EventKind::Any | EventKind::Other => true,
    };
    kind && (event.paths.is_empty() || event.paths.iter().any(|p| !below_dot_name(root, p)))
}

/// Whether `path` lies at or below a name starting with `.` inside `root`.
fn below_dot_name(root: &Path, path: &Path) -> bool {
    path.strip_prefix(root).is_ok_and(|rel| {
        rel.components()
            .any(|c| c.as_os_str().as_encoded_bytes().starts_with(b"."))
    })
}

/// What the scanner is asked to do.
pub(crate) enum Order {
    /// The folder changed (the watch).
    Changed,
    /// A reload: check files against `pools` from now on; the scan's
    /// result carries `ticket`.
    Reload { pools: Vec<String>, ticket: u64 },
}

/// The scheduler's end of the scanner: orders scans, each reload's with a
/// ticket its result comes back with.
pub struct ScanLink {
    orders: Sender<Order>,
    last_ticket: u64,
}

impl ScanLink {
    /// Orders a scan checked against `pools`; returns its ticket.
    pub fn reload(&mut self, pools: Vec<String>) -> u64 {
        self.last_ticket += 1;
        let ticket = self.last_ticket;
        let _ = self.orders.send(Order::Reload { pools, ticket });
        ticket
    }
}

/// A channel of orders to the scanner, its scheduler end, and a sender for
/// the watch.
pub(crate) fn scan_orders() -> (ScanLink, Sender<Order>, Receiver<Order>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let link = ScanLink {
        orders: tx.clone(),
        last_ticket: 0,
    };
    (link, tx, rx)
}

/// Starts the scanner thread: for each batch of orders, one scan of the
/// folder, sent to the scheduler as `Msg::Scanned` with the highest
/// reload ticket of the batch. It ends when every sender of orders is
/// gone, or the scheduler is.
pub(crate) fn spawn_scanner(
    mut folder: JobsFolder,
    orders: Receiver<Order>,
    scheduler: Sender<Msg>,
    metrics: Shared,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("ax-scanner".into())
        .spawn(move || {
            while let Ok(first) = orders.recv() {
                let mut ticket = None;
                for order in std::iter::once(first).chain(orders.try_iter()) {
                    if let Order::Reload { pools, ticket: t } = order {
                        folder.set_pools(pools);
                        ticket = Some(t);
                    }
                }
                let scan = scan_measured(&mut folder, &metrics);
                let msg = Msg::Scanned {
                    scan: Box::new(scan),
                    ticket,
                };
                if scheduler.send(msg).is_err() {
                    return;
                }
            }
        })
}

/// One scan, with `ax_jobs_scanning` set while it runs and its time
/// observed.
pub(crate) fn scan_measured(
    folder: &mut JobsFolder,
    metrics: &Shared,
) -> crate::jobs_folder::scan::Scan {
    metrics.jobs_scanning.set(1);
    let started = Instant::now();
    let scan = folder.scan();
    metrics
        .jobs_scan_seconds
        .observe(started.elapsed().as_secs_f64());
    metrics.jobs_scanning.set(0);
    for e in &scan.folder_errors {
        tracing::error!("jobs folder: {e}");
    }
    scan
}
