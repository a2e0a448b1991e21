//! Start-up: the attempts that keepers hold from an earlier life of axd
//! (docs/operations.md, "Upgrade"), offered to the engine's restore, and
//! what becomes of those it does not take.
//!
//! An attempt is offered only when its keeper started in this boot (the
//! kernel's boot id): after a reboot nothing of an earlier life can run,
//! and a keeper that says otherwise is not believed. A pid is trusted
//! because its keeper is its parent and has not reaped it, which is what
//! the keeper's record says; the store's pid and start time of the
//! attempt must match it too.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use ax_engine::{Reattach, RunId};

use crate::keeper::launch::{Found, inventory};
use crate::keeper::wire::{HeldAttempt, Reply, Request};

type Key = (RunId, u32);

/// The keepers found at start-up, and the runtime their connections live on.
pub(crate) struct Inventory {
    runtime: tokio::runtime::Runtime,
    found: Vec<Found>,
    boot: Option<String>,
}

/// What the executor is given: attempts to reattach (by their keeper's
/// socket) and ended ones its keeper may drop once the restore is
/// committed.
pub(crate) type ForExecutor = (HashMap<Key, PathBuf>, Vec<(Key, PathBuf)>);

impl Inventory {
    /// Asks every keeper in `dir` what it holds.
    pub(crate) fn take(dir: &Path, orphan_kill_ms: Option<u64>) -> std::io::Result<Inventory> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let found = runtime.block_on(inventory(dir, orphan_kill_ms));
        let boot = crate::runtime::boot::current_boot_id()
            .ok()
            .map(|b| b.as_str().to_owned());
        Ok(Inventory {
            runtime,
            found,
            boot,
        })
    }

    /// Whether the keeper's attempts belong to this boot.
    fn of_this_boot(&self, f: &Found) -> bool {
        self.boot.is_some() && f.conn.boot_id == self.boot
    }

    fn held(&self) -> impl Iterator<Item = (&Found, &HeldAttempt)> {
        self.found
            .iter()
            .filter(|f| self.of_this_boot(f))
            .flat_map(|f| f.attempts.iter().map(move |a| (f, a)))
    }

    /// The processes that keepers hold alive: the start-up sweep spares
    /// them.
    pub(crate) fn alive_pids(&self) -> HashSet<(u32, Option<u64>)> {
        self.held()
            .filter(|(_, a)| a.exit.is_none())
            .map(|(_, a)| (a.pid, a.pid_start))
            .collect()
    }

    /// The attempts to offer the engine's restore. `stored` gives the pid
    /// and start time the store recorded for an attempt, when it did: a
    /// record that names another process is not taken.
    pub(crate) fn for_engine(
        &self,
        stored: impl Fn(Key) -> Option<(Option<u32>, Option<u64>)>,
    ) -> HashMap<Key, Reattach> {
        let time = crate::keeper::wire::monotonic_ms();
        let steady = crate::runtime::time::steady_ms();
        let engine_time = |mono: i64| steady - (time - mono).max(0);
        self.held()
            .filter(|(_, a)| {
                match stored((RunId(a.run), a.attempt)) {
                    // Not recorded yet (the step that started it was not
                    // committed): the keeper's word is all there is.
                    Some((None, _)) => true,
                    Some((Some(pid), start)) => {
                        pid == a.pid && (start.is_none() || start == a.pid_start)
                    }
                    None => false,
                }
            })
            .map(|(_, a)| {
                (
                    (RunId(a.run), a.attempt),
                    Reattach {
                        spawned: engine_time(a.spawned_mono_ms),
                        slot: a.slot,
                        ended: a
                            .exit
                            .map(|e| (engine_time(e.at_mono_ms), e.code, e.signal)),
                    },
                )
            })
            .collect()
    }

    /// After the restore: attempts the engine did not take are killed (a
    /// run the store says is not running must not go on twice) and
    /// dropped; every keeper found is told to retire. Returns what the
    /// executor needs of the ones taken.
    pub(crate) fn settle(self, taken: &HashSet<Key>) -> ForExecutor {
        let mut alive = HashMap::new();
        let mut ended = Vec::new();
        let this_boot: Vec<bool> = self.found.iter().map(|f| self.of_this_boot(f)).collect();
        let Inventory { runtime, found, .. } = self;
        runtime.block_on(async {
            for (f, this_boot) in found.iter().zip(this_boot) {
                for a in &f.attempts {
                    let key = (RunId(a.run), a.attempt);
                    if this_boot && taken.contains(&key) {
                        if a.exit.is_none() {
                            alive.insert(key, f.conn.path.clone());
                        } else {
                            // What is left of its group goes, as when a
                            // supervised job's leader exits.
                            crate::execution::executor::sweep_orphan(a.pid, a.pid_start);
                            ended.push((key, f.conn.path.clone()));
                        }
                        continue;
                    }
                    if a.exit.is_none() && a.pid > 1 {
                        tracing::warn!(
                            run = a.run,
                            attempt = a.attempt,
                            pid = a.pid,
                            "killing a job process an earlier axd left that the store does not \
                             hold as running{}",
                            if this_boot {
                                ""
                            } else {
                                " (its keeper is from another boot)"
                            }
                        );
                        // SAFETY: kill takes integers only. The keeper has
                        // not reaped the leader (no exit recorded), so the
                        // pid is still its group's.
                        unsafe { libc::kill(-(a.pid as i32), libc::SIGKILL) };
                    }
                    let _ = f
                        .conn
                        .tell(&Request::Forget {
                            attempts: vec![(a.run, a.attempt)],
                        })
                        .await;
                }
                if let Ok((other, _)) = f.conn.request(&Request::Retire, &[]).await
                    && !matches!(other, Reply::Retiring)
                {
                    tracing::warn!("keeper {}: {other:?}", f.conn.path.display());
                }
            }
        });
        (alive, ended)
    }
}
