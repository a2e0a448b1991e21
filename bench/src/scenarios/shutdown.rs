//! `ax-bench shutdown [CYCLES]`: readiness and SIGTERM, over and over on one
//! state dir.
//!
//! Each cycle starts `axd` with `NOTIFY_SOCKET` pointing at a datagram
//! socket of ours, connects the instant `READY=1` arrives and asks for
//! `status` (that must never fail), checks that the runs that were running
//! at the previous SIGTERM are still running, taken over with the same
//! attempt and none interrupted (jobs outlive axd), tops the queue up,
//! sends SIGTERM with 8 jobs running (some ignoring SIGTERM) and more
//! queued, and checks: exit within `shutdown_grace` + 5 s, exit code 0, no
//! attempt started between the signal and the next start.

use std::collections::BTreeSet;
use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::json;

use ax_testkit::{Conn, Daemon};

use crate::axd;
use crate::measure::stats;

const SHUTDOWN_GRACE_MS: u64 = 1500;

fn ms_of(t: &serde_json::Value) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(t.as_str()?)
        .ok()
        .map(|d| d.timestamp_millis())
}

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Start–SIGTERM cycles
    #[arg(default_value_t = 20)]
    cycles: usize,
}

/// What the cycles found; every count but the totals is a failure.
#[derive(Default)]
struct Tally {
    ready_to_answer: Vec<f64>,
    ready_failures: usize,
    exit_times: Vec<f64>,
    bad_exits: usize,
    started_after_term: usize,
    not_kept: usize,
    kept_total: usize,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let cycles = args.cycles;
    let mut d = axd::prepare(
        &format!(
            "max_concurrency = 8\nshutdown_grace = \"{SHUTDOWN_GRACE_MS}ms\"\n[pools.default]\nslots = 8\n"
        ),
        &[],
    )?;
    let notify_path = d.path("notify.sock");
    let notify = UnixDatagram::bind(&notify_path)?;
    d.set_env("NOTIFY_SOCKET", &notify_path);
    notify.set_read_timeout(Some(Duration::from_secs(30)))?;

    let mut tally = Tally::default();
    let mut expect_kept: BTreeSet<u64> = BTreeSet::new();
    let mut term_at: i64 = 0;

    for cycle in 0..cycles {
        let launched_at = chrono::Utc::now().timestamp_millis();
        d.launch()?;
        wait_ready(&notify)?;
        answer_after_ready(&d, cycle, &mut tally);
        let mut c = axd::open(&d.socket)?;
        check_kept(&mut c, std::mem::take(&mut expect_kept), cycle, &mut tally)?;
        if cycle > 0 {
            tally.started_after_term += started_between(&mut c, term_at, launched_at)?;
        }
        expect_kept = top_up(&mut c)?;
        tally.kept_total += expect_kept.len();
        drop(c);

        term_at = chrono::Utc::now().timestamp_millis();
        terminate(&mut d, cycle, &mut tally)?;
    }
    report(&tally, cycles);
    if tally.ready_failures + tally.bad_exits + tally.started_after_term + tally.not_kept > 0 {
        bail!("shutdown/readiness violation");
    }
    Ok(())
}

/// Waits for `READY=1` on the notify socket.
fn wait_ready(notify: &UnixDatagram) -> anyhow::Result<()> {
    let mut buf = [0u8; 4096];
    loop {
        let n = notify
            .recv(&mut buf)
            .context("no READY=1 from axd within 30 s")?;
        if String::from_utf8_lossy(&buf[..n])
            .lines()
            .any(|l| l == "READY=1")
        {
            return Ok(());
        }
    }
}

/// A client connecting right after `READY=1` must be answered.
fn answer_after_ready(d: &Daemon, cycle: usize, tally: &mut Tally) {
    let t = Instant::now();
    match axd::open(&d.socket).and_then(|mut c| Ok(c.call("status", json!({}))?)) {
        Ok(_) => tally
            .ready_to_answer
            .push(t.elapsed().as_secs_f64() * 1000.0),
        Err(e) => {
            tally.ready_failures += 1;
            eprintln!("cycle {cycle}: a client right after READY failed: {e}");
        }
    }
}

