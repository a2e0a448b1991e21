//! Pools of slots with their ready queues, and the retry token bucket.

use super::*;

#[derive(Debug)]
pub(super) struct Pool {
    pub(super) slots: u32,
    pub(super) running: u32,
    pub(super) free: BTreeSet<u32>,
    pub(super) queue: ReadyQueue,
    /// Running preemptible runs not yet being killed, lowest priority first,
    /// then the most recently started (least work lost).
    pub(super) victims: BTreeSet<(u8, std::cmp::Reverse<Millis>, RunId)>,
    /// Preemption kills issued for this pool and not yet reaped.
    pub(super) preempting: u32,
    /// The slot numbers this node may use, leased from the cluster
    /// (`None`: one node alone, all of them). Invariant with `held`:
    /// `free = {i < slots : i leased (or None), i not held}`.
    pub(super) leased: Option<BTreeSet<u32>>,
    /// Slot numbers running attempts hold.
    pub(super) held: BTreeSet<u32>,
}

impl Pool {
    pub(super) fn new(slots: u32) -> Pool {
        Pool {
            slots,
            running: 0,
            free: (0..slots).collect(),
            queue: ReadyQueue::default(),
            victims: BTreeSet::new(),
            preempting: 0,
            leased: None,
            held: BTreeSet::new(),
        }
    }

    /// A run may start here now: under the pool's size, on a free slot
    /// (alone, the first implies the second; in a cluster the slot must
    /// also be leased).
    pub(super) fn usable(&self) -> bool {
        self.running < self.slots && !self.free.is_empty()
    }

    /// Whether slot `i` exists and is this node's to use.
    fn mine(&self, i: u32) -> bool {
        i < self.slots && self.leased.as_ref().is_none_or(|l| l.contains(&i))
    }

    /// Takes the lowest free slot for a starting attempt.
    pub(super) fn take(&mut self) -> Option<u32> {
        let slot = self.free.pop_first()?;
        self.held.insert(slot);
        Some(slot)
    }

    /// The slot numbers this node may use from now on (a cluster). A
    /// slot taken away while held stays with its attempt until it ends.
    pub(super) fn set_leased(&mut self, leased: BTreeSet<u32>) {
        self.leased = Some(leased);
        self.free = (0..self.slots)
            .filter(|i| self.mine(*i) && !self.held.contains(i))
            .collect();
    }

    /// Gives back a slot index at an attempt's end. An index at or above
    /// `slots` was held across a shrink and no longer exists.
    pub(super) fn release(&mut self, slot: u32) {
        self.held.remove(&slot);
        if self.mine(slot) {
            self.free.insert(slot);
        }
    }

    /// Sets the pool's size; `held` are the slot indices running attempts
    /// hold. Keeps the invariant `free = {i < slots : i not held}`, so
    /// `running < slots` still implies a free slot after a shrink.
    pub(super) fn resize(&mut self, slots: u32, held: &[u32]) {
        self.slots = slots;
        self.held = held.iter().copied().collect();
        self.free = (0..slots)
            .filter(|i| self.mine(*i) && !held.contains(i))
            .collect();
    }

    /// Queues a ready run under its priority at its `ready_at`.
    pub(super) fn enqueue(&mut self, run: &Run) {
        self.queue
            .insert(run.priority(), run.ready_at.unwrap_or(0), run.id);
    }

    /// Takes a run out of the queue; `false` if it was not queued here.
    pub(super) fn dequeue(&mut self, run: &Run) -> bool {
        self.queue
            .remove(run.priority(), run.ready_at.unwrap_or(0), run.id)
    }

    /// A running preemptible run's key in `victims`.
    pub(super) fn victim(run: &Run) -> (u8, std::cmp::Reverse<Millis>, RunId) {
        (
            run.priority(),
            std::cmp::Reverse(run.started_at.unwrap_or(0)),
            run.id,
        )
    }
}

#[derive(Clone, Debug)]
pub(super) struct TokenBucket {
    pub(super) capacity: f64,
    pub(super) tokens: f64,
    pub(super) per_ms: f64,
    pub(super) last: Millis,
}

impl TokenBucket {
    pub(super) fn new(per_minute: u32) -> TokenBucket {
        let capacity = f64::from(per_minute.max(1));
        TokenBucket {
            capacity,
            tokens: capacity,
            per_ms: capacity / 60_000.0,
            last: Millis::MIN,
        }
    }
    /// A new rate (and capacity); tokens earned so far are kept up to it.
    pub(super) fn set_rate(&mut self, now: Millis, per_minute: u32) {
        self.refill(now);
        self.capacity = f64::from(per_minute.max(1));
        self.per_ms = self.capacity / 60_000.0;
        self.tokens = self.tokens.min(self.capacity);
    }
    pub(super) fn refill(&mut self, now: Millis) {
        if self.last != Millis::MIN && now > self.last {
            self.tokens = (self.tokens + (now - self.last) as f64 * self.per_ms).min(self.capacity);
        }
        self.last = self.last.max(now);
    }
    pub(super) fn take(&mut self, now: Millis) -> bool {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
    /// When the next whole token will be available.
    pub(super) fn next_token_at(&self, now: Millis) -> Millis {
        let missing = (1.0 - self.tokens).max(0.0);
        now + (missing / self.per_ms).ceil() as Millis
    }
}
