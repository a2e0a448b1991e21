//! axd's start-up that blocks: the state dir and its lock, opening (and
//! migrating) the store, registering this node of a cluster, replaying
//! the journal, loading unfinished runs into the engine, the node's first
//! heartbeat. `prepare` does all of it on the caller's thread before any
//! async runtime runs, so no store call of start-up waits inside one;
//! what it returns is what the services are started with (`services`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender};

use anyhow::{Context, anyhow, bail};
use nix::fcntl::{Flock, FlockArg};
use tokio::sync::broadcast;

use super::restore::{Restored, TakenOver};
use crate::bus::fault::Fault;
use crate::bus::{Msg, RemoteLogs};
use crate::config::Config;
use crate::execution::executor::{ExecConfig, Executor, Spawners};
use crate::runtime::shutdown::Shutdown;
use crate::scheduler::{Parts, Scheduler};
use crate::store::Store;
use crate::store::postgres::PgStore;
use crate::store::prune::Prune;
use crate::store::sqlite::SqliteStore;
use ax_engine::{Effect, Millis};

/// What the services are started with (`services::start`), made by
/// `prepare`.
pub struct Prepared {
    pub(crate) cfg: Config,
    /// Ended attempts their keepers may drop, told at exit if nothing
    /// carried them before.
    pub(crate) forgets: Arc<crate::execution::executor::Forgets>,
    /// When start-up began (for "ms to ready").
    pub(crate) started: std::time::Instant,
    /// The state dir's lock, held until axd exits.
    pub(crate) lock: StateLock,
    /// Who may use the socket.
    pub(crate) access: crate::server::Access,
    pub(crate) log_dir: PathBuf,
    /// The scheduler's queue: a sender for every service that talks to
    /// it, the receiver for the scheduler thread.
    pub(crate) tx: Sender<Msg>,
    pub(crate) rx: Receiver<Msg>,
    pub(crate) shutdown: Shutdown,
    pub(crate) notify: broadcast::Sender<Arc<str>>,
    pub(crate) metrics: crate::metrics::Shared,
    pub(crate) remote_logs: Option<RemoteLogs>,
    /// Wakes `logs -f` followers when an attempt's log grows or ends.
    pub(crate) follows: crate::logs::follow::LogWatch,
    /// The scheduler, and its first step's effects.
    pub(crate) scheduler: Scheduler,
    pub(crate) initial: Vec<Effect>,
    /// The engine's time at the restore, and the stored cron marks: what
    /// the jobs folder's first load starts from.
    pub(crate) now: Millis,
    pub(crate) marks: ax_engine::TriggerMarks,
    pub(crate) spawners: Spawners,
    pub(crate) writer: crate::store::writer::Parts,
    pub(crate) pruner: crate::store::retention::Pruner,
    pub(crate) prune_orders: Receiver<crate::store::retention::Order>,
    /// In a cluster: the log shipper's inbox and its store handle.
    pub(crate) ship: Option<Shipping>,
    /// In a cluster: the heartbeat's, the claimer's and the feed's parts.
    pub(crate) cluster: Option<ClusterParts>,
    /// The jobs folder (loaded by `services::start`, then the scanner
    /// thread's), and its orders.
    pub(crate) folder: crate::jobs_folder::scan::JobsFolder,
    pub(crate) scan_orders: Receiver<crate::jobs_folder::watcher::Order>,
    pub(crate) scan_tx: Sender<crate::jobs_folder::watcher::Order>,
    /// The notifier's end of its queue (the scheduler holds the other).
    pub(crate) mail_inbox: crate::notifier::Inbox,
}

/// The state dir's lock (`axd.lock`), held while it lives.
pub type StateLock = Flock<std::fs::File>;

/// The log shipper's parts (a cluster only).
pub(crate) struct Shipping {
    pub(crate) notices: crate::logs::ship::Notices,
    pub(crate) inbox: crate::logs::ship::Inbox,
    pub(crate) logs: crate::store::postgres::PgLogs,
}

