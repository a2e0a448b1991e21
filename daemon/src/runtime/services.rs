//! Every thread and task of axd, in the order `start` starts them; they
//! stop in the reverse order (`Services::stop_all`). Start-up that
//! blocks on the store (opening it, the restore, the first heartbeat) is
//! done before any of them (`startup::prepare`); the jobs folder's first
//! load runs just before the scanner starts, once the heartbeat renews
//! the lease.
//!
//! | # | service | thread / task | owns | stops |
//! |---|---------|---------------|------|-------|
//! | 1 | socket server | task on axd's runtime, one task per connection | the Unix socket | `Shutdown::stop` (last) |
//! | 2 | metrics endpoint | task (only with `metrics_addr`) | the TCP listener | `Shutdown::stop` |
//! | 3 | orphan reaper | task | the signalfd for SIGCHLD | detached: ends with the process |
//! | 4 | store notifier | task on the store's runtime (cluster) | the LISTEN connection | detached: ends with the store |
//! | 5 | store elector | task on the store's runtime (cluster) | the cron leader's lock | detached: ends with the store |
//! | 6 | heartbeat | `ax-heartbeat` + its lease guard (cluster) | this node's row, the lease | its stop sender dropped: hands back its DAG runs, leaves |
//! | 7 | claimer | `ax-claimer` (cluster) | claims of offered DAG runs, pool leases | a stop flag and a nudge |
//! | 8 | feed | `ax-feed` (cluster) | reading other nodes' events | detached: ends when the LISTEN side or the scheduler is gone |
//! | 9 | log shipper | `ax-logship` (cluster) | copying log files to the store | `Notices::stop`: ships the rest, ends |
//! | 10 | spawners | `ax-spawner-0..3`, a runtime each | the job processes and their supervision | detached: live as long as the process (`PR_SET_PDEATHSIG`) |
//! | 11 | clock | `ax-clock` | the wall-clock step timerfd | detached: ends at the next step once the scheduler is gone |
//! | 12 | pruner | `ax-pruner` | retention's store handle and log deletion | ends when the scheduler drops its orders |
//! | 13 | notifier | `ax-notifier` | running `mail_command` for DAG runs' mail | ends when the scheduler and the writer have dropped its queue, after the sends under way |
//! | 14 | store writer | `ax-writer` | the store's write handle, the journal | ends when the scheduler drops its queue, after writing what it holds |
//! | 15 | jobs folder scanner | `ax-scanner` | the jobs folder's scans | detached: ends when its orders or the scheduler are gone |
//! | 16 | jobs folder watcher | `notify`'s own thread | the inotify watch | dropped |
//! | 17 | scheduler | `ax-scheduler` | the engine, the store's read handle, the executor | drained (SIGTERM, SIGINT, `Shutdown::fail`): ends once its jobs have |
//! | 18 | systemd status | task (under systemd) | `STATUS=` and the watchdog | detached: ends with the runtime |
//!
//! So the scheduler stops first, then the writer commits what it holds
//! (handing the notifier the DAG runs that ended), the notifier sends
//! their mail, the pruner, the shipper, the claimer and the heartbeat
//! end, and the socket answers until all of them have.
//!
//! A mail sent after the scheduler ended has no event: the scheduler
//! records them.

use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::Context;
use ax_protocol::api::Role;
use ax_protocol::request::Metrics;

use crate::bus::{Handle, Msg, Peer};
use crate::runtime::startup::{ClusterParts, Prepared, Shipping, StateLock};
use crate::server::{Access, bind, serve};

/// One thread or task: its name (as the log says it), what stops it and
/// how it is waited for.
pub(crate) struct Service {
    name: &'static str,
    stop: Option<Box<dyn FnOnce()>>,
    join: Join,
}

enum Join {
    /// A thread, joined within the shutdown bound; `false` from it: it
    /// ended leaving work undone (the writer's unwritten steps).
    Thread(JoinHandle<bool>),
    /// The scheduler thread, already waited for by the signal loop.
    Watched,
    /// A task, awaited.
    Task(tokio::task::JoinHandle<()>),
    /// Not waited for: it ends with the process (the table above says
    /// why that is safe).
    Detached,
}

impl Service {
    fn thread(name: &'static str, stop: Option<Box<dyn FnOnce()>>, t: JoinHandle<bool>) -> Self {
        Service {
            name,
            stop,
            join: Join::Thread(t),
        }
    }

    fn detached(name: &'static str) -> Self {
        Service {
            name,
            stop: None,
            join: Join::Detached,
        }
    }
}

