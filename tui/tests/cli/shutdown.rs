//! `ax shutdown` (docs/cli.md; docs/operations.md, "Stopping"): axd exits
//! and its running job goes on for the next axd; with `--stop-jobs` the
//! job is stopped too. The command returns once axd has exited.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ax_testkit::{Daemon, axd_beside};

fn ax(socket: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ax"))
        .arg("--socket")
        .arg(socket)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// Submits a job that writes its pid and sleeps; returns the pid.
fn sleeping_job(d: &Daemon) -> i32 {
    let pidfile = d.path("job.pid");
    let cmd = format!("echo $$ > {}; exec sleep 1000", pidfile.display());
    let (code, out) = ax(&d.socket, &["submit", "--", "sh", "-c", &cmd]);
    assert_eq!(code, 0, "{out}");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(pid) = std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return pid;
        }
        assert!(Instant::now() < deadline, "the job never started");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| !s[s.rfind(')').unwrap() + 2..].starts_with('Z'))
}

#[test]
fn ax_shutdown_leaves_the_job_and_stop_jobs_stops_it() {
    let axd = axd_beside(Path::new(env!("CARGO_BIN_EXE_ax"))).unwrap();
    let mut d = Daemon::start(&axd, "timezone = \"UTC\"\n", &[]).unwrap();
    let pid = sleeping_job(&d);
    let (code, out) = ax(&d.socket, &["shutdown"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("keep running"), "{out}");
    assert!(d.wait_exit(Duration::from_secs(10)).unwrap().is_some());
    assert!(alive(pid), "the job goes on without axd");

    d.spawn().unwrap();
    let (code, out) = ax(&d.socket, &["shutdown", "--stop-jobs"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("stopping its 1 running jobs"), "{out}");
    assert!(d.wait_exit(Duration::from_secs(20)).unwrap().is_some());
    assert!(!alive(pid), "the job was stopped with axd");
}
