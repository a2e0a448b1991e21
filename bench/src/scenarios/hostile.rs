//! `ax-bench hostile [--quick]`: hostile clients against one real axd, while a
//! well-behaved client measures its own latency (`status` round trips on a
//! kept-open connection) in every phase:
//!
//! 1. 1 GiB without a newline;
//! 2. 10,000 random or malformed JSON-RPC frames (seeded);
//! 3. 1,000 idle connections held open;
//! 4. 50 subscribers that never read while ~100,000 events flow (25,000
//!    no-op runs), against the same load with no such subscribers;
//! 5. 400 `list_runs {"limit": 10000}` pipelined on one connection whose
//!    answers are never read, over the 50,000 runs of phase 4.
//!
//! Figures: the daemon's peak RSS (VmHWM), p50/p99 of the probe per phase
//! and its ratio to idle, how each hostile client was answered, and
//! whether axd is still serving at the end. Fails on a dead daemon.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::bail;
use serde_json::json;

use ax_testkit::{Conn, ConnError};

use crate::axd;
use crate::measure::percentile;
use crate::procfs::{raise_own_nofile, status_kib};

/// A thread measuring `status` round trips, tagged by the current phase.
struct Probe {
    phase: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Vec<f64>>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Probe {
    fn start(socket: &Path, phases: usize) -> anyhow::Result<Probe> {
        let phase = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(vec![Vec::new(); phases]));
        let (p, v) = (phase.clone(), samples.clone());
        let thread = axd::sample_status(socket, stop.clone(), move |_, ms| {
            v.lock().unwrap()[p.load(Ordering::Relaxed)].push(ms);
        })?;
        Ok(Probe {
            phase,
            stop,
            samples,
            thread: Some(thread),
        })
    }

    fn set(&self, phase: usize) {
        self.phase.store(phase, Ordering::Relaxed);
    }

    fn finish(mut self) -> Vec<Vec<f64>> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        std::mem::take(&mut *self.samples.lock().unwrap())
    }
}

/// xorshift64*: a seeded generator, so a failing frame can be reproduced.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn malformed(rng: &mut Rng) -> Vec<u8> {
    let methods = [
        "submit",
        "get_run",
        "list_runs",
        "cancel",
        "retry",
        "pause",
        "trigger",
        "logs",
        "subscribe",
        "hello",
        "heartbeat",
        "get_dag_run",
        "nope",
        "",
    ];
    let values = [
        "null",
        "true",
        "-1",
        "1e309",
        "18446744073709551616",
        "\"x\"",
        "[]",
        "{}",
        "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]",
        "{\"command\": 5}",
        "{\"toml\": \"[[job]]\\nid=1\"}",
        "{\"id\": \"abc\"}",
        "{\"limit\": 0}",
        "{\"run\": -5, \"offset\": -1}",
        "{\"dag\": \"../../etc\"}",
        "{\"command\": \"true\", \"priority\": 1000}",
        "{\"after\": [1, \"x\"]}",
    ];
    match rng.below(6) {
        // random bytes, often invalid UTF-8
        0 => (0..rng.below(300))
            .map(|_| rng.below(256) as u8)
            .filter(|b| *b != b'\n')
            .collect(),
        // truncated JSON
        1 => {
            let full = format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"{}\",\"params\":{}}}",
                rng.below(1000),
                methods[rng.below(methods.len() as u64) as usize],
                values[rng.below(values.len() as u64) as usize]
            );
            let cut = rng.below(full.len() as u64) as usize;
            full.as_bytes()[..cut].to_vec()
        }
        // valid JSON, wrong shape
        2 => values[rng.below(values.len() as u64) as usize]
            .as_bytes()
            .to_vec(),
        // wrong version or id types
        3 => format!(
            "{{\"jsonrpc\":\"{}\",\"id\":{},\"method\":{}}}",
            ["1.0", "2", "", "2.0"][rng.below(4) as usize],
            values[rng.below(values.len() as u64) as usize],
            values[rng.below(values.len() as u64) as usize]
        )
        .into_bytes(),
        // real methods, hostile params
        _ => format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{},\"method\":\"{}\",\"params\":{}}}",
            rng.below(1000),
            methods[rng.below(methods.len() as u64) as usize],
            values[rng.below(values.len() as u64) as usize]
        )
        .into_bytes(),
    }
}

