//! `ax-bench proctree [N]`: N attempts whose process trees try to outlive
//! their job, ended by timeout (half) or cancel (half). Three kinds, in turn:
//!
//! * `fork`: background children in the job's group;
//! * `setsid`: a child in its own session, which forks again (a daemon);
//! * `ignore-term`: the whole tree ignores SIGTERM, so only SIGKILL after
//!   `kill_grace` ends it.
//!
//! Every process of every tree appends its pid to a file. After all runs
//! are terminal and `kill_grace` + 1 s has passed, the figures: processes
//! still alive (must be 0), zombies left under axd (0), and zombies of
//! those pids anywhere (0).

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::json;

use crate::axd;

const KILL_GRACE_MS: u64 = 300;

fn job_text(kind: usize, pidfile: &str, timeout: bool) -> String {
    // Each process writes its own pid ($$ of its own sh) before exec'ing
    // the long sleep.
    let leaf = format!("sh -c 'echo $$ >> {pidfile}; exec sleep 300'");
    let command = match kind {
        0 => format!("echo $$ >> {pidfile}; {leaf} & {leaf} & wait"),
        1 => format!(
            "echo $$ >> {pidfile}; setsid sh -c \"echo \\$\\$ >> {pidfile}; sh -c 'echo \\$\\$ >> {pidfile}; exec sleep 300' & exec sleep 300\" & wait"
        ),
        _ => format!("trap '' TERM; echo $$ >> {pidfile}; {leaf} & {leaf}; wait"),
    };
    let timeout = if timeout { "timeout = \"1s\"\n" } else { "" };
    format!(
        "command = {}\nkill_grace = \"{KILL_GRACE_MS}ms\"\n{timeout}",
        toml_string(&command)
    )
}

fn toml_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// (alive, zombie) for a pid, judged by /proc (a reused pid would have to
/// be running our `sleep 300` to count).
fn pid_state(pid: i32) -> (bool, bool, i32) {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return (false, false, 0);
    };
    let Some(close) = stat.rfind(')') else {
        return (false, false, 0);
    };
    let mut rest = stat[close + 2..].split_whitespace();
    let state = rest.next().unwrap_or("");
    let ppid: i32 = rest.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let ours = cmd.windows(9).any(|w| w == b"sleep\x00300") || cmd.starts_with(b"sh\x00");
    if state == "Z" {
        (false, true, ppid)
    } else {
        (ours, false, ppid)
    }
}

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Attempts
    #[arg(default_value_t = 1000)]
    n: usize,
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let n = args.n;
    let mut d = axd::start(64, &[])?;
    let axd_pid = axd::pid(&d)? as i32;
    let pids_dir = d.path("pids");
    std::fs::create_dir_all(&pids_dir)?;
    let mut c = axd::open(&d.socket)?;
    let started = Instant::now();
    let mut kinds: BTreeMap<u64, (usize, bool)> = BTreeMap::new();
    let mut files = Vec::new();
    for i in 0..n {
        let kind = i % 3;
        let by_timeout = (i / 3) % 2 == 0;
        let pidfile = pids_dir.join(format!("{i}"));
        let text = job_text(kind, &pidfile.display().to_string(), by_timeout);
        let name = format!(
            "{}-{}-{i}",
            ["fork", "setsid", "noterm"][kind],
            if by_timeout { "timeout" } else { "cancel" }
        );
        let v = c.call("submit", json!({"toml": text, "name": name}))?;
        let id = v["runs"][0].as_u64().unwrap_or(0);
        kinds.insert(id, (kind, by_timeout));
        files.push(pidfile);
    }
    // Cancel the cancel-kind runs once they have been seen running twice,
    // 200 ms apart (so their trees are up).
    let mut seen: HashSet<u64> = HashSet::new();
    let mut cancelled: HashSet<u64> = HashSet::new();
    loop {
        let running = c.call("list_runs", json!({"state": "running", "limit": 10000}))?;
        for r in running.as_array().into_iter().flatten() {
            let id = r["id"].as_u64().unwrap_or(0);
            if kinds.get(&id).is_some_and(|(_, t)| !t) && !cancelled.contains(&id) {
                if seen.contains(&id) {
                    c.call("cancel", json!({"id": id}))?;
                    cancelled.insert(id);
                } else {
                    seen.insert(id);
                }
            }
        }
        let status = c.call("status", json!({}))?;
        let open: u64 = ["queued", "ready", "running", "waiting", "retrying"]
            .iter()
            .map(|s| status["runs"][s].as_u64().unwrap_or(0))
            .sum();
        if open == 0 {
            break;
        }
        if started.elapsed() > Duration::from_secs(600) {
            bail!("runs did not finish in 10 minutes");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let elapsed = started.elapsed();
    let status = c.call("status", json!({}))?;
    std::thread::sleep(Duration::from_millis(KILL_GRACE_MS + 1000));

    let mut processes = 0;
    let mut alive = Vec::new();
    let mut zombies_axd = 0;
    let mut zombies_other = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for pid in text.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            processes += 1;
            let (live, zombie, ppid) = pid_state(pid);
            if live {
                alive.push((pid, f.file_name().unwrap().to_string_lossy().to_string()));
            }
            if zombie {
                if ppid == axd_pid {
                    zombies_axd += 1;
                } else {
                    zombies_other += 1;
                }
            }
        }
    }
    let timed_out = status["runs"]["timed_out"].as_u64().unwrap_or(0);
    let cancelled_n = status["runs"]["cancelled"].as_u64().unwrap_or(0);
    println!(
        "process trees: {n} attempts (fork / setsid / ignore-TERM), kill_grace {KILL_GRACE_MS} ms"
    );
    println!("  ended by timeout:                      {timed_out}");
    println!("  ended by cancel:                       {cancelled_n}");
    println!("  processes started (pids recorded):     {processes}");
    println!("  alive after kill_grace + 1 s:          {}", alive.len());
    println!("  zombies under axd:                     {zombies_axd}");
    println!("  zombies elsewhere:                     {zombies_other}");
    println!(
        "  wall time:                             {:.1} s",
        elapsed.as_secs_f64()
    );
    // Clean up anything left so a failed run does not leak sleeps.
    for (pid, _) in &alive {
        // SAFETY: plain kill of a pid we recorded.
        unsafe { libc::kill(*pid, libc::SIGKILL) };
    }
    d.stop();
    if !alive.is_empty() || zombies_axd > 0 || zombies_other > 0 {
        bail!(
            "process trees outlived their jobs: alive {:?}",
            alive.iter().take(10).collect::<Vec<_>>()
        );
    }
    if timed_out + cancelled_n != n as u64 {
        bail!("expected {n} runs timed out or cancelled, got {timed_out} + {cancelled_n}");
    }
    Ok(())
}
