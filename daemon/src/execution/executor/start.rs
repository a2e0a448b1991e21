//! An attempt's start through its keeper, or its takeover from an earlier
//! life of axd (`reattach`), up to its supervision (`supervise`); an
//! attempt that finds axd short of resources waits and tries again
//! (`start_when_possible`).

use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use ax_engine::{Input, SpawnOrder};
use tokio::sync::mpsc;

use super::output::{JobLog, LazyLog};
use super::prepare::{Prepared, prepare};
use super::{ExecConfig, attached, supervise};
use crate::bus::ExecEvent;
use crate::keeper::wire::{Bytes, LogSpec, Reply, Request};
use crate::logs::paths::log_path;

/// Starts an attempt and supervises it to its end.
pub(super) async fn run_attempt(
    cfg: ExecConfig,
    conns: attached::Conns,
    order: SpawnOrder,
    kill_rx: mpsc::UnboundedReceiver<i64>,
    events: impl Fn(ExecEvent) + Send + Sync + Clone + 'static,
) {
    match start(&cfg, &conns, &order).await {
        Started::Running(child, read_end, log) => {
            supervise(
                cfg,
                conns,
                order,
                child,
                (Some(read_end), log),
                kill_rx,
                events,
            )
            .await
        }
        Started::Short(error) => {
            start_when_possible(cfg, conns, order, kill_rx, error, events).await
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
    let (mut request, write_end) = attached::spawn_request(plan, order, spec);
    request.forget = cfg.forgets.take(&conn.path);
    let (run, attempt) = (order.run.0, order.attempt);
    let mut exit = conn.exit_of(run, attempt);
    let answer = conn
        .spawn(Box::new(request), &[&write_end, &read_end])
        .await;
    // The keeper and the job hold the write end now: this copy goes, so the
    // log reader sees EOF when the job's processes exit.
    drop(write_end);
    match answer {
        Ok(Reply::Spawned {
            pid,
            pid_start,
            spawned_mono_ms,
            exit: ended,
            ..
        }) => {
            if let Some(ended) = ended {
                // It ended within the answer's wait: no `Exited` follows.
                conn.unwatch(run, attempt);
                let (tx, rx) = tokio::sync::oneshot::channel();
                let _ = tx.send(ended);
                exit = rx;
            }
            Started::Running(
                attached::Attached {
                    pid,
                    pid_start,
                    exit,
                    conn,
                    spawned_at: attached::engine_time(spawned_mono_ms),
                },
                read_end,
                log,
            )
        }
        Ok(Reply::NotSpawned {
            error,
            shortage,
            killed_pid,
            ..
        }) => {
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
        Ok(other) => {
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
pub(super) async fn reattach(
    cfg: ExecConfig,
    conns: attached::Conns,
    keeper: PathBuf,
    order: SpawnOrder,
    kill_rx: mpsc::UnboundedReceiver<i64>,
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
    let take = Request::Take {
        run: run.0,
        attempt,
    };
    let taken = tokio::time::timeout(attached::KEEPER_ANSWER, conn.request(&take, &[]))
        .await
        .unwrap_or(Err(crate::keeper::wire::WireError::Closed));
    let (held, output, secrets) = match taken {
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
        // It ended between the start-up's inventory and now; what is left
        // of its group goes, as when a supervised job's leader exits.
        super::sweep_orphan(held.pid, held.pid_start);
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
        return;
    }
    supervise(cfg, conns, order, child, (read_end, log), kill_rx, events).await
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
    mut kill_rx: mpsc::UnboundedReceiver<i64>,
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
                    (Some(read_end), log),
                    kill_rx,
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
