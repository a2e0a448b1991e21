//! Start-up, signals and shutdown of `axd` (SPEC §5.3).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::Sender;
use std::thread::JoinHandle;

use anyhow::{Context, anyhow, bail};
use ax_shared::RunState;
use nix::fcntl::{Flock, FlockArg};
use tokio::signal::unix::{SignalKind, signal};

use ax_shared::api::Role;
use ax_shared::protocol::request::{Metrics, Status};

use crate::config::Config;
use crate::engine::{Effect, Engine, Millis};
use crate::executor::{ExecConfig, Executor, sweep_orphan};
use crate::scheduler::{Handle, Msg, Parts, Peer, Scheduler};
use crate::server::{Access, bind, serve};
use crate::shutdown::Shutdown;
use crate::store::Store;
use crate::store::postgres::PgStore;
use crate::store::prune::Prune;
use crate::store::sqlite::SqliteStore;
use crate::time::now_ms;
use crate::writer::Fault;

/// How often `STATUS=` is refreshed under systemd.
const STATUS_REFRESH: std::time::Duration = std::time::Duration::from_secs(2);

/// The one line systemd shows for axd: runs running, ready runs waiting
/// for a slot, and runs that failed or timed out in the last hour.
pub fn status_line(s: &ax_shared::api::StatusView) -> String {
    let running: u32 = s.pools.iter().map(|p| p.running).sum();
    let queued = s.runs.get("ready").copied().unwrap_or(0);
    format!(
        "{running} running, {queued} queued, {} failed in the last hour",
        s.failed_last_hour
    )
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
    let file = crate::private::open_rw(&path)
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
    let started = crate::time::monotonic();
    // Private whatever the umask (`private`).
    crate::private::dir(&cfg.state_dir)
        .with_context(|| format!("cannot create state_dir {}", cfg.state_dir.display()))?;
    let log_dir = cfg.state_dir.join("logs");
    crate::private::dir(&log_dir)
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
            let host = crate::cluster::host_name();
            let id = crate::cluster::node_id(&cfg.state_dir, &host).with_context(|| {
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

    // 3. executor, writer, scheduler, jobs folder
    let (tx, rx) = std::sync::mpsc::channel::<Msg>();
    let shutdown = {
        let tx = tx.clone();
        Shutdown::new(move || {
            let _ = tx.send(Msg::Wake);
        })
    };
    let (notify_tx, _) = tokio::sync::broadcast::channel::<Arc<str>>(1024);
    if let Some((old, new)) = crate::spawn::raise_nofile() {
        tracing::debug!("open-files limit raised from {old} to {new} (jobs keep {old})");
    }
    // Orphans of jobs come to axd and are reaped here (`reaper`).
    if crate::reaper::become_subreaper() {
        tokio::spawn(crate::reaper::run());
    } else {
        tracing::warn!("cannot become a child subreaper; orphans of jobs go to PID 1");
    }
    // In a cluster, the log shipper: a thread of its own, told by the
    // executor when logs grow and attempts end.
    let (ship, logship_thread) = match &shipped_logs {
        Some(logs) => {
            let (notices, inbox) = crate::logship::channel();
            let (logs, dir) = (logs.clone(), log_dir.clone());
            let thread = std::thread::Builder::new()
                .name("ax-logship".into())
                .spawn(move || crate::logship::run(logs, dir, inbox))
                .context("cannot start the log shipper thread")?;
            for (run, attempt) in unshipped {
                notices.resumed(run, attempt);
            }
            (Some(notices), Some(thread))
        }
        None => (None, None),
    };
    let remote_logs = match (&shipped_logs, &me) {
        (Some(logs), Some((me, _))) => Some(crate::scheduler::RemoteLogs {
            logs: logs.clone(),
            node: Arc::from(me.id.as_str()),
        }),
        _ => None,
    };
    let exec_tx = {
        let tx = tx.clone();
        Executor::start(
            ExecConfig {
                log_dir: log_dir.clone(),
                socket: cfg.socket.clone(),
                log_max_bytes: Arc::new(std::sync::atomic::AtomicU64::new(cfg.log_max_bytes)),
                ship: ship.clone(),
            },
            move |ev| {
                let _ = tx.send(Msg::Exec(ev));
            },
        )
        .context("cannot start the spawner threads")?
    };
    let fault: Fault = Arc::default();
    // Bounded: a store slower than the scheduler slows the scheduler down
    // rather than letting unwritten steps pile up without end.
    let (writer_tx, writer_rx) = std::sync::mpsc::sync_channel(4096);
    let writer_thread = {
        let (notify, fault) = (notify_tx.clone(), fault.clone());
        let metrics = metrics_shared.clone();
        std::thread::Builder::new()
            .name("ax-writer".into())
            .spawn(move || crate::writer::run(writer_store, writer_rx, notify, fault, metrics))
            .context("cannot start the store writer thread")?
    };
    let (pruner, retention, orders) =
        crate::retention::Pruner::new(pruner_store, &log_dir, shutdown.clone());
    let pruner_thread = std::thread::Builder::new()
        .name("ax-pruner".into())
        .spawn(move || pruner.run(orders))
        .context("cannot start the pruner thread")?;
    // The node registry and the claimer: threads and store handles of
    // their own.
    let (heartbeat_stop, heartbeat_stopped) = std::sync::mpsc::channel::<()>();
    let claimer_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (nodes, heartbeat_thread, claimer, claimer_thread) = match (heartbeat_store, me) {
        (Some(store), Some((me, host))) => {
            let registry = crate::cluster::Registry::new(&me.id);
            let info = crate::store::postgres::NodeInfo {
                id: me.id.clone(),
                host,
                version: env!("CARGO_PKG_VERSION").into(),
                slots: cfg.max_concurrency,
                heartbeat_ms: cfg.heartbeat.as_millis() as u64,
            };
            let (link, woken) = crate::claimer::Link::new(cfg.max_concurrency, cfg.burst_extra);
            // Other nodes' events for this node's subscribers: read on a
            // thread of their own (detached: it holds nothing to flush).
            let (commits, committed) = std::sync::mpsc::channel();
            {
                let (store, tx, notify) = (store.another(), tx.clone(), notify_tx.clone());
                std::thread::Builder::new()
                    .name("ax-feed".into())
                    .spawn(move || crate::feed::run(store, committed, tx, notify))
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
                    let _ = tx.send(Msg::Lead { leader, leading });
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
                        crate::claimer::run(store, link, woken, tx, interval, aging, stop)
                    })
                    .context("cannot start the claimer thread")?
            };
            let thread = {
                let (registry, tx) = (registry.clone(), tx.clone());
                std::thread::Builder::new()
                    .name("ax-heartbeat".into())
                    .spawn(move || {
                        crate::cluster::run(store, info, registry, tx, paused, heartbeat_stopped)
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
    });
    let watcher: Arc<str> = Arc::from("watcher");
    initial.extend(scheduler.load_jobs(now, &watcher, &cron_marks));

    std::fs::create_dir_all(&cfg.jobs_dir)
        .with_context(|| format!("cannot create jobs_dir {}", cfg.jobs_dir.display()))?;
    let _watch = {
        let tx = std::sync::Mutex::new(tx.clone());
        crate::watcher::watch(&cfg.jobs_dir, move || {
            if let Ok(tx) = tx.lock() {
                let _ = tx.send(Msg::Rescan);
            }
        })
        .with_context(|| format!("cannot watch {}", cfg.jobs_dir.display()))?
    };

    // 4. accept clients, dispatch
    let socket_groups: Vec<u32> = socket_gid.into_iter().chain(admin_gid).collect();
    // The socket's folders must be axd's user's alone, before axd creates
    // what is missing and again once it has (`socket_dir`).
    let euid = nix::unistd::geteuid().as_raw();
    ax_shared::socket_dir::check(&cfg.socket, euid)?;
    let listener = bind(&cfg.socket, &socket_groups)?;
    if let Err(e) = ax_shared::socket_dir::check(&cfg.socket, euid) {
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
        metrics: metrics_shared,
        remote_logs,
    };
    let access = Access {
        owner_uid: nix::unistd::getuid().as_raw(),
        admin_gid,
        socket_gid,
    };
    let server = tokio::spawn(serve(listener, handle.clone(), access, shutdown.clone()));
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
        tokio::spawn(crate::metrics_http::serve(listener, ask, async move {
            stopping.stopped().await
        }));
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
    let code = serve_until_stopped(&shutdown, &tx, threads).await?;
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
        let main = PgStore::open(url).with_context(|| format!("cannot open {name}"))?;
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
    crate::private::sqlite_store(&db).with_context(|| format!("cannot create {}", db.display()))?;
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
    unshipped: Vec<(crate::engine::RunId, u32)>,
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
    let t_load = crate::time::monotonic();
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
    let now = now_ms();
    let seed = now as u64 ^ u64::from(std::process::id());
    let mut engine = Engine::new(cfg.engine_config(), seed);
    if let Some(me) = me {
        // Ids unique across nodes; submissions offered to every node;
        // cron only once this node holds the leader's lock.
        engine.set_ids(crate::engine::IdScheme {
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
    writer: JoinHandle<()>,
    pruner: JoinHandle<()>,
    /// The heartbeat thread and what stops it (dropped: it leaves the
    /// registry and ends).
    heartbeat: Option<(Sender<()>, JoinHandle<()>)>,
    /// The claimer thread and its stop flag.
    claimer: Option<(
        Arc<std::sync::atomic::AtomicBool>,
        Option<crate::claimer::Link>,
        JoinHandle<()>,
    )>,
    /// The log shipper and what stops it.
    logship: Option<(crate::logship::Notices, JoinHandle<()>)>,
}

/// Answers signals until the scheduler thread ends (shutdown complete, or
/// a panic), then joins the writer and the pruner and stops the socket.
/// Returns the exit code.
async fn serve_until_stopped(
    shutdown: &Shutdown,
    tx: &Sender<Msg>,
    threads: Threads,
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
    let scheduler_ended = loop {
        tokio::select! {
            _ = term.recv() => { notify(&[sd_notify::NotifyState::Stopping]); shutdown.drain(); }
            _ = int.recv() => { notify(&[sd_notify::NotifyState::Stopping]); shutdown.drain(); }
            _ = hup.recv() => {
                notify(&[sd_notify::NotifyState::Reloading]);
                let _ = tx.send(Msg::Reload);
                notify(&[sd_notify::NotifyState::Ready]);
            }
            ended = &mut scheduler_done => break ended,
        }
    };
    // The scheduler has dropped the writer's queue: the writer writes what
    // it holds, sends the answers waiting on it, and ends.
    let writer_ended = tokio::task::spawn_blocking(move || writer_thread.join()).await;
    // The scheduler has dropped the pruner's orders; the pruner stopped
    // between batches once draining began, and ends.
    let pruner_ended = tokio::task::spawn_blocking(move || pruner_thread.join()).await;
    // Every attempt has ended (the scheduler waited for them): the
    // shipper ships the rest of their logs and ends.
    let logship_ended = match logship {
        Some((notices, thread)) => {
            notices.stop();
            tokio::task::spawn_blocking(move || thread.join()).await
        }
        None => Ok(Ok(())),
    };
    // The claimer stops claiming (the scheduler that adopted is gone).
    let claimer_ended = match claimer {
        Some((stop, link, thread)) => {
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            if let Some(link) = link {
                link.nudge();
            }
            tokio::task::spawn_blocking(move || thread.join()).await
        }
        None => Ok(Ok(())),
    };
    // The heartbeat thread hands back this node's unfinished DAG runs,
    // removes its row and ends.
    let heartbeat_ended = match heartbeat {
        Some((stop, thread)) => {
            drop(stop);
            tokio::task::spawn_blocking(move || thread.join()).await
        }
        None => Ok(Ok(())),
    };
    shutdown.stop();
    Ok(exit_code(&[
        (
            "scheduler",
            scheduler_ended.unwrap_or_else(|e| Err(Box::new(e))),
        ),
        (
            "store writer",
            writer_ended.unwrap_or_else(|e| Err(Box::new(e))),
        ),
        ("pruner", pruner_ended.unwrap_or_else(|e| Err(Box::new(e)))),
        (
            "heartbeat",
            heartbeat_ended.unwrap_or_else(|e| Err(Box::new(e))),
        ),
        (
            "claimer",
            claimer_ended.unwrap_or_else(|e| Err(Box::new(e))),
        ),
        (
            "log shipper",
            logship_ended.unwrap_or_else(|e| Err(Box::new(e))),
        ),
    ]))
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
    use super::exit_code;

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
