//! The ax benchmark suite. Starts a real `axd` (the release build next to
//! this binary) in a temp dir and measures each scenario several times,
//! side by side with its baseline in the same run:
//!
//! * raw: this program spawning and reaping the same command with tokio at
//!   the same concurrency (the machine's limit);
//! * pueue: when `pueued`/`pueue` are found (PATH or $AX_BENCH_PUEUE_DIR).
//!
//! Run: `cargo build --release && cargo run --release -p ax-bench -- all`
//! (`--quick` for the CI smoke sizes).
//!
//! Prints a table of medians (min–max) and ratios, and writes JSON to
//! `bench-results.json` (or `--json PATH`).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

struct Opts {
    quick: bool,
    reps: usize,
    json: PathBuf,
}

#[derive(Default)]
struct Report {
    rows: Vec<(String, String, String)>,
    json: Vec<Value>,
}

impl Report {
    fn add(&mut self, name: &str, value: String, note: String, raw: Value) {
        println!("{name:<58} {value:<34} {note}");
        self.rows.push((name.into(), value, note));
        self.json.push(json!({"name": name, "data": raw}));
    }
}

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn fmt3(v: (f64, f64, f64), unit: &str) -> String {
    format!("{:.0}{unit} ({:.0}–{:.0})", v.0, v.1, v.2)
}