#[derive(clap::Args)]
pub(crate) struct Args {
    /// CI sizes (a tenth or less of each phase)
    #[arg(long)]
    quick: bool,
}

/// The name the hostile connections give in `hello`.
const CLIENT: &str = "hostile";

/// The daemon under attack and the phases' sizes.
struct Target<'a> {
    socket: &'a Path,
    pid: u32,
    quick: bool,
}

impl Target<'_> {
    /// `full` for a real run, `small` with `--quick`.
    fn scale(&self, full: usize, small: usize) -> usize {
        if self.quick { small } else { full }
    }

    /// The daemon's peak RSS so far (KiB).
    fn peak_kib(&self) -> u64 {
        status_kib(self.pid, "VmHWM:")
    }
}

/// The phases in the order they run; the probe's samples and the peak RSS
/// are indexed by them.
const PHASES: [&str; 7] = [
    "idle",
    "1 GiB without newline",
    "random frames",
    "idle connections",
    "run load, no stuck subscribers",
    "run load + stuck subscribers",
    "400 big reads never read",
];

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let quick = args.quick;
    // This process holds a thousand connections too.
    raise_own_nofile();
    // The idle-connections phase holds more than the default per-uid cap.
    let mut d = axd::start_pools(
        "max_concurrency = 64\n[pools.default]\nslots = 64\n[limits]\nconnections_per_uid = 4096\n",
        &[],
    )?;
    let t = Target {
        socket: &d.socket,
        pid: axd::pid(&d)?,
        quick,
    };
    let probe = Probe::start(t.socket, PHASES.len())?;
    let mut notes: Vec<String> = Vec::new();
    let mut rss = vec![0u64; PHASES.len()];

    // 0. idle
    std::thread::sleep(Duration::from_millis(if quick { 300 } else { 2000 }));
    rss[0] = t.peak_kib();

    probe.set(1);
    notes.push(endless_frame(&t)?);
    rss[1] = t.peak_kib();

    probe.set(2);
    notes.push(random_frames(&t)?);
    rss[2] = t.peak_kib();

    probe.set(3);
    let (note, peak) = idle_connections(&t)?;
    notes.push(note);
    rss[3] = peak;

    // 4. the same run load twice: without, then with stuck subscribers
    let runs = t.scale(25_000, 1_000);
    let mut c = axd::open(t.socket)?;
    probe.set(4);
    run_load(&mut c, runs)?;
    rss[4] = t.peak_kib();

    probe.set(5);
    let stuck = stuck_subscribers(&t, &mut c, runs)?;
    notes.push(stuck.note);
    rss[5] = stuck.peak_kib;

    probe.set(6);
    let (note, peak) = big_reads_never_read(&t, runs)?;
    notes.push(note);
    rss[6] = peak;

    let alive = axd::open(t.socket)
        .and_then(|mut c| Ok(c.call("status", json!({}))?))
        .is_ok();
    let samples = probe.finish();
    d.stop();

    print_table(&samples, &rss)?;
    for n in &notes {
        println!("  {n}");
    }
    println!(
        "  axd still serving at the end: {alive}; log has a panic: {}",
        d.log().contains("panicked")
    );
    if !alive || d.log().contains("panicked") {
        bail!("axd did not survive hostile clients");
    }
    if stuck.neither > 0 {
        bail!(
            "{} stuck subscribers were neither told `lagged` nor disconnected",
            stuck.neither
        );
    }
    Ok(())
}