/// What the cluster's services are started with (a PostgreSQL store).
pub(crate) struct ClusterParts {
    /// The heartbeat thread's store handle.
    pub(crate) heartbeat: PgStore,
    pub(crate) beating: crate::cluster::nodes::Beating,
    pub(crate) registry: crate::cluster::nodes::Registry,
    pub(crate) claimer: crate::cluster::claimer::Link,
    /// Woken claimer: what `Link::waker` and the scheduler send to.
    pub(crate) woken: Receiver<()>,
    pub(crate) claimer_store: PgStore,
    pub(crate) feed_store: PgStore,
    pub(crate) aging: crate::store::postgres::ClaimAging,
    pub(crate) me_id: String,
}

/// Everything up to serving, in order; nothing is started yet.
pub fn prepare(cfg: Config, config_path: Option<PathBuf>) -> anyhow::Result<Prepared> {
    let started = crate::runtime::time::monotonic();
    let (lock, log_dir) = claim_state_dir(&cfg)?;
    let access = access(&cfg)?;
    let Stores {
        mut main,
        writer: writer_store,
        pruner: pruner_store,
        heartbeat: mut heartbeat_store,
        logs: shipped_logs,
        name: db,
    } = open_stores(&cfg)?;
    // On PostgreSQL this node registers first: its number decides its
    // ids, and it loads only the DAG runs it owns.
    let me = match &mut heartbeat_store {
        Some(store) => Some(register(&cfg, store, &db)?),
        None => None,
    };
    // Ends recorded while the store could not write go in before the
    // store is loaded, so their runs are not taken for interrupted ones.
    let journal = open_journal(&cfg, &mut *main)?;
    let TakenOver {
        restored,
        keepers,
        forgets,
        alive: reattach_alive,
        ended: reattach_ended,
    } = super::restore::take_over(&cfg, &mut *main, &db, me.as_ref().map(|(m, _)| m))?;
    let metrics = crate::metrics::Shared::default();
    let seeded_metrics = seeded_metrics(&mut *main, &db, restored.now, metrics.clone())?;
    let (tx, rx) = std::sync::mpsc::channel::<Msg>();
    let shutdown = {
        let tx = tx.clone();
        Shutdown::new(move || {
            let _ = tx.send(Msg::Wake);
        })
    };
    let (notify, _) = broadcast::channel::<Arc<str>>(1024);
    if let Some((old, new)) = crate::execution::spawn::raise_nofile() {
        tracing::debug!("open-files limit raised from {old} to {new} (jobs keep {old})");
    }
    let follows = crate::logs::follow::LogWatch::default();
    let (ship, remote_logs, mut exec, spawners) = executor_parts(
        &cfg,
        &follows,
        &log_dir,
        &tx,
        (
            shipped_logs,
            me.as_ref().map(|(m, _)| m.id.as_str()),
            &restored.unshipped,
        ),
        (&keepers, &forgets),
    )?;
    exec.set_reattachable(reattach_alive, reattach_ended);
    let fault = Fault::default();
    // Bounded: a store slower than the scheduler slows the scheduler down
    // rather than letting unwritten steps pile up without end.
    let (writer_tx, writer_rx) = std::sync::mpsc::sync_channel(4096);
    let writer = crate::store::writer::Parts {
        store: writer_store,
        rx: writer_rx,
        notify: notify.clone(),
        fault: fault.clone(),
        metrics: metrics.clone(),
        journal,
        state_dir: Some(state_dir_identity(&cfg)?),
        shutdown: shutdown.clone(),
    };
    let (pruner, retention, prune_orders) =
        crate::store::retention::Pruner::new(pruner_store, &log_dir, shutdown.clone());
    let mut cluster = match (heartbeat_store, me) {
        (Some(store), Some((me, host))) => Some(cluster_parts(
            &cfg,
            store,
            me,
            host,
            &fault,
            &tx,
            &restored.paused,
        )),
        _ => None,
    };
    if let Some(c) = &mut cluster {
        first_beat(c, &db)?;
    }
    let (scan_link, scan_tx, scan_orders) = crate::jobs_folder::watcher::scan_orders();
    let (mailer, mail_inbox) = crate::notifier::channel(crate::notifier::Settings::of(&cfg));
    let Restored {
        now,
        engine,
        initial,
        stored_terminal,
        marks,
        ..
    } = restored;
    let scheduler = Scheduler::new(Parts {
        cfg: cfg.clone(),
        config_path,
        engine,
        store: main,
        exec,
        notify: notify.clone(),
        stored_terminal,
        writer: writer_tx,
        fault,
        shutdown: shutdown.clone(),
        retention,
        own_queue: tx.clone(),
        metrics: seeded_metrics,
        nodes: cluster.as_ref().map(|c| c.registry.clone()),
        claimer: cluster.as_ref().map(|c| c.claimer.clone()),
        scans: scan_link,
        mailer,
    });
    std::fs::create_dir_all(&cfg.jobs_dir)
        .with_context(|| format!("cannot create jobs_dir {}", cfg.jobs_dir.display()))?;
    let folder = crate::jobs_folder::scan::JobsFolder::new(&cfg.jobs_dir, scheduler.pool_names());
    Ok(Prepared {
        cfg,
        forgets,
        started,
        lock,
        access,
        log_dir,
        tx,
        rx,
        shutdown,
        notify,
        metrics,
        remote_logs,
        follows,
        scheduler,
        initial,
        now,
        marks,
        spawners,
        writer,
        pruner,
        prune_orders,
        ship,
        cluster,
        folder,
        scan_orders,
        scan_tx,
        mail_inbox,
    })
}

