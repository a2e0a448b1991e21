//! The ax benchmark suite and reliability checks. Each starts a real `axd`
//! (the build next to this binary) in a temp dir; see `scenarios/`.
//!
//! Run: `cargo build --release && ./target/release/ax-bench all`
//! (`--quick` for the CI smoke sizes).

mod axd;
mod measure;
mod procfs;
mod scenarios;

use clap::{Parser, Subcommand};

use scenarios::{
    access, all, cluster, crashloop, dag, hostile, jobsdir, latency, logview, proctree, prune,
    restart, shutdown, submit, throughput, wal,
};

/// The ax benchmark suite (a real axd against the machine's limit and
/// pueue) and its reliability checks.
#[derive(Parser)]
#[command(name = "ax-bench")]
struct Cli {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Subcommand)]
enum Scenario {
    /// The whole suite: a table of medians and ratios, and JSON
    All(all::Args),
    /// Scenario 1 alone: no-op throughput, raw and ax alternating
    Throughput(throughput::Args),
    /// Scenario 2 alone: submit→started and parent exit→child started
    Latency(latency::Args),
    /// Scenario 3b alone: runs streamed over one connection
    Submit(submit::Args),
    /// Scenario 4 alone: a DAG of SIZE no-op jobs in each SHAPE
    Dag(dag::Args),
    /// Scenario 6: restart with N runs in the store
    Restart(restart::Args),
    /// Retention: axd prunes a store of N finished runs under a trickle of submissions
    Prune(prune::Args),
    /// kill -9 during submissions: nothing acknowledged may be lost
    Crashloop(crashloop::Args),
    /// Timeouts and cancels of process trees: nothing may survive its job
    Proctree(proctree::Args),
    /// SIGTERM with jobs running, restart, READY: no failed client, no late exit
    Shutdown(shutdown::Args),
    /// Huge and random frames, idle connections, stuck subscribers
    Hostile(hostile::Args),
    /// Scans of the jobs folder: 5,000 files, a reload of them, one 10 MiB file; status meanwhile
    Jobsdir(jobsdir::Args),
    /// Socket modes, foreign uid, stale sockets and second daemons over restarts
    Access(access::Args),
    /// The WAL's size under steady load with a subscriber
    Wal(wal::Args),
    /// The console's log view following a job printing ~10,000 lines/s
    Logview(logview::Args),
    /// 1, 2 and 3 nodes on PostgreSQL beside SQLite, and the claim latency
    Cluster(cluster::Args),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().scenario {
        Scenario::All(args) => all::run(&args),
        Scenario::Throughput(args) => throughput::run(&args),
        Scenario::Latency(args) => latency::run(&args),
        Scenario::Submit(args) => submit::run(&args),
        Scenario::Dag(args) => dag::run(&args),
        Scenario::Restart(args) => restart::run(&args),
        Scenario::Prune(args) => prune::run(&args),
        Scenario::Crashloop(args) => crashloop::run(&args),
        Scenario::Proctree(args) => proctree::run(&args),
        Scenario::Shutdown(args) => shutdown::run(&args),
        Scenario::Hostile(args) => hostile::run(&args),
        Scenario::Jobsdir(args) => jobsdir::run(&args),
        Scenario::Access(args) => access::run(&args),
        Scenario::Wal(args) => wal::run(&args),
        Scenario::Logview(args) => logview::run(&args),
        Scenario::Cluster(args) => cluster::run(&args),
    }
}