/// Phase 1, a frame that never ends: the attacker reconnects each time axd cuts
/// it off, until 1 GiB has been sent.
fn endless_frame(t: &Target<'_>) -> anyhow::Result<String> {
    let gib: usize = t.scale(1 << 30, 64 << 20);
    let chunk = vec![b'a'; 1 << 20];
    let (mut sent, mut conns, mut cut_with_error) = (0usize, 0usize, 0usize);
    while sent < gib {
        let mut s = Conn::connect(t.socket)?;
        conns += 1;
        while sent < gib {
            match s.write(&chunk) {
                Ok(n) => sent += n,
                Err(_) => break,
            }
        }
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        let answer = s.read_line().ok().flatten().unwrap_or_default();
        if answer.contains("frame_too_large") {
            cut_with_error += 1;
        }
    }
    Ok(format!(
        "1 GiB without a newline: sent over {conns} connections, each cut off after ~1 MiB; {cut_with_error} told `frame_too_large`"
    ))
}

/// Phase 2, random and malformed frames.
fn random_frames(t: &Target<'_>) -> anyhow::Result<String> {
    let frames = t.scale(10_000, 1_000);
    let mut rng = Rng(0x5eed_f00d);
    let (mut answered, mut closed) = (0usize, 0usize);
    let mut s = Conn::open(t.socket, CLIENT)?;
    for _ in 0..frames {
        let mut f = malformed(&mut rng);
        f.push(b'\n');
        let ok = s.write_all(&f).is_ok();
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        // A frame without an id gets no answer, and a frame may be a valid
        // subscribe: a ping follows every frame, and lines are read up to
        // the ping's answer. Answers are counted; a closed connection is
        // opened again.
        let mut got = ok
            && s.send_line(&json!({"jsonrpc":"2.0","id":"ping","method":"status"}).to_string())
                .is_ok();
        while got {
            match s.read_line() {
                Ok(Some(line)) => {
                    if line.contains("\"id\":\"ping\"") {
                        break;
                    }
                }
                _ => got = false,
            }
        }
        if got {
            answered += 1;
        } else {
            closed += 1;
            s = Conn::open(t.socket, CLIENT)?;
        }
    }
    Ok(format!(
        "random frames: {frames} sent, {answered} answered on a live connection, {closed} closed it (invalid UTF-8)"
    ))
}

/// Phase 3, idle connections held open, half of them after `hello`; the peak
/// RSS is read while they are held.
fn idle_connections(t: &Target<'_>) -> anyhow::Result<(String, u64)> {
    let idle_n = t.scale(1_000, 200);
    let rss_before_idle = status_kib(t.pid, "VmRSS:");
    let mut idle = Vec::with_capacity(idle_n);
    for i in 0..idle_n {
        idle.push(if i % 2 == 0 {
            Conn::open(t.socket, CLIENT)?
        } else {
            Conn::connect(t.socket)?
        });
    }
    std::thread::sleep(Duration::from_millis(if t.quick { 300 } else { 2000 }));
    let rss_idle = status_kib(t.pid, "VmRSS:");
    let note = format!(
        "idle connections: {idle_n} held (half after hello); RSS +{} KiB ({:.1} KiB each)",
        rss_idle.saturating_sub(rss_before_idle),
        rss_idle.saturating_sub(rss_before_idle) as f64 / idle_n as f64
    );
    Ok((note, t.peak_kib()))
}

/// `runs` no-op runs submitted and waited for.
fn run_load(c: &mut Conn, runs: usize) -> Result<(), ConnError> {
    let done0 = c.count("success")?;
    c.pipeline(runs, 500, &|_| {
        ("submit".into(), json!({"command": "true", "name": "flood"}))
    })?;
    c.wait_count("success", done0 + runs as u64, Duration::from_secs(600))
}

/// What the stuck subscribers phase saw.
struct Stuck {
    note: String,
    peak_kib: u64,
    /// Subscribers neither told `lagged` nor disconnected (a failure).
    neither: usize,
}

