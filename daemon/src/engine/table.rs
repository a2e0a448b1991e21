//! Runs stored by id in a dense vector.
//!
//! Run ids are allocated by the engine in increasing order, so a vector
//! indexed by `id - base` replaces a hash map: no hashing, and the runs of
//! one DAG run sit next to each other. Slots hold boxes so that the holes
//! left by evicted runs cost a pointer, and leading holes are dropped, so
//! the table follows the window of runs the engine still holds.

use std::ops::Index;

use super::{Run, RunId};

#[derive(Default)]
pub struct RunTable {
    base: u64,
    slots: std::collections::VecDeque<Option<Box<Run>>>,
    len: usize,
}

impl RunTable {
    fn index_of(&self, id: RunId) -> Option<usize> {
        id.0.checked_sub(self.base).map(|i| i as usize)
    }

    pub fn get(&self, id: &RunId) -> Option<&Run> {
        self.slots.get(self.index_of(*id)?)?.as_deref()
    }

    pub fn get_mut(&mut self, id: &RunId) -> Option<&mut Run> {
        let i = self.index_of(*id)?;
        self.slots.get_mut(i)?.as_deref_mut()
    }

    pub fn contains_key(&self, id: &RunId) -> bool {
        self.get(id).is_some()
    }

    /// Inserts a run; ids below the current window (a DAG run loaded back
    /// from the store) grow the window downwards.
    pub fn insert(&mut self, id: RunId, run: Run) {
        if self.slots.is_empty() {
            self.base = id.0;
        }
        if id.0 < self.base {
            for _ in id.0..self.base {
                self.slots.push_front(None);
            }
            self.base = id.0;
        }
        let i = (id.0 - self.base) as usize;
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, || None);
        }
        if self.slots[i].replace(Box::new(run)).is_none() {
            self.len += 1;
        }
    }

    pub fn remove(&mut self, id: &RunId) -> Option<Run> {
        let i = self.index_of(*id)?;
        let run = self.slots.get_mut(i)?.take()?;
        self.len -= 1;
        while matches!(self.slots.front(), Some(None)) {
            self.slots.pop_front();
            self.base += 1;
        }
        Some(*run)
    }

    pub fn values(&self) -> impl Iterator<Item = &Run> {
        self.slots.iter().flatten().map(|b| &**b)
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
