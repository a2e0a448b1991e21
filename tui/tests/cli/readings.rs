//! Readings an operator can trust, from the real `ax` against a real axd:
//! fire times in the DAG's zone (`ax dags`, `ax dag`, `ax validate
//! --config`), `ax reload`'s exit on broken files, `ax ls --dag` patterns
//! and its width, what `ax trigger` prints, `ax cancel --dag-run` of an
//! ended DAG run across a restart, `ax status`'s failures across a
//! restart and `ax why` (docs/cli.md; docs/operations.md, "Reading
//! `why`").

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ax_testkit::{Daemon, axd_beside};
use serde_json::Value;

use super::support::{ax_offline, parts};

/// `ax ARGS` with `env`: exit code, stdout, stderr. `COLUMNS` is unset
/// unless `env` sets it.
fn ax_env(d: &Daemon, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ax"))
        .arg("--socket")
        .arg(&d.socket)
        .args(args)
        .env_remove("AX_RUN_ID")
        .env_remove("COLUMNS")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    parts(&out)
}

fn ax(d: &Daemon, args: &[&str]) -> (i32, String, String) {
    ax_env(d, args, &[])
}

fn json(d: &Daemon, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let (code, out, err) = ax(d, &all);
    assert_eq!(code, 0, "ax {args:?}: {err}");
    serde_json::from_str(&out).unwrap()
}

fn daemon(jobs: &[(&str, &str)]) -> Daemon {
    let axd = axd_beside(Path::new(env!("CARGO_BIN_EXE_ax"))).unwrap();
    Daemon::start(axd, "timezone = \"UTC\"\n", jobs).unwrap()
}

/// Waits until run `id` is in `state`.
fn wait_state(d: &Daemon, id: u64, state: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let r = json(d, &["show", &id.to_string()]);
        if r["state"] == state {
            return r;
        }
        assert!(Instant::now() < deadline, "run {id} never {state}: {r}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn runs_of(d: &Daemon, dag_run: u64) -> Vec<u64> {
    json(d, &["ls", "--limit", "1000"])
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["dag_run"] == dag_run)
        .map(|r| r["id"].as_u64().unwrap())
        .collect()
}

const KOLKATA: &str = "schedule = \"0 9 * * *\"\ntimezone = \"Asia/Kolkata\"\n\
                       [[job]]\nid = \"a\"\ncommand = \"true\"\n";

#[test]
fn fire_times_show_in_the_dags_zone_with_its_offset() {
    let d = daemon(&[("india.toml", KOLKATA)]);
    let (code, out, err) = ax(&d, &["dags"]);
    assert_eq!(code, 0, "{err}");
    // Kolkata has no DST: 09:00 there is always +05:30.
    let row = out.lines().find(|l| l.starts_with("india")).unwrap();
    assert!(row.contains(" 09:00 +05:30 Asia/Kolkata "), "{out}");
    let (code, out, err) = ax(&d, &["dag", "india"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("schedule \"0 9 * * *\" in Asia/Kolkata, next fire ")
            && out.contains(" 09:00 +05:30 Asia/Kolkata"),
        "{out}"
    );
}

#[test]
fn validate_shows_fire_times_in_the_zone_axd_would_use() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("daily.toml");
    std::fs::write(
        &file,
        "schedule = \"0 9 * * *\"\n[[job]]\nid = \"a\"\ncommand = \"true\"\n",
    )
    .unwrap();
    let config = dir.path().join("axd.toml");
    std::fs::write(&config, "timezone = \"Asia/Tokyo\"\n").unwrap();
    let (file, config) = (file.display().to_string(), config.display().to_string());
    let validate = |args: &[&str], tz: &str| {
        let mut all = vec!["validate"];
        all.extend_from_slice(args);
        ax_offline(&all, &[("TZ", tz)])
    };
    let (code, out, err) = validate(&[&file, "--config", &config], "America/New_York");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("in Asia/Tokyo (timezone \"Asia/Tokyo\" of "),
        "{out}"
    );
    assert!(out.contains("T09:00:00+09:00"), "{out}");
    // Without --config: axd's default, said to be assumed.
    let (code, out, _) = validate(&[&file], "Asia/Kolkata");
    assert_eq!(code, 0);
    assert!(
        out.contains("in Asia/Kolkata (assumed: axd's default timezone \"local\""),
        "{out}"
    );
    assert!(out.contains("T09:00:00+05:30"), "{out}");
    std::fs::write(dir.path().join("axd.toml"), "timezone = \"Mars/Olympus\"\n").unwrap();
    let (code, _, err) = validate(&[&file, "--config", &config], "UTC");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("Mars/Olympus"), "{err}");
}

