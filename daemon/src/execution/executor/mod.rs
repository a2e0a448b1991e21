//! Runs attempts as real processes (docs/job-files.md, "What a job's
//! process gets").
//!
//! * Every attempt gets its own session (setsid), so its process group id is
//!   its pid and every kill targets the whole group.
//! * The process is spawned by axd's keeper (`crate::keeper`), its parent,
//!   so that it outlives axd: axd prepares it (account, environment, log,
//!   the output pipe), the keeper clones and execs it and tells its exit.
//! * Attempts are supervised by a few long-lived *spawner* threads, each
//!   running its own single-threaded tokio runtime with its own keeper
//!   connection. The scheduler hands a spawn order straight to one of them,
//!   which prepares the attempt, has the keeper start it, reports `Started`
//!   and keeps the attempt's supervising task on its own runtime: a run
//!   never wakes the daemon's socket runtime (each cross-thread hand-off
//!   is a context switch, which BENCHMARKS.md measured as the largest part
//!   of axd's cost per no-op run).
//! * An attempt an earlier life of axd started is *reattached*: its
//!   keeper hands over its output pipe and tells its exit here.
//! * stdout and stderr share one pipe, so the log file has them in arrival
//!   order; the log is capped at `logs.max_bytes` with a marker line.
//! * Kills: SIGTERM to the group, `kill_grace`, SIGKILL. When the leader
//!   exits, what is left of its group is stopped the same way, so background
//!   children never outlive their job. The slot is released (the `Exited`
//!   message sent) only after the leader is reaped and its group is gone.

use std::collections::HashMap;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ax_shared::Exec;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::sync::{mpsc, oneshot};

use crate::accounts::{Account, group_gid};
use crate::execution::spawn::Credentials;
use crate::logs::paths::log_path;
use ax_engine::{Input, RunId, SpawnOrder};

mod attached;
mod groups;
mod output;
use crate::bus::ExecEvent;
use crate::keeper::wire::{Bytes, HeldAttempt, LogSpec, Reply, Request};
use output::{JobLog, LazyLog, OutputBeats, read_output, sleep_until_opt};

#[cfg(test)]
use groups::process_start_time;
use groups::{LiveGroup, group_alive};
pub(crate) use groups::{kill_all, sweep_orphan};

/// Threads that start and supervise job processes. A clone+exec blocks its
/// thread until the child has exec'ed (CLONE_VFORK, ~0.3 ms for `sh`), so
/// one thread would cap starts well below the machine's rate.
const SPAWNER_THREADS: usize = 4;

/// A job's umask when it sets none (as cron).
const DEFAULT_UMASK: u32 = 0o022;

/// How long a started job runs before `Started` (its pid) is reported on
/// its own; see `supervise`.
const STARTED_COALESCE: Duration = Duration::from_millis(10);

#[derive(Clone, Debug)]
pub struct ExecConfig {
    pub log_dir: PathBuf,
    pub socket: PathBuf,
    /// `logs.max_bytes`, shared with the scheduler so a reload changes it
    /// for attempts that start afterwards.
    pub log_max_bytes: Arc<AtomicU64>,
    /// In a cluster: told when an attempt's log grows and when it ends,
    /// so that its log is shipped to the store (`crate::logs::ship`).
    pub ship: Option<crate::logs::ship::Notices>,
    /// Told when an attempt's log grows and when it ends, so that `logs`
    /// follows read again (`crate::logs::follow`).
    pub follows: crate::logs::follow::LogWatch,
    /// What jobs start from, replaced at a config reload for attempts
    /// that start afterwards.
    pub job_env: Arc<std::sync::RwLock<Arc<JobEnv>>>,
    /// The keepers that spawn and hold the jobs (`crate::keeper`).
    pub(crate) keepers: Arc<crate::keeper::launch::Keepers>,
}

/// What a spawner thread is handed.
enum Order {
    /// Start an attempt.
    Spawn {
        order: SpawnOrder,
        kill_rx: mpsc::UnboundedReceiver<i64>,
        forget_rx: oneshot::Receiver<()>,
    },
    /// Supervise again an attempt an earlier life started, which the
    /// keeper at `keeper` holds.
    Reattach {
        order: SpawnOrder,
        kill_rx: mpsc::UnboundedReceiver<i64>,
        forget_rx: oneshot::Receiver<()>,
        keeper: PathBuf,
    },
    /// The end of an attempt of an earlier life is recorded: its keeper
    /// may drop it.
    Forget {
        run: RunId,
        attempt: u32,
        keeper: PathBuf,
    },
}

/// The scheduler's handle on the executor, owned by the scheduler thread
/// (no lock): it hands out spawn orders and routes kill orders to the
/// attempt's supervising task.
pub struct Executor {
    log_max_bytes: Arc<AtomicU64>,
    job_env: Arc<std::sync::RwLock<Arc<JobEnv>>>,
    spawners: Vec<mpsc::UnboundedSender<Order>>,
    next_spawner: usize,
    /// Attempts started and not yet reported ended (`Exited` or
    /// `SpawnFailed`), by (run, attempt): their spawner thread, where a
    /// kill order goes, and what tells their keeper it may drop them.
    attempts: HashMap<(RunId, u32), Supervised>,
    /// Spawner threads that just reported an attempt's end, most recent
    /// last: the next start goes there, to a thread likely still awake.
    warm: Vec<usize>,
    /// Attempts of an earlier life to reattach, with their keepers
    /// (`set_reattachable`).
    reattachable: HashMap<(RunId, u32), PathBuf>,
    /// Ended attempts whose keepers may drop them once the step that
    /// records their end is committed (`take_forgets`).
    forgets: Vec<Forget>,
}

