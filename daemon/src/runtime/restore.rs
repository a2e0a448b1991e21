//! Start-up's restore: the unfinished runs loaded into a new engine, and
//! the jobs an earlier life of axd left running taken over
//! (docs/operations.md, "Upgrade"): the keepers are asked what they hold
//! (`reattach`), the engine keeps those runs running, and a keeper is
//! started for this life.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use ax_engine::{Effect, Engine, Millis, RunId};
use ax_shared::RunState;

use crate::config::Config;
use crate::execution::executor::{Forgets, sweep_orphan};
use crate::keeper::launch::Keepers;
use crate::runtime::time::{now_ms, steady_ms};
use crate::store::Store;

/// What start-up takes over from an earlier life.
pub(super) struct TakenOver {
    pub(super) restored: Restored,
    /// This life's keepers (one started already).
    pub(super) keepers: Arc<Keepers>,
    pub(super) forgets: Arc<Forgets>,
    /// Attempts to reattach, by their keeper's socket.
    pub(super) alive: HashMap<(RunId, u32), PathBuf>,
    /// Attempts that ended while no axd ran, recorded by the restore.
    pub(super) ended: Vec<((RunId, u32), PathBuf)>,
}

/// Loads the store into a new engine, taking over the jobs the keepers of
/// this state dir hold, and starts this life's keeper.
pub(super) fn take_over(
    cfg: &Config,
    store: &mut dyn Store,
    db: &str,
    me: Option<&crate::store::postgres::Me>,
) -> anyhow::Result<TakenOver> {
    // In a cluster, a keeper left without axd kills its jobs before this
    // node's lease could end (docs/operations.md, "Cluster").
    let orphan_kill_ms = cfg
        .store
        .is_some()
        .then(|| cfg.lease.saturating_sub(2 * cfg.heartbeat).as_millis() as u64);
    let keepers_dir = crate::keeper::launch::keepers_dir(&cfg.state_dir);
    // Cookies name the state dir (its device and inode): the next axd
    // finds a job that outlived this one by the same cookie.
    if let Ok(meta) = std::fs::metadata(&cfg.state_dir) {
        use std::os::unix::fs::MetadataExt;
        crate::execution::reaper::set_cookie_prefix(format!("{:x}-{:x}", meta.dev(), meta.ino()));
    }
    let inventory = super::reattach::Inventory::take(&keepers_dir, orphan_kill_ms)
        .context("cannot ask the keepers for the jobs they hold")?;
    let mut restored = restore(cfg, store, db, me, &inventory)?;
    let taken: HashSet<_> = restored.engine.reattached().into_iter().collect();
    let (reattach_alive, reattach_ended) = inventory.settle(&taken);
    let keepers = Arc::new(Keepers::new(keepers_dir, orphan_kill_ms));
    // The keeper of this life, started before serving: a failure to start
    // it stops axd here, not at the first spawn.
    keepers.current().context("cannot start the keeper")?;
    let forgets: Arc<Forgets> = Arc::default();
    Ok(TakenOver {
        restored,
        keepers,
        forgets,
        alive: reattach_alive,
        ended: reattach_ended,
    })
}

/// The engine as the store left it, with what the scheduler needs to go
/// on from there.
pub(super) struct Restored {
    pub(super) now: Millis,
    pub(super) engine: Engine,
    /// Effects of the restore, for the scheduler's first step.
    pub(super) initial: Vec<Effect>,
    pub(super) stored_terminal: BTreeMap<RunState, u64>,
    pub(super) marks: ax_engine::TriggerMarks,
    /// Attempts this node was running when its earlier life ended: the
    /// rest of their logs is shipped now (a cluster only).
    pub(super) unshipped: Vec<(ax_engine::RunId, u32)>,
    /// The paused DAGs as loaded: what the heartbeat's first read of the
    /// stored set is compared with (a cluster only).
    pub(super) paused: Vec<String>,
}