fn fmt3f(v: (f64, f64, f64), unit: &str) -> String {
    format!("{:.2}{unit} ({:.2}–{:.2})", v.0, v.1, v.2)
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

// ----- the daemon under test ------------------------------------------------

struct Daemon {
    dir: tempfile::TempDir,
    child: Option<Child>,
    socket: PathBuf,
    config: PathBuf,
}

fn sibling(name: &str) -> anyhow::Result<PathBuf> {
    let p = std::env::current_exe()?.with_file_name(name);
    if !p.exists() {
        bail!(
            "{} not found: run `cargo build --release` first",
            p.display()
        );
    }
    Ok(p)
}

impl Daemon {
    fn start(slots: u32, extra_jobs: &[(&str, &str)]) -> anyhow::Result<Daemon> {
        Daemon::start_config(
            &format!("max_concurrency = {slots}\n[pools.default]\nslots = {slots}\n"),
            extra_jobs,
        )
    }

    /// A daemon with `pools` (and `max_concurrency`) given as TOML.
    fn start_config(pools: &str, extra_jobs: &[(&str, &str)]) -> anyhow::Result<Daemon> {
        let dir = tempfile::tempdir()?;
        std::fs::create_dir_all(dir.path().join("jobs.d"))?;
        for (n, t) in extra_jobs {
            std::fs::write(dir.path().join("jobs.d").join(n), t)?;
        }
        let config = dir.path().join("axd.toml");
        std::fs::write(
            &config,
            format!(
                "jobs_dir = \"jobs.d\"\nstate_dir = \"state\"\nsocket = \"axd.sock\"\nsynchronous = \"{}\"\n{pools}[retry]\nrate = \"100000/min\"\n",
                std::env::var("AX_BENCH_SYNC").unwrap_or_else(|_| "full".into())
            ),
        )?;
        let socket = dir.path().join("axd.sock");
        let mut d = Daemon {
            dir,
            child: None,
            socket,
            config,
        };
        d.spawn()?;
        Ok(d)
    }

    fn spawn(&mut self) -> anyhow::Result<Duration> {
        let t = Instant::now();
        let child = Command::new(sibling("axd")?)
            .arg("--config")
            .arg(&self.config)
            .env("RUST_LOG", "warn")
            .stderr(std::fs::File::create(self.dir.path().join("axd.log"))?)
            .spawn()?;
        self.child = Some(child);
        while Instant::now() - t < Duration::from_secs(120) {
            if let Ok(mut c) = Conn::open(&self.socket)
                && c.call("status", json!({})).is_ok()
            {
                return Ok(t.elapsed());
            }
            // An axd that exited will never answer: say why at once.
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                self.child = None;
                let holders = Command::new("fuser")
                    .arg("-v")
                    .arg(self.dir.path().join("state/axd.lock"))
                    .output()
                    .map(|o| {
                        String::from_utf8_lossy(&o.stderr).into_owned()
                            + &String::from_utf8_lossy(&o.stdout)
                    })
                    .unwrap_or_default();
                bail!(
                    "axd exited ({status}) before serving:\n{}\nlock holders: {holders}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        bail!("axd did not start within 120 s:\n{}", self.log())
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(c.id().to_string())
                .status();
            let _ = c.wait();
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("axd.log")).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Raises this process's open-files limit to the hard limit.
fn raise_own_nofile() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// A process's CPU time so far (all threads, user + system), in µs, and
/// its context switches (voluntary + involuntary, summed over threads).
fn cpu_and_switches(pid: u32) -> (f64, u64) {
    let tick = 1e6 / 100.0; // USER_HZ is 100 on Linux
    let cpu = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = &s[s.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some((f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?) * tick)
        })
        .unwrap_or(0.0);
    let mut switches = 0;
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let status = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
            for l in status.lines() {
                if l.starts_with("voluntary_ctxt_switches:")
                    || l.starts_with("nonvoluntary_ctxt_switches:")
                {
                    switches += l
                        .split_whitespace()
                        .nth(1)
                        .and_then(|v| v.parse::<u64>().ok())
                        .unwrap_or(0);
                }
            }
        }
    }
    (cpu, switches)
}

/// A blocking JSON-RPC connection that can pipeline requests.
struct Conn {
    w: UnixStream,
    r: BufReader<UnixStream>,
    id: u64,
}

impl Conn {
    fn open(socket: &Path) -> anyhow::Result<Conn> {
        let s = UnixStream::connect(socket)?;
        let mut c = Conn {
            r: BufReader::new(s.try_clone()?),
            w: s,
            id: 0,
        };
        c.call("hello", json!({"protocol": 1, "client": "ax-bench"}))?;
        Ok(c)
    }

    fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        self.id += 1;
        writeln!(
            self.w,
            "{}",
            json!({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params})
        )?;
        let mut line = String::new();
        loop {
            line.clear();
            self.r.read_line(&mut line)?;
            let v: Value = serde_json::from_str(&line)?;
            if v.get("id").is_some() {
                if let Some(e) = v.get("error") {
                    bail!("{method}: {e}");
                }
                return Ok(v["result"].clone());
            }
        }
    }

    /// Sends `n` requests before reading any answer (batches of `batch`).
    fn pipeline(
        &mut self,
        n: usize,
        batch: usize,
        make: &dyn Fn(usize) -> (String, Value),
    ) -> anyhow::Result<()> {
        let mut sent = 0;
        while sent < n {
            let k = batch.min(n - sent);
            let mut buf = String::new();
            for i in sent..sent + k {
                self.id += 1;
                let (m, p) = make(i);
                buf.push_str(
                    &json!({"jsonrpc": "2.0", "id": self.id, "method": m, "params": p}).to_string(),
                );
                buf.push('\n');
            }
            self.w.write_all(buf.as_bytes())?;
            let mut line = String::new();
            for _ in 0..k {
                line.clear();
                self.r.read_line(&mut line)?;
                if line.contains("\"error\"") {
                    bail!("pipelined request failed: {line}");
                }
            }
            sent += k;
        }
        Ok(())
    }

    /// Sends `n` requests as fast as the daemon takes them while another
    /// thread reads the answers, as an async client would: the daemon's
    /// per-connection in-flight cap is the only window.
    fn stream(&mut self, n: usize, make: &dyn Fn(usize) -> (String, Value)) -> anyhow::Result<()> {
        if !self.r.buffer().is_empty() {
            bail!("unread answers before streaming");
        }
        let reader = BufReader::new(self.w.try_clone()?);
        let answers = std::thread::spawn(move || -> anyhow::Result<()> {
            let mut reader = reader;
            let mut line = String::new();
            for _ in 0..n {
                line.clear();
                reader.read_line(&mut line)?;
                if line.contains("\"error\"") {
                    bail!("streamed request failed: {line}");
                }
            }
            Ok(())
        });
        let mut buf = String::new();
        for i in 0..n {
            self.id += 1;
            let (m, p) = make(i);
            buf.push_str(
                &json!({"jsonrpc": "2.0", "id": self.id, "method": m, "params": p}).to_string(),
            );
            buf.push('\n');
            if buf.len() > 64 * 1024 {
                self.w.write_all(buf.as_bytes())?;
                buf.clear();
            }
        }
        self.w.write_all(buf.as_bytes())?;
        answers
            .join()
            .map_err(|_| anyhow::anyhow!("answer reader panicked"))?
    }

    fn count(&mut self, state: &str) -> anyhow::Result<u64> {
        Ok(self.call("status", json!({}))?["runs"][state]
            .as_u64()
            .unwrap_or(0))
    }

    fn wait_count(&mut self, state: &str, n: u64, limit: Duration) -> anyhow::Result<()> {
        let t = Instant::now();
        while self.count(state)? < n {
            if t.elapsed() > limit {
                bail!("waited {limit:?} for {n} {state}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }
}

// ----- scenarios ---------------------------------------------------------------

/// The physical limit: spawn and reap `true` with tokio at `conc` concurrency.
fn raw_spawn_rate(n: usize, conc: usize) -> f64 {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let sem = std::sync::Arc::new(tokio::sync::Semaphore::new(conc));
        let t = Instant::now();
        let mut handles = Vec::with_capacity(n);
        for _ in 0..n {
            let permit = sem.clone().acquire_owned().await.unwrap();
            handles.push(tokio::spawn(async move {
                let _ = tokio::process::Command::new("/bin/sh")
                    .arg("-c")
                    .arg("true")
                    .status()
                    .await;
                drop(permit);
            }));
        }
        for h in handles {
            let _ = h.await;
        }
        n as f64 / t.elapsed().as_secs_f64()
    })
}

/// No-op throughput through the daemon: `n` runs submitted in one pipelined
/// batch, runs/s until the last one succeeded.
fn ax_noop_rate(n: usize, slots: u32) -> anyhow::Result<f64> {
    Ok(ax_noop_profile(n, slots)?.0)
}

/// The same, with axd's own CPU µs and context switches per run.
fn ax_noop_profile(n: usize, slots: u32) -> anyhow::Result<(f64, f64, f64)> {
    let d = Daemon::start(slots, &[])?;
    let mut c = Conn::open(&d.socket)?;
    let (cpu0, sw0) = cpu_and_switches(d.pid());
    let t = Instant::now();
    c.pipeline(n, 1000, &|i| {
        (
            "submit".into(),
            json!({"command": "true", "name": format!("n{i}")}),
        )
    })?;
    c.wait_count("success", n as u64, Duration::from_secs(600))?;
    let rate = n as f64 / t.elapsed().as_secs_f64();
    let (cpu1, sw1) = cpu_and_switches(d.pid());
    Ok((
        rate,
        (cpu1 - cpu0) / n as f64,
        (sw1 - sw0) as f64 / n as f64,
    ))
}

fn pueue_dir() -> Option<PathBuf> {
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
fn pueue_rate(dir: &Path, n: usize, parallel: u32) -> anyhow::Result<f64> {
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

/// `ax submit` as separate processes: per-call ms over `n` calls.
fn ax_submit_calls(n: usize) -> anyhow::Result<(f64, f64)> {
    let d = Daemon::start(8, &[("hold.toml", "command = \"true\"\n")])?;
    let ax = sibling("ax")?;
    let mut times = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        let st = Command::new(&ax)
            .arg("--socket")
            .arg(&d.socket)
            .args(["submit", "--name", &format!("s{i}"), "--", "true"])
            .stdout(Stdio::null())
            .status()?;
        if !st.success() {
            bail!("ax submit failed");
        }
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let k = 100.min(n / 2).max(1);
    let first: f64 = times[..k].iter().sum::<f64>() / k as f64;
    let last: f64 = times[n - k..].iter().sum::<f64>() / k as f64;
    Ok((first, last))
}

/// Runs queued behind a paused DAG: daemon RSS growth per queued run, then
/// restart time with them in the store, and the console's window query.
fn queued_memory_restart_console(n: usize, report: &mut Report) -> anyhow::Result<()> {
    let mut d = Daemon::start(8, &[("hold.toml", "command = \"true\"\n")])?;
    let mut c = Conn::open(&d.socket)?;
    c.call("pause", json!({"dag": "hold"}))?;
    std::thread::sleep(Duration::from_millis(200));
    let before = rss_kib(d.pid());
    let t = Instant::now();
    c.stream(n, &|_| ("trigger".into(), json!({"dag": "hold"})))?;
    let submit_secs = t.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(300));
    let after = rss_kib(d.pid());
    let per_run = (after.saturating_sub(before)) as f64 * 1024.0 / n as f64;
    report.add(
        &format!("{n} runs submitted over one connection (streamed, durable)"),
        format!(
            "{:.2} s ({:.0} runs/s)",
            submit_secs,
            n as f64 / submit_secs
        ),
        "target ≤ 1 s per 100k".into(),
        json!({"runs": n, "seconds": submit_secs}),
    );
    report.add(
        &format!("daemon RSS growth per queued run ({n} queued)"),
        format!("{per_run:.0} B"),
        "target ≤ 1 KB".into(),
        json!({"bytes_per_run": per_run, "rss_before_kib": before, "rss_after_kib": after}),
    );
    let db = d.dir.path().join("state/ax.db");
    let wal = d.dir.path().join("state/ax.db-wal");
    // the console: the window it asks for, and a frame
    let mut lat = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        c.call("list_runs", json!({"limit": 50}))?;
        lat.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let (p50, p99) = (
        percentile(&mut lat.clone(), 0.5),
        percentile(&mut lat, 0.99),
    );
    report.add(
        &format!("list_runs limit 50 with {n} runs (p50 / p99)"),
        format!("{p50:.2} / {p99:.2} ms"),
        "target ≤ 20 ms".into(),
        json!({"p50_ms": p50, "p99_ms": p99}),
    );
    let ax = sibling("ax")?;
    let mut ls = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        Command::new(&ax)
            .arg("--socket")
            .arg(&d.socket)
            .args(["ls", "--limit", "50"])
            .stdout(Stdio::null())
            .status()?;
        ls.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    report.add(
        &format!("`ax ls --limit 50` process with {n} runs"),
        fmt3f(stats(ls.clone()), " ms"),
        "target ≤ 20 ms".into(),
        json!({"ms": ls}),
    );
    let window: Vec<ax_shared::api::RunView> =
        serde_json::from_value(c.call("list_runs", json!({"limit": 80}))?)?;
    let status: ax_shared::api::StatusView = serde_json::from_value(c.call("status", json!({}))?)?;
    let frame = render_frames(window, status);
    report.add(
        &format!("console frame render (window of 80 runs, {n} in the daemon)"),
        fmt3f(stats(frame.clone()), " ms"),
        "target ≤ 5 ms".into(),
        json!({"ms": frame}),
    );
    drop(c);
    // restart with them in the store
    d.stop();
    let size = std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0)
        + std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    report.add(
        &format!("store size per run ({n} runs, incl. indexes and events)"),
        format!("{:.0} B", size as f64 / n as f64),
        "target ≤ 1 KB".into(),
        json!({"bytes": size}),
    );
    let mut restarts = Vec::new();
    for _ in 0..3 {
        restarts.push(d.spawn()?.as_secs_f64() * 1000.0);
        d.stop();
    }
    report.add(
        &format!("restart → first answered request ({n} queued runs in the store)"),
        fmt3(stats(restarts.clone()), " ms"),
        "target ≤ 150 ms at 100k".into(),
        json!({"ms": restarts}),
    );
    Ok(())
}

fn render_frames(
    window: Vec<ax_shared::api::RunView>,
    status: ax_shared::api::StatusView,
) -> Vec<f64> {
    use ax_tui::console::state::{App, DaemonEvent};
    let mut app = App::new(chrono::Utc::now(), true);
    app.on_daemon(DaemonEvent::Connected {
        version: status.version.clone(),
    });
    app.on_daemon(DaemonEvent::Status(status));
    for _ in 0..180 {
        app.on_tick(chrono::Utc::now());
    }
    app.on_daemon(DaemonEvent::Window(window));
    let mut term = ratatui::Terminal::new(ratatui::backend::TestBackend::new(160, 50)).unwrap();
    (0..200)
        .map(|_| {
            let t = Instant::now();
            term.draw(|f| ax_tui::console::ui::render(f, &app)).unwrap();
            t.elapsed().as_secs_f64() * 1000.0
        })
        .collect()
}

/// DAG scale: one DAG run of `n` no-op jobs in a shape, vs `n` independent runs.
/// A DAG of `n` no-op jobs of `shape`, dropped into the jobs folder as a
/// job file (a 100k-job DAG is ~5 MiB, beyond the 1 MiB socket frame) and
/// triggered: seconds from the trigger to the last success.
fn dag_scale(n: usize, shape: &str) -> anyhow::Result<f64> {
    let mut toml = String::with_capacity(n * 48);
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = |k: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % k as u64) as usize
    };
    for i in 0..n {
        toml.push_str(&format!("[[job]]\nid = \"j{i}\"\ncommand = \"true\"\n"));
        let deps: Vec<String> = match shape {
            "chain" if i > 0 => vec![format!("j{}", i - 1)],
            "fanout" if i > 0 => vec!["j0".into()],
            "fanin" if i == n - 1 => (0..n - 1).map(|k| format!("j{k}")).collect(),
            // 1–3 random earlier jobs
            "random" if i > 0 => {
                let mut d: Vec<String> = (0..1 + rnd(3)).map(|_| format!("j{}", rnd(i))).collect();
                d.sort();
                d.dedup();
                d
            }
            _ => vec![],
        };
        if !deps.is_empty() {
            toml.push_str(&format!("deps = {deps:?}\n"));
        }
    }
    let d = Daemon::start(8, &[("big.toml", &toml)])?;
    let mut c = Conn::open(&d.socket)?;
    let t0 = Instant::now();
    loop {
        match c.call("trigger", json!({"dag": "big"})) {
            Ok(_) => break,
            // Not loaded yet: the watcher picks the file up shortly.
            Err(_) if t0.elapsed() < Duration::from_secs(120) => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => return Err(e),
        }
    }
    let t = Instant::now();
    c.wait_count("success", n as u64, Duration::from_secs(3600))?;
    Ok(t.elapsed().as_secs_f64())
}

