//! Start-up, signals and shutdown of `axd` (what a stop does to running
//! jobs: docs/operations.md, "Upgrade").

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;

use anyhow::{Context, anyhow, bail};
use ax_shared::RunState;
use nix::fcntl::{Flock, FlockArg};
use tokio::signal::unix::{SignalKind, signal};

use ax_protocol::api::Role;
use ax_protocol::request::{Metrics, Status};

use crate::bus::fault::Fault;
use crate::bus::{Handle, Msg, Peer};
use crate::config::Config;
use crate::execution::executor::{ExecConfig, Executor, sweep_orphan};
use crate::runtime::shutdown::Shutdown;
use crate::runtime::time::{now_ms, steady_ms};
use crate::scheduler::{Parts, Scheduler};
use crate::server::{Access, bind, serve};
use crate::store::Store;
use crate::store::postgres::PgStore;
use crate::store::prune::Prune;
use crate::store::sqlite::SqliteStore;
use ax_engine::{Effect, Engine, Millis};

/// How often `STATUS=` is refreshed under systemd.
const STATUS_REFRESH: std::time::Duration = std::time::Duration::from_secs(2);

/// The one line systemd shows for axd: runs running, ready runs waiting
/// for a slot, runs that failed or timed out in the last hour, and a
/// store fault while there is one.
pub fn status_line(s: &ax_protocol::api::StatusView) -> String {
    let running: u32 = s.pools.iter().map(|p| p.running).sum();
    let queued = s.runs.get("ready").copied().unwrap_or(0);
    let mut line = format!(
        "{running} running, {queued} queued, {} failed in the last hour",
        s.failed_last_hour
    );
    if let Some(e) = &s.store_error {
        line.push_str("; STORE FAULT: ");
        line.push_str(e);
    }
    line
}