/// The runs running at the last SIGTERM are still running, taken over by
/// this axd: one attempt each, none interrupted.
fn check_kept(
    c: &mut Conn,
    expect_kept: BTreeSet<u64>,
    cycle: usize,
    tally: &mut Tally,
) -> anyhow::Result<()> {
    for id in expect_kept {
        let r = c.call("get_run", json!({"id": id}))?;
        let attempts = r["attempts"].as_array().cloned().unwrap_or_default();
        let interrupted = attempts.iter().any(|a| a["outcome"] == "interrupted");
        if interrupted || r["state"] != "running" || attempts.len() != 1 {
            tally.not_kept += 1;
            eprintln!(
                "cycle {cycle}: run {id} not kept running: {} with {} attempts ({})",
                r["state"],
                attempts.len(),
                r["why"]
            );
        }
    }
    Ok(())
}

/// Attempts begun after the SIGTERM at `term_at` and before the next start
/// at `launched_at`, while the old daemon was stopping (there must be none).
fn started_between(c: &mut Conn, term_at: i64, launched_at: i64) -> anyhow::Result<usize> {
    let mut n = 0;
    let runs = c.call("list_runs", json!({"limit": 10000}))?;
    for r in runs.as_array().into_iter().flatten() {
        for a in r["attempts"].as_array().into_iter().flatten() {
            let started = ms_of(&a["started_at"]).unwrap_or(0);
            if started > term_at && started < launched_at {
                n += 1;
            }
        }
    }
    Ok(n)
}

/// Keeps 8 running and 8 queued (one in four ignores SIGTERM); returns the
/// running ones, which must outlive the SIGTERM.
fn top_up(c: &mut Conn) -> anyhow::Result<BTreeSet<u64>> {
    let open = {
        let s = c.call("status", json!({}))?;
        ["queued", "ready", "running"]
            .iter()
            .map(|k| s["runs"][k].as_u64().unwrap_or(0))
            .sum::<u64>()
    };
    for i in open..16 {
        let cmd = if i % 4 == 0 {
            "trap '' TERM; sleep 300"
        } else {
            "sleep 300"
        };
        c.call(
            "submit",
            json!({"command": cmd, "name": format!("long{i}")}),
        )?;
    }
    c.wait_count("running", 8, Duration::from_secs(20))?;
    let running = c.call("list_runs", json!({"state": "running", "limit": 100}))?;
    Ok(running
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["id"].as_u64())
        .collect())
}

/// SIGTERM: axd must exit 0 within `shutdown_grace` + 5 s.
fn terminate(d: &mut Daemon, cycle: usize, tally: &mut Tally) -> anyhow::Result<()> {
    let t = Instant::now();
    let limit = Duration::from_millis(SHUTDOWN_GRACE_MS + 30_000);
    let status = match d.terminate(limit) {
        Ok(Some(status)) => status,
        Ok(None) => bail!("cycle {cycle}: axd was not running at SIGTERM"),
        Err(e) => bail!("axd did not exit 30 s past shutdown_grace: {e}"),
    };
    let took = t.elapsed();
    tally.exit_times.push(took.as_secs_f64() * 1000.0);
    if status.code() != Some(0) || took > Duration::from_millis(SHUTDOWN_GRACE_MS + 5000) {
        tally.bad_exits += 1;
        eprintln!("cycle {cycle}: exit {status:?} after {took:?}");
    }
    Ok(())
}

fn report(tally: &Tally, cycles: usize) {
    let (r50, rlo, rhi) = stats(tally.ready_to_answer.clone());
    let (e50, elo, ehi) = stats(tally.exit_times.clone());
    println!(
        "shutdown and readiness: {cycles} cycles, shutdown_grace {SHUTDOWN_GRACE_MS} ms, 8 running (2 ignore SIGTERM) + 8 queued at each SIGTERM"
    );
    println!(
        "  clients right after READY that failed:   {} of {cycles}",
        tally.ready_failures
    );
    println!(
        "  READY → first answer:                    median {r50:.2} ms (min {rlo:.2}, max {rhi:.2})"
    );
    println!(
        "  SIGTERM → exit:                          median {e50:.0} ms (min {elo:.0}, max {ehi:.0}); bound {} ms",
        SHUTDOWN_GRACE_MS + 5000
    );
    println!(
        "  exits late or non-zero:                  {}",
        tally.bad_exits
    );
    println!(
        "  attempts started after SIGTERM:          {}",
        tally.started_after_term
    );
    println!(
        "  runs running at SIGTERM:                 {}, not kept running: {}",
        tally.kept_total, tally.not_kept
    );
}
