//! `ax-bench crashloop [CYCLES] [SEED]`: crash recovery under fire.

use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::{Value, json};

use crate::axd;
use crate::measure::stats;

#[derive(clap::Args)]
pub(crate) struct Args {
    /// kill -9 cycles
    #[arg(default_value_t = 50)]
    cycles: usize,
    /// Seed of the moments and batch sizes
    #[arg(default_value_t = 0x5eed)]
    seed: u64,
}

/// Crash recovery under fire: kill -9 the daemon at random moments while a
/// client submits (single and pipelined) and jobs run; restart each time.
/// Checks that no acknowledged submission is lost, that every run ends
/// terminal, that no run had more counted attempts than its policy allows,
/// that no attempt's process ran twice, and `PRAGMA integrity_check` after
/// every crash.
pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let (cycles, seed) = (args.cycles, args.seed);
    let mut rng = seed | 1;
    let mut rand = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n.max(1)
    };
    let mut d = axd::start(4, &[])?;
    // Each process writes its run and attempt: no attempt may run twice
    // (jobs outlive axd, and the next one takes them over).
    let marks = d.path("marks.txt");
    let mut acked: Vec<u64> = Vec::new();
    let mut restarts = Vec::new();
    let mut integrity_ok = 0;
    for cycle in 0..cycles {
        let socket = d.socket.clone();
        let command = format!(
            "echo $AX_RUN_ID.$AX_ATTEMPT >> {}; sleep 0.02",
            marks.display()
        );
        let batch = 1 + rand(40) as usize;
        let submitter = std::thread::spawn(move || -> Vec<u64> {
            let mut ids = Vec::new();
            let Ok(mut c) = axd::open(&socket) else {
                return ids;
            };
            for i in 0.. {
                // alternate single submissions and pipelined batches
                let n = if i % 2 == 0 { 1 } else { batch };
                for _ in 0..n {
                    let params = json!({"command": command, "name": format!("c{cycle}")});
                    if c.send("submit", params).is_err() {
                        return ids;
                    }
                }
                for _ in 0..n {
                    let Ok(Some(line)) = c.read_line() else {
                        return ids;
                    };
                    // Only an answer counts as acknowledged.
                    if let Ok(v) = serde_json::from_str::<Value>(&line)
                        && let Some(id) = v["result"]["runs"][0].as_u64()
                    {
                        ids.push(id);
                    }
                }
            }
            ids
        });
        std::thread::sleep(Duration::from_millis(20 + rand(300)));
        d.kill9();
        acked.extend(submitter.join().unwrap_or_default());
        let db = rusqlite::Connection::open(d.path("state/ax.db"))?;
        let ok: String = db.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
        if ok == "ok" {
            integrity_ok += 1;
        } else {
            eprintln!("cycle {cycle}: integrity_check: {ok}");
        }
        drop(db);
        restarts.push(d.spawn()?.as_secs_f64() * 1000.0);
    }
    // Let everything finish.
    let mut c = axd::open(&d.socket)?;
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let runs = c.call("status", json!({}))?["runs"].clone();
        let open: u64 = ["waiting", "delayed", "ready", "running"]
            .iter()
            .map(|k| runs[k].as_u64().unwrap_or(0))
            .sum();
        if open == 0 || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let db = rusqlite::Connection::open(d.path("state/ax.db"))?;
    let mut lost = 0;
    let mut unfinished = 0;
    for id in &acked {
        let state: Option<String> = db
            .query_row("SELECT state FROM runs WHERE id = ?1", [*id as i64], |r| {
                r.get(0)
            })
            .ok();
        match state.as_deref() {
            None => lost += 1,
            Some("success") | Some("failed") | Some("timed_out") | Some("cancelled") => {}
            Some(_) => unfinished += 1,
        }
    }
    let total: i64 = db.query_row("SELECT COUNT(*) FROM runs", [], |r| r.get(0))?;
    let nonterminal: i64 = db.query_row(
        "SELECT COUNT(*) FROM runs WHERE state NOT IN ('success','failed','timed_out','cancelled')",
        [],
        |r| r.get(0),
    )?;
    let beyond: i64 = db.query_row(
        "SELECT COUNT(*) FROM (SELECT r.id FROM runs r JOIN attempts a ON a.run = r.id
           WHERE a.outcome IS NOT 'interrupted' GROUP BY r.id HAVING COUNT(*) > MAX(r.retries, 0) + 1)",
        [],
        |r| r.get(0),
    )?;
    let interrupted: i64 = db.query_row(
        "SELECT COUNT(*) FROM attempts WHERE outcome = 'interrupted'",
        [],
        |r| r.get(0),
    )?;
    let text = std::fs::read_to_string(&marks).unwrap_or_default();
    let mut seen = std::collections::HashMap::<&str, u32>::new();
    for line in text.lines() {
        *seen.entry(line).or_default() += 1;
    }
    let twice = seen.values().filter(|n| **n > 1).count();
    let (med, lo, hi) = stats(restarts.clone());
    println!("crash loop: {cycles} kill -9 cycles, seed {seed}");
    println!("  acknowledged submissions:            {}", acked.len());
    println!("  acknowledged submissions lost:       {lost}");
    println!("  acknowledged runs not terminal:      {unfinished}");
    println!("  runs in the store / non-terminal:    {total} / {nonterminal}");
    println!(
        "  runs with attempts beyond policy:    {beyond} (interrupted attempts: {interrupted})"
    );
    println!("  attempts whose process ran twice:    {twice}");
    println!("  integrity_check ok:                  {integrity_ok} of {cycles}");
    println!(
        "  restart → serving:                   median {med:.0} ms (min {lo:.0}, max {hi:.0})"
    );
    if lost > 0
        || unfinished > 0
        || nonterminal > 0
        || beyond > 0
        || twice > 0
        || integrity_ok != cycles
    {
        bail!("crash loop found a violation");
    }
    Ok(())
}