struct Supervised {
    spawner: usize,
    kill: mpsc::UnboundedSender<i64>,
    forget: oneshot::Sender<()>,
}

/// A keeper may drop an ended attempt.
enum Forget {
    /// Told to the attempt's supervising task.
    Task(oneshot::Sender<()>),
    /// An attempt no task supervises (it ended while no axd ran).
    Order(usize, Order),
}

/// The spawner threads' bodies, each with its thread's name: orders
/// sent to the `Executor` wait in their queues until these start.
pub struct Spawners(Vec<(String, Box<dyn FnOnce() + Send>)>);

impl Spawners {
    /// Starts every spawner thread (detached: each lives as long as the
    /// process).
    pub fn start(mut self) -> std::io::Result<()> {
        for (name, body) in std::mem::take(&mut self.0) {
            std::thread::Builder::new().name(name).spawn(body)?;
        }
        Ok(())
    }
}

impl Drop for Spawners {
    /// Spawners never started (start-up failed after they were made, e.g.
    /// another axd serves the socket) own tokio runtimes, which may not be
    /// dropped inside the async runtime start-up runs on: they are dropped
    /// on a thread of their own.
    fn drop(&mut self) {
        let bodies = std::mem::take(&mut self.0);
        if bodies.is_empty() {
            return;
        }
        let _ = std::thread::spawn(move || drop(bodies)).join();
    }
}

impl Executor {
    /// The executor and its spawner threads, not started yet
    /// (`Spawners::start`). `events` receives everything the scheduler
    /// must know; for one attempt, `Started` is sent before `Exited`.
    pub fn new(
        cfg: ExecConfig,
        events: impl Fn(ExecEvent) + Send + Sync + Clone + 'static,
    ) -> std::io::Result<(Executor, Spawners)> {
        let log_max_bytes = cfg.log_max_bytes.clone();
        let job_env = cfg.job_env.clone();
        let mut spawners = Vec::with_capacity(SPAWNER_THREADS);
        let mut bodies = Spawners(Vec::with_capacity(SPAWNER_THREADS));
        for i in 0..SPAWNER_THREADS {
            let (tx, rx) = mpsc::unbounded_channel::<Order>();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (cfg, events) = (cfg.clone(), events.clone());
            bodies.0.push((
                format!("ax-spawner-{i}"),
                Box::new(move || runtime.block_on(spawner(cfg, rx, events))),
            ));
            spawners.push(tx);
        }
        let executor = Executor {
            log_max_bytes,
            job_env,
            spawners,
            next_spawner: 0,
            attempts: HashMap::new(),
            warm: Vec::new(),
            reattachable: HashMap::new(),
            forgets: Vec::new(),
        };
        Ok((executor, bodies))
    }

    /// `logs.max_bytes` for attempts that start from now on.
    pub fn set_log_max_bytes(&self, bytes: u64) {
        self.log_max_bytes.store(bytes, Ordering::Relaxed);
    }

    /// `shell`, `pass_env` and `[job_env]` for attempts that start from
    /// now on.
    pub fn set_job_env(&self, cfg: &crate::config::Config) {
        let env = Arc::new(JobEnv::from_config(cfg));
        *self.job_env.write().unwrap_or_else(|e| e.into_inner()) = env;
    }

    /// The attempts of an earlier life that keepers hold (by the socket of
    /// each one's keeper), for `reattach`; and those that ended while no
    /// axd ran, which their keepers may drop once the restore's first
    /// step is committed.
    pub(crate) fn set_reattachable(
        &mut self,
        alive: HashMap<(RunId, u32), PathBuf>,
        ended: Vec<((RunId, u32), PathBuf)>,
    ) {
        self.reattachable = alive;
        for ((run, attempt), keeper) in ended {
            let spawner = self.pick();
            self.forgets.push(Forget::Order(
                spawner,
                Order::Forget {
                    run,
                    attempt,
                    keeper,
                },
            ));
        }
    }

    fn pick(&mut self) -> usize {
        self.warm.pop().unwrap_or_else(|| {
            self.next_spawner = (self.next_spawner + 1) % self.spawners.len();
            self.next_spawner
        })
    }

    /// Starts an attempt (the answer comes as `Started` or `SpawnFailed`).
    pub fn spawn(&mut self, order: SpawnOrder) {
        let (kill_tx, kill_rx) = mpsc::unbounded_channel();
        let (forget_tx, forget_rx) = oneshot::channel();
        let spawner = self.pick();
        self.attempts.insert(
            (order.run, order.attempt),
            Supervised {
                spawner,
                kill: kill_tx,
                forget: forget_tx,
            },
        );
        let _ = self.spawners[spawner].send(Order::Spawn {
            order,
            kill_rx,
            forget_rx,
        });
    }

    /// Supervises again an attempt of an earlier life whose process its
    /// keeper holds (the answer comes as `Exited`).
    pub fn reattach(&mut self, order: SpawnOrder) {
        let Some(keeper) = self.reattachable.remove(&(order.run, order.attempt)) else {
            tracing::error!(
                run = order.run.0,
                attempt = order.attempt,
                "no keeper holds the attempt to reattach"
            );
            return;
        };
        let (kill_tx, kill_rx) = mpsc::unbounded_channel();
        let (forget_tx, forget_rx) = oneshot::channel();
        let spawner = self.pick();
        self.attempts.insert(
            (order.run, order.attempt),
            Supervised {
                spawner,
                kill: kill_tx,
                forget: forget_tx,
            },
        );
        let _ = self.spawners[spawner].send(Order::Reattach {
            order,
            kill_rx,
            forget_rx,
            keeper,
        });
    }