/// How the joined threads ended.
pub(crate) struct Stopped {
    /// Each joined thread, in stop order: `Err` when it panicked.
    pub(crate) ended: Vec<(&'static str, std::thread::Result<()>)>,
    /// Threads still busy at the bound, left behind.
    pub(crate) late: Vec<&'static str>,
    /// A thread ended leaving work undone (it said what in the log).
    pub(crate) undone: bool,
}

pub(crate) type JoinResult = Result<std::thread::Result<bool>, tokio::task::JoinError>;

/// The started services, in start order.
pub(crate) struct Services {
    list: Vec<Service>,
    /// The scheduler thread, until the signal loop takes it.
    scheduler: Option<JoinHandle<bool>>,
}

impl Services {
    /// The scheduler thread's end, for the signal loop to wait on.
    pub(crate) fn scheduler_ended(&mut self) -> tokio::task::JoinHandle<std::thread::Result<bool>> {
        let t = self
            .scheduler
            .take()
            .expect("the scheduler is started once");
        tokio::task::spawn_blocking(move || t.join())
    }

    /// Stops and joins every service in the reverse of the start order,
    /// all within `deadline`; `scheduler` is how the scheduler ended
    /// (`None`: not by the deadline).
    pub(crate) async fn stop_all(
        self,
        scheduler: Option<JoinResult>,
        deadline: tokio::time::Instant,
    ) -> Stopped {
        let mut stopped = Stopped {
            ended: Vec::new(),
            late: Vec::new(),
            undone: false,
        };
        let mut scheduler = Some(scheduler);
        for service in self.list.into_iter().rev() {
            if let Some(stop) = service.stop {
                stop();
            }
            let done = match service.join {
                Join::Thread(t) => within(deadline, move || t.join()).await,
                Join::Watched => scheduler.take().flatten(),
                Join::Task(task) => {
                    let _ = task.await;
                    continue;
                }
                Join::Detached => continue,
            };
            let ended = match done {
                Some(Ok(Ok(clean))) => {
                    stopped.undone |= !clean;
                    Ok(())
                }
                Some(Ok(Err(panic))) => Err(panic),
                Some(Err(e)) => Err(Box::new(e) as Box<dyn std::any::Any + Send>),
                None => {
                    stopped.late.push(service.name);
                    Ok(())
                }
            };
            stopped.ended.push((service.name, ended));
        }
        stopped
    }
}

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

fn spawn_thread(
    name: &str,
    what: &str,
    body: impl FnOnce() -> bool + Send + 'static,
) -> anyhow::Result<JoinHandle<bool>> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(body)
        .with_context(|| format!("cannot start the {what} thread"))
}

