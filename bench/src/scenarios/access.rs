//! `ax-bench access [CYCLES]`: the socket's access rules over many restarts on
//! one state dir, every other life ended by kill -9 (which leaves a stale
//! socket behind).
//!
//! Each cycle: the socket's mode at the first instant it exists and once
//! serving (never wider than 0600), its directory's mode (never world
//! accessible), a foreign uid (65534, via `setpriv`, needs root) refused at
//! connect with the default modes and at `hello` with the modes opened up,
//! a second `axd` on the same config and one on another state dir but the
//! same socket both refused with a clear message while the first keeps
//! serving.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::json;

use ax_testkit::Daemon;

use crate::axd;
use crate::measure::stats;

fn mode(p: &Path) -> Option<u32> {
    std::fs::symlink_metadata(p)
        .ok()
        .map(|m| m.permissions().mode() & 0o777)
}

/// What uid 65534 gets from a hello: "connect-refused: …", axd's answer,
/// or why it could not be asked.
fn foreign_hello(socket: &Path) -> String {
    match ax_testkit::foreign_hello(socket) {
        Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
        Err(e) => format!("setpriv failed: {e}"),
    }
}

#[derive(clap::Args)]
pub(crate) struct Args {
    /// Lives of axd on one state dir
    #[arg(default_value_t = 50)]
    cycles: usize,
}

/// What the cycles found.
#[derive(Default)]
struct Tally {
    widest_socket: u32,
    widest_dir: u32,
    stale_found: usize,
    start_failures: usize,
    foreign_connected: usize,
    foreign_served: usize,
    foreign_checked: usize,
    second_started: usize,
    thief_started: usize,
    first_broken: usize,
    unclear: Vec<String>,
    start_ms: Vec<f64>,
}

impl Tally {
    fn violated(&self) -> bool {
        self.start_failures
            + self.foreign_connected
            + self.foreign_served
            + self.second_started
            + self.thief_started
            + self.first_broken
            > 0
            || self.widest_socket & 0o177 != 0
            || self.widest_dir & 0o007 != 0
            || !self.unclear.is_empty()
    }
}

pub(crate) fn run(args: &Args) -> anyhow::Result<()> {
    let cycles = args.cycles;
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut d = axd::prepare("[pools.default]\nslots = 4\n", &[])?;
    let config = d.config.clone();
    // Another state dir, the same socket.
    let thief_config = d.path("thief.toml");
    std::fs::write(
        &thief_config,
        "jobs_dir = \"jobs.d\"\nstate_dir = \"state2\"\nsocket = \"run/axd.sock\"\n[pools.default]\nslots = 4\n",
    )?;
    let socket = d.socket.clone();
    let mut tally = Tally::default();

    for cycle in 0..cycles {
        if socket.exists() {
            tally.stale_found += 1;
        }
        if !start_and_check_modes(&mut d, &mut tally)? {
            tally.start_failures += 1;
            eprintln!("cycle {cycle}: axd did not start:\n{}", d.log());
            break;
        }
        if root {
            check_foreign_uid(&d, cycle, &mut tally)?;
        }
        check_second_daemons(&config, &thief_config, &mut tally)?;
        if axd::open(&socket)
            .and_then(|mut c| Ok(c.call("status", json!({}))?))
            .is_err()
        {
            tally.first_broken += 1;
            eprintln!("cycle {cycle}: the first axd stopped serving");
        }

        if cycle % 2 == 0 {
            d.kill9();
        } else {
            d.stop();
        }
    }

    report(&tally, cycles, root);
    if tally.violated() {
        bail!("access control violation");
    }
    Ok(())
}

/// Starts axd and watches its socket appear, recording the socket's mode
/// at first sight and once serving, and its directory's. False if it did
/// not serve within 20 s.
fn start_and_check_modes(d: &mut Daemon, tally: &mut Tally) -> anyhow::Result<bool> {
    let socket = d.socket.clone();
    let t = Instant::now();
    d.launch()?;
    let mut first_seen = None;
    let serving = loop {
        if first_seen.is_none()
            && let Some(m) = mode(&socket)
            && std::os::unix::net::UnixStream::connect(&socket).is_ok()
        {
            first_seen = Some(m);
        }
        if first_seen.is_some() && axd::open(&socket).is_ok() {
            break true;
        }
        if t.elapsed() > Duration::from_secs(20) {
            break false;
        }
        std::thread::sleep(Duration::from_micros(200));
    };
    if !serving {
        return Ok(false);
    }
    tally.start_ms.push(t.elapsed().as_secs_f64() * 1000.0);
    tally.widest_socket |= first_seen.unwrap_or(0) | mode(&socket).unwrap_or(0);
    tally.widest_dir |= mode(&d.path("run")).unwrap_or(0);
    Ok(true)
}