/// The executor, its spawner threads (not started) and, in a cluster, the
/// log shipper's parts and where other nodes' logs are read: the shipper
/// is told when logs grow and attempts end, the attempts of an earlier
/// life being resumed first.
#[allow(clippy::type_complexity)]
fn executor_parts(
    cfg: &Config,
    follows: &crate::logs::follow::LogWatch,
    log_dir: &Path,
    tx: &Sender<Msg>,
    (shipped_logs, me, unshipped): (
        Option<crate::store::postgres::PgLogs>,
        Option<&str>,
        &[(ax_engine::RunId, u32)],
    ),
    (keepers, forgets): (
        &Arc<crate::keeper::launch::Keepers>,
        &Arc<crate::execution::executor::Forgets>,
    ),
) -> anyhow::Result<(Option<Shipping>, Option<RemoteLogs>, Executor, Spawners)> {
    let ship = shipped_logs.clone().map(|logs| {
        let (notices, inbox) = crate::logs::ship::channel();
        for (run, attempt) in unshipped {
            notices.resumed(*run, *attempt);
        }
        Shipping {
            notices,
            inbox,
            logs,
        }
    });
    let remote_logs = match (&shipped_logs, me) {
        (Some(logs), Some(me)) => Some(RemoteLogs {
            logs: logs.clone(),
            node: Arc::from(me),
        }),
        _ => None,
    };
    let (exec, spawners) = {
        let tx = tx.clone();
        Executor::new(
            ExecConfig {
                log_dir: log_dir.to_path_buf(),
                socket: cfg.socket.clone(),
                log_max_bytes: Arc::new(std::sync::atomic::AtomicU64::new(cfg.log_max_bytes)),
                ship: ship.as_ref().map(|s| s.notices.clone()),
                follows: follows.clone(),
                job_env: Arc::new(std::sync::RwLock::new(Arc::new(
                    crate::execution::executor::JobEnv::from_config(cfg),
                ))),
                keepers: keepers.clone(),
                forgets: forgets.clone(),
            },
            move |ev| {
                let _ = tx.send(Msg::Exec(ev));
            },
        )
        .context("cannot make the spawner threads' runtimes")?
    };
    Ok((ship, remote_logs, exec, spawners))
}