fn notify(state: &[sd_notify::NotifyState]) {
    let _ = sd_notify::notify(state);
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

/// Runs axd until it has shut down; the exit code says whether every
/// thread ended well (`exit_code`).
pub async fn run(cfg: Config, config_path: Option<PathBuf>) -> anyhow::Result<u8> {
    let started = crate::runtime::time::monotonic();
    // Private whatever the umask (`private`).
    crate::runtime::private::dir(&cfg.state_dir)
        .with_context(|| format!("cannot create state_dir {}", cfg.state_dir.display()))?;
    let log_dir = cfg.state_dir.join("logs");
    crate::runtime::private::dir(&log_dir)
        .with_context(|| format!("cannot create {}", log_dir.display()))?;
    let _lock = lock_state_dir(&cfg.state_dir)?;
    let admin_gid = cfg
        .admin_group
        .as_deref()
        .map(|g| gid_of(g, "admin_group"))
        .transpose()?;
    let socket_gid = cfg
        .socket_group
        .as_deref()
        .map(|g| gid_of(g, "socket_group"))
        .transpose()?;

    // 1. open the store, migrate, load unfinished runs
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
        Some(store) => {
            let host = crate::cluster::nodes::host_name();
            let id = crate::cluster::nodes::node_id(&cfg.state_dir, &host).with_context(|| {
                format!("cannot write {}", cfg.state_dir.join("node-id").display())
            })?;
            let me = store
                .register(&id)
                .with_context(|| format!("cannot register node {id} in {db}"))?;
            let pools: Vec<(String, u32)> =
                cfg.pools.iter().map(|(n, s)| (n.clone(), *s)).collect();
            store
                .ensure_pool_slots(&pools)
                .with_context(|| format!("cannot write the pool slots in {db}"))?;
            tracing::info!(
                "node {} (number {}, epoch {}) registers in {db}",
                me.id,
                me.no,
                me.epoch
            );
            Some((me, host))
        }
        None => None,
    };
    // Ends recorded while the store could not write go in before the
    // store is loaded, so their runs are not taken for interrupted ones.
    let journal = open_journal(&cfg, &mut *main)?;
    let Restored {
        now,
        engine,
        mut initial,
        stored_terminal,
        cron_marks,
        unshipped,
        paused,
    } = restore(&cfg, &mut *main, &db, me.as_ref().map(|(m, _)| m))?;

    // When each DAG last succeeded and failed: the metrics' dead man's
    // switch survives restarts.
    let dag_history = main
        .dag_history()
        .with_context(|| format!("cannot read {db}"))?;
    let metrics_shared = crate::metrics::Shared::default();

    // 2. reaper, log shipper, executor, clock, writer, pruner, cluster
    //    (heartbeat, claimer, feed), scheduler, jobs folder
    let (tx, rx) = std::sync::mpsc::channel::<Msg>();
    let shutdown = {
        let tx = tx.clone();
        Shutdown::new(move || {
            let _ = tx.send(Msg::Wake);
        })
    };
    let (notify_tx, _) = tokio::sync::broadcast::channel::<Arc<str>>(1024);
    if let Some((old, new)) = crate::execution::spawn::raise_nofile() {
        tracing::debug!("open-files limit raised from {old} to {new} (jobs keep {old})");
    }
    // Orphans of jobs come to axd and are reaped here (`reaper`).
    if crate::execution::reaper::become_subreaper() {
        tokio::spawn(crate::execution::reaper::run());
    } else {
        tracing::warn!("cannot become a child subreaper; orphans of jobs go to PID 1");
    }
    // In a cluster, the log shipper: a thread of its own, told by the
    // executor when logs grow and attempts end.
    let (ship, logship_thread) = match &shipped_logs {
        Some(logs) => {
            let (notices, inbox) = crate::logs::ship::channel();
            let (logs, dir) = (logs.clone(), log_dir.clone());
            let thread = std::thread::Builder::new()
                .name("ax-logship".into())
                .spawn(move || crate::logs::ship::run(logs, dir, inbox))
                .context("cannot start the log shipper thread")?;
            for (run, attempt) in unshipped {
                notices.resumed(run, attempt);
            }
            (Some(notices), Some(thread))
        }
        None => (None, None),
    };
    let remote_logs = match (&shipped_logs, &me) {
        (Some(logs), Some((me, _))) => Some(crate::bus::RemoteLogs {
            logs: logs.clone(),
            node: Arc::from(me.id.as_str()),
        }),
        _ => None,
    };
    let follows = crate::logs::follow::LogWatch::default();
    let exec_tx = {
        let tx = tx.clone();
        Executor::start(
            ExecConfig {
                log_dir: log_dir.clone(),
                socket: cfg.socket.clone(),
                log_max_bytes: Arc::new(std::sync::atomic::AtomicU64::new(cfg.log_max_bytes)),
                ship: ship.clone(),
                follows: follows.clone(),
            },
            move |ev| {
                let _ = tx.send(Msg::Exec(ev));
            },
        )
        .context("cannot start the spawner threads")?
    };
    {
        // A step of the wall clock wakes the scheduler at once (cron slots
        // follow the wall clock); without the timerfd, at its next wake-up.
        let tx = tx.clone();
        std::thread::Builder::new()
            .name("ax-clock".into())
            .spawn(move || {
                while crate::runtime::time::wait_for_wall_step() {
                    if tx.send(Msg::WallStepped).is_err() {
                        return;
                    }
                }
            })
            .context("cannot start the clock thread")?;
    }
    let fault = Fault::default();
    // Bounded: a store slower than the scheduler slows the scheduler down
    // rather than letting unwritten steps pile up without end.
    let (writer_tx, writer_rx) = std::sync::mpsc::sync_channel(4096);
    let state_dir = Some(state_dir_identity(&cfg)?);
    let writer_thread = {
        let parts = crate::store::writer::Parts {
            store: writer_store,
            rx: writer_rx,
            notify: notify_tx.clone(),
            fault: fault.clone(),
            metrics: metrics_shared.clone(),
            journal,
            state_dir,
            shutdown: shutdown.clone(),
        };
        std::thread::Builder::new()
            .name("ax-writer".into())
            .spawn(move || crate::store::writer::run(parts))
            .context("cannot start the store writer thread")?
    };
    let (pruner, retention, orders) =
        crate::store::retention::Pruner::new(pruner_store, &log_dir, shutdown.clone());
    let pruner_thread = std::thread::Builder::new()
        .name("ax-pruner".into())
        .spawn(move || pruner.run(orders))
        .context("cannot start the pruner thread")?;
    // The node registry and the claimer: threads and store handles of
    // their own.
    let (heartbeat_stop, heartbeat_stopped) = std::sync::mpsc::channel::<()>();
    let claimer_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (nodes, heartbeat_thread, claimer, claimer_thread) = match (heartbeat_store, me) {
        (Some(mut store), Some((me, host))) => {
            let registry = crate::cluster::nodes::Registry::new(&me.id);
            let info = crate::store::postgres::NodeInfo {
                id: me.id.clone(),
                host,
                version: env!("CARGO_PKG_VERSION").into(),
                slots: cfg.max_concurrency,
                heartbeat_ms: cfg.heartbeat.as_millis() as u64,
                lease_ms: cfg.lease.as_millis() as u64,
            };
            // A lease renewed now, after the load (however long it took)
            // and before the scheduler starts any attempt: from here the
            // heartbeat thread's guard counts.
            let registered = crate::cluster::nodes::now();
            store
                .beat(&info, true)
                .with_context(|| format!("cannot write this node's heartbeat in {db}"))?;
            let (link, woken) =
                crate::cluster::claimer::Link::new(cfg.max_concurrency, cfg.burst_extra);
            // Other nodes' events for this node's subscribers: read on a
            // thread of their own (detached: it holds nothing to flush).
            let (commits, committed) = std::sync::mpsc::channel();
            {
                let (store, tx, notify) = (store.another(), tx.clone(), notify_tx.clone());
                std::thread::Builder::new()
                    .name("ax-feed".into())
                    .spawn(move || crate::cluster::feed::run(store, committed, tx, notify))
                    .context("cannot start the feed thread")?;
            }
            let wake_claimer = link.waker();
            let me_id = me.id.clone();
            store.listen(move |channel, payload| {
                if channel != crate::store::postgres::EVENTS_CHANNEL {
                    wake_claimer(channel);
                } else if let Some((node, seqs)) = crate::store::postgres::parse_payload(payload)
                    && node != me_id
                {
                    let _ = commits.send(seqs);
                }
            });
            {
                let tx = tx.clone();
                store.lead(cfg.heartbeat, move |leader, leading| {
                    let _ = tx.send(Msg::lead(leader, leading));
                });
            }
            let claimer_thread = {
                let (store, link, tx) = (store.another(), link.clone(), tx.clone());
                let (interval, stop) = (cfg.heartbeat, claimer_stop.clone());
                let aging = crate::store::postgres::ClaimAging {
                    cap: cfg.aging_cap,
                    every: cfg.aging_every,
                };
                std::thread::Builder::new()
                    .name("ax-claimer".into())
                    .spawn(move || {
                        crate::cluster::claimer::run(store, link, woken, tx, interval, aging, stop)
                    })
                    .context("cannot start the claimer thread")?
            };
            let thread = {
                let beating = crate::cluster::nodes::Beating {
                    me: info,
                    lease: cfg.lease,
                    registered,
                    fault: fault.clone(),
                    scheduler: tx.clone(),
                    loaded_paused: paused,
                };
                let registry = registry.clone();
                std::thread::Builder::new()
                    .name("ax-heartbeat".into())
                    .spawn(move || {
                        crate::cluster::nodes::run(store, beating, registry, heartbeat_stopped)
                    })
                    .context("cannot start the heartbeat thread")?
            };
            (
                Some(registry),
                Some(thread),
                Some(link),
                Some(claimer_thread),
            )
        }
        _ => (None, None, None, None),
    };
    let claimer_nudge = claimer.clone();
    let (scan_link, scan_tx, scan_orders) = crate::jobs_folder::watcher::scan_orders();
    let mut scheduler = Scheduler::new(Parts {
        cfg: cfg.clone(),
        config_path,
        engine,
        store: main,
        exec: exec_tx,
        notify: notify_tx.clone(),
        stored_terminal,
        writer: writer_tx,
        fault,
        shutdown: shutdown.clone(),
        retention,
        own_queue: tx.clone(),
        metrics: crate::metrics::Metrics::new(metrics_shared.clone(), dag_history),
        nodes,
        claimer,
        scans: scan_link,
    });
    std::fs::create_dir_all(&cfg.jobs_dir)
        .with_context(|| format!("cannot create jobs_dir {}", cfg.jobs_dir.display()))?;
    let watcher: Arc<str> = Arc::from("watcher");
    let mut folder =
        crate::jobs_folder::scan::JobsFolder::new(&cfg.jobs_dir, scheduler.pool_names());
    initial.extend(scheduler.load_jobs(now, &watcher, &cron_marks, &mut folder));
    // Scans after this one run on their own thread; the scheduler only
    // puts their results in force (docs/operations.md, "Jobs folder: loops,
    // huge files, unreadable folders").
    crate::jobs_folder::watcher::spawn_scanner(
        folder,
        scan_orders,
        tx.clone(),
        metrics_shared.clone(),
    )
    .context("cannot start the jobs folder's scanner thread")?;
    let _watch = crate::jobs_folder::watcher::watch(&cfg.jobs_dir, move || {
        let _ = scan_tx.send(crate::jobs_folder::watcher::Order::Changed);
    })
    .with_context(|| format!("cannot watch {}", cfg.jobs_dir.display()))?;

    // 3. accept clients, dispatch
    let socket_groups: Vec<u32> = socket_gid.into_iter().chain(admin_gid).collect();
    // The socket's folders must be axd's user's alone, before axd creates
    // what is missing and again once it has (`socket_dir`).
    let euid = nix::unistd::geteuid().as_raw();
    ax_protocol::socket_dir::check(&cfg.socket, euid)?;
    let listener = bind(&cfg.socket, &socket_groups)?;
    if let Err(e) = ax_protocol::socket_dir::check(&cfg.socket, euid) {
        let _ = std::fs::remove_file(&cfg.socket);
        return Err(e.into());
    }
    let scheduler_thread = std::thread::Builder::new()
        .name("ax-scheduler".into())
        .spawn(move || scheduler.run(rx, initial))?;
    let handle = Handle {
        tx: tx.clone(),
        notify: notify_tx,
        log_dir,
        follows,
        metrics: metrics_shared,
        remote_logs,
    };
    let access = Access {
        owner_uid: nix::unistd::getuid().as_raw(),
        admin_gid,
        socket_gid,
    };
    let server = tokio::spawn(serve(
        listener,
        handle.clone(),
        access,
        cfg.limits.clone(),
        shutdown.clone(),
    ));
    if let Some(addr) = cfg.metrics_addr {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("metrics_addr {addr}: cannot listen"))?;
        tracing::info!("metrics at http://{addr}/metrics");
        let (handle, stopping) = (handle.clone(), shutdown.clone());
        let peer = Peer {
            role: Role::Viewer,
            actor: Arc::from("metrics over http"),
        };
        let ask = move || {
            let (handle, peer) = (handle.clone(), peer.clone());
            async move { handle.ask(&peer, Metrics).await.ok().map(|m| m.text) }
        };
        let limits = crate::metrics::http::HttpLimits {
            connections: cfg.limits.metrics_connections,
            header_timeout: cfg.limits.frame_timeout,
        };
        tokio::spawn(crate::metrics::http::serve(
            listener,
            ask,
            limits,
            async move { stopping.stopped().await },
        ));
    }

    tracing::info!(
        "axd {} serving {} ({} ms to ready)",
        env!("CARGO_PKG_VERSION"),
        cfg.socket.display(),
        started.elapsed().as_millis()
    );
    notify(&[
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(&format!("serving {}", cfg.socket.display())),
    ]);

    // Under systemd: `STATUS=` (what `systemctl status axd` shows) is
    // refreshed from the scheduler every few seconds, and the watchdog is
    // petted only while the scheduler answers.
    if std::env::var_os("NOTIFY_SOCKET").is_some() {
        let handle = handle.clone();
        let watchdog = sd_notify::watchdog_enabled();
        let period = watchdog.map_or(STATUS_REFRESH, |w| (w / 2).min(STATUS_REFRESH));
        tokio::spawn(async move {
            let peer = Peer {
                role: Role::Owner,
                actor: Arc::from("systemd status"),
            };
            loop {
                if let Ok(status) = handle.ask(&peer, Status).await {
                    let line = status_line(&status);
                    let mut states = vec![sd_notify::NotifyState::Status(&line)];
                    if watchdog.is_some() {
                        states.push(sd_notify::NotifyState::Watchdog);
                    }
                    notify(&states);
                }
                tokio::time::sleep(period).await;
            }
        });
    }

    let threads = Threads {
        scheduler: scheduler_thread,
        writer: writer_thread,
        pruner: pruner_thread,
        heartbeat: heartbeat_thread.map(|t| (heartbeat_stop, t)),
        claimer: claimer_thread.map(|t| (claimer_stop, claimer_nudge, t)),
        logship: ship.zip(logship_thread),
    };
    let bound = crate::runtime::shutdown::bound(cfg.shutdown_grace);
    let code = serve_until_stopped(&shutdown, &tx, threads, bound).await?;
    let _ = server.await;
    let _ = std::fs::remove_file(&cfg.socket);
    tracing::info!("axd stopped");
    Ok(code)
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

