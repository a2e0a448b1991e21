//! The claimer thread of a cluster node (SPEC §9): while this node has
//! room, it claims offered DAG runs from the database and hands them to
//! the scheduler, which adopts them into its engine. It never runs on
//! the scheduler's thread (a claim is a transaction; a step never waits
//! on the database).
//!
//! Room: the scheduler publishes after each step how many runs it has
//! running or ready to run (`Link::publish`); the claimer takes up to
//! `max_concurrency` minus that. It sleeps until woken: by an `ax_work`
//! notification (a DAG run was offered or handed back), by the scheduler
//! when its load falls, and at every heartbeat interval, since
//! notifications sent while the LISTEN connection was down are lost.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use crate::scheduler::Msg;
use crate::store::StoreError;
use crate::store::postgres::PgStore;

/// DAG runs claimed in one transaction at most.
const MAX_CLAIM: u32 = 64;

/// What the scheduler and the claimer share.
#[derive(Clone)]
pub struct Link {
    capacity: u32,
    load: Arc<AtomicU32>,
    wake: Sender<()>,
}

impl Link {
    /// The link, and the receiving end of its wake-ups (for `run`).
    pub fn new(capacity: u32) -> (Link, Receiver<()>) {
        let (wake, woken) = std::sync::mpsc::channel();
        let link = Link {
            capacity,
            load: Arc::new(AtomicU32::new(0)),
            wake,
        };
        (link, woken)
    }

    /// Something that wakes the claimer (an `ax_work` notification).
    pub fn waker(&self) -> impl Fn() + Send + Sync + 'static {
        let wake = self.wake.clone();
        move || {
            let _ = wake.send(());
        }
    }

    /// The scheduler's load after a step: runs running or ready. Falling
    /// below the capacity wakes the claimer.
    pub fn publish(&self, load: u32) {
        let old = self.load.swap(load, Ordering::SeqCst);
        if load < old && load < self.capacity {
            let _ = self.wake.send(());
        }
    }

    /// Wakes the claimer now (to see its stop flag).
    pub fn nudge(&self) {
        let _ = self.wake.send(());
    }

    /// No more claims (shutdown).
    pub fn close(&self) {
        self.load.store(u32::MAX, Ordering::SeqCst);
    }

    fn room(&self) -> u32 {
        self.capacity
            .saturating_sub(self.load.load(Ordering::SeqCst))
            .min(MAX_CLAIM)
    }
}

/// The thread body: claims while there is room, else sleeps until woken
/// or `interval` passes; ends once `stop` is set (and it is woken) or the
/// scheduler is gone.
pub fn run(
    mut store: PgStore,
    link: Link,
    woken: Receiver<()>,
    scheduler: Sender<Msg>,
    interval: Duration,
    stop: Arc<AtomicBool>,
) {
    let mut failing = false;
    while !stop.load(Ordering::SeqCst) {
        let room = link.room();
        if room > 0 {
            match store.claim(room) {
                Ok(claimed) if !claimed.dag_runs.is_empty() => {
                    failing = false;
                    let (done, adopted) = std::sync::mpsc::channel();
                    if scheduler.send(Msg::Adopt { claimed, done }).is_err() {
                        return;
                    }
                    // Until the scheduler has adopted them and published
                    // its new load; then perhaps claim more at once.
                    let _ = adopted.recv();
                    continue;
                }
                Ok(_) => failing = false,
                Err(StoreError::Fenced(id)) => crate::cluster::fenced(&id),
                Err(e) => {
                    if !failing {
                        tracing::warn!("cannot claim work: {e}");
                    }
                    failing = true;
                }
            }
        }
        match woken.recv_timeout(interval) {
            Ok(()) => while woken.try_recv().is_ok() {},
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}
