//! `ax logs -f` through one node of a cluster follows a run that another
//! node runs (docs/operations.md, "Cluster"): every attempt's output,
//! shipped through the store, across its retries, and the exit code of its
//! end, although the node asked sends no notification about that run.
//! Without a PostgreSQL server the test says `skipped: …` and passes,
//! unless `AX_REQUIRE_PG=1`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use ax_testkit::pg::TestDb;
use ax_testkit::{Daemon, axd_beside, run_ids};

use crate::support::{text, wait_output};

fn ax(socket: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ax"));
    cmd.arg("--socket").arg(socket).args(args);
    cmd
}

#[test]
fn logs_follow_through_another_node_reads_every_attempt_and_the_end() {
    let Some(db) = TestDb::create("cluster_follow") else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let count = work.path().join("count");
    let jobs = format!(
        "overlap = \"replace\"\nretries = 2\nbackoff = {{ kind = \"fixed\", base = \"500ms\", jitter = \"0s\" }}\n\
         command = \"n=$(cat {count} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {count}; echo \\\"line of attempt $n\\\"; sleep 0.3; [ $n -ge 3 ]\"\n",
        count = count.display(),
    );
    let config = format!(
        "store = \"{}\"\n[pools.default]\nslots = 8\n[cluster]\nheartbeat = \"500ms\"\n",
        db.url
    );
    let axd = axd_beside(Path::new(env!("CARGO_BIN_EXE_ax"))).unwrap();
    let a = Daemon::start(axd.clone(), &config, &[("flaky.toml", &jobs)]).unwrap();
    let b = Daemon::start(axd, &config, &[("flaky.toml", &jobs)]).unwrap();

    // Triggered through B, the DAG run of a `replace` DAG stays on B;
    // followed through A.
    let out = ax(&b.socket, &["--json", "trigger", "flaky"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let answer: serde_json::Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    let run = run_ids(&answer)[0].to_string();
    let follower = ax(&a.socket, &["logs", "-f", &run])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_output(follower, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        text(&out.stdout),
        "line of attempt 1\nline of attempt 2\nline of attempt 3\n"
    );
    assert!(
        text(&out.stderr).contains("── attempt 3"),
        "{}",
        text(&out.stderr)
    );
    // It did run on B: A has no log file of it.
    assert!(!a.path(&format!("state/logs/{run}.1.log")).exists());
    assert!(b.path(&format!("state/logs/{run}.1.log")).exists());
}
