//! Runs stored by id in a dense ring of slots.
//!
//! Run ids are allocated by the engine in increasing order, so a deque
//! indexed by `id - base` replaces a hash map: no hashing, no pointer
//! chasing, and the runs of one DAG run sit next to each other. Evicted
//! runs leave holes; holes at the front are dropped, so the deque follows
//! the window of runs the engine still holds. A run loaded back from far
//! below the window (a retry of an old run) goes to a small side map rather
//! than stretching the window over millions of empty slots.
//!
//! Invariant: a run is in exactly one of `slots` and `far`. The window can
//! move below a far run (it restarts at the next id inserted once it is
//! empty), so lookups try `far` first whenever it holds anything, rather
//! than judging by the id alone.

use std::collections::{HashMap, VecDeque};
use std::ops::Index;

use super::{Run, RunId};

/// How far below the window a run may be and still join it.
const NEAR: u64 = 4096;

#[derive(Default)]
pub(crate) struct RunTable {
    base: u64,
    slots: VecDeque<Option<Run>>,
    far: HashMap<RunId, Run>,
}

impl RunTable {
    pub(crate) fn get(&self, id: &RunId) -> Option<&Run> {
        if !self.far.is_empty()
            && let Some(run) = self.far.get(id)
        {
            return Some(run);
        }
        match id.0.checked_sub(self.base) {
            Some(i) => self.slots.get(i as usize)?.as_ref(),
            None => self.far.get(id),
        }
    }

    pub(crate) fn get_mut(&mut self, id: &RunId) -> Option<&mut Run> {
        if !self.far.is_empty() && self.far.contains_key(id) {
            return self.far.get_mut(id);
        }
        match id.0.checked_sub(self.base) {
            Some(i) => self.slots.get_mut(i as usize)?.as_mut(),
            None => self.far.get_mut(id),
        }
    }

    pub(crate) fn contains_key(&self, id: &RunId) -> bool {
        self.get(id).is_some()
    }

    pub(crate) fn insert(&mut self, id: RunId, run: Run) {
        if let Some(held) = self.far.get_mut(&id) {
            *held = run;
            return;
        }
        if self.slots.is_empty() {
            self.base = id.0;
        }
        if id.0 < self.base {
            if self.base - id.0 > NEAR {
                self.far.insert(id, run);
                return;
            }
            for _ in id.0..self.base {
                self.slots.push_front(None);
            }
            self.base = id.0;
        }
        let i = (id.0 - self.base) as usize;
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, || None);
        }
        self.slots[i] = Some(run);
    }

    pub(crate) fn remove(&mut self, id: &RunId) -> Option<Run> {
        let far = if self.far.is_empty() {
            None
        } else {
            self.far.remove(id)
        };
        let run = match far {
            Some(run) => run,
            None => {
                let i = id.0.checked_sub(self.base)?;
                self.slots.get_mut(i as usize)?.take()?
            }
        };
        while matches!(self.slots.front(), Some(None)) {
            self.slots.pop_front();
            self.base += 1;
        }
        Some(run)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &Run> {
        self.far.values().chain(self.slots.iter().flatten())
    }

    /// Number of runs held (tests only: the engine never asks).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.values().count()
    }
}

impl Index<&RunId> for RunTable {
    type Output = Run;
    fn index(&self, id: &RunId) -> &Run {
        self.get(id).expect("run exists")
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ax_shared::DagSpec;

    use super::*;
    use crate::DagRunId;

    fn run(id: u64) -> Run {
        let spec = Arc::new(DagSpec::adhoc("t", Vec::new()));
        Run::waiting(RunId(id), DagRunId(id), "t".into(), spec, 0, 0, Vec::new())
    }

    /// A far run stays reachable after the window empties and restarts
    /// below it (ids of a cluster's nodes arrive out of order).
    #[test]
    fn a_far_run_is_found_after_the_window_moves_below_it() {
        let mut t = RunTable::default();
        t.insert(RunId(9_000), run(9_000));
        t.insert(RunId(4_000), run(4_000));
        t.remove(&RunId(9_000));
        t.insert(RunId(100), run(100));
        assert_eq!(t.get(&RunId(4_000)).map(|r| r.id), Some(RunId(4_000)));
        assert!(t.get_mut(&RunId(4_000)).is_some());
        assert_eq!(t.values().count(), 2);
        assert_eq!(t.len(), 2);
        t.insert(RunId(4_000), run(4_000));
        assert_eq!(t.len(), 2, "a far run is replaced, not held twice");
        assert!(t.remove(&RunId(4_000)).is_some());
        assert!(t.get(&RunId(4_000)).is_none());
        assert_eq!(t.len(), 1);
    }
}
