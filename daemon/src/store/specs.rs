//! DAG specs as both stores keep them: JSON text, deduplicated by a
//! content hash, written once per content.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use ax_shared::DagSpec;

use super::{Commit, StoreError};

/// A stable content hash (FNV-1a, 64 bit) to dedupe stored specs.
pub(crate) fn content_hash(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// `SpecHashes` is not swept below this size.
const SPEC_SWEEP_MIN: usize = 10_000;

/// The content hash per spec allocation a store has written. Specs are
/// shared by every DAG run of one DAG version: hashed once per `Arc` and
/// stored once per content.
pub(crate) struct SpecHashes {
    /// The `Weak` keeps the allocation's address from being reused while
    /// the entry exists, so a pointer key never maps to another spec's hash.
    by_ptr: HashMap<usize, (Weak<DagSpec>, String)>,
    /// When `by_ptr` is next swept of dead specs: twice its size after the
    /// last sweep, so the sweeps cost O(1) per entry amortised even when
    /// every live run has a spec of its own (ad-hoc submissions).
    sweep_at: usize,
    /// The entries the last `new_specs` added: unwritten if that commit
    /// fails (`rollback`).
    pending: Vec<usize>,
}

impl Default for SpecHashes {
    fn default() -> SpecHashes {
        SpecHashes {
            by_ptr: HashMap::new(),
            sweep_at: SPEC_SWEEP_MIN,
            pending: Vec::new(),
        }
    }
}

impl SpecHashes {
    /// Hashes the specs of `c.dag_runs` not seen before; returns the
    /// `(hash, text)` pairs the commit must insert (if absent).
    pub(crate) fn new_specs(
        &mut self,
        c: &Commit<'_>,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let mut new_specs = Vec::new();
        self.pending.clear();
        if self.by_ptr.len() > self.sweep_at {
            self.by_ptr.retain(|_, (w, _)| w.strong_count() > 0);
            self.sweep_at = (2 * self.by_ptr.len()).max(SPEC_SWEEP_MIN);
        }
        for d in &c.dag_runs {
            let key = Arc::as_ptr(&d.spec) as usize;
            if let std::collections::hash_map::Entry::Vacant(slot) = self.by_ptr.entry(key) {
                let text = serde_json::to_string(&*d.spec)
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?;
                let hash = content_hash(&text);
                slot.insert((Arc::downgrade(&d.spec), hash.clone()));
                self.pending.push(key);
                new_specs.push((hash, text));
            }
        }
        Ok(new_specs)
    }

    /// Forgets the specs the last `new_specs` added: their commit failed,
    /// so the retry must write them again.
    pub(crate) fn rollback(&mut self) {
        for key in self.pending.drain(..) {
            self.by_ptr.remove(&key);
        }
    }

    /// The hash of a spec `new_specs` has seen.
    pub(crate) fn hash_of(&self, spec: &Arc<DagSpec>) -> &str {
        &self.by_ptr[&(Arc::as_ptr(spec) as usize)].1
    }
}

/// A DAG definition as stored: `(hash, JSON text)`.
pub(crate) fn def_text(def: &DagSpec) -> Result<(String, String), StoreError> {
    let text = serde_json::to_string(def).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Ok((content_hash(&text), text))
}

/// A DAG definition's version as the nodes of a cluster compare it: the
/// content hash of its JSON without `file`, since nodes may keep the same
/// jobs folder in different places.
pub(crate) fn definition_hash(def: &DagSpec) -> String {
    let mut value = serde_json::to_value(def).unwrap_or_default();
    if let Some(fields) = value.as_object_mut() {
        fields.remove("file");
    }
    content_hash(&value.to_string())
}

/// Parses a stored spec.
pub(crate) fn parse_spec(text: &str, what: &str) -> Result<DagSpec, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_definition_hash_ignores_where_the_file_is() {
        let mut a = DagSpec::adhoc("etl", vec![]);
        a.file = "/srv/a/jobs/etl.toml".into();
        let mut b = a.clone();
        b.file = "/srv/b/jobs/etl.toml".into();
        assert_eq!(definition_hash(&a), definition_hash(&b));
        assert_ne!(def_text(&a).unwrap().0, def_text(&b).unwrap().0);
        b.schedule = Some("0 3 * * *".into());
        assert_ne!(definition_hash(&a), definition_hash(&b));
    }
}
