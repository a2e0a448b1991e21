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
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::sync::{mpsc, oneshot};

use ax_engine::{Input, RunId, SpawnOrder};

mod attached;
mod groups;
mod output;
mod prepare;
mod start;
use crate::bus::ExecEvent;
use crate::keeper::wire::{HeldAttempt, Request};
pub(crate) use attached::Forgets;
use output::{JobLog, OutputBeats, read_output, sleep_until_opt};
pub(crate) use prepare::JobEnv;

#[cfg(test)]
use groups::process_start_time;
use groups::{LiveGroup, group_alive};
pub(crate) use groups::{kill_all, sweep_orphan};

/// Threads that start and supervise job processes. A clone+exec blocks its
/// thread until the child has exec'ed (CLONE_VFORK, ~0.3 ms for `sh`), so
/// one thread would cap starts well below the machine's rate.
const SPAWNER_THREADS: usize = 4;

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
    /// Ended attempts their keepers may drop, carried by the next spawn.
    pub(crate) forgets: Arc<attached::Forgets>,
}

/// What a spawner thread is handed.
enum Order {
    /// Start an attempt.
    Spawn {
        order: SpawnOrder,
        kill_rx: mpsc::UnboundedReceiver<i64>,
    },
    /// Supervise again an attempt an earlier life started, which the
    /// keeper at `keeper` holds.
    Reattach {
        order: SpawnOrder,
        kill_rx: mpsc::UnboundedReceiver<i64>,
        keeper: PathBuf,
    },
    /// Tell the keepers, in a moment, of the ended attempts in the
    /// `Forgets` box that no spawn has carried meanwhile.
    FlushForgets,
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
    /// Ended attempts, with their keepers, that the keepers may drop once
    /// the step that records their end is committed (`take_forgets`).
    forgets: Vec<(PathBuf, u64, u32)>,
    forget_box: Arc<attached::Forgets>,
    keepers: Arc<crate::keeper::launch::Keepers>,
}

struct Supervised {
    spawner: usize,
    kill: mpsc::UnboundedSender<i64>,
    /// The keeper that holds it (`None`: none was started yet).
    keeper: Option<PathBuf>,
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
        let keepers = cfg.keepers.clone();
        let forget_box = cfg.forgets.clone();
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
            forget_box,
            keepers,
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
            self.forgets.push((keeper, run.0, attempt));
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
        let keeper = self.keepers.known();
        let (spawner, kill_rx) = self.track(&order, keeper);
        let _ = self.spawners[spawner].send(Order::Spawn { order, kill_rx });
    }

    /// Records an attempt about to be supervised, held by `keeper`:
    /// the spawner thread it goes to, and where its kill orders come from.
    fn track(
        &mut self,
        order: &SpawnOrder,
        keeper: Option<PathBuf>,
    ) -> (usize, mpsc::UnboundedReceiver<i64>) {
        let (kill_tx, kill_rx) = mpsc::unbounded_channel();
        let spawner = self.pick();
        self.attempts.insert(
            (order.run, order.attempt),
            Supervised {
                spawner,
                kill: kill_tx,
                keeper,
            },
        );
        (spawner, kill_rx)
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
        let (spawner, kill_rx) = self.track(&order, Some(keeper.clone()));
        let _ = self.spawners[spawner].send(Order::Reattach {
            order,
            kill_rx,
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
            if let Some(keeper) = s.keeper {
                self.forgets.push((keeper, run.0, attempt));
            }
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
        let boxed = self.forget_box.clone();
        let i = self.pick();
        let spawner = self.spawners[i].clone();
        Some(Box::new(move || {
            if boxed.add(forgets) {
                let _ = spawner.send(Order::FlushForgets);
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
            Order::Spawn { order, kill_rx } => {
                tokio::spawn(start::run_attempt(
                    cfg.clone(),
                    conns.clone(),
                    order,
                    kill_rx,
                    events.clone(),
                ));
            }
            Order::Reattach {
                order,
                kill_rx,
                keeper,
            } => {
                tokio::spawn(start::reattach(
                    cfg.clone(),
                    conns.clone(),
                    keeper,
                    order,
                    kill_rx,
                    events.clone(),
                ));
            }
            Order::FlushForgets => {
                let conns = conns.clone();
                let boxed = cfg.forgets.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(attached::FORGET_FLUSH).await;
                    for (keeper, attempts) in boxed.take_all() {
                        if let Ok(conn) = conns.to(&keeper).await {
                            let _ = conn.tell(&Request::Forget { attempts }).await;
                        }
                    }
                });
            }
        }
    }
    // The daemon is stopping: the attempts still being supervised stay
    // until the process exits.
    std::future::pending::<()>().await
}

async fn supervise(
    cfg: ExecConfig,
    conns: attached::Conns,
    order: SpawnOrder,
    mut child: attached::Attached,
    (read_end, log): (Option<OwnedFd>, JobLog),
    mut kill_rx: mpsc::UnboundedReceiver<i64>,
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
    let (exited_at, status) = when_and_how(status, &child.conn, run.0, attempt);
    if let Some(input) = started.take() {
        events(ExecEvent {
            at: spawned_at,
            input,
        });
    }
    let kill = (kill_deadline, kill_ordered);
    clear_leftovers(pgid, run, attempt, kill, job_grace).await;
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
    let (code, signal) = status.map_or((None, Some(libc::SIGKILL)), |e| (e.code, e.signal));
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
    // The keeper keeps the exit until the store has it (`take_forgets`).
}

/// When the attempt's leader was reaped (engine's clock) and how it ended;
/// `None` when its keeper was lost, and the job with it (PDEATHSIG).
fn when_and_how(
    status: Result<crate::keeper::wire::Exit, oneshot::error::RecvError>,
    conn: &crate::keeper::client::KeeperConn,
    run: u64,
    attempt: u32,
) -> (ax_engine::Millis, Option<crate::keeper::wire::Exit>) {
    match status {
        Ok(exit) => (attached::engine_time(exit.at_mono_ms), Some(exit)),
        Err(_) => {
            conn.unwatch(run, attempt);
            tracing::error!(run, attempt, "the keeper holding the attempt was lost");
            (crate::runtime::time::steady_ms(), None)
        }
    }
}

/// The leader is reaped: whatever is left of its group goes too (SIGTERM,
/// the rest of the grace period, SIGKILL); a killed attempt's escapees
/// (setsid) get the rest of the kill's grace, then SIGKILL. Escapees are
/// not hunted for an attempt that exited by itself: a /proc scan per run
/// would cost more than the run, and a job may start a daemon on purpose.
async fn clear_leftovers(
    pgid: i32,
    run: RunId,
    attempt: u32,
    (kill_deadline, kill_ordered): (Option<tokio::time::Instant>, Option<tokio::time::Instant>),
    job_grace: Duration,
) {
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
    if let Some(deadline) = kill_ordered {
        while signal_escapees(run, attempt, 0).await > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        signal_escapees(run, attempt, libc::SIGKILL).await;
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