    /// SIGTERM to the attempt's processes, SIGKILL after `grace_ms`.
    pub fn kill(&mut self, run: RunId, attempt: u32, grace_ms: i64) {
        if let Some(s) = self.attempts.get(&(run, attempt)) {
            let _ = s.kill.send(grace_ms);
        }
    }

    /// The scheduler saw the attempt's last event (`Exited`, `SpawnFailed`).
    pub fn ended(&mut self, run: RunId, attempt: u32) {
        if let Some(s) = self.attempts.remove(&(run, attempt)) {
            if self.warm.len() < 2 * SPAWNER_THREADS {
                self.warm.push(s.spawner);
            }
            self.forgets.push(Forget::Task(s.forget));
        }
    }

    /// What tells the keepers of the attempts ended since the last call
    /// that they may drop them: to run once the step recording those ends
    /// is committed (a keeper that dropped an end the store has not got
    /// would leave the run `running` with no process after a crash).
    pub(crate) fn take_forgets(&mut self) -> Option<Box<dyn FnOnce() + Send>> {
        if self.forgets.is_empty() {
            return None;
        }
        let forgets = std::mem::take(&mut self.forgets);
        let spawners = self.spawners.clone();
        Some(Box::new(move || {
            for f in forgets {
                match f {
                    Forget::Task(tx) => {
                        let _ = tx.send(());
                    }
                    Forget::Order(spawner, order) => {
                        let _ = spawners[spawner].send(order);
                    }
                }
            }
        }))
    }
}

/// A spawner thread's body: starts each attempt it is handed and keeps the
/// attempts' supervising tasks. The keeper's clone blocks the keeper, not
/// this thread, which may have several spawns in flight.
async fn spawner(
    cfg: ExecConfig,
    mut orders: mpsc::UnboundedReceiver<Order>,
    events: impl Fn(ExecEvent) + Send + Sync + Clone + 'static,
) {
    let conns = attached::Conns::new(cfg.keepers.clone());
    while let Some(order) = orders.recv().await {
        match order {
            Order::Spawn {
                order,
                kill_rx,
                forget_rx,
            } => {
                tokio::spawn(run_attempt(
                    cfg.clone(),
                    conns.clone(),
                    order,
                    kill_rx,
                    forget_rx,
                    events.clone(),
                ));
            }
            Order::Reattach {
                order,
                kill_rx,
                forget_rx,
                keeper,
            } => {
                tokio::spawn(reattach(
                    cfg.clone(),
                    conns.clone(),
                    keeper,
                    order,
                    (kill_rx, forget_rx),
                    events.clone(),
                ));
            }
            Order::Forget {
                run,
                attempt,
                keeper,
            } => {
                let conns = conns.clone();
                tokio::spawn(async move {
                    if let Ok(conn) = conns.to(&keeper).await {
                        let _ = conn
                            .request(
                                &Request::Forget {
                                    run: run.0,
                                    attempt,
                                },
                                &[],
                            )
                            .await;
                    }
                });
            }
        }
    }
    // The daemon is stopping: the attempts still being supervised stay
    // until the process exits.
    std::future::pending::<()>().await
}

/// Starts an attempt and supervises it to its end.
async fn run_attempt(
    cfg: ExecConfig,
    conns: attached::Conns,
    order: SpawnOrder,
    kill_rx: mpsc::UnboundedReceiver<i64>,
    forget_rx: oneshot::Receiver<()>,
    events: impl Fn(ExecEvent) + Send + Sync + Clone + 'static,
) {
    match start(&cfg, &conns, &order).await {
        Started::Running(child, read_end, log) => {
            supervise(
                cfg,
                conns,
                order,
                child,
                Some(read_end),
                (kill_rx, forget_rx),
                log,
                events,
            )
            .await
        }
        Started::Short(error) => {
            start_when_possible(cfg, conns, order, (kill_rx, forget_rx), error, events).await
        }
        Started::Failed(error) => failed(&cfg, &order, error, &events),
        Started::Killed(pid) => killed(&cfg, &order, pid, &events),
    }
}

/// What one try to start an attempt came to.
enum Started {
    Running(attached::Attached, OwnedFd, JobLog),
    /// Nothing ran, for lack of the daemon's own resources (descriptors,
    /// processes, memory): try again once running jobs give some back.
    Short(String),
    /// Nothing ran: the attempt failed.
    Failed(String),
    /// The process started but could not be supervised; it was killed
    /// (SIGKILL to its group) and reaped.
    Killed(u32),
}

