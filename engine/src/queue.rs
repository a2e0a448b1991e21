//! The ready queue of one pool: O(log n) choice of the next run under aging.
//!
//! Runs are bucketed by base priority (1–100); inside a bucket they are
//! ordered by (ready_at, id). Aging raises a run's effective priority with
//! the time it has been ready, and within one bucket the oldest run has aged
//! the most, so each bucket's head is that bucket's best run. Choosing the
//! best run therefore compares at most 100 bucket heads (only the non-empty
//! ones, found from a bitmask) — O(log n) for the heads' B-tree lookups,
//! never a scan of the runs.

use std::collections::BTreeSet;

use super::{Millis, RunId};

/// Aging rule (docs/config.md, "`[aging]`"): effective = min(cap, priority +
/// ⌊ready time / every⌋); a priority above the cap is never lowered.
#[derive(Clone, Copy, Debug)]
pub struct Aging {
    pub every: Millis,
    pub cap: u8,
}

impl Aging {
    pub fn effective(&self, priority: u8, ready_at: Millis, now: Millis) -> u8 {
        if priority >= self.cap || self.every <= 0 {
            return priority;
        }
        let steps = (now - ready_at).max(0) / self.every;
        let aged = i64::from(priority) + steps;
        aged.min(i64::from(self.cap)) as u8
    }
}

/// What the scheduler compares: higher effective priority first, then
/// earlier ready time (FIFO), then lower run id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub effective: u8,
    pub priority: u8,
    pub ready_at: Millis,
    pub run: RunId,
}

impl Candidate {
    /// `true` if `self` should start before `other`.
    pub fn beats(&self, other: &Candidate) -> bool {
        (
            self.effective,
            std::cmp::Reverse(self.ready_at),
            std::cmp::Reverse(self.run),
        ) > (
            other.effective,
            std::cmp::Reverse(other.ready_at),
            std::cmp::Reverse(other.run),
        )
    }
}

#[derive(Debug)]
pub struct ReadyQueue {
    buckets: Vec<BTreeSet<(Millis, RunId)>>,
    /// Bit p set ⇔ bucket p is non-empty.
    nonempty: u128,
    len: usize,
}

impl Default for ReadyQueue {
    fn default() -> Self {
        ReadyQueue {
            buckets: (0..=100).map(|_| BTreeSet::new()).collect(),
            nonempty: 0,
            len: 0,
        }
    }
}

impl ReadyQueue {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn insert(&mut self, priority: u8, ready_at: Millis, run: RunId) {
        let p = usize::from(priority.min(100));
        if self.buckets[p].insert((ready_at, run)) {
            self.len += 1;
            self.nonempty |= 1u128 << p;
        }
    }

    pub fn remove(&mut self, priority: u8, ready_at: Millis, run: RunId) -> bool {
        let p = usize::from(priority.min(100));
        let removed = self.buckets[p].remove(&(ready_at, run));
        if removed {
            self.len -= 1;
            if self.buckets[p].is_empty() {
                self.nonempty &= !(1u128 << p);
            }
        }
        removed
    }

    /// The best run whose base priority is at least `min_priority`.
    pub fn best(&self, now: Millis, aging: Aging, min_priority: u8) -> Option<Candidate> {
        let mut mask = self.nonempty & !((1u128 << min_priority.min(127)) - 1);
        let mut best: Option<Candidate> = None;
        while mask != 0 {
            let p = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            let &(ready_at, run) = self.buckets[p].first().expect("bit set ⇒ non-empty");
            let priority = p as u8;
            let c = Candidate {
                effective: aging.effective(priority, ready_at, now),
                priority,
                ready_at,
                run,
            };
            if best.is_none_or(|b| c.beats(&b)) {
                best = Some(c);
            }
        }
        best
    }

    /// Number of queued runs with base priority ≥ `min_priority`.
    pub fn count_at_least(&self, min_priority: u8) -> usize {
        self.buckets[usize::from(min_priority.min(100))..]
            .iter()
            .map(BTreeSet::len)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AGING: Aging = Aging {
        every: 600_000,
        cap: 90,
    };

    #[test]
    fn aging_rule() {
        assert_eq!(AGING.effective(50, 0, 0), 50);
        assert_eq!(AGING.effective(50, 0, 599_999), 50);
        assert_eq!(AGING.effective(50, 0, 600_000), 51);
        assert_eq!(AGING.effective(50, 0, 600_000 * 100), 90, "capped");
        assert_eq!(
            AGING.effective(95, 0, 600_000 * 100),
            95,
            "above cap never lowered"
        );
        assert_eq!(AGING.effective(90, 0, 600_000 * 100), 90);
    }

    #[test]
    fn best_is_priority_then_fifo_then_id() {
        let mut q = ReadyQueue::default();
        q.insert(50, 10, RunId(3));
        q.insert(50, 10, RunId(2));
        q.insert(50, 5, RunId(9));
        q.insert(40, 0, RunId(1));
        assert_eq!(q.best(20, AGING, 0).unwrap().run, RunId(9));
        q.remove(50, 5, RunId(9));
        assert_eq!(q.best(20, AGING, 0).unwrap().run, RunId(2));
        // A priority-40 run ready for 20 periods (60) beats a priority-50
        // run ready for 9 (59), but not one ready for 11 (61).
        let mut aged = ReadyQueue::default();
        aged.insert(40, 0, RunId(1));
        aged.insert(50, 11 * 600_000, RunId(2));
        assert_eq!(aged.best(20 * 600_000, AGING, 0).unwrap().run, RunId(1));
        let mut aged = ReadyQueue::default();
        aged.insert(40, 0, RunId(1));
        aged.insert(50, 9 * 600_000, RunId(2));
        assert_eq!(aged.best(20 * 600_000, AGING, 0).unwrap().run, RunId(2));
        assert_eq!(
            q.best(20, AGING, 45).unwrap().run,
            RunId(2),
            "min priority filter"
        );
        assert!(q.best(20, AGING, 60).is_none());
        assert_eq!(q.count_at_least(45), 2);
        assert_eq!(q.len(), 3);
    }
}