#[test]
fn reload_exits_1_naming_each_broken_file() {
    let d = daemon(&[("good.toml", "[[job]]\nid = \"a\"\ncommand = \"true\"\n")]);
    let (code, out, err) = ax(&d, &["reload"]);
    assert_eq!(code, 0, "{out}{err}");
    let bad = d.path("jobs.d/broken.toml");
    std::fs::write(&bad, "[[job]]\nid = \"a\"\ncomand = \"true\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, out, err) = ax(&d, &["reload"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("1 with errors"), "{out}");
    assert!(err.contains("broken.toml:"), "{err}");
    let (code, _, _) = ax(&d, &["--json", "reload"]);
    assert_eq!(code, 1);
}

const QUICK: &str = "[[job]]\nid = \"j\"\ncommand = \"true\"\n";
const LONG_NAME: &str = "team-a/nightly-warehouse-rebuild-of-everything";

#[test]
fn ls_dag_takes_a_prefix_or_a_glob_and_refuses_an_unknown_dag() {
    let long_file = format!("{LONG_NAME}.toml");
    let d = daemon(&[
        ("team-a/one.toml", QUICK),
        ("team-a/two.toml", QUICK),
        ("team-b/three.toml", QUICK),
        (&long_file, QUICK),
    ]);
    for dag in ["team-a/one", "team-a/two", "team-b/three"] {
        let (code, _, err) = ax(&d, &["trigger", dag]);
        assert_eq!(code, 0, "{err}");
    }
    let dags_of = |pattern: &str| -> Vec<String> {
        let mut v: Vec<String> = json(&d, &["ls", "--dag", pattern])
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["dag"].as_str().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    assert_eq!(dags_of("team-a/one"), ["team-a/one"]);
    assert_eq!(dags_of("team-a/"), ["team-a/one", "team-a/two"]);
    assert_eq!(dags_of("team-a/*"), ["team-a/one", "team-a/two"]);
    assert_eq!(dags_of("*/t*"), ["team-a/two", "team-b/three"]);
    assert_eq!(
        dags_of("team"),
        ["team-a/one", "team-a/two", "team-b/three"]
    );
    // A DAG with no runs yet: an empty table, not an error.
    assert_eq!(dags_of(LONG_NAME), Vec::<String>::new());
    for unknown in ["nosuch", "team-c/*", "team-a/one/"] {
        let (code, out, err) = ax(&d, &["ls", "--dag", unknown]);
        assert_eq!(code, 4, "{unknown}: {out}{err}");
        assert!(err.contains("not found"), "{err}");
    }
}

#[test]
fn ls_shows_names_whole_to_a_pipe_and_fits_them_to_columns() {
    let long_file = format!("{LONG_NAME}.toml");
    let d = daemon(&[(&long_file, QUICK)]);
    let (code, _, err) = ax(&d, &["trigger", LONG_NAME]);
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = ax(&d, &["ls"]);
    let row = out.lines().nth(1).unwrap();
    assert!(row.contains(&format!("{LONG_NAME} j ")), "{out}");
    let header = out.lines().next().unwrap();
    assert_eq!(header.find("JOB"), row.find(" j ").map(|i| i + 1), "{out}");
    // Wide enough: whole.
    let (_, out, _) = ax_env(&d, &["ls"], &[("COLUMNS", "200")]);
    assert!(out.contains(LONG_NAME), "{out}");
    // 80 columns: the DAG column shrinks to 20, cut with `…`.
    let (_, out, _) = ax_env(&d, &["ls"], &[("COLUMNS", "80")]);
    let row = out.lines().nth(1).unwrap();
    assert!(row.contains("team-a/nightly-ware… j "), "{out}");
}

const SLOW_SKIP: &str = "overlap = \"skip\"\n[[job]]\nid = \"s\"\ncommand = \"sleep 30\"\n";
const SLOW_QUEUE: &str = "overlap = \"queue\"\n[[job]]\nid = \"s\"\ncommand = \"sleep 30\"\n";

#[test]
fn trigger_prints_the_dag_run_id_whatever_overlap_does() {
    let d = daemon(&[("skip.toml", SLOW_SKIP), ("queue.toml", SLOW_QUEUE)]);
    for dag in ["skip", "queue"] {
        let (code, out, err) = ax(&d, &["trigger", dag]);
        assert_eq!(code, 0, "{err}");
        let dag_run: u64 = out.trim().parse().expect("a DAG run id alone");
        assert!(err.contains(&format!("started DAG run {dag_run}")), "{err}");
        // The id is the DAG run's, not its one run's.
        let runs = runs_of(&d, dag_run);
        assert_eq!(runs.len(), 1, "DAG run {dag_run}");
        let (code, again, err) = ax(&d, &["trigger", dag]);
        assert_eq!(again.trim(), dag_run.to_string(), "{err}");
        if dag == "skip" {
            assert_eq!(code, 1, "{err}");
            assert!(
                err.contains(&format!("skipped because DAG run {dag_run} is active")),
                "{err}"
            );
        } else {
            assert_eq!(code, 0, "{err}");
            assert!(
                err.contains(&format!("queued behind DAG run {dag_run}")),
                "{err}"
            );
        }
        let (code, out, err) = ax(&d, &["trigger", "--force", dag]);
        assert_eq!(code, 0, "{err}");
        assert!(out.trim().parse::<u64>().unwrap() > dag_run, "{out}");
    }
}

#[test]
fn cancel_of_an_ended_dag_run_changes_nothing_also_after_a_restart() {
    let mut d = daemon(&[("quick.toml", QUICK)]);
    let (_, out, _) = ax(&d, &["trigger", "quick"]);
    let dag_run = out.trim().to_string();
    let run = runs_of(&d, dag_run.parse().unwrap())[0];
    wait_state(&d, run, "success");
    let (code, _, err) = ax(&d, &["cancel", "--dag-run", &dag_run]);
    assert_eq!(code, 0, "{err}");
    d.terminate(Duration::from_secs(30)).unwrap();
    d.spawn().unwrap();
    let (code, out, err) = ax(&d, &["cancel", "--dag-run", &dag_run]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(json(&d, &["show", &run.to_string()])["state"], "success");
    let (code, _, err) = ax(&d, &["cancel", "--dag-run", "999999"]);
    assert_eq!(code, 4, "{err}");
}

#[test]
fn status_counts_the_hours_failures_across_a_restart() {
    let mut d = daemon(&[]);
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (code, out, err) = ax(&d, &["submit", "--", "false"]);
        assert_eq!(code, 0, "{err}");
        ids.push(out.trim().parse::<u64>().unwrap());
    }
    for id in &ids {
        wait_state(&d, *id, "failed");
    }
    let failed = |d: &Daemon| json(d, &["status"])["failed_last_hour"].as_u64().unwrap();
    assert_eq!(failed(&d), 3);
    d.terminate(Duration::from_secs(30)).unwrap();
    d.spawn().unwrap();
    assert_eq!(failed(&d), 3);
    let (_, out, _) = ax(&d, &["status"]);
    assert!(out.contains("failed in the last hour: 3"), "{out}");
}

const CHAIN: &str = "[[job]]\nid = \"first\"\ncommand = \"sleep 30\"\n\
                     [[job]]\nid = \"second\"\ndeps = [\"first\"]\ncommand = \"true\"\n";

const HELD: &str = "[[job]]\nid = \"h\"\ncommand = \"true\"\n";
const RETRIED: &str = "[[job]]\nid = \"r\"\ncommand = \"exit 4\"\nretries = 1\n\
                       backoff = { kind = \"fixed\", base = \"1h\", jitter = \"0s\" }\n";

#[test]
fn why_says_a_run_is_held_by_a_pause_or_delayed_until_a_time() {
    let d = daemon(&[("held.toml", HELD), ("retried.toml", RETRIED)]);
    let (code, _, err) = ax(&d, &["pause", "held"]);
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = ax(&d, &["trigger", "held"]);
    let held = runs_of(&d, out.trim().parse().unwrap())[0];
    let (_, out, _) = ax(&d, &["why", &held.to_string()]);
    assert!(
        out.contains("because: DAG paused\n`ax resume held` lets it start"),
        "{out}"
    );
    let (_, out, _) = ax(&d, &["trigger", "retried"]);
    let retried = runs_of(&d, out.trim().parse().unwrap())[0];
    wait_state(&d, retried, "delayed");
    let (_, out, _) = ax(&d, &["why", &retried.to_string()]);
    assert!(out.contains("is delayed\nbecause: backoff until "), "{out}");
    assert!(
        out.contains("its last attempt: failed with exit 4"),
        "{out}"
    );
}

#[test]
fn why_says_what_a_run_waits_on_and_how_it_ended() {
    let d = daemon(&[("chain.toml", CHAIN)]);
    let (_, out, _) = ax(&d, &["trigger", "chain"]);
    let runs = runs_of(&d, out.trim().parse().unwrap());
    let (first, second) = (runs.iter().min().unwrap(), runs.iter().max().unwrap());
    wait_state(&d, *first, "running");
    let (code, out, err) = ax(&d, &["why", &second.to_string()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("is waiting\nbecause: waiting for first (running)"),
        "{out}"
    );
    let (code, _, err) = ax(&d, &["cancel", &first.to_string()]);
    assert_eq!(code, 0, "{err}");
    wait_state(&d, *second, "cancelled");
    let (_, out, _) = ax(&d, &["why", &first.to_string()]);
    assert!(out.contains("it was cancelled by "), "{out}");
    assert!(out.contains(" via ax at "), "{out}");
    let (_, out, _) = ax(&d, &["why", &second.to_string()]);
    assert!(
        out.contains("because its dependency first did not succeed"),
        "{out}"
    );

    let (_, out, _) = ax(&d, &["submit", "--", "exit 3"]);
    let id = out.trim().to_string();
    wait_state(&d, id.parse().unwrap(), "failed");
    let (_, out, _) = ax(&d, &["why", &id]);
    assert!(out.contains("it failed with exit 3 at "), "{out}");
    assert!(out.contains(&format!("`ax logs {id}`")), "{out}");
    let (code, _, _) = ax(&d, &["why", "999999"]);
    assert_eq!(code, 4);
}
