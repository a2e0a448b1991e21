//! The store writer: one thread that makes the scheduler's steps durable,
//! so the scheduler does not wait for an fsync (only for room in the
//! writer's bounded queue, when the store falls that far behind).
//!
//! The scheduler decides a step, sends its spawn and kill orders at once,
//! and hands the step's changes to this thread with the answers and the
//! notification that depend on them. The writer takes every step waiting
//! in its queue and writes them in **one** transaction (group commit across
//! steps), then sends the answers and notifications in step order.
//!
//! Invariants:
//! * a client hears of a change (answer or notification) only after it is
//!   durable;
//! * steps are written in the order they were decided; a DAG definition
//!   change is written in a transaction of its own, so a delete and a
//!   re-create are never merged out of order;
//! * when the store refuses a write (disk full), nothing is dropped: the
//!   steps are held and retried every second with later ones added, and
//!   `fault` says why so the scheduler refuses new writes meanwhile; the
//!   held steps' rows go to the journal (`crate::store::journal`), so that a
//!   shutdown that gives up on them (`shutdown::FINAL_WRITE` after the
//!   scheduler ended) loses no run's end;
//! * an answer goes out only while the state dir is the one axd locked
//!   (`crate::runtime::state_dir`): once it is found deleted, every write is
//!   refused and axd stops with exit code 1;
//! * a commit that has waited longer than a heartbeat (a stalled store
//!   that neither answers nor fails) is a store fault too, and so, in a
//!   cluster, is a lease not renewed for two heartbeats ([`Fault`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use ax_protocol::api::{EventView, StatusView};
use ax_protocol::{Changed, Notification, RpcError, codes};
use ax_shared::time::Timestamp;
use tokio::sync::broadcast;

use crate::bus::Step;
use crate::bus::fault::Fault;
use crate::store::journal::Journal;
use crate::store::{Commit, Store};
use ax_engine::{Event, Run};

/// How often a failing store is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// How long the writer waits for more steps before a commit.
const LINGER: Duration = Duration::from_millis(2);

/// Steps merged into one transaction at most.
const MAX_GROUP: usize = 512;

/// What the writer thread is given.
pub(crate) struct Parts {
    pub store: Box<dyn Store>,
    pub rx: Receiver<Step>,
    pub notify: broadcast::Sender<Arc<str>>,
    pub fault: Fault,
    pub metrics: crate::metrics::Shared,
    /// Where held steps are recorded while the store refuses them (SQLite;
    /// `None` on PostgreSQL, whose runs are then at least once).
    pub journal: Option<Journal>,
    /// Checked after each commit, before its answers go out.
    pub state_dir: Option<crate::runtime::state_dir::Identity>,
    pub shutdown: crate::runtime::shutdown::Shutdown,
}

/// Steps the writer could not commit before it gave up (shutdown).
#[derive(Debug)]
pub(crate) struct Unwritten {
    pub steps: usize,
    pub runs: usize,
    pub answers: usize,
}