/// Loads unfinished runs into a new engine (a node of a cluster: the
/// ones it owns); processes of an earlier life die first.
fn restore(
    cfg: &Config,
    store: &mut dyn Store,
    db: &str,
    me: Option<&crate::store::postgres::Me>,
    keepers: &super::reattach::Inventory,
) -> anyhow::Result<Restored> {
    let t_load = crate::runtime::time::monotonic();
    let loaded = store.load()?;
    tracing::debug!("store load took {:?}", t_load.elapsed());
    // Processes a keeper holds for this boot go on; any other process of
    // an earlier life's attempt dies.
    let kept = keepers.alive_pids();
    let swept = loaded
        .orphans
        .iter()
        .filter(|o| !kept.contains(o))
        .filter(|(pid, start)| sweep_orphan(*pid, *start))
        .count();
    if swept > 0 {
        tracing::warn!("killed {swept} job process group(s) left by an earlier axd");
    }
    // The engine's clock (monotonic, read first here: it reads the wall
    // clock's value now, see `time`).
    let now = steady_ms();
    let seed = now_ms() as u64 ^ u64::from(std::process::id());
    let mut engine = Engine::new(cfg.engine_config(), seed);
    // `@reboot` DAGs fire once per boot id; without one, none fires.
    match super::boot::current_boot_id() {
        Ok(boot) => engine.set_boot(Some(Arc::from(boot.as_str()))),
        Err(e) => tracing::warn!("{e}: @reboot DAGs will not fire"),
    }
    if let Some(me) = me {
        // Ids unique across nodes; submissions offered to every node;
        // cron only once this node holds the leader's lock.
        engine.set_ids(ax_engine::IdScheme {
            stride: crate::store::postgres::STRIDE,
            offset: me.no,
        });
        engine.set_offering(true);
        engine.set_cron_leader(false);
        engine.set_leasing();
        engine.set_node(&me.id);
    }
    for (id, state) in &loaded.external {
        engine.note_external(*id, *state);
    }
    let running: Vec<_> = loaded
        .dag_runs
        .iter()
        .flat_map(|d| &d.runs)
        .filter(|r| r.state == RunState::Running)
        .collect();
    // Attempts a keeper may hold: the last of each running run, and the
    // next of each ready run (started by the earlier life, which died
    // before the start was committed; no pid is recorded for it).
    let recorded: HashMap<(ax_engine::RunId, u32), (Option<u32>, Option<u64>)> = running
        .iter()
        .filter_map(|r| {
            r.attempts
                .last()
                .map(|a| ((r.id, a.n), (a.pid, a.pid_start)))
        })
        .chain(
            loaded
                .dag_runs
                .iter()
                .flat_map(|d| &d.runs)
                .filter(|r| r.state == RunState::Ready)
                .map(|r| ((r.id, r.attempts.len() as u32 + 1), (None, None))),
        )
        .collect();
    let offered = keepers.for_engine(|key| recorded.get(&key).copied());
    let kept_running = offered.len();
    engine.set_reattach(offered);
    let unshipped = match me {
        Some(me) => running
            .iter()
            .filter_map(|r| r.attempts.last().map(|a| (r.id, a)))
            .filter(|(_, a)| a.node.as_deref() == Some(me.id.as_str()))
            .map(|(id, a)| (id, a.n))
            .collect(),
        None => Vec::new(),
    };
    let running_count = running.len();
    let running_keys: std::collections::HashSet<(ax_engine::RunId, u32)> = running
        .iter()
        .map(|r| (r.id, r.attempts.len() as u32))
        .collect();
    let loaded_runs: usize = loaded.dag_runs.iter().map(|d| d.runs.len()).sum();
    // Paused DAGs first: restoring dispatches, and a paused DAG's runs
    // must stay held.
    for dag in &loaded.paused {
        engine.set_paused(now, dag, true);
    }
    let initial = engine.restore(now, loaded.dag_runs, loaded.next_run, loaded.next_dag_run);
    engine.restore_trigger_queues(loaded.trigger_queues);
    tracing::debug!("restore done at {:?}", t_load.elapsed());
    let counts = store.state_counts()?;
    tracing::debug!("state counts done at {:?}", t_load.elapsed());
    let mut stored_terminal = BTreeMap::new();
    for s in RunState::ALL.into_iter().filter(|s| s.is_terminal()) {
        let total = counts.get(s.as_str()).copied().unwrap_or(0);
        stored_terminal.insert(s, total.saturating_sub(engine.count(s)));
    }
    let reattached = engine.reattached_so_far().len();
    let reattached_running = engine
        .reattached_so_far()
        .iter()
        .filter(|key| running_keys.contains(key))
        .count();
    let interrupted = running_count - reattached_running.min(running_count);
    if kept_running > reattached {
        tracing::debug!(
            "{} attempts held by keepers were not taken",
            kept_running - reattached
        );
    }
    tracing::info!(
        "store {db} loaded: {loaded_runs} runs of unfinished DAG runs, {reattached} still running (reattached), {interrupted} interrupted"
    );
    Ok(Restored {
        now,
        engine,
        initial,
        stored_terminal,
        marks: loaded.marks,
        unshipped,
        paused: loaded.paused,
    })
}