async fn start(cfg: &ExecConfig, conns: &attached::Conns, order: &SpawnOrder) -> Started {
    let (plan, read_end, mut log, secrets) = match prepare(cfg, order) {
        Ok(p) => p,
        Err(Prepared::Short(e)) => return Started::Short(e),
        Err(Prepared::Failed(e)) => return Started::Failed(e),
    };
    if let Some(name) = order
        .job()
        .held_secrets
        .iter()
        .find(|n| !order.job().env.contains_key(*n))
    {
        // axd held the value in memory only (docs/job-files.md, "Secrets").
        let error = format!(
            "secret {name} was not kept across axd's restart (ad-hoc secret values are held in memory only): submit the job again"
        );
        let _ = writeln!(log.file, "[ax] {error}");
        return Started::Failed(error);
    }
    let conn = match conns.current().await {
        Ok(c) => c,
        Err(e) => return Started::Short(format!("the keeper is unreachable: {e}")),
    };
    let spec = LogSpec {
        path: Bytes::from(log.file.path.as_os_str()),
        max_bytes: cfg.log_max_bytes.load(Ordering::Relaxed),
        secrets,
    };
    let (request, write_end) = attached::spawn_request(plan, order, spec);
    let (run, attempt) = (order.run.0, order.attempt);
    let exit = conn.exit_of(run, attempt);
    let answer = conn
        .request(&Request::Spawn(Box::new(request)), &[&write_end, &read_end])
        .await;
    // The keeper and the job hold the write end now: this copy goes, so the
    // log reader sees EOF when the job's processes exit.
    drop(write_end);
    match answer {
        Ok((
            Reply::Spawned {
                pid,
                pid_start,
                spawned_mono_ms,
            },
            _,
        )) => Started::Running(
            attached::Attached {
                pid,
                pid_start,
                exit,
                conn,
                spawned_at: attached::engine_time(spawned_mono_ms),
            },
            read_end,
            log,
        ),
        Ok((
            Reply::NotSpawned {
                error,
                shortage,
                killed_pid,
            },
            _,
        )) => {
            conn.unwatch(run, attempt);
            if let Some(pid) = killed_pid {
                let _ = writeln!(
                    log.file,
                    "[ax] process {pid} could not be supervised ({error}): its group was killed"
                );
                Started::Killed(pid)
            } else if shortage {
                Started::Short(error)
            } else {
                let _ = writeln!(log.file, "[ax] could not start: {error}");
                Started::Failed(error)
            }
        }
        Ok((other, _)) => {
            conn.unwatch(run, attempt);
            Started::Failed(format!("the keeper answered a spawn with {other:?}"))
        }
        Err(e) => {
            // The spawn may have happened: if the keeper lives, it holds
            // the attempt (never start it twice). A keeper that died took
            // what it spawned with it (PDEATHSIG).
            match attached::retake(conns, &conn.path, run, attempt).await {
                Some((conn, exit, held)) => Started::Running(
                    attached::Attached {
                        pid: held.pid,
                        pid_start: held.pid_start,
                        exit,
                        conn,
                        spawned_at: attached::engine_time(held.spawned_mono_ms),
                    },
                    read_end,
                    log,
                ),
                None => {
                    conns.keepers.lost(&conn.path);
                    Started::Short(format!("the keeper is unreachable: {e}"))
                }
            }
        }
    }
}

/// Takes over an attempt an earlier life started: its keeper stops copying
/// its output and tells its exit here from now on.
async fn reattach(
    cfg: ExecConfig,
    conns: attached::Conns,
    keeper: PathBuf,
    order: SpawnOrder,
    (kill_rx, forget_rx): (mpsc::UnboundedReceiver<i64>, oneshot::Receiver<()>),
    events: impl Fn(ExecEvent) + Send + Sync + Clone + 'static,
) {
    let (run, attempt) = (order.run, order.attempt);
    let lost = |why: String| {
        tracing::error!(run = run.0, attempt, "cannot reattach: {why}");
        events(ExecEvent::now(Input::Exited {
            run,
            attempt,
            code: None,
            signal: None,
        }));
        cfg.follows.notice(run, attempt);
    };
    let conn = match conns.to(&keeper).await {
        Ok(c) => c,
        Err(e) => return lost(format!("its keeper is unreachable: {e}")),
    };
    let exit = conn.exit_of(run.0, attempt);
    let (held, output, secrets) = match conn
        .request(
            &Request::Take {
                run: run.0,
                attempt,
            },
            &[],
        )
        .await
    {
        Ok((
            Reply::Taken {
                attempt: Some(held),
                output,
                secrets,
            },
            fds,
        )) => (
            held,
            output.then(|| fds.into_iter().next()).flatten(),
            secrets,
        ),
        Ok((other, _)) => return lost(format!("its keeper answered {other:?}")),
        Err(e) => return lost(e.to_string()),
    };
    tracing::info!(
        run = run.0,
        attempt,
        pid = held.pid,
        "reattached to an attempt an earlier axd started"
    );
    let log = JobLog {
        file: LazyLog {
            path: log_path(&cfg.log_dir, run, attempt),
            file: None,
            resumed: true,
        },
        redactor: crate::execution::secrets::OutputRedactor::new(
            secrets.iter().map(String::as_str),
        ),
    };
    let child = attached::Attached {
        pid: held.pid,
        pid_start: held.pid_start,
        exit,
        conn,
        spawned_at: attached::engine_time(held.spawned_mono_ms),
    };
    // `None`: the keeper drained the pipe to its end; nothing more comes.
    let read_end = output;
    if let Some(exit) = held.exit {
        // It ended between the start-up's inventory and now.
        events(ExecEvent {
            at: attached::engine_time(exit.at_mono_ms),
            input: Input::Exited {
                run,
                attempt,
                code: exit.code,
                signal: exit.signal,
            },
        });
        cfg.follows.notice(run, attempt);
        let conn = child.conn.clone();
        let _ = forget_rx.await;
        let _ = conn
            .request(
                &Request::Forget {
                    run: run.0,
                    attempt,
                },
                &[],
            )
            .await;
        return;
    }
    supervise(
        cfg,
        conns,
        order,
        child,
        read_end,
        (kill_rx, forget_rx),
        log,
        events,
    )
    .await
}