/// Starts every service, in the order of the table above.
/// Also hands back the scheduler's `Handle` and the state dir's lock,
/// which axd holds until it exits.
pub(crate) async fn start(p: Prepared) -> anyhow::Result<(Services, Handle, StateLock)> {
    let Prepared {
        cfg,
        forgets: _,
        started,
        access,
        log_dir,
        tx,
        rx,
        shutdown,
        notify,
        metrics,
        remote_logs,
        follows,
        mut scheduler,
        mut initial,
        now,
        marks,
        spawners,
        writer,
        pruner,
        prune_orders,
        ship,
        cluster,
        mut folder,
        scan_orders,
        scan_tx,
        mail_inbox,
        lock,
    } = p;
    let mut list = Vec::new();
    let handle = Handle {
        tx: tx.clone(),
        notify,
        log_dir,
        metrics: metrics.clone(),
        remote_logs,
        follows,
    };
    list.push(socket_server(&cfg, access, &handle, &shutdown)?);
    // 2. The metrics endpoint.
    if let Some(addr) = cfg.metrics_addr {
        list.push(metrics_endpoint(addr, &cfg, &handle, &shutdown).await?);
    }
    // 3. The orphan reaper: orphans of jobs come to axd and are reaped here.
    if crate::execution::reaper::become_subreaper() {
        tokio::spawn(crate::execution::reaper::run());
    } else {
        tracing::warn!("cannot become a child subreaper; orphans of jobs go to PID 1");
    }
    list.push(Service::detached("orphan reaper"));
    // 4-8. The cluster's services.
    if let Some(c) = cluster {
        start_cluster(c, &cfg, &tx, &handle.notify, &mut list)?;
    }
    // 9. The log shipper.
    if let Some(s) = ship {
        list.push(log_shipper(s, &handle)?);
    }
    // 10. The spawners.
    spawners
        .start()
        .context("cannot start the spawner threads")?;
    list.push(Service::detached("spawners"));
    // 11. The clock: a step of the wall clock wakes the scheduler at once
    // (cron slots follow the wall clock); without the timerfd, at its
    // next wake-up.
    {
        let tx = tx.clone();
        spawn_thread("ax-clock", "clock", move || {
            while crate::runtime::time::wait_for_wall_step() {
                if tx.send(Msg::WallStepped).is_err() {
                    break;
                }
            }
            true
        })?;
        list.push(Service::detached("clock"));
    }
    // 12. The pruner.
    let t = spawn_thread("ax-pruner", "pruner", move || {
        pruner.run(prune_orders);
        true
    })?;
    list.push(Service::thread("pruner", None, t));
    // 13. The notifier: before the writer, which hands it the
    // DAG runs that ended, so it is stopped after.
    let (dir, queue) = (handle.log_dir.clone(), tx.clone());
    let t = spawn_thread("ax-notifier", "notifier", move || {
        crate::notifier::run(mail_inbox, dir, queue)
    })?;
    list.push(Service::thread("notifier", None, t));
    // 14. The store writer.
    let t = spawn_thread("ax-writer", "store writer", move || {
        crate::store::writer::run(writer).is_ok()
    })?;
    list.push(Service::thread("store writer", None, t));
    // The jobs folder's first load, into the scheduler before its thread
    // starts. On a blocking thread: it reads files and the store, and the
    // socket server (this runtime's tasks) answers meanwhile.
    let (scheduler, folder, loaded) = tokio::task::spawn_blocking(move || {
        let watcher: Arc<str> = Arc::from("watcher");
        let loaded = scheduler.load_jobs(now, &watcher, &marks, &mut folder);
        (scheduler, folder, loaded)
    })
    .await
    .context("the jobs folder's first load failed")?;
    initial.extend(loaded);
    // 15. The jobs folder's scanner: scans after the first run on their
    // own thread; the scheduler only puts their results in force
    // (docs/operations.md).
    crate::jobs_folder::watcher::spawn_scanner(folder, scan_orders, tx.clone(), metrics)
        .context("cannot start the jobs folder's scanner thread")?;
    list.push(Service::detached("jobs folder scanner"));
    // 16. The jobs folder's watcher.
    let watch = crate::jobs_folder::watcher::watch(&cfg.jobs_dir, move || {
        let _ = scan_tx.send(crate::jobs_folder::watcher::Order::Changed);
    })
    .with_context(|| format!("cannot watch {}", cfg.jobs_dir.display()))?;
    list.push(Service {
        name: "jobs folder watcher",
        stop: Some(Box::new(move || drop(watch))),
        join: Join::Detached,
    });
    // 17. The scheduler.
    let t = std::thread::Builder::new()
        .name("ax-scheduler".into())
        .spawn(move || {
            scheduler.run(rx, initial);
            true
        })?;
    list.push(Service {
        name: "scheduler",
        stop: None,
        join: Join::Watched,
    });
    ready(&cfg, started);
    // 18. The systemd status.
    if crate::runtime::systemd::under_systemd() {
        tokio::spawn(crate::runtime::systemd::status_loop(handle.clone()));
        list.push(Service::detached("systemd status"));
    }
    let services = Services {
        list,
        scheduler: Some(t),
    };
    Ok((services, handle, lock))
}

/// The socket server: it accepts clients until `Shutdown::stop`.
fn socket_server(
    cfg: &crate::config::Config,
    access: Access,
    handle: &Handle,
    shutdown: &crate::runtime::shutdown::Shutdown,
) -> anyhow::Result<Service> {
    let listener = bind_socket(cfg, &access)?;
    let task = tokio::spawn(serve(
        listener,
        handle.clone(),
        access,
        cfg.limits.clone(),
        shutdown.clone(),
    ));
    let stopping = shutdown.clone();
    Ok(Service {
        name: "socket server",
        stop: Some(Box::new(move || stopping.stop())),
        join: Join::Task(task),
    })
}

/// The socket, bound with its groups; its folders must be axd's user's
/// alone, before axd creates what is missing and again once it has
/// (`socket_dir`).
fn bind_socket(
    cfg: &crate::config::Config,
    access: &Access,
) -> anyhow::Result<tokio::net::UnixListener> {
    let socket_groups: Vec<u32> = access
        .socket_gid
        .into_iter()
        .chain(access.admin_gid)
        .collect();
    let euid = nix::unistd::geteuid().as_raw();
    ax_protocol::socket_dir::check(&cfg.socket, euid)?;
    let listener = bind(&cfg.socket, &socket_groups, access.has_users())?;
    if let Err(e) = ax_protocol::socket_dir::check(&cfg.socket, euid) {
        let _ = std::fs::remove_file(&cfg.socket);
        return Err(e.into());
    }
    Ok(listener)
}

