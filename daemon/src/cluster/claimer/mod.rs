//! The claimer thread of a cluster node (docs/operations.md, "Cluster"):
//! while this node has room, it claims offered DAG runs from the database
//! and hands them to the scheduler, which adopts them into its engine. It
//! never runs on the scheduler's thread (a claim is a transaction; a step
//! never waits on the database).
//!
//! Room: the scheduler publishes after each step how many runs it has
//! running or ready to run (`Link::publish`); the claimer takes up to
//! `max_concurrency` minus that. It sleeps until woken: by an `ax_work`
//! notification (a DAG run was offered or handed back), by the scheduler
//! when its load falls, and at every heartbeat interval, since
//! notifications sent while the LISTEN connection was down are lost.
//!
//! Pool slots: a pool's `slots` is the total over the cluster. Its slot
//! numbers are rows of `pool_slots`, leased to one node at a time; the
//! claimer leases free ones for pools where ready runs wait, tells the
//! engine which slot numbers it may use (`Input::Leases`), and gives back
//! slots that stayed idle for a heartbeat interval once the engine no
//! longer holds them (taking a slot away never stops a running attempt).
//! Ready runs it cannot lease for are recorded as the node's unmet demand
//! (`pool_wants`, with `NOTIFY ax_work` when it starts); a node holding
//! more than its fair share of a pool another node wants (`share`) takes
//! the excess away from its engine and gives each slot back as its
//! attempt ends, which wakes the wanting node's claimer to lease it.
//!
//! Watched DAG runs: triggered DAG runs this node offered (and, on a new
//! cron leader, those active anywhere) count for their DAG's overlap
//! policy until they end. The claimer asks the store which of them ended
//! whenever it wakes, an `ax_done` notification included, and tells the
//! scheduler.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::bus::Msg;
use crate::store::StoreError;
use crate::store::postgres::PgStore;
use ax_engine::{DagRunId, Input, PoolLease};
use share::{Claim, shares};

mod share;

/// DAG runs claimed in one transaction at most.
const MAX_CLAIM: u32 = 64;

/// What the scheduler and the claimer share.
#[derive(Clone)]
pub struct Link {
    capacity: u32,
    /// Slots leased over all pools at most: what could run at once
    /// (`max_concurrency` and burst), so that a node holding more ready
    /// runs than it can start does not keep slots from the others.
    slot_cap: u32,
    load: Arc<AtomicU32>,
    wake: Sender<()>,
    /// Each pool as of the scheduler's last step.
    pools: Arc<Mutex<Vec<PoolLease>>>,
    /// Some pool has ready runs and no free leased slot.
    wanting: Arc<AtomicBool>,
    /// Slots taken away from the engine that attempts still hold: each
    /// one's end wakes the claimer to give it back.
    draining: Arc<AtomicU32>,
    /// DAG runs of other nodes whose end the engine waits to hear of
    /// (`Engine::watched_elsewhere`), as of the scheduler's last step.
    watched: Arc<Mutex<Vec<u64>>>,
}

impl Link {
    /// The link, and the receiving end of its wake-ups (for `run`).
    pub fn new(capacity: u32, burst: u32) -> (Link, Receiver<()>) {
        let (wake, woken) = std::sync::mpsc::channel();
        let link = Link {
            capacity,
            slot_cap: capacity + burst,
            load: Arc::new(AtomicU32::new(0)),
            wake,
            pools: Arc::default(),
            wanting: Arc::default(),
            draining: Arc::default(),
            watched: Arc::default(),
        };
        (link, woken)
    }