/// The writer thread's body. Ends `Ok` once the scheduler has dropped its
/// queue and everything is written; `Err` when it gave up on held steps,
/// `shutdown::FINAL_WRITE` after the scheduler ended (said in the log).
pub(crate) fn run(parts: Parts) -> Result<(), Unwritten> {
    let Parts {
        mut store,
        rx,
        notify,
        fault,
        metrics,
        mut journal,
        state_dir,
        shutdown,
    } = parts;
    let mut pending: Vec<Step> = Vec::new();
    // `pending[..journaled]` are in the journal.
    let mut journaled: usize = 0;
    // When the scheduler dropped its end of the queue.
    let mut closed: Option<Instant> = None;
    // Set once the state dir is found gone: nothing is acknowledged again.
    let mut lost: Option<String> = None;
    loop {
        if pending.is_empty() {
            if closed.is_some() {
                return Ok(());
            }
            match rx.recv() {
                Ok(s) => pending.push(s),
                Err(_) => return Ok(()),
            }
        }
        // Linger a little for more steps: a commit's cost is mostly per
        // transaction (WAL frames of the pages touched, the fsync), so
        // fewer, larger groups leave the CPU to the jobs. Starts are not
        // delayed (spawn orders go out before the step reaches here); only
        // answers and notifications wait, by at most LINGER.
        // The writer sleeps through the linger rather than waiting on the
        // queue: steps sent meanwhile wake nobody (each wake-up is a
        // context switch, a real share of a no-op run's cost).
        std::thread::sleep(LINGER);
        while pending.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(s) => pending.push(s),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    closed.get_or_insert_with(Instant::now);
                    break;
                }
            }
        }
        if let Some(why) = &lost {
            refuse(pending.drain(..), why);
            journaled = 0;
            continue;
        }
        // The group: up to the first step that changes definitions (which
        // goes alone), in order.
        let group = match pending.iter().position(Step::has_definitions) {
            Some(0) => 1,
            Some(i) => i,
            None => pending.len(),
        };
        // An empty commit returns at once (`Commit::is_empty`).
        let began = Instant::now();
        fault.writing(Some(began));
        let result = store.commit(&Commit::merged(pending[..group].iter().map(|s| &s.changes)));
        fault.writing(None);
        match &result {
            Ok(_) => metrics
                .store_commit_seconds
                .observe(began.elapsed().as_secs_f64()),
            Err(_) => {
                metrics.store_write_errors.inc();
            }
        }
        // A commit into a deleted state dir succeeds (or fails for that
        // reason): either way it is not durable, and nothing more will be.
        if let Some(Err(why)) = state_dir.as_ref().map(|s| s.check()) {
            tracing::error!(
                "{why}: refusing every write from now on and stopping; \
                 what this axd accepted since cannot be kept"
            );
            fault.set_error(why.clone());
            shutdown.fail();
            refuse(pending.drain(..), &why);
            journaled = 0;
            lost = Some(why);
            continue;
        }
        match result {
            Ok(seqs) => {
                if let Some(e) = fault.take_error() {
                    tracing::warn!("store writable again (after: {e})");
                }
                journaled = journaled.saturating_sub(group);
                deliver(pending.drain(..group), &seqs, &notify);
                // Everything the journal holds is in the store now.
                if pending.is_empty()
                    && let Some(j) = journal.as_mut().filter(|j| !j.is_empty())
                    && let Err(e) = j.clear()
                {
                    tracing::error!("{e}: its lines are replayed again at the next start");
                }
            }
            Err(crate::store::StoreError::Fenced(id)) => crate::runtime::fencing::fenced(&id),
            Err(e) => {
                let error = e.to_string();
                let held = pending.len();
                if fault.set_error(error.clone()) {
                    tracing::error!(
                        "store commit failed: {error}; holding {held} step(s), refusing new writes until it recovers"
                    );
                }
                if let Some(j) = journal.as_mut() {
                    journaled = record(j, &pending, journaled);
                }
                if closed.is_some_and(|t| t.elapsed() >= crate::runtime::shutdown::FINAL_WRITE) {
                    return Err(give_up(pending, journaled, journal.as_ref(), &error));
                }
                wait_retry(&rx, &mut pending, &mut closed);
            }
        }
    }
}

/// Sends the committed steps' answers and notifications, in order
/// (`seqs`: the sequence numbers of their events).
fn deliver(steps: impl Iterator<Item = Step>, seqs: &[i64], notify: &broadcast::Sender<Arc<str>>) {
    let mut at = 0;
    for step in steps {
        let n = step.changes.events.len();
        let seqs = seqs.get(at..at + n).unwrap_or(&[]);
        at += n;
        // `on_commit` queues its message to the scheduler before any
        // client hears of the step: a request a client sends after its
        // answer is then handled after that message (a triggered run read
        // back is no longer "being written").
        if let Some(on_commit) = step.on_commit {
            on_commit();
        }
        for (reply, answer) in step.replies {
            let _ = reply.send(answer);
        }
        announce(
            notify,
            &step.changes.events,
            &step.progress,
            step.status,
            seqs,
        );
    }
}

/// Appends the held steps not yet in the journal (`pending[journaled..]`);
/// returns how many of `pending` the journal holds now.
fn record(journal: &mut Journal, pending: &[Step], journaled: usize) -> usize {
    if journaled >= pending.len() {
        return journaled;
    }
    match journal.append(&pending[journaled..]) {
        Ok(()) => pending.len(),
        Err(e) => {
            tracing::error!(
                "{e}: {} held step(s) are not recorded; if axd stops before the \
                 store recovers, their runs run again",
                pending.len() - journaled
            );
            journaled
        }
    }
}

