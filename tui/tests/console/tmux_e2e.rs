//! ax-tui in a real terminal (tmux): see the jobs, open the DAG view, cancel
//! a running job with `c` `y`, retry a failed one with `r`, quit with `q`
//! and leave the terminal clean. Checks the daemon's side with `ax`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ax_testkit::{Daemon, axd_beside, run_ids};

fn tmux(args: &[&str]) -> String {
    let out = Command::new("tmux").args(args).output().expect("tmux runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn wait_for(what: &str, secs: u64, mut f: impl FnMut() -> Option<String>) -> String {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(s) = f() {
            return s;
        }
        if Instant::now() > deadline {
            panic!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// True (after a one-line note) when tmux is not installed.
fn no_tmux() -> bool {
    let missing = Command::new("tmux").arg("-V").output().is_err();
    if missing {
        eprintln!("skipped: tmux is not installed (.ci/run installs it)");
    }
    missing
}

/// A shell command running in a detached tmux session of `w`×`h`; the
/// session ends on drop (a daemon ends when its harness drops).
struct Tui {
    session: String,
}

impl Tui {
    fn start(name: &str, w: u16, h: u16, cmd: &str) -> Tui {
        let session = format!("ax-e2e-{name}-{}", std::process::id());
        let (w, h) = (w.to_string(), h.to_string());
        tmux(&[
            "new-session",
            "-d",
            "-s",
            &session,
            "-x",
            &w,
            "-y",
            &h,
            "sh",
            "-c",
            cmd,
        ]);
        Tui { session }
    }

    /// ax-tui on `socket`, then a marker line when it has exited.
    fn on_socket(name: &str, w: u16, h: u16, socket: &Path) -> Tui {
        let cmd = format!(
            "{} --socket {}; echo AX-TUI-EXITED; sleep 60",
            env!("CARGO_BIN_EXE_ax-tui"),
            socket.display()
        );
        Tui::start(name, w, h, &cmd)
    }

    fn capture(&self) -> String {
        tmux(&["capture-pane", "-p", "-t", &self.session])
    }

    fn send(&self, keys: &[&str]) {
        for k in keys {
            tmux(&["send-keys", "-t", &self.session, k]);
            std::thread::sleep(Duration::from_millis(80));
        }
    }
}

impl Drop for Tui {
    fn drop(&mut self) {
        tmux(&["kill-session", "-t", &self.session]);
    }
}

fn ax_json(socket: &Path, args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_ax"))
        .arg("--socket")
        .arg(socket)
        .arg("--json")
        .args(args)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

#[test]
fn console_in_a_real_terminal() {
    if no_tmux() {
        return;
    }
    let axd = axd_beside(Path::new(env!("CARGO_BIN_EXE_ax-tui"))).unwrap();
    let daemon = Daemon::start(
        axd,
        "max_concurrency = 4\n",
        &[(
            "e2e.toml",
            "[[job]]\nid = \"slow\"\ncommand = \"sleep 1000\"\n[[job]]\nid = \"bad\"\ncommand = \"echo failing; exit 3\"\n[[job]]\nid = \"after_bad\"\ncommand = \"true\"\ndeps = [\"bad\"]\n",
        )],
    )
    .unwrap();
    let socket = daemon.socket.clone();
    let triggered = ax_json(&socket, &["trigger", "e2e"]);
    let runs = run_ids(&triggered);
    let (slow, bad, after_bad) = (runs[0], runs[1], runs[2]);
    wait_for("bad to fail", 20, || {
        (ax_json(&socket, &["show", &bad.to_string()])["state"] == "failed").then(String::new)
    });
    let tui = Tui::on_socket("runs", 120, 40, &socket);
    let capture = || tui.capture();
    let send = |keys: &[&str]| tui.send(keys);
    // the jobs are on screen
    wait_for("runs on screen", 20, || {
        let s = capture();
        (s.contains("e2e/slow") && s.contains("running") && s.contains("e2e/bad")).then_some(s)
    });
    // the DAG view
    send(&["/", "s", "l", "o", "w", "Enter"]);
    wait_for("filtered to slow", 10, || {
        let s = capture();
        (s.contains("runs (1)") && s.contains("e2e/slow")).then_some(s)
    });
    send(&["g"]);
    let dag = wait_for("DAG view", 10, || {
        let s = capture();
        (s.contains("[▶ slow]") && s.contains("[✗ bad]") && s.contains("after_bad]")).then_some(s)
    });
    assert!(dag.contains('▼'), "{dag}");
    send(&["q"]);
    // cancel the running job with c, y
    send(&["c"]);
    wait_for("the question", 10, || {
        capture().contains("y/n").then(String::new)
    });
    send(&["y"]);
    wait_for("slow cancelled in the daemon", 20, || {
        (ax_json(&socket, &["show", &slow.to_string()])["state"] == "cancelled").then(String::new)
    });
    wait_for("cancel result in the status line", 10, || {
        capture()
            .contains(&format!("cancel {slow}: ok"))
            .then(String::new)
    });
    // retry the failed one with r
    send(&["Escape", "/", "b", "a", "d", "Enter"]);
    wait_for("filtered to bad", 10, || {
        let s = capture();
        (s.contains("runs (2)") || s.contains("runs (1)")).then_some(s)
    });
    // newest first: after_bad (cancelled) is above bad; move to bad
    let screen = capture();
    if screen.find("e2e/after_bad").unwrap_or(usize::MAX) < screen.find("e2e/bad ").unwrap_or(0) {
        send(&["j"]);
    }
    send(&["r"]);
    wait_for("bad retried", 20, || {
        let v = ax_json(&socket, &["show", &bad.to_string()]);
        (v["attempts"].as_array().map(|a| a.len()) == Some(2)).then(String::new)
    });
    // A run's attempts are read live from the engine, its events from the
    // store once the writer has committed them: under load the event can
    // come a moment after the second attempt shows.
    wait_for("downstream revived by the retry", 10, || {
        let revived = ax_json(&socket, &["show", &after_bad.to_string()]);
        let events = revived["events"].as_array().cloned().unwrap_or_default();
        events
            .iter()
            .any(|e| e["reason"] == "upstream bad retried")
            .then(String::new)
    });
    // quit leaves the terminal clean
    send(&["Escape", "q"]);
    let after = wait_for("ax-tui to exit", 10, || {
        let s = capture();
        s.contains("AX-TUI-EXITED").then_some(s)
    });
    assert!(
        !after.contains("runs ("),
        "the console's screen is gone:\n{after}"
    );
    assert_eq!(
        tmux(&[
            "display-message",
            "-p",
            "-t",
            &tui.session,
            "#{alternate_on}"
        ])
        .trim(),
        "0",
        "alternate screen left"
    );
}

/// The DAGs view in a real terminal: it shows a broken file's error,
/// triggers a DAG that never ran, pauses and resumes a DAG from its real
/// state, and `C` cancels a whole DAG run.
#[test]
fn dags_view_steers_in_a_real_terminal() {
    if no_tmux() {
        return;
    }
    let axd = axd_beside(Path::new(env!("CARGO_BIN_EXE_ax-tui"))).unwrap();
    let daemon = Daemon::start(
        axd,
        "max_concurrency = 4\n",
        &[
            (
                "never.toml",
                "[[job]]\nid = \"first\"\ncommand = \"sleep 1000\"\n[[job]]\nid = \"second\"\ncommand = \"sleep 1000\"\n",
            ),
            ("steer.toml", "command = \"true\"\nschedule = \"0 3 * * *\"\n"),
            ("broken.toml", "[[job]]\nid = 5\ncommand = \"true\"\n"),
        ],
    )
    .unwrap();
    let socket = daemon.socket.clone();
    let tui = Tui::on_socket("dags", 140, 45, &socket);
    let capture = || tui.capture();
    let send = |keys: &[&str]| tui.send(keys);
    let dag = |name: &str| -> serde_json::Value {
        ax_json(&socket, &["dags"])
            .as_array()
            .and_then(|a| a.iter().find(|d| d["name"] == name).cloned())
            .unwrap_or_default()
    };
    // The banner counts the broken file; the DAGs view shows its error.
    wait_for("the fault banner", 20, || {
        capture().contains("1 job-file error").then(String::new)
    });
    send(&["d"]);
    wait_for("the broken file's located error", 10, || {
        let s = capture();
        (s.contains("DAGs (3, 1 with errors)") && s.contains("✗ line 2")).then_some(s)
    });
    // Trigger the DAG that never ran.
    assert!(dag("never")["last_run_state"].is_null());
    send(&["/", "n", "e", "v", "e", "r", "Enter", "t"]);
    wait_for("never triggered", 20, || {
        let runs = ax_json(&socket, &["ls", "--dag", "never"]);
        (runs.as_array().map(Vec::len) == Some(2)).then(String::new)
    });
    wait_for("the trigger's result", 10, || {
        capture()
            .contains("trigger never: started DAG run")
            .then(String::new)
    });
    // Pause, then resume, from the DAGs view.
    send(&["Escape", "/", "s", "t", "e", "e", "r", "Enter", "p"]);
    wait_for("steer paused", 20, || {
        (dag("steer")["paused"] == true).then(String::new)
    });
    wait_for("shown paused", 10, || {
        capture().contains("⏸ paused").then(String::new)
    });
    send(&["p"]);
    wait_for("steer resumed", 20, || {
        (dag("steer")["paused"] == false).then(String::new)
    });
    // Enter: never's runs; C y cancels its whole DAG run.
    send(&["Escape", "/", "n", "e", "v", "e", "r", "Enter", "Enter"]);
    wait_for("never's runs", 10, || {
        let s = capture();
        (s.contains("DAG never (Esc: all)") && s.contains("never/second")).then_some(s)
    });
    send(&["C"]);
    wait_for("the question", 10, || {
        capture()
            .contains("all its unfinished runs? y/n")
            .then(String::new)
    });
    send(&["y"]);
    wait_for("the whole DAG run cancelled", 20, || {
        let runs = ax_json(&socket, &["ls", "--dag", "never"]);
        runs.as_array()
            .is_some_and(|a| a.len() == 2 && a.iter().all(|r| r["state"] == "cancelled"))
            .then(String::new)
    });
    // Each row says who cancelled it, the one not selected too (asked of
    // axd from the run's events).
    wait_for("who cancelled, in both rows", 10, || {
        let s = capture();
        let says = |job: &str| {
            s.lines()
                .any(|l| l.contains(&format!("never/{job} ")) && l.contains("cancelled by "))
        };
        (says("first") && says("second")).then_some(s)
    });
    send(&["Escape", "q"]);
    wait_for("ax-tui to exit", 10, || {
        capture().contains("AX-TUI-EXITED").then(String::new)
    });
}

/// `ax-tui --demo` opens on the shipped examples (config/jobs.d), shows
/// their DAGs, and quits clean: exit 0, its private daemon and temp dir
/// gone.
#[test]
fn demo_opens_on_the_examples_and_quits_clean() {
    if no_tmux() {
        return;
    }
    // The demo starts the axd built beside ax-tui.
    axd_beside(Path::new(env!("CARGO_BIN_EXE_ax-tui"))).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cmd = format!(
        "cd {} && {} --demo; echo AX-TUI-EXITED $?; sleep 60",
        root.display(),
        env!("CARGO_BIN_EXE_ax-tui"),
    );
    let tui = Tui::start("demo", 80, 24, &cmd);
    let capture = || tui.capture();
    wait_for("the demo's runs", 30, || {
        let s = capture();
        (s.contains("urgent-fix") && s.contains("connected")).then_some(s)
    });
    // A single-job DAG's run is named once, not `urgent-fix/urgent-fix`.
    let runs = capture();
    assert!(!runs.contains("urgent-fix/urgent-fix"), "{runs}");
    tui.send(&["d"]);
    wait_for("the shipped DAGs", 10, || {
        let s = capture();
        (s.contains("DAGs (") && s.contains("etl-nightly") && s.contains("disk-usage")).then_some(s)
    });
    // The demo's temp dir is named after ax-tui's pid (the pane's shell's
    // child).
    let shell = tmux(&["display-message", "-p", "-t", &tui.session, "#{pane_pid}"]);
    let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", shell.trim()))
        .unwrap_or_default();
    let tui_pid = children
        .split_whitespace()
        .next()
        .expect("ax-tui runs")
        .to_string();
    let dir = std::env::temp_dir().join(format!("ax-demo-{tui_pid}"));
    assert!(dir.is_dir(), "{}", dir.display());
    tui.send(&["q", "q"]);
    let after = wait_for("ax-tui to exit", 20, || {
        let s = capture();
        s.contains("AX-TUI-EXITED").then_some(s)
    });
    assert!(after.contains("AX-TUI-EXITED 0"), "{after}");
    assert!(!dir.exists(), "the demo's temp dir is removed");
}