    /// What wakes the claimer at a notification: every `ax_work` one, and
    /// an `ax_done` one (some DAG run finished) while it watches DAG runs.
    pub fn waker(&self) -> impl Fn(&str) + Send + Sync + 'static {
        let wake = self.wake.clone();
        let watched = self.watched.clone();
        move |channel| {
            if channel == crate::store::postgres::DONE_CHANNEL
                && watched.lock().unwrap_or_else(|e| e.into_inner()).is_empty()
            {
                return;
            }
            let _ = wake.send(());
        }
    }

    /// The DAG runs of other nodes the engine watches, after a step.
    pub fn watch(&self, dag_runs: Vec<u64>) {
        *self.watched.lock().unwrap_or_else(|e| e.into_inner()) = dag_runs;
    }

    /// The scheduler's state after a step: its load (runs running or
    /// ready) and its pools. A load falling below the capacity wakes the
    /// claimer, and so do a pool starting to want a slot and a slot taken
    /// away being let go by its attempt.
    pub fn publish(&self, load: u32, pools: Vec<PoolLease>) {
        let old = self.load.swap(load, Ordering::SeqCst);
        let wanting = pools.iter().any(wants_slots);
        let was_wanting = self.wanting.swap(wanting, Ordering::SeqCst);
        let draining: u32 = pools
            .iter()
            .map(|p| p.held.difference(&p.leased).count() as u32)
            .sum();
        let was_draining = self.draining.swap(draining, Ordering::SeqCst);
        *self.pools.lock().unwrap_or_else(|e| e.into_inner()) = pools;
        if (load < old && load < self.capacity)
            || (wanting && !was_wanting)
            || draining < was_draining
        {
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

/// Ready runs wait and no leased slot is free.
fn wants_slots(p: &PoolLease) -> bool {
    p.queued > 0 && p.leased.difference(&p.held).next().is_none()
}

/// The pool slots this node has leased in the database, and since when
/// each pool has had leased slots idle with nothing waiting.
#[derive(Default)]
struct Leases {
    stored: HashMap<String, BTreeSet<u32>>,
    idle_since: HashMap<String, Instant>,
    /// The size each pool's rows were last made for.
    ensured: HashMap<String, u32>,
    /// The unmet demand last recorded per pool (absent: none).
    wants: HashMap<String, u32>,
}

/// What the claimer does after a pass.
#[derive(Debug, PartialEq)]
enum Pass {
    Done,
    /// Slots were taken away from the engine: pass again once it has
    /// published, to give back those no attempt holds.
    Again,
    /// The scheduler is gone.
    Gone,
}

impl Leases {
    /// One pass over the pools: gives back slots the engine no longer
    /// uses, takes away from the engine slots above its fair share of a
    /// pool another node wants (`share`) and slots that stayed idle for
    /// an `interval`, leases more (up to that share) where ready runs
    /// wait, and records the demand it could not meet. Each change of
    /// what the engine may use goes to the scheduler, and is awaited.
    fn pass(
        &mut self,
        store: &mut PgStore,
        link: &Link,
        scheduler: &Sender<Msg>,
        interval: Duration,
    ) -> Result<Pass, StoreError> {
        let pools = link.pools.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut leased_total: u32 = pools.iter().map(|p| p.leased.len() as u32).sum();
        // Other nodes' stakes, in the pools one of them wants slots of;
        // read only while this node has a stake of its own.
        let contenders = if pools.iter().any(|p| p.queued > 0 || !p.leased.is_empty()) {
            store.contenders()?
        } else {
            HashMap::new()
        };
        let me = store.me().map(|m| m.id.clone()).unwrap_or_default();
        let mut next = Pass::Done;
        for p in &pools {
            // A pool new or grown since (a reload) gets its slot rows.
            if self.ensured.get(&p.pool) != Some(&p.slots) {
                store.ensure_pool_slots(&[(p.pool.clone(), p.slots)])?;
                self.ensured.insert(p.pool.clone(), p.slots);
            }
            let stored = self.stored.entry(p.pool.clone()).or_default();
            let stale: Vec<u32> = stored
                .iter()
                .filter(|s| !p.leased.contains(s) && !p.held.contains(s))
                .copied()
                .collect();
            if !stale.is_empty() {
                store.unlease(&p.pool, &stale)?;
                for s in &stale {
                    stored.remove(s);
                }
            }
            // This node's share while another node wants slots of the pool.
            let share = contenders.get(&p.pool).map(|others| {
                let mut claims: Vec<Claim> = others
                    .iter()
                    .map(|o| Claim {
                        node: &o.node,
                        leased: o.leased,
                        demand: o.leased + o.want,
                    })
                    .collect();
                claims.push(Claim {
                    node: &me,
                    leased: stored.len() as u32,
                    demand: p.held.len() as u32 + p.queued,
                });
                shares(p.slots, &claims)[me.as_str()]
            });
            let idle: BTreeSet<u32> = p.leased.difference(&p.held).copied().collect();
            let mut leased = p.leased.clone();
            let mut unmet = 0;
            let mut changed = false;
            if let Some(share) = share.filter(|s| leased.len() > *s as usize) {
                // Above its share: keeps the slots its attempts hold first.
                self.idle_since.remove(&p.pool);
                let (held, free): (Vec<u32>, Vec<u32>) =
                    leased.iter().partition(|s| p.held.contains(s));
                leased = held.into_iter().chain(free).take(share as usize).collect();
                leased_total -= p.leased.len() as u32 - share;
                let idle_left = leased.difference(&p.held).count() as u32;
                unmet = p.queued.saturating_sub(idle_left);
                changed = true;
                next = Pass::Again;
            } else if p.queued as usize > idle.len() {
                self.idle_since.remove(&p.pool);
                let wanted =
                    (p.queued - idle.len() as u32).min(link.slot_cap.saturating_sub(leased_total));
                let room = share.map_or(wanted, |s| {
                    wanted.min(s.saturating_sub(leased.len() as u32))
                });
                let got = if room > 0 {
                    store.lease(&p.pool, p.slots, room)?
                } else {
                    Vec::new()
                };
                unmet = wanted - got.len() as u32;
                if !got.is_empty() {
                    leased_total += got.len() as u32;
                    stored.extend(&got);
                    leased.extend(got);
                    changed = true;
                }
            } else if p.queued == 0 && !idle.is_empty() {
                let since = *self
                    .idle_since
                    .entry(p.pool.clone())
                    .or_insert_with(Instant::now);
                if since.elapsed() >= interval {
                    self.idle_since.remove(&p.pool);
                    leased.retain(|s| !idle.contains(s));
                    changed = true;
                }
            } else {
                self.idle_since.remove(&p.pool);
            }
            self.want(store, &p.pool, unmet)?;
            if !changed {
                continue;
            }
            let (done, applied) = std::sync::mpsc::channel();
            let msg = Msg::Cluster {
                input: Input::Leases {
                    pool: p.pool.clone(),
                    slots: leased.into_iter().collect(),
                },
                done: Some(done),
            };
            if scheduler.send(msg).is_err() {
                return Ok(Pass::Gone);
            }
            let _ = applied.recv();
        }
        // A pool gone from the engine (a reload) wants nothing.
        let gone: Vec<String> = self
            .wants
            .keys()
            .filter(|w| !pools.iter().any(|p| &p.pool == *w))
            .cloned()
            .collect();
        for pool in gone {
            self.want(store, &pool, 0)?;
        }
        Ok(next)
    }

    /// Records `unmet` as this node's demand for more slots of `pool`, if
    /// it changed.
    fn want(&mut self, store: &mut PgStore, pool: &str, unmet: u32) -> Result<(), StoreError> {
        if self.wants.get(pool).copied().unwrap_or(0) == unmet {
            return Ok(());
        }
        store.set_want(pool, unmet)?;
        if unmet == 0 {
            self.wants.remove(pool);
        } else {
            self.wants.insert(pool.to_string(), unmet);
        }
        Ok(())
    }
}

/// The thread body: claims while there is room, else sleeps until woken
/// or `interval` passes; ends once `stop` is set (and it is woken) or the
/// scheduler is gone.
pub(crate) fn run(
    mut store: PgStore,
    link: Link,
    woken: Receiver<()>,
    scheduler: Sender<Msg>,
    interval: Duration,
    aging: crate::store::postgres::ClaimAging,
    stop: Arc<AtomicBool>,
) {
    let mut failing = false;
    let mut leases = Leases::default();
    while !stop.load(Ordering::SeqCst) {
        let mut again = false;
        match leases.pass(&mut store, &link, &scheduler, interval) {
            Ok(Pass::Done) => {}
            Ok(Pass::Again) => again = true,
            Ok(Pass::Gone) => return,
            Err(StoreError::Fenced(id)) => crate::runtime::fencing::fenced(&id),
            Err(e) => {
                if !failing {
                    tracing::warn!("cannot lease pool slots: {e}");
                }
                failing = true;
            }
        }
        let watched = link
            .watched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if !watched.is_empty() {
            match store.ended_among(&watched) {
                Ok(ended) if !ended.is_empty() => {
                    let dag_runs = ended.into_iter().map(DagRunId).collect();
                    let (done, told) = std::sync::mpsc::channel();
                    let msg = Msg::Cluster {
                        input: Input::EndedElsewhere { dag_runs },
                        done: Some(done),
                    };
                    if scheduler.send(msg).is_err() {
                        return;
                    }
                    // Until the scheduler has published what it still watches.
                    let _ = told.recv();
                }
                Ok(_) => {}
                Err(StoreError::Fenced(id)) => crate::runtime::fencing::fenced(&id),
                Err(e) => {
                    if !failing {
                        tracing::warn!("cannot read DAG runs of other nodes: {e}");
                    }
                    failing = true;
                }
            }
        }
        let room = link.room();
        if room > 0 {
            match store.claim(room, aging) {
                Ok(claimed) if !claimed.dag_runs.is_empty() => {
                    failing = false;
                    let (done, adopted) = std::sync::mpsc::channel();
                    if scheduler.send(Msg::adopt(claimed, done)).is_err() {
                        return;
                    }
                    // Until the scheduler has adopted them and published
                    // its new load; then perhaps claim more at once.
                    let _ = adopted.recv();
                    continue;
                }
                Ok(_) => failing = false,
                Err(StoreError::Fenced(id)) => crate::runtime::fencing::fenced(&id),
                Err(e) => {
                    if !failing {
                        tracing::warn!("cannot claim work: {e}");
                    }
                    failing = true;
                }
            }
        }
        if again {
            continue;
        }
        match woken.recv_timeout(interval) {
            Ok(()) => while woken.try_recv().is_ok() {},
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}