/// The engine as the store left it, with what the scheduler needs to go
/// on from there.
struct Restored {
    now: Millis,
    engine: Engine,
    /// Effects of the restore, for the scheduler's first step.
    initial: Vec<Effect>,
    stored_terminal: BTreeMap<RunState, u64>,
    cron_marks: HashMap<String, i64>,
    /// Attempts this node was running when its earlier life ended: the
    /// rest of their logs is shipped now (a cluster only).
    unshipped: Vec<(ax_engine::RunId, u32)>,
    /// The paused DAGs as loaded: what the heartbeat's first read of the
    /// stored set is compared with (a cluster only).
    paused: Vec<String>,
}

/// Loads unfinished runs into a new engine (a node of a cluster: the
/// ones it owns); processes of an earlier life die first.
fn restore(
    cfg: &Config,
    store: &mut dyn Store,
    db: &str,
    me: Option<&crate::store::postgres::Me>,
) -> anyhow::Result<Restored> {
    let t_load = crate::runtime::time::monotonic();
    let loaded = store.load()?;
    tracing::debug!("store load took {:?}", t_load.elapsed());
    let swept = loaded
        .orphans
        .iter()
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
    let interrupted = running.len();
    let unshipped = match me {
        Some(me) => running
            .iter()
            .filter_map(|r| r.attempts.last().map(|a| (r.id, a)))
            .filter(|(_, a)| a.node.as_deref() == Some(me.id.as_str()))
            .map(|(id, a)| (id, a.n))
            .collect(),
        None => Vec::new(),
    };
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
    tracing::info!(
        "store {db} loaded: {loaded_runs} runs of unfinished DAG runs, {interrupted} interrupted"
    );
    Ok(Restored {
        now,
        engine,
        initial,
        stored_terminal,
        cron_marks: loaded.cron_marks,
        unshipped,
        paused: loaded.paused,
    })
}