/// SPEC §5.3 under fire: kill -9 the daemon at random moments while a
/// client submits (single and pipelined) and jobs run; restart each time.
/// Checks that no acknowledged submission is lost, that every run ends
/// terminal, that no run had more counted attempts than its policy allows,
/// and `PRAGMA integrity_check` after every crash.
fn crashloop(cycles: usize, seed: u64) -> anyhow::Result<()> {
    let mut rng = seed | 1;
    let mut rand = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n.max(1)
    };
    let mut d = Daemon::start(4, &[])?;
    let mut acked: Vec<u64> = Vec::new();
    let mut restarts = Vec::new();
    let mut integrity_ok = 0;
    for cycle in 0..cycles {
        let socket = d.socket.clone();
        let batch = 1 + rand(40) as usize;
        let submitter = std::thread::spawn(move || -> Vec<u64> {
            let mut ids = Vec::new();
            let Ok(mut c) = Conn::open(&socket) else {
                return ids;
            };
            for i in 0.. {
                // alternate single submissions and pipelined batches
                let n = if i % 2 == 0 { 1 } else { batch };
                for _ in 0..n {
                    c.id += 1;
                    let req = json!({"jsonrpc": "2.0", "id": c.id, "method": "submit", "params": {"command": "sleep 0.02", "name": format!("c{cycle}")}});
                    if writeln!(c.w, "{req}").is_err() {
                        return ids;
                    }
                }
                for _ in 0..n {
                    let mut line = String::new();
                    match c.r.read_line(&mut line) {
                        Ok(0) | Err(_) => return ids,
                        Ok(_) => {}
                    }
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
        if let Some(mut child) = d.child.take() {
            let _ = child.kill(); // SIGKILL
            let _ = child.wait();
        }
        acked.extend(submitter.join().unwrap_or_default());
        let db = rusqlite::Connection::open(d.dir.path().join("state/ax.db"))?;
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
    let mut c = Conn::open(&d.socket)?;
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
    let db = rusqlite::Connection::open(d.dir.path().join("state/ax.db"))?;
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
    let (med, lo, hi) = stats(restarts.clone());
    println!("crash loop: {cycles} kill -9 cycles, seed {seed}");
    println!("  acknowledged submissions:            {}", acked.len());
    println!("  acknowledged submissions lost:       {lost}");
    println!("  acknowledged runs not terminal:      {unfinished}");
    println!("  runs in the store / non-terminal:    {total} / {nonterminal}");
    println!(
        "  runs with attempts beyond policy:    {beyond} (interrupted attempts: {interrupted})"
    );
    println!("  integrity_check ok:                  {integrity_ok} of {cycles}");
    println!(
        "  restart → serving:                   median {med:.0} ms (min {lo:.0}, max {hi:.0})"
    );
    if lost > 0 || unfinished > 0 || nonterminal > 0 || beyond > 0 || integrity_ok != cycles {
        bail!("crash loop found a violation");
    }
    Ok(())
}

mod access;
mod hostile;
mod latency;
mod proctree;
mod restart;
mod shutdown;
mod wal;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("dag") {
        // Scenario 4 alone: `dag SIZE SHAPE...`, each shape once, in order
        // (shapes: independent, chain, fanout, fanin, random).
        let size = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10_000);
        for shape in &args[3..] {
            let s = dag_scale(size, shape)?;
            println!(
                "{size} {shape}: {s:.2} s ({:.1} µs per run)",
                s * 1e6 / size as f64
            );
        }
        return Ok(());
    }
    if args.get(1).map(String::as_str) == Some("proctree") {
        let n = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(1000);
        return proctree::run(n);
    }
    if args.get(1).map(String::as_str) == Some("throughput") {
        // Scenario 1 alone, raw and ax alternating: N runs, REPS times.
        let n = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(10_000);
        let reps = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(3);
        for slots in [8u32, 64] {
            let (mut raw, mut ax, mut cpu, mut sw) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            let mut raw_cpu = Vec::new();
            for _ in 0..reps {
                let (c0, _) = cpu_and_switches(std::process::id());
                raw.push(raw_spawn_rate(n, slots as usize));
                raw_cpu.push((cpu_and_switches(std::process::id()).0 - c0) / n as f64);
                let (rate, c, s) = ax_noop_profile(n, slots)?;
                ax.push(rate);
                cpu.push(c);
                sw.push(s);
            }
            let (r, a) = (stats(raw), stats(ax));
            println!(
                "{slots:>3} slots: raw {} /s ({:.0} µs CPU/run), ax {} /s, ax/raw {:.0}%; axd per run: {:.0} µs CPU, {:.1} context switches",
                fmt3(r, ""),
                stats(raw_cpu).0,
                fmt3(a, ""),
                a.0 / r.0 * 100.0,
                stats(cpu).0,
                stats(sw).0,
            );
        }
        return Ok(());
    }
    if args.get(1).map(String::as_str) == Some("submit") {
        // Scenario 3b alone: N runs pipelined over one connection, REPS times.
        let n = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(100_000);
        let reps = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(3);
        let mut secs = Vec::new();
        for _ in 0..reps {
            let d = Daemon::start(8, &[("hold.toml", "command = \"true\"\n")])?;
            let mut c = Conn::open(&d.socket)?;
            c.call("pause", json!({"dag": "hold"}))?;
            let before = rss_kib(d.pid());
            let t = Instant::now();
            c.stream(n, &|_| ("trigger".into(), json!({"dag": "hold"})))?;
            secs.push(t.elapsed().as_secs_f64());
            std::thread::sleep(Duration::from_millis(300));
            let after = rss_kib(d.pid());
            println!(
                "  RSS growth {:.0} B per queued run",
                (after.saturating_sub(before)) as f64 * 1024.0 / n as f64
            );
        }
        println!("{n} runs pipelined (durable): {} s", fmt3f(stats(secs), ""));
        return Ok(());
    }
    if args.get(1).map(String::as_str) == Some("latency") {
        let n = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(300);
        let show = |name: &str, mut v: Vec<f64>| {
            let (p50, p99) = (percentile(&mut v.clone(), 0.5), percentile(&mut v, 0.99));
            println!("{name:<44} p50 {p50:.2} ms  p99 {p99:.2} ms");
        };
        show("raw: clock → spawn date → print", latency::raw(n)?);
        for (load, label) in [(false, "idle"), (true, "under load")] {
            let (ss, es) = latency::ax(n, load)?;
            show(&format!("submit→started, {label}"), ss);
            show(&format!("parent exit→child started, {label}"), es);
        }
        return Ok(());
    }
    if args.get(1).map(String::as_str) == Some("restart") {
        let sizes: Vec<usize> = args[2..].iter().filter_map(|s| s.parse().ok()).collect();
        let sizes = if sizes.is_empty() {
            vec![100_000, 1_000_000]
        } else {
            sizes
        };
        return restart::run(&sizes, 3);
    }
    if args.get(1).map(String::as_str) == Some("wal") {
        let n = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(100_000);
        return wal::run(n);
    }
    if args.get(1).map(String::as_str) == Some("access") {
        let n = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(50);
        return access::run(n);
    }
    if args.get(1).map(String::as_str) == Some("hostile") {
        return hostile::run(args.iter().any(|a| a == "--quick"));
    }
    if args.get(1).map(String::as_str) == Some("shutdown") {
        let n = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(20);
        return shutdown::run(n);
    }
    if args.get(1).map(String::as_str) == Some("crashloop") {
        let cycles = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(50);
        let seed = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(0x5eed);
        return crashloop(cycles, seed);
    }
    if args.get(1).map(String::as_str) != Some("all") {
        eprintln!(
            "usage: ax-bench all [--quick] [--reps N] [--json PATH] | ax-bench crashloop [CYCLES] [SEED] | ax-bench proctree [N] | ax-bench shutdown [CYCLES] | ax-bench hostile [--quick] | ax-bench access [CYCLES] | ax-bench wal [RUNS] | ax-bench restart [N...]"
        );
        std::process::exit(2);
    }
    let quick = args.iter().any(|a| a == "--quick");
    let reps = args
        .iter()
        .position(|a| a == "--reps")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(if quick { 1 } else { 3 });
    let json_path = args
        .iter()
        .position(|a| a == "--json")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("bench-results.json"));
    let o = Opts {
        quick,
        reps,
        json: json_path,
    };
    let mut report = Report::default();
    println!("{:<58} {:<34} note", "scenario", "median (min–max)");

    // Sizes; each can be overridden (AX_BENCH_N, AX_BENCH_PUEUE_N,
    // AX_BENCH_CALLS, AX_BENCH_DAG=a,b, AX_BENCH_QUEUED=a,b).
    let env_n = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let env_list = |k: &str, d: Vec<usize>| {
        std::env::var(k)
            .ok()
            .map(|v| v.split(',').filter_map(|x| x.parse().ok()).collect())
            .unwrap_or(d)
    };
    let n = env_n("AX_BENCH_N", if o.quick { 300 } else { 10_000 });
    for slots in [8u32, 64] {
        let raw: Vec<f64> = (0..o.reps)
            .map(|_| raw_spawn_rate(n, slots as usize))
            .collect();
        let ax: Vec<f64> = (0..o.reps)
            .map(|_| ax_noop_rate(n, slots))
            .collect::<anyhow::Result<_>>()?;
        let (rs, xs) = (stats(raw.clone()), stats(ax.clone()));
        report.add(
            &format!("raw tokio spawn+reap `sh -c true`, {n} at {slots}"),
            fmt3(rs, " /s"),
            "the machine's limit".into(),
            json!({"runs_per_s": raw}),
        );
        report.add(
            &format!("axd no-op throughput, {n} runs at {slots} slots"),
            fmt3(xs, " /s"),
            format!("{:.0}% of raw (target ≥ 80%)", 100.0 * xs.0 / rs.0),
            json!({"runs_per_s": ax}),
        );
        if slots == 8 {
            match pueue_dir() {
                Some(dir) => {
                    let pn = env_n("AX_BENCH_PUEUE_N", if o.quick { 50 } else { 500 });
                    let p: Vec<f64> = (0..o.reps).map(|_| pueue_rate(&dir, pn, slots)).collect::<anyhow::Result<_>>()?;
                    let ps = stats(p.clone());
                    report.add(&format!("pueue no-op throughput, {pn} tasks at {slots} parallel"), fmt3f(ps, " /s"), format!("ax is {:.0}× pueue (target ≥ 50×)", xs.0 / ps.0), json!({"runs_per_s": p}));
                }
                None => report.add("pueue no-op throughput", "skipped".into(), "pueue not installed (cargo install pueue --locked --root DIR; AX_BENCH_PUEUE_DIR=DIR/bin)".into(), Value::Null),
            }
        }
    }
    {
        let samples = if o.quick { 20 } else { 300 };
        let pct = |v: &[f64]| {
            let mut v = v.to_vec();
            (percentile(&mut v.clone(), 0.5), percentile(&mut v, 0.99))
        };
        let raw = pct(&latency::raw(samples)?);
        report.add(
            "raw: clock → spawn `date` → its print (p50 / p99)",
            format!("{:.2} / {:.2} ms", raw.0, raw.1),
            "the floor both latencies below include".into(),
            json!({"p50_ms": raw.0, "p99_ms": raw.1}),
        );
        for (load, label) in [(false, "idle"), (true, "under scenario-1 load")] {
            let (ss, es) = latency::ax(samples, load)?;
            let (ss, es) = (pct(&ss), pct(&es));
            report.add(
                &format!("submit→started, {label} (p50 / p99)"),
                format!("{:.2} / {:.2} ms", ss.0, ss.1),
                format!("raw floor {:.2} ms; target p50 ≤ 2, p99 ≤ 10 idle", raw.0),
                json!({"p50_ms": ss.0, "p99_ms": ss.1}),
            );
            report.add(
                &format!("parent exit→child started, {label} (p50 / p99)"),
                format!("{:.2} / {:.2} ms", es.0, es.1),
                format!("raw floor {:.2} ms; target p50 ≤ 2, p99 ≤ 10 idle", raw.0),
                json!({"p50_ms": es.0, "p99_ms": es.1}),
            );
        }
    }
    let calls = env_n("AX_BENCH_CALLS", if o.quick { 40 } else { 10_000 });
    let (first, last) = ax_submit_calls(calls)?;
    report.add(
        &format!("`ax submit` per call, first vs last 100 of {calls}"),
        format!("{first:.2} / {last:.2} ms"),
        format!("last/first {:.2} (target ≤ 1.2)", last / first),
        json!({"first_ms": first, "last_ms": last}),
    );
    for size in env_list(
        "AX_BENCH_DAG",
        if o.quick {
            vec![200]
        } else {
            vec![10_000, 100_000]
        },
    ) {
        let indep = dag_scale(size, "independent")?;
        report.add(
            &format!("DAG of {size} no-op jobs: independent (no deps)"),
            format!("{indep:.2} s ({:.1} µs per run)", indep * 1e6 / size as f64),
            "the baseline of the shapes below".into(),
            json!({"seconds": indep}),
        );
        for shape in ["chain", "fanout", "fanin", "random"] {
            let s = dag_scale(size, shape)?;
            let note = if shape == "chain" {
                // A chain runs one job at a time: its floor is serial
                // spawning, measured here.
                let serial = raw_spawn_rate(size.min(20_000), 1);
                format!(
                    "{:.2}× independent; serial floor {:.2} s (raw, 1 at a time) → {:.2}× the floor",
                    s / indep,
                    size as f64 / serial,
                    s / (size as f64 / serial)
                )
            } else {
                format!("{:.2}× independent (target ≤ 1.2×)", s / indep)
            };
            report.add(
                &format!("DAG of {size} no-op jobs: {shape}"),
                format!("{s:.2} s ({:.1} µs per run)", s * 1e6 / size as f64),
                note,
                json!({"seconds": s, "independent": indep}),
            );
        }
    }
    for q in env_list(
        "AX_BENCH_QUEUED",
        if o.quick {
            vec![2_000]
        } else {
            vec![100_000, 1_000_000]
        },
    ) {
        queued_memory_restart_console(q, &mut report)?;
    }
    std::fs::write(&o.json, serde_json::to_string_pretty(&report.json)?).context("writing JSON")?;
    println!("\nJSON: {}", o.json.display());
    Ok(())
}
