//! The pueue baseline of scenario 1: the same no-op tasks through pueue,
//! when `pueued`/`pueue` are found.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Where `pueued` and `pueue` are: `$AX_BENCH_PUEUE_DIR`, the cache this
/// machine keeps them in, or `~/.cargo/bin`.
pub(crate) fn pueue_dir() -> Option<PathBuf> {
    let from_env = std::env::var_os("AX_BENCH_PUEUE_DIR").map(PathBuf::from);
    let candidates = [
        from_env,
        Some(PathBuf::from("/work/pueue-cache/bin")),
        Some(PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cargo/bin")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|d| d.join("pueued").exists() && d.join("pueue").exists())
}

/// pueue at `parallel`: `n` no-op tasks added, time until all are done.
pub(crate) fn pueue_rate(dir: &Path, n: usize, parallel: u32) -> anyhow::Result<f64> {
    let tmp = tempfile::tempdir()?;
    let cfg = tmp.path().join("pueue.yml");
    std::fs::write(
        &cfg,
        format!(
            "shared:\n  pueue_directory: {0}\n  runtime_directory: {0}\n  use_unix_socket: true\n  unix_socket_path: {0}/pueue.sock\ndaemon:\n  callback: null\nclient: {{}}\n",
            tmp.path().display()
        ),
    )?;
    let mut daemon = Command::new(dir.join("pueued"))
        .arg("-c")
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    let pueue = |args: &[&str]| {
        Command::new(dir.join("pueue"))
            .arg("-c")
            .arg(&cfg)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
    };
    let t0 = Instant::now();
    while !tmp.path().join("pueue.sock").exists() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    pueue(&["parallel", &parallel.to_string()])?;
    pueue(&["pause"])?;
    for _ in 0..n {
        pueue(&["add", "--", "true"])?;
    }
    let t = Instant::now();
    pueue(&["start"])?;
    let done = || -> bool {
        let out = Command::new(dir.join("pueue"))
            .arg("-c")
            .arg(&cfg)
            .args(["status", "--json"])
            .output();
        out.ok()
            .and_then(|o| serde_json::from_slice::<Value>(&o.stdout).ok())
            .map(|v| {
                v["tasks"]
                    .as_object()
                    .map(|t| t.values().all(|x| x["status"].get("Done").is_some()))
                    .unwrap_or(false)
            })
            .unwrap_or(false)
    };
    while !done() {
        if t.elapsed() > Duration::from_secs(900) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let rate = n as f64 / t.elapsed().as_secs_f64();
    let _ = daemon.kill();
    let _ = daemon.wait();
    Ok(rate)
}