fn failed(cfg: &ExecConfig, order: &SpawnOrder, error: String, events: &impl Fn(ExecEvent)) {
    if let Some(ship) = &cfg.ship {
        ship.ended(order.run, order.attempt);
    }
    events(ExecEvent::now(Input::SpawnFailed {
        run: order.run,
        attempt: order.attempt,
        error,
    }));
    cfg.follows.notice(order.run, order.attempt);
}

/// An attempt whose process ran but was killed at once (it could not be
/// supervised): recorded as what it is, a process that started and died of
/// SIGKILL, not as one that never ran.
fn killed(cfg: &ExecConfig, order: &SpawnOrder, pid: u32, events: &impl Fn(ExecEvent)) {
    if let Some(ship) = &cfg.ship {
        ship.ended(order.run, order.attempt);
    }
    let (run, attempt) = (order.run, order.attempt);
    events(ExecEvent::now(Input::Started {
        run,
        attempt,
        pid,
        pid_start: None,
    }));
    events(ExecEvent::now(Input::Exited {
        run,
        attempt,
        code: None,
        signal: Some(libc::SIGKILL),
    }));
    cfg.follows.notice(run, attempt);
}

/// First wait before starting again an attempt that found the daemon
/// short of resources; it doubles up to `SHORT_RETRY_MAX`.
const SHORT_RETRY_FIRST: Duration = Duration::from_millis(50);
const SHORT_RETRY_MAX: Duration = Duration::from_secs(2);

/// How long an attempt waits for resources before it fails as
/// `spawn_error` (which the retry policy counts): a shortage that lasts
/// this long is not one that running jobs will end, and the attempt must
/// not wait, without a deadline, for ever.
const SHORT_WAIT_MAX: Duration = Duration::from_secs(600);

/// Starts an attempt that found the daemon short of descriptors (or
/// processes, or memory) as soon as it can: again and again, waiting a
/// little longer each time, on this spawner thread (PDEATHSIG). Nothing
/// ran meanwhile, so no retry is used; its slot stays taken. A kill order
/// (cancel, preemption, shutdown) ends the waiting: the attempt is
/// reported never started, and the engine records the kill's outcome.
/// After `SHORT_WAIT_MAX` it fails as never started.
async fn start_when_possible(
    cfg: ExecConfig,
    conns: attached::Conns,
    order: SpawnOrder,
    (mut kill_rx, forget_rx): (mpsc::UnboundedReceiver<i64>, oneshot::Receiver<()>),
    first_error: String,
    events: impl Fn(ExecEvent) + Send + Sync + Clone + 'static,
) {
    tracing::warn!(
        run = order.run.0,
        attempt = order.attempt,
        "cannot start the attempt yet ({first_error}); trying again as running jobs end"
    );
    events(ExecEvent::now(Input::SpawnWaiting {
        run: order.run,
        attempt: order.attempt,
        error: first_error.clone(),
    }));
    let mut pause = SHORT_RETRY_FIRST;
    let mut last = first_error;
    let give_up = tokio::time::Instant::now() + SHORT_WAIT_MAX;
    loop {
        if tokio::time::Instant::now() >= give_up {
            let waited = SHORT_WAIT_MAX.as_secs();
            let error = format!("not started: {last} (still short after {waited} s)");
            return failed(&cfg, &order, error, &events);
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            Some(_) = kill_rx.recv() => {
                let error = format!("not started: {last} (stopped while waiting for resources)");
                return failed(&cfg, &order, error, &events);
            }
        }
        match start(&cfg, &conns, &order).await {
            Started::Running(child, read_end, log) => {
                return supervise(
                    cfg,
                    conns,
                    order,
                    child,
                    Some(read_end),
                    (kill_rx, forget_rx),
                    log,
                    events,
                )
                .await;
            }
            Started::Short(e) => last = e,
            Started::Failed(e) => return failed(&cfg, &order, e, &events),
            Started::Killed(pid) => return killed(&cfg, &order, pid, &events),
        }
        pause = (pause * 2).min(SHORT_RETRY_MAX);
    }
}

/// PATH for jobs when `pass_env` does not keep axd's (as cron's), with
/// axd's own folder appended so `ax heartbeat` works inside jobs.
const DEFAULT_JOB_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What every job starts from (docs/users.md, "What a job gets"), built
/// at start and at each config reload, shared by every spawn: the
/// variables converted once, and axd's own account read once (a job that
/// names no `user` runs as it).
pub struct JobEnv {
    /// PATH, the `pass_env` variables, then `[job_env]`.
    base: Arc<crate::execution::spawn::BaseEnv>,
    /// `shell` of axd.toml.
    shell: PathBuf,
    /// axd's own user; `None` when its uid has no password entry.
    own: Option<Account>,
}

/// Without the variables' values: `[job_env]` may hold secrets.
impl std::fmt::Debug for JobEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobEnv")
            .field("shell", &self.shell)
            .field("own", &self.own.as_ref().map(|a| &a.name))
            .finish_non_exhaustive()
    }
}