/// Waits `RETRY` before the next try, still taking steps in (they are
/// held too); notes when the scheduler has dropped its end of the queue.
fn wait_retry(rx: &Receiver<Step>, pending: &mut Vec<Step>, closed: &mut Option<Instant>) {
    let until = Instant::now() + RETRY;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        match rx.recv_timeout(left) {
            Ok(s) => pending.push(s),
            Err(RecvTimeoutError::Timeout) => return,
            // The scheduler has stopped: what is held is tried again, for
            // `shutdown::FINAL_WRITE`.
            Err(RecvTimeoutError::Disconnected) => {
                closed.get_or_insert_with(Instant::now);
                std::thread::sleep(left);
                return;
            }
        }
    }
}

/// Answers the steps' requests with an error instead of their answers;
/// their changes are dropped.
fn refuse(steps: impl Iterator<Item = Step>, why: &str) {
    for step in steps {
        for (reply, _) in step.replies {
            let _ = reply.send(Err(RpcError::new(
                codes::STORE_ERROR,
                format!("not accepted: {why}"),
            )));
        }
    }
}

/// Says what is left unwritten at shutdown, and answers its requests
/// with the error.
fn give_up(
    pending: Vec<Step>,
    journaled: usize,
    journal: Option<&Journal>,
    error: &str,
) -> Unwritten {
    let left = Unwritten {
        steps: pending.len(),
        runs: pending.iter().map(|s| s.changes.runs.len()).sum(),
        answers: pending.iter().map(|s| s.replies.len()).sum(),
    };
    // Each run as its latest step has it.
    let latest: BTreeMap<u64, &Run> = pending
        .iter()
        .flat_map(|s| &s.changes.runs)
        .map(|r| (r.id.0, r))
        .collect();
    let ended: Vec<&Run> = latest
        .into_values()
        .filter(|r| r.state.is_terminal())
        .collect();
    // The first few by id; the count says the rest.
    const NAMED: usize = 20;
    let mut ends: Vec<String> = ended
        .iter()
        .take(NAMED)
        .map(|r| format!("{}({})", r.id.0, r.state.as_str()))
        .collect();
    if ended.len() > NAMED {
        ends.push(format!("and {} more", ended.len() - NAMED));
    }
    let recorded = match journal {
        Some(j) if journaled == pending.len() => format!(
            "all recorded in {}, written to the store at the next start",
            j.path().display()
        ),
        Some(j) => format!(
            "{} of {} step(s) recorded in {}; the runs of the others run again",
            journaled,
            pending.len(),
            j.path().display()
        ),
        None => "no journal here: runs that ended meanwhile run again".to_string(),
    };
    tracing::error!(
        "shutdown: the store still refuses writes ({error}); {} step(s) not committed: \
         {} run change(s), ended runs [{}], {} answer(s) refused; {recorded}",
        left.steps,
        left.runs,
        ends.join(" "),
        left.answers,
    );
    refuse(
        pending.into_iter(),
        &format!("axd stopped before the store could write it ({error})"),
    );
    left
}