/// The state dir and its `logs/` folder, private whatever the umask
/// (`private`), and the lock on it.
fn claim_state_dir(cfg: &Config) -> anyhow::Result<(Flock<std::fs::File>, PathBuf)> {
    crate::runtime::private::dir(&cfg.state_dir)
        .with_context(|| format!("cannot create state_dir {}", cfg.state_dir.display()))?;
    let log_dir = cfg.state_dir.join("logs");
    crate::runtime::private::dir(&log_dir)
        .with_context(|| format!("cannot create {}", log_dir.display()))?;
    Ok((lock_state_dir(&cfg.state_dir)?, log_dir))
}

/// Registers this node in the store's `nodes` and makes sure the pool
/// slots exist: its id, number and epoch, and its host name.
fn register(
    cfg: &Config,
    store: &mut PgStore,
    db: &str,
) -> anyhow::Result<(crate::store::postgres::Me, String)> {
    let host = crate::cluster::nodes::host_name();
    let id = crate::cluster::nodes::node_id(&cfg.state_dir, &host)
        .with_context(|| format!("cannot write {}", cfg.state_dir.join("node-id").display()))?;
    let me = store
        .register(&id)
        .with_context(|| format!("cannot register node {id} in {db}"))?;
    let pools: Vec<(String, u32)> = cfg.pools.iter().map(|(n, s)| (n.clone(), *s)).collect();
    store
        .ensure_pool_slots(&pools)
        .with_context(|| format!("cannot write the pool slots in {db}"))?;
    tracing::info!(
        "node {} (number {}, epoch {}) registers in {db}",
        me.id,
        me.no,
        me.epoch
    );
    Ok((me, host))
}

/// The cluster's services' parts: the node registry, this node's row,
/// the claimer's link and a store handle each.
fn cluster_parts(
    cfg: &Config,
    store: PgStore,
    me: crate::store::postgres::Me,
    host: String,
    fault: &Fault,
    tx: &Sender<Msg>,
    paused: &[String],
) -> ClusterParts {
    let registry = crate::cluster::nodes::Registry::new(&me.id);
    let info = crate::store::postgres::NodeInfo {
        id: me.id.clone(),
        host,
        version: env!("CARGO_PKG_VERSION").into(),
        slots: cfg.max_concurrency,
        heartbeat_ms: cfg.heartbeat.as_millis() as u64,
        lease_ms: cfg.lease.as_millis() as u64,
    };
    let (claimer, woken) = crate::cluster::claimer::Link::new(cfg.max_concurrency, cfg.burst_extra);
    ClusterParts {
        beating: crate::cluster::nodes::Beating {
            me: info,
            lease: cfg.lease,
            registered: crate::cluster::nodes::now(),
            fault: fault.clone(),
            scheduler: tx.clone(),
            loaded_paused: paused.to_vec(),
        },
        registry,
        claimer,
        woken,
        claimer_store: store.another(),
        feed_store: store.another(),
        heartbeat: store,
        aging: crate::store::postgres::ClaimAging {
            cap: cfg.aging_cap,
            every: cfg.aging_every,
        },
        me_id: me.id,
    }
}

/// A lease renewed now, after the restore (however long it took) and
/// before the scheduler starts any attempt: from here the heartbeat
/// thread's guard counts.
fn first_beat(c: &mut ClusterParts, db: &str) -> anyhow::Result<()> {
    c.heartbeat
        .beat(&c.beating.me, true)
        .with_context(|| format!("cannot write this node's heartbeat in {db}"))?;
    Ok(())
}

/// `[users] allow` as uids and gids. An unknown group is an error, as
/// for `admin_group`; an unknown user is only logged, so that removing an
/// account does not keep axd from starting at the next boot.
/// Who may use the socket, and with what role (docs/users.md).
fn access(cfg: &Config) -> anyhow::Result<crate::server::Access> {
    let gid = |group: &Option<String>, key| group.as_deref().map(|g| gid_of(g, key)).transpose();
    Ok(crate::server::Access {
        owner_uid: nix::unistd::getuid().as_raw(),
        admin_gid: gid(&cfg.admin_group, "admin_group")?,
        socket_gid: gid(&cfg.socket_group, "socket_group")?,
        ..allowed_users(&cfg.users_allow)?
    })
}