/// Phase 4, the run load again, with subscribers that never read.
fn stuck_subscribers(t: &Target<'_>, c: &mut Conn, runs: usize) -> anyhow::Result<Stuck> {
    let subs_n = 50;
    let mut subs = Vec::new();
    for _ in 0..subs_n {
        let mut s = Conn::open(t.socket, CLIENT)?;
        s.send("subscribe", json!({}))?;
        subs.push(s);
    }
    let seq_before = last_seq(c)?;
    run_load(c, runs)?;
    let events = last_seq(c)? - seq_before;
    let peak_kib = t.peak_kib();
    // A write blocked on a stuck subscriber ends the connection after
    // axd's write timeout (10 s); then read what each one was sent.
    std::thread::sleep(Duration::from_secs(11));
    let (mut lagged, mut disconnected, mut neither) = (0, 0, 0);
    let mut received = Vec::new();
    for mut s in subs {
        s.set_read_timeout(Some(Duration::from_millis(500)))?;
        let mut saw_lagged = false;
        let mut lines = 0usize;
        let eof = loop {
            match s.read_line() {
                Ok(None) => break true,
                Ok(Some(line)) => {
                    lines += 1;
                    saw_lagged |= line.contains("\"lagged\"");
                }
                Err(_) => break false,
            }
        };
        received.push(lines);
        match (saw_lagged, eof) {
            (true, _) => lagged += 1,
            (false, true) => disconnected += 1,
            _ => neither += 1,
        }
    }
    received.sort();
    let note = format!(
        "stuck subscribers: {subs_n}, {events} events flowed; {lagged} told `lagged`, {disconnected} disconnected, {neither} still connected (lines buffered for each: {}–{})",
        received.first().unwrap_or(&0),
        received.last().unwrap_or(&0)
    );
    Ok(Stuck {
        note,
        peak_kib,
        neither,
    })
}

/// Phase 5, big reads pipelined and never read, over the `2 * runs` runs of the
/// load phases; the peak RSS is read while they wait.
fn big_reads_never_read(t: &Target<'_>, runs: usize) -> anyhow::Result<(String, u64)> {
    let rss_before_reads = status_kib(t.pid, "VmRSS:");
    let mut greedy = Conn::open(t.socket, CLIENT)?;
    let mut flood = String::new();
    for i in 1..=400 {
        flood.push_str(&format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"list_runs\",\"params\":{{\"limit\":10000}}}}\n"
        ));
    }
    greedy.write_all(flood.as_bytes())?;
    std::thread::sleep(Duration::from_secs(if t.quick { 2 } else { 8 }));
    let peak = t.peak_kib();
    let note = format!(
        "big reads never read: 400 pipelined list_runs of 10,000 over {} runs; RSS {} → {} MiB while they wait",
        2 * runs,
        rss_before_reads / 1024,
        status_kib(t.pid, "VmRSS:") / 1024
    );
    drop(greedy);
    Ok((note, peak))
}

/// The probe's p50/p99 and the peak RSS of each phase, the p99 against
/// idle's.
fn print_table(samples: &[Vec<f64>], rss: &[u64]) -> anyhow::Result<()> {
    let i99 = {
        let mut v = samples[0].clone();
        if v.is_empty() {
            bail!("no idle samples");
        }
        percentile(&mut v, 0.99)
    };
    println!("hostile clients (probe: `status` round trips on a kept-open connection)");
    println!(
        "  {:<34} {:>10} {:>10} {:>9} {:>12}",
        "phase", "p50 ms", "p99 ms", "p99/idle", "peak RSS MiB"
    );
    for (i, name) in PHASES.iter().enumerate() {
        let mut v = samples[i].clone();
        if v.is_empty() {
            continue;
        }
        let (p50, p99) = (percentile(&mut v, 0.5), percentile(&mut v, 0.99));
        println!(
            "  {name:<34} {p50:>10.3} {p99:>10.3} {:>9.2} {:>12.1}",
            p99 / i99.max(1e-9),
            rss[i] as f64 / 1024.0
        );
    }
    Ok(())
}

fn last_seq(c: &mut Conn) -> anyhow::Result<i64> {
    let v = c.call("list_runs", json!({"limit": 1}))?;
    let Some(id) = v[0]["id"].as_u64() else {
        return Ok(0);
    };
    let r = c.call("get_run", json!({"id": id}))?;
    Ok(r["events"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["seq"].as_i64())
        .max()
        .unwrap_or(0))
}
