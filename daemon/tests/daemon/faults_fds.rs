//! Descriptor exhaustion against the real `axd` (docs/operations.md,
//! "Descriptor exhaustion"): axd started under `ulimit -n 256` runs 500
//! jobs at once.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::support::*;
use serde_json::json;

const JOBS: usize = 500;

/// Pids of the live processes whose environment holds `needle`, and the
/// zombies whose parent is `parent`.
fn leftovers(parent: u32, needle: &str) -> (Vec<u32>, Vec<u32>) {
    let (mut marked, mut zombies) = (Vec::new(), Vec::new());
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let mut f = after.split_whitespace();
        let state = f.next().unwrap_or("");
        let ppid: u32 = f.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        if state == "Z" {
            if ppid == parent {
                zombies.push(pid);
            }
            continue;
        }
        if let Ok(env) = std::fs::read(format!("/proc/{pid}/environ"))
            && env
                .split(|b| *b == 0)
                .any(|kv| kv.starts_with(needle.as_bytes()))
        {
            marked.push(pid);
        }
    }
    (marked, zombies)
}

/// Under `ulimit -n 256`, 500 jobs that may all start at once: every
/// process that started is supervised and recorded as the attempt it is
/// (each attempt's line appears exactly once in the jobs' file, and no
/// line belongs to an attempt recorded as never started), no attempt is
/// lost to the shortage (all succeed: an attempt that could not be spawned
/// for lack of descriptors uses no retry), no zombie or stray process is
/// left, and axd answers throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_ulimit_n_256_every_started_process_is_supervised_and_runs_once() {
    let mut toml = String::from(
        "[defaults]\nretries = 1\nbackoff = { kind = \"fixed\", base = \"100ms\" }\n\
         timeout = \"2m\"\n",
    );
    for i in 0..JOBS {
        toml.push_str(&format!(
            "[[job]]\nid = \"j{i}\"\ncommand = \"echo $AX_RUN_ID.$AX_ATTEMPT >> \\\"$OUT\\\"; sleep 1\"\n"
        ));
    }
    let config = format!(
        "max_concurrency = {JOBS}\nshutdown_grace = \"5s\"\ntimezone = \"UTC\"\n\
         pass_env = [\"OUT\"]\n[pools.default]\nslots = {JOBS}\n"
    );
    let mut d = Daemon::prepare(&config, &[("many.toml", &toml)]);
    let out = d.path("attempts.txt");
    d.set_env("OUT", &out);
    d.set_nofile(256);
    d.spawn();
    let axd = d.pid();
    let mut c = d.client().await;
    let began = Instant::now();
    let ids = trigger(&mut c, "many").await;
    assert_eq!(ids.len(), JOBS);

    let deadline = Instant::now() + Duration::from_secs(240);
    let mut slowest = Duration::ZERO;
    let runs: Vec<ax_protocol::api::RunView> = loop {
        let asked = Instant::now();
        let v = c
            .call("list_runs", json!({"dag": "many", "limit": 10000}))
            .await
            .unwrap();
        slowest = slowest.max(asked.elapsed());
        let runs: Vec<ax_protocol::api::RunView> = serde_json::from_value(v).unwrap();
        if runs.len() == JOBS && runs.iter().all(|r| r.finished_at.is_some()) {
            break runs;
        }
        assert!(
            Instant::now() < deadline,
            "not all runs ended:\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        slowest < Duration::from_secs(5),
        "axd took {slowest:?} to answer"
    );

    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let mut lines: BTreeMap<String, usize> = BTreeMap::new();
    for l in text.lines() {
        *lines.entry(l.to_string()).or_default() += 1;
    }
    for r in &runs {
        let full = get_run(&mut c, r.id).await;
        assert_eq!(full.state.as_str(), "success", "{full:#?}");
        for a in &full.attempts {
            let key = format!("{}.{}", r.id, a.n);
            let seen = lines.remove(&key).unwrap_or(0);
            let ran = a.outcome.map(|o| o.as_str()) != Some("spawn_error");
            assert_eq!(
                seen,
                usize::from(ran),
                "attempt {key} recorded {:?} ran {seen} times",
                a.outcome
            );
        }
    }
    assert!(
        lines.is_empty(),
        "processes ran for attempts that are not recorded: {lines:?}"
    );

    // Nothing left behind: no zombie of axd's or of its keeper's (the
    // jobs' parent), no process of a job.
    let needle = format!("OUT={}", out.display());
    let keepers = d.keepers();
    assert_eq!(keepers.len(), 1, "one keeper");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (mut marked, mut zombies) = leftovers(axd, &needle);
        zombies.extend(leftovers(keepers[0] as u32, &needle).1);
        // axd and its keeper have OUT too (axd's environment).
        marked.retain(|p| *p != axd && *p != keepers[0] as u32);
        if marked.is_empty() && zombies.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left behind: job processes {marked:?}, zombies {zombies:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    c.call("status", json!({})).await.unwrap();
    let log = d.log();
    eprintln!(
        "{JOBS} jobs under ulimit -n 256: all ended in {:?}; {} attempts waited for \
         descriptors; slowest list_runs answer {slowest:?}",
        began.elapsed(),
        log.matches("cannot start the attempt yet").count()
    );
    assert!(
        log.contains("cannot start the attempt yet"),
        "the limit was never reached: the test proves nothing\n{log}"
    );
    drop(c);
    assert_eq!(d.term(), Some(0), "{}", d.log());
}