fn allowed_users(allow: &[String]) -> anyhow::Result<crate::server::Access> {
    let mut access = crate::server::Access::default();
    for entry in allow {
        if let Some(group) = entry.strip_prefix('@') {
            access.user_gids.push(gid_of(group, "users.allow")?);
        } else {
            match crate::accounts::Account::by_name(entry) {
                Ok(a) => access.user_uids.push(a.uid),
                Err(e) => tracing::warn!("users.allow: {e}: the entry allows nobody"),
            }
        }
    }
    Ok(access)
}

fn gid_of(name: &str, key: &str) -> anyhow::Result<u32> {
    match nix::unistd::Group::from_name(name) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        _ => bail!("{key} = {name:?}: no such group"),
    }
}

/// Takes the state dir's lock; a second daemon gets a clear error.
fn lock_state_dir(dir: &Path) -> anyhow::Result<Flock<std::fs::File>> {
    let path = dir.join("axd.lock");
    let file = crate::runtime::private::open_rw(&path)
        .with_context(|| format!("cannot open lock file {}", path.display()))?;
    // A few tries: a process of a just-killed axd may hold the lock for a
    // moment while it dies (systemd restarts fast).
    let mut file = file;
    let mut tries = 0;
    let locked = loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(l) => break Ok(l),
            Err((f, _)) if tries < 20 => {
                tries += 1;
                file = f;
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            Err(err) => break Err(err),
        }
    };
    let mut lock = locked.map_err(|(_, e)| {
        let holder = std::fs::read_to_string(&path).unwrap_or_default();
        anyhow!(
            "another axd owns the state dir {} ({}): {e}",
            dir.display(),
            if holder.trim().is_empty() {
                "pid unknown".to_string()
            } else {
                format!("pid {}", holder.trim())
            }
        )
    })?;
    use std::io::{Seek, Write};
    let _ = lock.set_len(0);
    let _ = lock.rewind();
    let _ = write!(lock, "{}", std::process::id());
    Ok(lock)
}

/// The store's handles: the scheduler's (reads), the writer thread's and
/// the pruner's, each used by its own thread.
struct Stores {
    main: Box<dyn Store>,
    writer: Box<dyn Store>,
    pruner: Box<dyn Prune>,
    /// The heartbeat thread's handle (PostgreSQL only).
    heartbeat: Option<PgStore>,
    /// The shipped logs (PostgreSQL only).
    logs: Option<crate::store::postgres::PgLogs>,
    /// What the log calls the store: the database file, or the URL
    /// without its password.
    name: String,
}

/// Opens (and migrates) the store the config names: PostgreSQL when
/// `store` is set, else SQLite in the state dir (one connection per
/// handle; the pruner's short batches wait for the writer's transactions
/// through the busy timeout, never the scheduler).
fn open_stores(cfg: &Config) -> anyhow::Result<Stores> {
    if let Some(url) = &cfg.store {
        let name = url.redacted();
        let url = url.with_liveness(cfg.heartbeat, cfg.lease);
        let main = PgStore::open(&url).with_context(|| format!("cannot open {name}"))?;
        return Ok(Stores {
            writer: Box::new(main.another()),
            pruner: Box::new(main.another()),
            heartbeat: Some(main.another()),
            logs: Some(main.logs()),
            main: Box::new(main),
            name,
        });
    }
    let db = cfg.state_dir.join("ax.db");
    refuse_empty_store(&db, &cfg.state_dir.join("logs"))?;
    crate::runtime::private::sqlite_store(&db)
        .with_context(|| format!("cannot create {}", db.display()))?;
    let open = || {
        SqliteStore::open(&db, cfg.synchronous_full)
            .with_context(|| format!("cannot open {}", db.display()))
    };
    Ok(Stores {
        main: Box::new(open()?),
        writer: Box::new(open()?),
        pruner: Box::new(open()?),
        heartbeat: None,
        logs: None,
        name: db.display().to_string(),
    })
}