impl JobEnv {
    pub fn from_config(cfg: &crate::config::Config) -> JobEnv {
        let mut vars: Vec<(std::ffi::OsString, std::ffi::OsString)> = Vec::new();
        let mut parts: Vec<PathBuf> = std::env::split_paths(DEFAULT_JOB_PATH).collect();
        if let Ok(exe) = std::env::current_exe()
            && let Some(dir) = exe.parent()
            && !parts.iter().any(|p| p == dir)
        {
            parts.push(dir.to_path_buf());
        }
        if let Ok(joined) = std::env::join_paths(parts) {
            vars.push(("PATH".into(), joined));
        }
        for name in &cfg.pass_env {
            if let Some(value) = std::env::var_os(name) {
                vars.push((name.into(), value));
            }
        }
        for (name, value) in &cfg.job_env {
            vars.push((name.into(), value.into()));
        }
        JobEnv {
            base: Arc::new(crate::execution::spawn::BaseEnv::new(vars)),
            shell: cfg.shell.clone(),
            own: Account::by_uid(nix::unistd::geteuid().as_raw()).ok(),
        }
    }
}

/// Who an attempt runs as: its account (as the password database has it
/// now), and the credentials to switch to (`None`: axd's own, unchanged).
/// With `member_only` (a user's own DAG) a `group` must still be one the
/// user is in, as it had to be when the DAG was applied.
fn run_as(
    job: &ax_shared::JobSpec,
    own: Option<&Account>,
    member_only: bool,
) -> Result<(Option<Account>, Option<Credentials>), String> {
    let me = nix::unistd::geteuid().as_raw();
    let account = match &job.user {
        // Resolved at each start: a removed user fails the attempt, it
        // never runs as axd instead.
        Some(name) => Some(Account::by_name(name).map_err(|e| {
            format!("cannot run as user {name:?}: {e} (the user was removed or renamed)")
        })?),
        None => own.cloned(),
    };
    if job.user.is_none() && job.group.is_none() {
        return Ok((account, None));
    }
    let (name, uid, primary) = match &account {
        Some(a) => (a.name.clone(), a.uid, a.gid),
        None => (format!("uid {me}"), me, nix::unistd::getegid().as_raw()),
    };
    let gid = match &job.group {
        Some(g) => group_gid(g)
            .map_err(|e| format!("cannot run as user {name:?} with group {g:?}: {e}"))?,
        None => primary,
    };
    if me != 0 && uid == me && gid == nix::unistd::getegid().as_raw() {
        // A daemon that is not root running its own jobs changes nothing.
        return Ok((account, None));
    }
    let groups = match &account {
        Some(a) => a
            .groups_with(gid)
            .map_err(|e| format!("cannot run as user {name:?}: {e}"))?,
        None => vec![gid],
    };
    if member_only
        && gid != primary
        && let Some(a) = &account
        && !a.groups_with(primary).is_ok_and(|g| g.contains(&gid))
    {
        return Err(format!(
            "cannot run as user {name:?} with group {:?}: {name} is no longer a member of it",
            job.group.as_deref().unwrap_or_default()
        ));
    }
    let credentials = Credentials {
        user: name,
        uid,
        gid,
        groups,
    };
    Ok((account, Some(credentials)))
}

/// Where a job runs without `cwd`: its user's home, else `/` (as cron).
fn default_cwd(account: Option<&Account>) -> PathBuf {
    account
        .map(|a| a.home.clone())
        .filter(|home| home.is_dir())
        .unwrap_or_else(|| PathBuf::from("/"))
}

/// Why an attempt's command could not be built.
enum Prepared {
    /// For lack of descriptors (or memory): it may work later.
    Short(String),
    Failed(String),
}

