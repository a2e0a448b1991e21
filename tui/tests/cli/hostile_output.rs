//! Text that other people control (a job's heartbeat message, a client's
//! name in the actor, a job file's bad key in its load error) reaches
//! `ax`'s human output with its control characters shown as escapes, and
//! `--json` with them exact (`ax --help`, "Output"). Real axd, real `ax`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ax_testkit::{Conn, Daemon, axd_beside, run_ids};
use serde_json::{Value, json};

/// Retitles the terminal, rings the bell, clears the screen.
const HIJACK: &str = "\u{1b}]0;HIJACK\u{7}\u{1b}[2J";
/// `HIJACK` as `ax` shows it.
const SHOWN: &str = "\\e]0;HIJACK\\x07\\e[2J";

fn ax(socket: &Path, args: &[&str]) -> (i32, Vec<u8>, Vec<u8>) {
    let out = Command::new(env!("CARGO_BIN_EXE_ax"))
        .arg("--socket")
        .arg(socket)
        .args(args)
        .env_remove("AX_RUN_ID")
        .output()
        .expect("ax runs");
    (out.status.code().unwrap_or(-1), out.stdout, out.stderr)
}

fn has_control(bytes: &[u8]) -> bool {
    bytes.iter().any(|&b| b == 0x1b || b == 0x07)
}

#[test]
fn escapes_from_a_job_a_client_and_a_job_file_are_shown_not_obeyed() {
    let beat = format!(
        "[[job]]\nid = \"beat\"\ncommand = \"\\\"$AX\\\" heartbeat \\\"$(printf '\\\\033]0;HIJACK\\\\007\\\\033[2J')\\\" && sleep 1000\"\nenv = {{ AX = {:?} }}\n",
        env!("CARGO_BIN_EXE_ax")
    );
    // A quoted key holding escapes: its "unknown key" error quotes it.
    let broken =
        "\"k\\u001b]0;HIJACK\\u0007\\u001b[2J\" = 1\n[[job]]\nid = \"j\"\ncommand = \"true\"\n";
    let axd = axd_beside(Path::new(env!("CARGO_BIN_EXE_ax"))).unwrap();
    let d = Daemon::start(axd, "", &[("beat.toml", &beat), ("broken.toml", broken)]).unwrap();
    // The actor of the trigger names this client.
    let mut evil = Conn::open(&d.socket, &format!("evil{HIJACK}")).unwrap();
    let answer = evil.call("trigger", json!({"dag": "beat"})).unwrap();
    let run = run_ids(&answer)[0];
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, out, _) = ax(&d.socket, &["--json", "show", &run.to_string()]);
        let view: Value = serde_json::from_slice(&out).unwrap();
        if view["message"] == json!(HIJACK) {
            break;
        }
        assert!(Instant::now() < deadline, "no heartbeat message: {view}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let run = run.to_string();
    for (args, expect) in [
        (vec!["ls"], SHOWN.to_string()),
        (vec!["show", &run], SHOWN.to_string()),
        // axd keeps only printable ASCII of a client's name.
        (vec!["events"], "via evil]0;HIJACK".to_string()),
        (vec!["dags"], "HIJACK".to_string()),
        (vec!["status"], "HIJACK".to_string()),
    ] {
        let (code, out, err) = ax(&d.socket, &args);
        assert_eq!(code, 0, "ax {args:?}: {}", String::from_utf8_lossy(&err));
        let text = String::from_utf8_lossy(&out);
        assert!(
            !has_control(&out) && !has_control(&err),
            "ax {args:?} printed a raw escape: {text:?}"
        );
        assert!(text.contains(&expect), "ax {args:?}: {text}");
    }
    // --json keeps the exact text.
    let (_, out, _) = ax(&d.socket, &["--json", "ls"]);
    let runs: Value = serde_json::from_slice(&out).unwrap();
    assert!(
        runs.as_array()
            .unwrap()
            .iter()
            .any(|r| r["message"] == json!(HIJACK))
    );
}

/// The audit trail through the CLI: `ax pause`, `ax resume` and `ax reload`
/// leave events that `ax events` shows with who asked.
#[test]
fn ax_events_shows_who_paused_resumed_and_reloaded() {
    let axd = axd_beside(Path::new(env!("CARGO_BIN_EXE_ax"))).unwrap();
    let job = "[[job]]\nid = \"j\"\ncommand = \"true\"\n";
    let d = Daemon::start(axd, "", &[("etl.toml", job)]).unwrap();
    for args in [&["pause", "etl"][..], &["resume", "etl"], &["reload"]] {
        let (code, _, err) = ax(&d.socket, args);
        assert_eq!(code, 0, "ax {args:?}: {}", String::from_utf8_lossy(&err));
    }
    let (_, out, _) = ax(&d.socket, &["events"]);
    let text = String::from_utf8_lossy(&out);
    let uid = nix::unistd::getuid();
    let name = nix::unistd::User::from_uid(uid).unwrap().unwrap().name;
    for reason in ["DAG etl paused", "DAG etl resumed", "reloaded: 1 DAGs"] {
        assert!(
            text.lines()
                .any(|l| l.contains(reason) && l.contains(&format!("[{name} (uid {uid}) via ax]"))),
            "{reason:?} by ax in:\n{text}"
        );
    }
}
