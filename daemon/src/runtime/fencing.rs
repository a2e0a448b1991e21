//! Fencing: a node of a cluster that another node declared dead, or that
//! could not renew its lease in time, kills every job it runs and exits at
//! once, so that no run goes on twice (docs/operations.md, "Cluster").

use std::time::Duration;

/// How axd exits once fenced.
pub(crate) const FENCED_EXIT: i32 = 1;

/// Another node declared this one dead and handed its DAG runs to the
/// cluster (its epoch moved on): whatever this node still runs, another
/// may be running too. It kills the process group of every job it runs
/// and exits at once, non-zero, so that systemd restarts it under a new
/// epoch.
pub(crate) fn fenced(id: &str) -> ! {
    let killed = crate::execution::executor::kill_all();
    tracing::error!(
        "node {id} was declared dead by another node and its work handed to others: killed {killed} job(s), exiting"
    );
    std::process::exit(FENCED_EXIT)
}

/// This node could not renew its lease and the lease may end for the
/// others within a heartbeat: it kills the process group of every job it
/// runs and exits at once, non-zero, writing nothing (the store does not
/// answer, and what it could not commit must not be recorded later). Its
/// runs go to other nodes once its lease has ended; systemd restarts it,
/// and it rejoins under a new epoch once the database answers.
pub(crate) fn fence_self(id: &str, since: Duration, lease: Duration) -> ! {
    let killed = crate::execution::executor::kill_all();
    tracing::error!(
        "node {id} fences itself: its lease was last renewed {:.1} s ago and ends for the other nodes {:.1} s after a renewal; killed {killed} job(s), exiting",
        since.as_secs_f64(),
        lease.as_secs_f64()
    );
    std::process::exit(FENCED_EXIT)
}