/// Builds the command for one attempt and opens its log.
fn prepare(
    cfg: &ExecConfig,
    order: &SpawnOrder,
) -> Result<(crate::execution::spawn::Plan, OwnedFd, JobLog, Vec<String>), Prepared> {
    let job = order.job();
    let job_env = cfg
        .job_env
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let user_dag = ax_shared::users::user_dag_owner(&order.dag).is_some();
    let (account, credentials) =
        run_as(job, job_env.own.as_ref(), user_dag).map_err(Prepared::Failed)?;
    let (program, args): (PathBuf, Vec<std::ffi::OsString>) = match &job.exec {
        Exec::Shell(s) => (
            job.shell.clone().unwrap_or_else(|| job_env.shell.clone()),
            vec!["-c".into(), s.into()],
        ),
        Exec::Argv(argv) => (
            argv[0].clone().into(),
            argv[1..].iter().map(Into::into).collect(),
        ),
    };
    // Read at each start, not at load: a rotated secret needs no reload.
    let file_env = match &job.env_file {
        Some(path) => {
            let run_as_uid = credentials
                .as_ref()
                .map_or_else(|| nix::unistd::geteuid().as_raw(), |c| c.uid);
            crate::execution::secrets::read_env_file(path, run_as_uid, !user_dag)
                .map_err(|e| Prepared::Failed(e.to_string()))?
        }
        None => Vec::new(),
    };
    let secrets = secret_values(job, &file_env, &job_env.base);
    let redactor =
        crate::execution::secrets::OutputRedactor::new(secrets.iter().map(String::as_str));
    // The user's HOME, USER, LOGNAME and SHELL (under everything else),
    // the base (PATH, `pass_env`, `[job_env]`), then the AX_* variables
    // (which the base cannot set: axd.toml may not name them), then the
    // env file's, then the job's `env`, then the cookie; a later value of
    // a name replaces an earlier one (`spawn` keeps the last).
    let defaults: Vec<(std::ffi::OsString, std::ffi::OsString)> = match &account {
        Some(a) => vec![
            ("HOME".into(), a.home.clone().into()),
            ("USER".into(), a.name.clone().into()),
            ("LOGNAME".into(), a.name.clone().into()),
            ("SHELL".into(), a.shell.clone().into()),
        ],
        None => Vec::new(),
    };
    let mut env: Vec<(std::ffi::OsString, std::ffi::OsString)> =
        Vec::with_capacity(7 + file_env.len() + job.env.len());
    let mut set = |k: std::ffi::OsString, v: std::ffi::OsString| env.push((k, v));
    for (k, v) in [
        ("AX_RUN_ID", order.run.0.to_string()),
        ("AX_DAG", order.dag.to_string()),
        ("AX_JOB", job.id.clone()),
        ("AX_ATTEMPT", order.attempt.to_string()),
        ("AX_SOCKET", cfg.socket.display().to_string()),
        ("AX_SLOT", order.slot.to_string()),
    ] {
        set(k.into(), v.into());
    }
    // The job's own env comes after: it may set AX_* itself (hooks pass
    // the finished DAG's name as AX_DAG this way), and what its file says
    // replaces what the shared env file says.
    for (k, v) in file_env.iter().map(|(k, v)| (k, v)).chain(&job.env) {
        set(k.into(), v.into());
    }
    // Last, so the job cannot replace it: how a kill finds the attempt's
    // processes that left its process group (`reaper`).
    set(
        crate::execution::reaper::COOKIE_VAR.into(),
        crate::execution::reaper::cookie(order.run.0, order.attempt).into(),
    );
    let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| {
        let why = format!("pipe: {e}");
        match e {
            nix::errno::Errno::EMFILE | nix::errno::Errno::ENFILE => Prepared::Short(why),
            _ => Prepared::Failed(why),
        }
    })?;
    let plan = crate::execution::spawn::Plan {
        program,
        args,
        defaults,
        base_env: job_env.base.clone(),
        env,
        cwd: Some(
            job.cwd
                .clone()
                .unwrap_or_else(|| default_cwd(account.as_ref())),
        ),
        credentials,
        umask: job.umask.unwrap_or(DEFAULT_UMASK) as libc::mode_t,
        output: write_end,
        close_fds: crate::execution::spawn::CloseFds::Range,
    };
    let path = log_path(&cfg.log_dir, order.run, order.attempt);
    set_aside_stale_log(&path);
    let log = JobLog {
        file: LazyLog {
            path,
            file: None,
            resumed: false,
        },
        redactor,
    };
    Ok((plan, read_end, log, secrets))
}

/// A log file already at a new attempt's path belongs to no attempt of
/// this store (logs kept beside a store that was replaced): it is renamed
/// to `<run>.<attempt>.log.stale-<ms>`, so the new attempt neither shows
/// nor extends it, and nothing of it is lost.
fn set_aside_stale_log(path: &Path) {
    if std::fs::symlink_metadata(path).is_err() {
        return;
    }
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let aside = path.with_extension(format!("log.stale-{ms}"));
    match std::fs::rename(path, &aside) {
        Ok(()) => tracing::warn!(
            "{} existed before its attempt started; moved to {}",
            path.display(),
            aside.display()
        ),
        Err(e) => tracing::error!(
            "{} existed before its attempt started and cannot be moved aside: {e}",
            path.display()
        ),
    }
}

/// The values this attempt must not show: every value of its env file,
/// and the value each `secret_env` name takes in the job's environment
/// (the job's `env`, the env file, else the base: `pass_env` and
/// `[job_env]`).
fn secret_values(
    job: &ax_shared::JobSpec,
    file_env: &[(String, String)],
    base: &crate::execution::spawn::BaseEnv,
) -> Vec<String> {
    if job.secret_env.is_empty() && file_env.is_empty() {
        return Vec::new();
    }
    let named = job.secret_env.iter().filter_map(|name| {
        job.env
            .get(name)
            .or_else(|| {
                file_env
                    .iter()
                    .rev()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v)
            })
            .cloned()
            .or_else(|| base.get(name))
    });
    file_env
        .iter()
        .map(|(_, v)| v.clone())
        .chain(named)
        .collect()
}