/// The scheduler's metrics, seeded from the store so what they count
/// survives a restart: when each DAG last succeeded and failed (the dead
/// man's switch), and the failures of the hour before `now` (`ax status`).
fn seeded_metrics(
    store: &mut dyn Store,
    db: &str,
    now: Millis,
    shared: crate::metrics::Shared,
) -> anyhow::Result<crate::metrics::Metrics> {
    let dag_history = store
        .dag_history()
        .with_context(|| format!("cannot read {db}"))?;
    let recent_failures = store
        .failed_since(now - crate::metrics::FAILURE_WINDOW_MS)
        .with_context(|| format!("cannot read {db}"))?;
    let mut metrics = crate::metrics::Metrics::new(shared, dag_history);
    metrics.seed_failures(recent_failures);
    Ok(metrics)
}

/// The ends journal beside `ax.db` (`crate::store::journal`): what it holds is
/// replayed into the store, then it is emptied and given its whole size.
/// `None` on PostgreSQL (a cluster's runs are at least once), and where
/// the size cannot be reserved (said in the log).
fn open_journal(
    cfg: &Config,
    store: &mut dyn Store,
) -> anyhow::Result<Option<crate::store::journal::Journal>> {
    if cfg.store.is_some() {
        return Ok(None);
    }
    let path = cfg.state_dir.join("ax.journal");
    let (mut journal, lines) = crate::store::journal::Journal::open(&path)?;
    if !lines.is_empty() {
        let done = crate::store::journal::replay(store, &lines)
            .with_context(|| format!("cannot replay {} into the store", path.display()))?;
        tracing::warn!(
            "{}: {} run(s) whose end the store could not take before axd stopped are recorded now{}",
            path.display(),
            done.runs,
            if done.unknown > 0 {
                format!(
                    " ({} others belong to DAG runs the store never held, never acknowledged)",
                    done.unknown
                )
            } else {
                String::new()
            }
        );
        journal.clear()?;
    }
    if let Err(e) = journal.reserve() {
        tracing::warn!(
            "{e}: runs that end while the store cannot write are not recorded (they run again after a restart)"
        );
        return Ok(None);
    }
    Ok(Some(journal))
}

/// The files whose identity the writer checks (`crate::runtime::state_dir`): the
/// lock and the database; with PostgreSQL, whose database is elsewhere,
/// the lock alone, which still says whose the state dir and its logs are.
fn state_dir_identity(cfg: &Config) -> anyhow::Result<crate::runtime::state_dir::Identity> {
    let files = match &cfg.store {
        None => crate::runtime::state_dir::watched(&cfg.state_dir),
        Some(_) => vec![cfg.state_dir.join("axd.lock")],
    };
    crate::runtime::state_dir::Identity::of(&files)
        .with_context(|| format!("cannot open the files of {}", cfg.state_dir.display()))
}

/// Refuses an empty or missing `ax.db` beside a log folder that holds
/// logs: a new store would give ids from 1 again, and its runs would be
/// shown the logs of the earlier store's runs of the same ids
/// (docs/operations.md, "Empty database file").
fn refuse_empty_store(db: &Path, log_dir: &Path) -> anyhow::Result<()> {
    let len = |p: &Path| std::fs::metadata(p).map(|m| m.len()).ok();
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    // A database whose only content is still in its WAL is not empty.
    let empty = len(db).unwrap_or(0) == 0 && len(Path::new(&wal)).unwrap_or(0) == 0;
    if !empty {
        return Ok(());
    }
    let holds_logs = std::fs::read_dir(log_dir)
        .with_context(|| format!("cannot read {}", log_dir.display()))?
        .flatten()
        .any(|e| crate::logs::paths::is_log_file(&e.file_name()));
    if !holds_logs {
        return Ok(());
    }
    bail!(
        "{} is {} but {} holds the logs of an earlier store: a new store would \
         reuse their run ids. Restore ax.db from a backup, or, to start fresh, \
         move the logs away first (mv {} {}.old)",
        db.display(),
        if len(db).is_some() {
            "empty"
        } else {
            "missing"
        },
        log_dir.display(),
        log_dir.display(),
        log_dir.display()
    )
}
