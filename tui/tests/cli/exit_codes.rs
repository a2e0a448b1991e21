//! Every remote `ax` command's exit code (docs/cli.md, "ax": 0 ok, 1 failed
//! request, 2 usage error, 3 daemon unreachable, 4 not found), run as the
//! real binary against a real axd. The cases run in order: later ones rely
//! on the DAG runs earlier ones started.

use std::path::Path;
use std::process::Command;

use ax_testkit::{Daemon, axd_beside, run_ids};
use serde_json::Value;

struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

fn ax(socket: &Path, args: &[&str], env: &[(&str, &str)]) -> Ran {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ax"));
    cmd.arg("--socket").arg(socket).args(args);
    cmd.env_remove("AX_RUN_ID");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("ax runs");
    Ran {
        code: out.status.code().expect("ax exits"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn ax_json(socket: &Path, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let r = ax(socket, &all, &[]);
    assert_eq!(r.code, 0, "ax {args:?}: {}", r.stderr);
    serde_json::from_str(&r.stdout).unwrap()
}

/// One case: the arguments, the exit code, and a text that stdout or
/// stderr must hold ("" for none).
struct Case {
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
    code: i32,
    says: &'static str,
}

fn case(args: &str, code: i32, says: &'static str) -> Case {
    Case {
        args: args.split_whitespace().map(str::to_string).collect(),
        env: Vec::new(),
        code,
        says,
    }
}

const SLOW: &str = "overlap = \"skip\"\n[[job]]\nid = \"slow\"\ncommand = \"sleep 1000\"\n";
const FILE: &str = "[[job]]\nid = \"one\"\ncommand = \"true\"\n";

#[test]
fn every_remote_command_exits_as_spec_section_6_says() {
    let axd = axd_beside(Path::new(env!("CARGO_BIN_EXE_ax"))).unwrap();
    let daemon = Daemon::start(axd, "max_concurrency = 4\n", &[("slow.toml", SLOW)]).unwrap();
    let socket = daemon.socket.clone();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("adhoc.toml");
    std::fs::write(&file, FILE).unwrap();
    let file = file.display().to_string();

    let first = ax_json(&socket, &["trigger", "slow"]);
    let active = first["dag_run"].as_u64().unwrap();
    let running = run_ids(&first)[0];
    let missing = 999_999;

    let mut cases = vec![
        case("status", 0, "pools:"),
        case("ls", 0, "STATE"),
        case("ls --state bogus", 2, "bogus"),
        case("ls --dag nosuch", 4, "not found"),
        case("ls --dag sl*", 0, "slow"),
        case(&format!("why {running}"), 0, "is running"),
        case(&format!("why {missing}"), 4, "not found"),
        case(&format!("show {running}"), 0, "state"),
        case(&format!("show {missing}"), 4, "not found"),
        case("show abc", 2, "abc"),
        case(&format!("logs {missing}"), 4, "not found"),
        case("dags", 0, "slow"),
        case("dag slow", 0, "slow"),
        case("dag nosuch", 4, "nosuch"),
        case("trigger nosuch", 4, "nosuch"),
        case(
            "trigger slow",
            1,
            "skipped because DAG run", // overlap = skip, one is active
        ),
        case("trigger slow --force", 0, "started DAG run"),
        case("submit -- true", 0, ""),
        case("submit", 2, "-f FILE"),
        case("submit --timeout ten -- true", 2, "--timeout"),
        case("submit --heartbeat soon -- true", 2, "--heartbeat"),
        case("submit --priority 0 -- true", 2, "--priority"),
        case(
            "submit --pool nosuch -- true",
            2,
            "pool: unknown pool \"nosuch\"",
        ),
        case(&format!("submit --after {missing} -- true"), 4, "--after"),
        case(&format!("submit -f {file}"), 0, ""),
        case(&format!("submit -f {file} --priority 5"), 2, "--priority"),
        case(&format!("submit -f {file} --pool default"), 2, "--pool"),
        case(&format!("submit -f {file} --timeout 1m"), 2, "--timeout"),
        case(&format!("submit -f {file} --retries 1"), 2, "--retries"),
        case(
            &format!("submit -f {file} --heartbeat 1m"),
            2,
            "--heartbeat",
        ),
        case(&format!("submit -f {file} --after {missing}"), 4, "--after"),
        case(
            &format!("submit -f {file} --after {running} --unique k"),
            0,
            "",
        ),
        case(
            &format!("submit -f {file} --unique k"),
            0,
            "deduplicated", // --unique applies to the file's DAG run
        ),
        case(&format!("retry {running}"), 1, ""),
        case(&format!("retry {missing}"), 4, "not found"),
        case("retry", 2, "run id"),
        case(&format!("cancel {missing}"), 4, "not found"),
        case("cancel", 2, "run id"),
        case(&format!("cancel --dag-run {missing}"), 4, "not found"),
        case(&format!("cancel 1 --dag-run {active}"), 2, "--dag-run"),
        case(
            &format!("cancel --dag-run {active}"),
            0,
            "cancelled DAG run",
        ),
        case("pause", 2, "--all"),
        case("pause nosuch", 4, "nosuch"),
        case("pause slow", 0, ""),
        case("resume slow", 0, ""),
        case("reload", 0, ""),
        case("events", 0, ""),
        case("heartbeat hi", 2, "AX_RUN_ID"),
        case("heartbeat --progress 2", 2, "progress"),
        Case {
            env: vec![("AX_RUN_ID", missing.to_string())],
            ..case("heartbeat hi", 4, "not found")
        },
        case("frobnicate", 2, "frobnicate"),
    ];
    // `heartbeat --progress 2` needs a run id to reach the daemon.
    cases
        .iter_mut()
        .filter(|c| c.args.join(" ") == "heartbeat --progress 2")
        .for_each(|c| c.env = vec![("AX_RUN_ID", running.to_string())]);

    let mut wrong = Vec::new();
    for c in &cases {
        let args: Vec<&str> = c.args.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = c.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = ax(&socket, &args, &env);
        let text = format!("{}{}", r.stdout, r.stderr);
        if r.code != c.code || !text.contains(c.says) {
            wrong.push(format!(
                "ax {}: exit {} (want {}), output {text:?} (want {:?})",
                c.args.join(" "),
                r.code,
                c.code,
                c.says
            ));
        }
    }
    assert!(wrong.is_empty(), "wrong cases:\n{}", wrong.join("\n"));

    // The DAG run cancelled above is cancelled whole.
    let shown = ax_json(&socket, &["show", &running.to_string()]);
    assert_eq!(shown["state"], "cancelled", "{shown}");
}

#[test]
fn an_unreachable_daemon_exits_3_naming_every_socket_tried() {
    let dir = tempfile::tempdir().unwrap();
    let given = dir.path().join("none.sock");
    let r = ax(&given, &["status"], &[]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.contains(&given.display().to_string()),
        "{}",
        r.stderr
    );

    if Path::new("/run/ax/axd.sock").exists() {
        eprintln!("default-socket case skipped: a system axd serves /run/ax/axd.sock here");
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_ax"))
        .arg("status")
        .env_remove("AX_SOCKET")
        .env("XDG_RUNTIME_DIR", dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let user = dir.path().join("ax/axd.sock").display().to_string();
    assert!(
        stderr.contains(&format!("{user} or /run/ax/axd.sock")),
        "{stderr}"
    );
}