async fn supervise(
    cfg: ExecConfig,
    conns: attached::Conns,
    order: SpawnOrder,
    mut child: attached::Attached,
    read_end: Option<OwnedFd>,
    (mut kill_rx, forget_rx): (mpsc::UnboundedReceiver<i64>, oneshot::Receiver<()>),
    log: JobLog,
    events: impl Fn(ExecEvent) + Send + Sync + Clone + 'static,
) {
    let (run, attempt) = (order.run, order.attempt);
    // The start, for `Started` (sent a little later, see below).
    let spawned_at = child.spawned_at;
    let pgid = child.pid as i32;
    let _live = LiveGroup::enter(pgid);
    // `Started` goes out once the job has run for STARTED_COALESCE, or
    // together with `Exited` if it ends sooner: a short job then wakes the
    // scheduler once rather than twice, and its row is written once.
    let mut started = Some(Input::Started {
        run,
        attempt,
        pid: child.pid,
        pid_start: child.pid_start,
    });
    let started_timer = tokio::time::sleep(STARTED_COALESCE);
    tokio::pin!(started_timer);

    // Read in this same task (one task per attempt, not two: a no-op job
    // costs a wakeup less).
    let beats = OutputBeats::new(run, order.job().heartbeat);
    let reader_done_at_start = read_end.is_none();
    let reader = read_output(
        read_end,
        log,
        cfg.log_max_bytes.load(Ordering::Relaxed),
        beats,
        cfg.ship
            .clone()
            .map(|s| output::Shipping::new(s, run, attempt)),
        (&cfg.follows, run, attempt),
        events.clone(),
    );
    tokio::pin!(reader);
    let mut reader_done = reader_done_at_start;
    let mut log_lost = 0;

    let job_grace = Duration::from_millis(order.job().kill_grace.as_millis() as u64);
    let mut kill_deadline: Option<tokio::time::Instant> = None;
    // When the attempt was ordered killed (timeout, cancel, shutdown): its
    // processes outside the group are hunted down too.
    let mut kill_ordered: Option<tokio::time::Instant> = None;
    let status = loop {
        tokio::select! {
            status = &mut child.exit => match status {
                Ok(exit) => break Ok(exit),
                // The connection was lost: a keeper still alive holds the
                // job, which goes on.
                Err(lost) => match attached::retake(&conns, &child.conn.path.clone(), run.0, attempt).await {
                    Some((_, _, HeldAttempt { exit: Some(exit), .. })) => break Ok(exit),
                    Some((conn, exit, _)) => {
                        child.conn = conn;
                        child.exit = exit;
                    }
                    None => break Err(lost),
                },
            },
            _ = &mut started_timer, if started.is_some() => {
                let input = started.take().expect("guarded by is_some");
                events(ExecEvent { at: spawned_at, input });
            }
            lost = &mut reader, if !reader_done => {
                reader_done = true;
                log_lost = lost;
            }
            Some(grace_ms) = kill_rx.recv() => {
                if kill_ordered.is_none() {
                    let _ = killpg(Pid::from_raw(pgid), Signal::SIGTERM);
                    signal_escapees(run, attempt, libc::SIGTERM).await;
                    let deadline = tokio::time::Instant::now() + Duration::from_millis(grace_ms.max(0) as u64);
                    kill_deadline = Some(deadline);
                    kill_ordered = Some(deadline);
                }
            }
            _ = sleep_until_opt(kill_deadline) => {
                let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
                signal_escapees(run, attempt, libc::SIGKILL).await;
                kill_deadline = None;
            }
        }
    };
    // When the keeper reaped the leader, whatever the cleanup below takes.
    let (exited_at, status) = match status {
        Ok(exit) => (
            attached::engine_time(exit.at_mono_ms),
            Some((exit.code, exit.signal)),
        ),
        Err(_) => {
            // The keeper died, and the job with it (PDEATHSIG).
            child.conn.unwatch(run.0, attempt);
            tracing::error!(
                run = run.0,
                attempt,
                "the keeper holding the attempt was lost"
            );
            (crate::runtime::time::steady_ms(), None)
        }
    };
    if let Some(input) = started.take() {
        events(ExecEvent {
            at: spawned_at,
            input,
        });
    }
    // The leader is reaped. Whatever is left of its group goes too:
    // SIGTERM, the rest of the grace period, SIGKILL.
    if group_alive(pgid) {
        let deadline = kill_deadline.unwrap_or_else(|| {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGTERM);
            tokio::time::Instant::now() + job_grace
        });
        while group_alive(pgid) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if group_alive(pgid) {
            let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
        }
    }
    // A killed attempt's escapees (setsid) get the rest of the grace, then
    // SIGKILL. Not done for an attempt that exited by itself: a /proc scan
    // per run would cost more than the run, and a job may start a daemon on
    // purpose.
    if let Some(deadline) = kill_ordered {
        while signal_escapees(run, attempt, 0).await > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        signal_escapees(run, attempt, libc::SIGKILL).await;
    }
    // Let the reader drain what is left in the pipe (bounded: a process that
    // escaped the group with setsid could hold the pipe open forever).
    if !reader_done
        && let Ok(lost) = tokio::time::timeout(Duration::from_secs(1), &mut reader).await
    {
        log_lost = lost;
    }
    // The log is final (the reader is done or given up on).
    if let Some(ship) = &cfg.ship {
        ship.ended(run, attempt);
    }
    let (code, signal) = status.unwrap_or((None, Some(libc::SIGKILL)));
    if log_lost > 0 {
        events(ExecEvent {
            at: exited_at,
            input: Input::LogLost {
                run,
                attempt,
                bytes: log_lost,
            },
        });
    }
    events(ExecEvent {
        at: exited_at,
        input: Input::Exited {
            run,
            attempt,
            code,
            signal,
        },
    });
    // After `Exited`: a follow's next `log_info` reaches the scheduler
    // behind it (one channel), so it reads the attempt as ended.
    cfg.follows.notice(run, attempt);
    // The keeper keeps the exit until the store has it.
    if forget_rx.await.is_ok() {
        let _ = child
            .conn
            .request(
                &Request::Forget {
                    run: run.0,
                    attempt,
                },
                &[],
            )
            .await;
    }
}

/// Signals the attempt's processes found by their cookie (`reaper`); with
/// signal 0, counts the live ones.
async fn signal_escapees(run: RunId, attempt: u32, signal: libc::c_int) -> usize {
    tokio::task::spawn_blocking(move || {
        crate::execution::reaper::signal_marked(run.0, attempt, signal)
    })
    .await
    .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_reads_field_22_of_proc_stat() {
        let pid = std::process::id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let want: u64 = stat[stat.rfind(')').unwrap() + 2..]
            .split_whitespace()
            .nth(19)
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(process_start_time(pid), Some(want));
        assert_eq!(process_start_time(u32::MAX), None, "no such pid");
    }
}
