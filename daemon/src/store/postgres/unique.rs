//! `--unique` across nodes (`--unique`, docs/cli.md): a node looks a key up in the store
//! and then commits the DAG run it creates with it, so two nodes doing so
//! at the same instant could both find nothing and both create one. Holds
//! close that window: a transaction-scoped advisory lock on each key,
//! taken before the look-up and released by ending the transaction once
//! the step that created the DAG run is durable. A second node waits for
//! the lock, then finds the first one's DAG run and deduplicates to it.
//!
//! One transaction holds every key of one scheduler step: a step never
//! waits for a key it already holds, and two nodes taking two keys in
//! opposite orders form a cycle PostgreSQL's deadlock detector sees (one
//! of the two submits is refused after `deadlock_timeout`) instead of one
//! spread over connections that only `lock_timeout` would end.

use std::collections::HashSet;
use std::sync::Arc;

use deadpool_postgres::Object;

use super::{PgStore, Shared};
use crate::store::{Hold, StoreError};

/// How long a node waits for another to end its hold on a key (its
/// commit, normally milliseconds) before the submit is refused: short,
/// as the wait stalls the waiting node's scheduler thread.
const HOLD_WAIT: &str = "2s";
/// A hold left idle this long (its node frozen or cut off before its
/// commit) is ended by the server, which frees its keys.
const HOLD_IDLE: &str = "30s";

/// The keys one step holds, until dropped.
pub(super) struct UniqueHolds {
    client: Option<Object>,
    keys: HashSet<String>,
    shared: Arc<Shared>,
}

impl Drop for UniqueHolds {
    /// Ends the transaction on the store's runtime without waiting: holds
    /// are dropped on the writer thread, which must not stall on them. A
    /// connection that fails to roll back is taken out of the pool (the
    /// server releases the locks when it closes).
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        if let Some(rt) = self.shared.rt.0.as_ref() {
            rt.spawn(async move {
                if client.batch_execute("ROLLBACK").await.is_err() {
                    drop(Object::take(client));
                }
            });
        }
    }
}

impl PgStore {
    /// Holds `key` in this handle's open holds (opened on first use).
    pub(super) fn hold_key(&mut self, key: &str) -> Result<(), StoreError> {
        if self.holds.as_ref().is_some_and(|h| h.keys.contains(key)) {
            return Ok(());
        }
        let shared = self.shared.clone();
        let opened = match self.holds.take() {
            Some(h) => h,
            None => {
                let client = shared.block_on(async {
                    let client = shared.holds.get().await?;
                    let begun = client
                        .batch_execute(&format!(
                            "BEGIN; SET LOCAL lock_timeout = '{HOLD_WAIT}'; \
                             SET LOCAL idle_in_transaction_session_timeout = '{HOLD_IDLE}'"
                        ))
                        .await;
                    match begun {
                        Ok(()) => Ok(client),
                        Err(e) => {
                            drop(Object::take(client));
                            Err(StoreError::from(e))
                        }
                    }
                })?;
                UniqueHolds {
                    client: Some(client),
                    keys: HashSet::new(),
                    shared: shared.clone(),
                }
            }
        };
        let holds = self.holds.insert(opened);
        let client = holds.client.as_ref().expect("set until dropped");
        // A failed wait (deadlock, timeout) is undone alone: the keys
        // already held stay held for the commit they guard.
        shared.block_on(async {
            client.batch_execute("SAVEPOINT hold").await?;
            let locked = client
                .execute(
                    "SELECT pg_advisory_xact_lock(hashtextextended('ax-unique:' || $1, 0))",
                    &[&key],
                )
                .await;
            match locked {
                Ok(_) => Ok(()),
                Err(e) => {
                    client.batch_execute("ROLLBACK TO SAVEPOINT hold").await?;
                    Err(StoreError::from(e))
                }
            }
        })?;
        holds.keys.insert(key.to_string());
        Ok(())
    }

    /// The holds taken since the last call, to be dropped once the step
    /// they guard is durable.
    pub(super) fn take_key_holds(&mut self) -> Option<Hold> {
        self.holds.take().map(|h| Box::new(h) as Hold)
    }
}
