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
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .read(true)
        .open(&path)
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
    std::fs::create_dir_all(&cfg.state_dir)
        .with_context(|| format!("cannot create state_dir {}", cfg.state_dir.display()))?;
    let log_dir = cfg.state_dir.join("logs");
    std::fs::create_dir_all(&log_dir)
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
    let db = cfg.state_dir.join("ax.db");
    let mut store = SqliteStore::open(&db, cfg.synchronous_full)
        .with_context(|| format!("cannot open {}", db.display()))?;
    let Restored {
        now,
        engine,
        mut initial,
        stored_terminal,
        cron_marks,
    } = restore(&cfg, &mut store, &db)?;

    // When each DAG last succeeded and failed: the metrics' dead man's
    // switch survives restarts.
    let dag_history = store
        .dag_history()
        .with_context(|| format!("cannot read {}", db.display()))?;
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
    let exec_tx = {
        let tx = tx.clone();
        Executor::start(
            ExecConfig {
                log_dir: log_dir.clone(),
                socket: cfg.socket.clone(),
                log_max_bytes: Arc::new(std::sync::atomic::AtomicU64::new(cfg.log_max_bytes)),
            },
            move |ev| {
                let _ = tx.send(Msg::Exec(ev));
            },
        )
        .context("cannot start the spawner threads")?
    };
    // A second connection for the writer thread; the scheduler's serves
    // reads.
    let writer_store = SqliteStore::open(&db, cfg.synchronous_full)
        .with_context(|| format!("cannot open {}", db.display()))?;
    let fault: Fault = Arc::default();
    // Bounded: a store slower than the scheduler slows the scheduler down
    // rather than letting unwritten steps pile up without end.
    let (writer_tx, writer_rx) = std::sync::mpsc::sync_channel(4096);
    let writer_thread = {
        let (notify, fault) = (notify_tx.clone(), fault.clone());
        let metrics = metrics_shared.clone();
        std::thread::Builder::new()
            .name("ax-writer".into())
            .spawn(move || {
                crate::writer::run(Box::new(writer_store), writer_rx, notify, fault, metrics)
            })
            .context("cannot start the store writer thread")?
    };
    // The pruner's own connection: its short batches wait for the writer's
    // transactions (busy timeout), never the scheduler.
    let pruner_store = SqliteStore::open(&db, cfg.synchronous_full)
        .with_context(|| format!("cannot open {}", db.display()))?;
    let (pruner, retention, orders) =
        crate::retention::Pruner::new(pruner_store, &db, &log_dir, shutdown.clone());
    let pruner_thread = std::thread::Builder::new()
        .name("ax-pruner".into())
        .spawn(move || pruner.run(orders))
        .context("cannot start the pruner thread")?;
    let mut scheduler = Scheduler::new(Parts {
        cfg: cfg.clone(),
        config_path,
        engine,
        store: Box::new(store),
        exec: exec_tx,
        notify: notify_tx.clone(),
        stored_terminal,
        writer: writer_tx,
        fault,
        shutdown: shutdown.clone(),
        retention,
        own_queue: tx.clone(),
        metrics: crate::metrics::Metrics::new(metrics_shared.clone(), dag_history),
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
    let listener = bind(&cfg.socket, &socket_groups)?;
    let scheduler_thread = std::thread::Builder::new()
        .name("ax-scheduler".into())
        .spawn(move || scheduler.run(rx, initial))?;
    let handle = Handle {
        tx: tx.clone(),
        notify: notify_tx,
        log_dir,
        metrics: metrics_shared,
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
    };
    let code = serve_until_stopped(&shutdown, &tx, threads).await?;
    let _ = server.await;
    let _ = std::fs::remove_file(&cfg.socket);
    tracing::info!("axd stopped");
    Ok(code)
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
}

/// Loads unfinished runs into a new engine; processes of an earlier life
/// die first.
fn restore(cfg: &Config, store: &mut SqliteStore, db: &Path) -> anyhow::Result<Restored> {
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
    for (id, state) in &loaded.external {
        engine.note_external(*id, *state);
    }
    let interrupted = loaded
        .dag_runs
        .iter()
        .flat_map(|d| &d.runs)
        .filter(|r| r.state == RunState::Running)
        .count();
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
        "store {} loaded: {loaded_runs} runs of unfinished DAG runs, {interrupted} interrupted",
        db.display()
    );
    Ok(Restored {
        now,
        engine,
        initial,
        stored_terminal,
        cron_marks: loaded.cron_marks,
    })
}

/// The threads axd joins at exit.
struct Threads {
    scheduler: JoinHandle<()>,
    writer: JoinHandle<()>,
    pruner: JoinHandle<()>,
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