/// The threads axd joins at exit.
struct Threads {
    scheduler: JoinHandle<()>,
    writer: JoinHandle<Result<(), crate::store::writer::Unwritten>>,
    pruner: JoinHandle<()>,
    /// The heartbeat thread and what stops it (dropped: it leaves the
    /// registry and ends).
    heartbeat: Option<(Sender<()>, JoinHandle<()>)>,
    /// The claimer thread and its stop flag.
    claimer: Option<(
        Arc<std::sync::atomic::AtomicBool>,
        Option<crate::cluster::claimer::Link>,
        JoinHandle<()>,
    )>,
    /// The log shipper and what stops it.
    logship: Option<(crate::logs::ship::Notices, JoinHandle<()>)>,
}

/// Answers signals until the scheduler thread ends (shutdown complete, or
/// a panic), then joins the writer and the other threads and stops the
/// socket. Returns the exit code. Everything is over within `bound` of
/// the drain (`shutdown::bound`): a thread still busy then (a store call
/// that hangs) is left behind, said in the log, and the exit code is 1.
async fn serve_until_stopped(
    shutdown: &Shutdown,
    tx: &Sender<Msg>,
    threads: Threads,
    bound: std::time::Duration,
) -> anyhow::Result<u8> {
    let Threads {
        scheduler: scheduler_thread,
        writer: writer_thread,
        pruner: pruner_thread,
        heartbeat,
        claimer,
        logship,
    } = threads;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    let mut scheduler_done = tokio::task::spawn_blocking(move || scheduler_thread.join());
    let mut deadline: Option<tokio::time::Instant> = None;
    let scheduler_ended = loop {
        tokio::select! {
            _ = term.recv() => { notify(&[sd_notify::NotifyState::Stopping]); shutdown.drain(); }
            _ = int.recv() => { notify(&[sd_notify::NotifyState::Stopping]); shutdown.drain(); }
            _ = hup.recv() => {
                notify(&[sd_notify::NotifyState::Reloading]);
                let _ = tx.send(Msg::Reload);
                notify(&[sd_notify::NotifyState::Ready]);
            }
            // A signal, or a fault that stops axd (`Shutdown::fail`).
            _ = shutdown.draining(), if deadline.is_none() => {
                deadline = Some(tokio::time::Instant::now() + bound);
            }
            _ = sleep_until_opt(deadline) => break None,
            ended = &mut scheduler_done => break Some(ended),
        }
    };
    let deadline = deadline.unwrap_or_else(|| tokio::time::Instant::now() + bound);
    let mut late: Vec<&str> = Vec::new();
    let mut join = |name: &'static str, done: Option<JoinResult>| match done {
        Some(ended) => (name, ended.unwrap_or_else(|e| Err(Box::new(e)))),
        None => {
            late.push(name);
            (name, Ok(()))
        }
    };
    let scheduler = join("scheduler", scheduler_ended);
    // The scheduler has dropped the writer's queue: the writer writes what
    // it holds (for `shutdown::FINAL_WRITE` at most while the store refuses),
    // sends the answers waiting on it, and ends.
    let writer_done = within(deadline, move || writer_thread.join()).await;
    let unwritten = matches!(writer_done, Some(Ok(Ok(Err(_)))));
    let writer = join(
        "store writer",
        writer_done.map(|r| r.map(|r| r.map(|_| ()))),
    );
    // The scheduler has dropped the pruner's orders; the pruner stopped
    // between batches once draining began, and ends.
    let pruner = join(
        "pruner",
        within(deadline, move || pruner_thread.join()).await,
    );
    // Every attempt has ended (the scheduler waited for them): the
    // shipper ships the rest of their logs and ends.
    let logship_done = match logship {
        Some((notices, thread)) => {
            notices.stop();
            within(deadline, move || thread.join()).await
        }
        None => Some(Ok(Ok(()))),
    };
    let logship = join("log shipper", logship_done);
    // The claimer stops claiming (the scheduler that adopted is gone).
    let claimer_done = match claimer {
        Some((stop, link, thread)) => {
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            if let Some(link) = link {
                link.nudge();
            }
            within(deadline, move || thread.join()).await
        }
        None => Some(Ok(Ok(()))),
    };
    let claimer = join("claimer", claimer_done);
    // The heartbeat thread hands back this node's unfinished DAG runs,
    // removes its row and ends.
    let heartbeat_done = match heartbeat {
        Some((stop, thread)) => {
            drop(stop);
            within(deadline, move || thread.join()).await
        }
        None => Some(Ok(Ok(()))),
    };
    let heartbeat = join("heartbeat", heartbeat_done);
    shutdown.stop();
    let mut code = exit_code(&[scheduler, writer, pruner, heartbeat, claimer, logship]);
    if !late.is_empty() {
        tracing::error!(
            "shutdown took longer than its bound ({} s): the {} thread(s) did not end and are abandoned; what they held is not committed",
            bound.as_secs(),
            late.join(", ")
        );
        code = 1;
    }
    if unwritten {
        // The writer said what it could not commit.
        code = 1;
    }
    if shutdown.failed() {
        code = 1;
    }
    Ok(code)
}