/// `GET /metrics` on `addr`, answered by the scheduler.
async fn metrics_endpoint(
    addr: std::net::SocketAddr,
    cfg: &crate::config::Config,
    handle: &Handle,
    shutdown: &crate::runtime::shutdown::Shutdown,
) -> anyhow::Result<Service> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("metrics_addr {addr}: cannot listen"))?;
    tracing::info!("metrics at http://{addr}/metrics");
    let (handle, stopping) = (handle.clone(), shutdown.clone());
    let peer = Peer::internal(Role::Viewer, "metrics over http");
    let ask = move || {
        let (handle, peer) = (handle.clone(), peer.clone());
        async move { handle.ask(&peer, Metrics).await.ok().map(|m| m.text) }
    };
    let limits = crate::metrics::http::HttpLimits {
        connections: cfg.limits.metrics_connections,
        header_timeout: cfg.limits.frame_timeout,
    };
    let stopped = stopping.clone();
    let task = tokio::spawn(crate::metrics::http::serve(
        listener,
        ask,
        limits,
        async move { stopped.stopped().await },
    ));
    Ok(Service {
        name: "metrics endpoint",
        stop: Some(Box::new(move || stopping.stop())),
        join: Join::Task(task),
    })
}

/// The store's notifier and elector (tasks of the store's own runtime),
/// the heartbeat, the claimer and the feed.
fn start_cluster(
    c: ClusterParts,
    cfg: &crate::config::Config,
    tx: &std::sync::mpsc::Sender<Msg>,
    notify: &tokio::sync::broadcast::Sender<Arc<str>>,
    list: &mut Vec<Service>,
) -> anyhow::Result<()> {
    let ClusterParts {
        heartbeat: store,
        beating,
        registry,
        claimer: link,
        woken,
        claimer_store,
        feed_store,
        aging,
        me_id,
    } = c;
    // 4. The notifier: wakes the claimer, and hands other nodes' commits
    // to the feed.
    let (commits, committed) = std::sync::mpsc::channel();
    let wake_claimer = link.waker();
    store.listen(move |channel, payload| {
        if channel != crate::store::postgres::EVENTS_CHANNEL {
            wake_claimer(channel);
        } else if let Some((node, seqs)) = crate::store::postgres::parse_payload(payload)
            && node != me_id
        {
            let _ = commits.send(seqs);
        }
    });
    list.push(Service::detached("store notifier"));
    // 5. The elector.
    {
        let tx = tx.clone();
        store.lead(cfg.heartbeat, move |leader, leading| {
            let _ = tx.send(Msg::lead(leader, leading));
        });
    }
    list.push(Service::detached("store elector"));
    // 6. The heartbeat: dropping `stop` makes it hand back this node's
    // unfinished DAG runs, remove its row and end.
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let t = spawn_thread("ax-heartbeat", "heartbeat", move || {
        crate::cluster::nodes::run(store, beating, registry, stopped);
        true
    })?;
    list.push(Service::thread(
        "heartbeat",
        Some(Box::new(move || drop(stop))),
        t,
    ));
    // 7. The claimer: stops claiming once the scheduler that adopted is
    // gone.
    let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let t = {
        let (link, tx, interval, flag) = (link.clone(), tx.clone(), cfg.heartbeat, flag.clone());
        spawn_thread("ax-claimer", "claimer", move || {
            crate::cluster::claimer::run(claimer_store, link, woken, tx, interval, aging, flag);
            true
        })?
    };
    let stop = move || {
        flag.store(true, std::sync::atomic::Ordering::SeqCst);
        link.nudge();
    };
    list.push(Service::thread("claimer", Some(Box::new(stop)), t));
    // 8. The feed: other nodes' events for this node's subscribers.
    let (tx, notify) = (tx.clone(), notify.clone());
    spawn_thread("ax-feed", "feed", move || {
        crate::cluster::feed::run(feed_store, committed, tx, notify);
        true
    })?;
    list.push(Service::detached("feed"));
    Ok(())
}

/// The log shipper: every attempt has ended once it is stopped (the
/// scheduler waited for them), so it ships the rest of their logs and
/// ends.
fn log_shipper(s: Shipping, handle: &Handle) -> anyhow::Result<Service> {
    let Shipping {
        notices,
        inbox,
        logs,
    } = s;
    let dir = handle.log_dir.clone();
    let t = spawn_thread("ax-logship", "log shipper", move || {
        crate::logs::ship::run(logs, dir, inbox);
        true
    })?;
    Ok(Service::thread(
        "log shipper",
        Some(Box::new(move || notices.stop())),
        t,
    ))
}

/// Says axd serves: the log, and `READY=1` to systemd.
fn ready(cfg: &crate::config::Config, started: std::time::Instant) {
    tracing::info!(
        "axd {} serving {} ({} ms to ready)",
        env!("CARGO_PKG_VERSION"),
        cfg.socket.display(),
        started.elapsed().as_millis()
    );
    crate::runtime::systemd::notify(&[
        crate::runtime::systemd::Notify::Ready,
        crate::runtime::systemd::Notify::Status(&format!("serving {}", cfg.socket.display())),
    ]);
}
