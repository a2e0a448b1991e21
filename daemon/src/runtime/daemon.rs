//! Running axd: the services started (`services`), signals answered
//! until the scheduler ends, the services stopped in reverse, and the
//! exit code (what a stop does to running jobs: docs/operations.md,
//! "Upgrade").

use tokio::signal::unix::{SignalKind, signal};

use crate::bus::Msg;
use crate::runtime::services::{JoinResult, Services};
use crate::runtime::shutdown::Shutdown;
use crate::runtime::startup::Prepared;
use crate::runtime::systemd::notify;

/// Runs axd until it has shut down; the exit code says whether every
/// thread ended well (`exit_code`). Start-up that blocks is done
/// (`startup::prepare`) before this runs.
pub async fn run(prepared: Prepared) -> anyhow::Result<u8> {
    let (socket, shutdown) = (prepared.cfg.socket.clone(), prepared.shutdown.clone());
    let forgets = prepared.forgets.clone();
    let bound = crate::runtime::shutdown::bound(prepared.cfg.shutdown_grace);
    let (mut services, handle, _lock) = crate::runtime::services::start(prepared).await?;
    let (scheduler, deadline) =
        until_scheduler_ends(&shutdown, &handle.tx, &mut services, bound).await?;
    let stopped = services.stop_all(scheduler, deadline).await;
    let mut code = exit_code(&stopped.ended);
    if !stopped.late.is_empty() {
        tracing::error!(
            "shutdown took longer than its bound ({} s): the {} thread(s) did not end and are abandoned; what they held is not committed",
            bound.as_secs(),
            stopped.late.join(", ")
        );
        code = 1;
    }
    if stopped.undone {
        // The writer said what it could not commit.
        code = 1;
    }
    if shutdown.failed() {
        code = 1;
    }
    // The writer has committed what it could: the keepers may drop what
    // it recorded, so a keeper left holding nothing exits.
    forgets.tell_all_now();
    let _ = std::fs::remove_file(&socket);
    tracing::info!("axd stopped");
    Ok(code)
}

/// Answers signals until the scheduler thread ends (shutdown complete, or
/// a panic) or the bound after the drain passes (`shutdown::bound`): how
/// the scheduler ended (`None`: it had not), and the deadline every other
/// service must end by; a thread still busy then (a store call that
/// hangs) is left behind.
async fn until_scheduler_ends(
    shutdown: &Shutdown,
    tx: &std::sync::mpsc::Sender<Msg>,
    services: &mut Services,
    bound: std::time::Duration,
) -> anyhow::Result<(Option<JoinResult>, tokio::time::Instant)> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    // `ax shutdown --stop-jobs` by signal (docs/operations.md, "Stopping").
    let mut usr2 = signal(SignalKind::user_defined2())?;
    let mut scheduler_done = services.scheduler_ended();
    let mut deadline: Option<tokio::time::Instant> = None;
    let scheduler_ended = loop {
        tokio::select! {
            _ = term.recv() => { notify(&[crate::runtime::systemd::Notify::Stopping]); shutdown.drain(); }
            _ = int.recv() => { notify(&[crate::runtime::systemd::Notify::Stopping]); shutdown.drain(); }
            _ = usr2.recv() => {
                notify(&[crate::runtime::systemd::Notify::Stopping]);
                shutdown.drain_stopping_jobs();
            }
            _ = hup.recv() => {
                notify(&[crate::runtime::systemd::Notify::Reloading]);
                let _ = tx.send(Msg::Reload);
                notify(&[crate::runtime::systemd::Notify::Ready]);
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
    Ok((scheduler_ended, deadline))
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