type JoinResult = Result<std::thread::Result<()>, tokio::task::JoinError>;

/// Runs the blocking `f` (a thread's join) until `deadline`; `None` if it
/// has not returned by then (it is left running).
async fn within<T: Send + 'static>(
    deadline: tokio::time::Instant,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<Result<T, tokio::task::JoinError>> {
    tokio::time::timeout_at(deadline, tokio::task::spawn_blocking(f))
        .await
        .ok()
}

async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// axd's exit code from how its threads ended: 0 when all returned, 1 when
/// any panicked (so that systemd's `Restart=on-failure` restarts it).
pub fn exit_code(threads: &[(&str, std::thread::Result<()>)]) -> u8 {
    let mut code = 0;
    for (name, ended) in threads {
        if let Err(panic) = ended {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            tracing::error!("the {name} thread panicked: {what}");
            code = 1;
        }
    }
    code
}

#[cfg(test)]
mod tests {
    use super::{exit_code, status_line};

    #[test]
    fn the_systemd_status_line_names_a_store_fault() {
        let mut s = ax_protocol::api::StatusView::default();
        assert_eq!(
            status_line(&s),
            "0 running, 0 queued, 0 failed in the last hour"
        );
        s.store_error = Some("a commit has waited 3.0 s for the store".into());
        assert_eq!(
            status_line(&s),
            "0 running, 0 queued, 0 failed in the last hour; STORE FAULT: a commit has waited 3.0 s for the store"
        );
    }

    #[test]
    fn a_panicked_thread_makes_the_exit_code_non_zero() {
        let fine = std::thread::spawn(|| {}).join();
        let panicked = std::thread::spawn(|| panic!("scheduler invariant broken")).join();
        assert_eq!(exit_code(&[("scheduler", fine)]), 0);
        let fine = std::thread::spawn(|| {}).join();
        assert_eq!(exit_code(&[("writer", fine), ("scheduler", panicked)]), 1);
        assert_eq!(exit_code(&[]), 0);
    }
}