/// Uid 65534 is refused at connect with the default modes, and at `hello`
/// with the path opened up; the modes are put back afterwards.
fn check_foreign_uid(d: &Daemon, cycle: usize, tally: &mut Tally) -> anyhow::Result<()> {
    let socket = &d.socket;
    tally.foreign_checked += 1;
    let closed = foreign_hello(socket);
    if !closed.starts_with("connect-refused") {
        tally.foreign_connected += 1;
        eprintln!("cycle {cycle}: foreign uid connected with default modes: {closed}");
    }
    // Open the path so the connection reaches hello.
    let run_dir = d.path("run");
    let saved = (mode(d.dir.path()), mode(&run_dir));
    for p in [d.dir.path(), run_dir.as_path(), socket.as_path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777))?;
    }
    let opened = foreign_hello(socket);
    if !opened.contains("\"forbidden\"") {
        tally.foreign_served += 1;
        eprintln!("cycle {cycle}: foreign uid not refused at hello: {opened}");
    }
    std::fs::set_permissions(
        d.dir.path(),
        std::fs::Permissions::from_mode(saved.0.unwrap_or(0o700)),
    )?;
    std::fs::set_permissions(
        &run_dir,
        std::fs::Permissions::from_mode(saved.1.unwrap_or(0o700)),
    )?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))?;
    Ok(())
}

/// A second axd on the same config, and one on another state dir but the
/// same socket, are both refused with a clear message.
fn check_second_daemons(
    config: &Path,
    thief_config: &Path,
    tally: &mut Tally,
) -> anyhow::Result<()> {
    for (cfg, count, expect) in [
        (config, &mut tally.second_started, "another axd"),
        (thief_config, &mut tally.thief_started, "already serving"),
    ] {
        let out = Command::new(axd::sibling("axd")?)
            .arg("--config")
            .arg(cfg)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .output()?;
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        if out.status.success() {
            *count += 1;
        } else if !err.contains(expect) {
            tally
                .unclear
                .push(err.lines().last().unwrap_or("").to_string());
        }
    }
    Ok(())
}

fn report(tally: &Tally, cycles: usize, root: bool) {
    let (s50, slo, shi) = stats(if tally.start_ms.is_empty() {
        vec![0.0]
    } else {
        tally.start_ms.clone()
    });
    let Tally {
        widest_socket,
        widest_dir,
        stale_found,
        start_failures,
        foreign_connected,
        foreign_served,
        foreign_checked,
        second_started,
        thief_started,
        first_broken,
        ..
    } = tally;
    println!("access control: {cycles} lives on one state dir, every other one ended by kill -9");
    println!(
        "  starts that failed:                          {start_failures} (stale sockets found before a start: {stale_found})"
    );
    println!(
        "  start → serving:                             median {s50:.0} ms (min {slo:.0}, max {shi:.0})"
    );
    println!("  widest socket mode seen (incl. first sight): {widest_socket:04o}");
    println!("  widest socket directory mode seen:           {widest_dir:04o}");
    if root {
        println!(
            "  foreign uid (65534) connected, default modes: {foreign_connected} of {foreign_checked}"
        );
        println!(
            "  foreign uid served past hello, modes opened:  {foreign_served} of {foreign_checked}"
        );
    } else {
        println!("  foreign uid: not checked (needs root for setpriv)");
    }
    println!("  second axd, same state dir, that started:    {second_started}");
    println!("  second axd, same socket, that started:       {thief_started}");
    println!(
        "  refusals without a clear message:           {}",
        tally.unclear.len()
    );
    println!("  first axd broken by a second one:            {first_broken}");
    for u in tally.unclear.iter().take(3) {
        println!("    unclear: {u}");
    }
}
