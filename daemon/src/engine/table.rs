//! Runs stored by id in a dense vector.
//!
//! Run ids are allocated by the engine in increasing order, so a vector
//! indexed by `id - base` replaces a hash map: no hashing, and the runs of
//! one DAG run sit next to each other in memory. With a million runs in the
//! system that locality is what keeps the cost of one completion flat.

use std::ops::Index;

use super::{Run, RunId};

#[derive(Default)]
pub struct RunTable {
    base: u64,
    slots: Vec<Option<Run>>,
    len: usize,
}

impl RunTable {
    fn index_of(&self, id: RunId) -> Option<usize> {
        id.0.checked_sub(self.base).map(|i| i as usize)
    }

    pub fn get(&self, id: &RunId) -> Option<&Run> {
        self.slots.get(self.index_of(*id)?)?.as_ref()
    }

    pub fn get_mut(&mut self, id: &RunId) -> Option<&mut Run> {
        let i = self.index_of(*id)?;
        self.slots.get_mut(i)?.as_mut()
    }

    pub fn contains_key(&self, id: &RunId) -> bool {
        self.get(id).is_some()
    }

    /// Inserts a run. Ids must not go below the first id ever inserted.
    pub fn insert(&mut self, id: RunId, run: Run) {
        if self.slots.is_empty() && self.len == 0 {
            self.base = id.0;
        }
        let i = self.index_of(id).expect("run ids only grow");
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, || None);
        }
        if self.slots[i].replace(run).is_none() {
            self.len += 1;
        }
    }

    pub fn values(&self) -> impl Iterator<Item = &Run> {
        self.slots.iter().flatten()
    }

    pub fn len(&self) -> usize {
        self.len
    }
}

impl Index<&RunId> for RunTable {
    type Output = Run;
    fn index(&self, id: &RunId) -> &Run {
        self.get(id).expect("run exists")
    }
}