/// One transaction's worth of steps. A run or DAG run changed by several
/// steps is written once, as the latest step has it.
fn announce(
    notify: &broadcast::Sender<Arc<str>>,
    events: &[Event],
    progress: &[u64],
    status: Option<StatusView>,
    seqs: &[i64],
) {
    let Some(status) = status else {
        return;
    };
    if notify.receiver_count() == 0 || (events.is_empty() && progress.is_empty()) {
        return;
    }
    let events = events
        .iter()
        .enumerate()
        .map(|(i, ev)| EventView {
            seq: seqs.get(i).copied().unwrap_or(0),
            time: Timestamp::from_millis(ev.at),
            run: ev.run.map(|r| r.0),
            dag_run: ev.dag_run.0,
            from: ev.from,
            to: ev.to,
            reason: ev.reason.clone(),
            actor: ev.actor.to_string(),
        })
        .collect();
    let note = Notification::Changed(Changed {
        events,
        progress: progress.to_vec(),
        status: Box::new(status),
    });
    let _ = notify.send(Arc::from(note.to_line()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::answer::Answer;
    use crate::store::{EventQuery, LastDagRun, Loaded, RunQuery, StoreError};
    use ax_protocol::api::RunView;
    use ax_shared::DagSpec;
    use std::collections::HashMap;
    use tokio::sync::oneshot;

    /// A store whose writes always fail (PostgreSQL out of reach); it is
    /// never read.
    struct Refusing;

    impl Store for Refusing {
        fn commit(&mut self, _: &crate::store::Commit<'_>) -> Result<Vec<i64>, StoreError> {
            Err(StoreError::Postgres("connection refused".into()))
        }
        fn load(&mut self) -> Result<Loaded, StoreError> {
            unreachable!()
        }
        fn list_runs(&mut self, _: &RunQuery) -> Result<Vec<RunView>, StoreError> {
            unreachable!()
        }
        fn get_run(&mut self, _: u64) -> Result<Option<RunView>, StoreError> {
            unreachable!()
        }
        fn run_events(&mut self, _: u64, _: usize) -> Result<Vec<EventView>, StoreError> {
            unreachable!()
        }
        fn events(&mut self, _: &EventQuery) -> Result<Vec<EventView>, StoreError> {
            unreachable!()
        }
        fn run_state(&mut self, _: u64) -> Result<Option<ax_shared::RunState>, StoreError> {
            unreachable!()
        }
        fn state_counts(&mut self) -> Result<BTreeMap<String, u64>, StoreError> {
            unreachable!()
        }
        fn failed_since(&mut self, _: i64) -> Result<Vec<i64>, StoreError> {
            unreachable!()
        }
        fn last_dag_runs(&mut self) -> Result<HashMap<String, LastDagRun>, StoreError> {
            unreachable!()
        }
        fn dag_history(
            &mut self,
        ) -> Result<HashMap<String, crate::metrics::DagHistory>, StoreError> {
            unreachable!()
        }
        fn newest_with_unique_key(
            &mut self,
            _: &str,
        ) -> Result<Option<ax_engine::UniqueHolder>, StoreError> {
            unreachable!()
        }
        fn load_dag_run(
            &mut self,
            _: u64,
        ) -> Result<Option<ax_engine::RestoredDagRun>, StoreError> {
            unreachable!()
        }
        fn load_dag_defs(&mut self) -> Result<Vec<DagSpec>, StoreError> {
            unreachable!()
        }
        fn dag_run_spec(&mut self, _: u64) -> Result<Option<Arc<DagSpec>>, StoreError> {
            unreachable!()
        }
    }

    #[test]
    fn a_store_that_never_writes_is_given_up_on_final_write_after_the_queue_closes() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (reply, answer) = oneshot::channel();
        let step = Step {
            replies: vec![(reply, Ok(Answer::from(ax_protocol::api::Done { ok: true })))],
            ..Step::default()
        };
        tx.send(step).unwrap();
        let fault = Fault::default();
        let parts = Parts {
            store: Box::new(Refusing),
            rx,
            notify: broadcast::channel(1).0,
            fault: fault.clone(),
            metrics: crate::metrics::Shared::default(),
            journal: None,
            state_dir: None,
            shutdown: crate::runtime::shutdown::Shutdown::new(|| {}),
        };
        let writer = std::thread::spawn(move || run(parts));
        // The scheduler ends a little later.
        std::thread::sleep(Duration::from_millis(300));
        let closed = Instant::now();
        drop(tx);
        let left = writer.join().unwrap().expect_err("nothing was written");
        let took = closed.elapsed();
        assert!(took >= crate::runtime::shutdown::FINAL_WRITE, "{took:?}");
        assert!(
            took < crate::runtime::shutdown::FINAL_WRITE + RETRY * 2,
            "{took:?}"
        );
        assert_eq!((left.steps, left.answers), (1, 1));
        // The waiting request hears why, rather than nothing.
        let err = answer.blocking_recv().unwrap().unwrap_err();
        assert_eq!(err.data.unwrap()["code"], codes::STORE_ERROR);
        assert!(fault.has_error());
    }
}
