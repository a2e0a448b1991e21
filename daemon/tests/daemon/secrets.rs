//! Secrets (docs/job-files.md, "Secrets"): a job's `env_file` and
//! `secret_env` values reach the job but never what axd shows or logs, nor
//! the job's captured output.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::support::*;
use serde_json::json;

const TOKEN: &str = "s3cr3t-value";
const API_KEY: &str = "key-from-the-job-file";
const DAEMON_SECRET: &str = "from-axd-environment";
const CONFIG_SECRET: &str = "from-axd-toml-job-env";

fn write_mode(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Everything a reader of axd can see about `runs`, as one string: the
/// run views (what `ax show` prints), the DAG view, every event, the
/// daemon's log and the runs' captured logs, through `logs` and on disk.
async fn everything_shown(d: &Daemon, c: &mut ax_protocol::client::Client, runs: &[u64]) -> String {
    let mut seen = String::new();
    for &id in runs {
        seen += &c
            .call("get_run", json!({"id": id}))
            .await
            .unwrap()
            .to_string();
        seen += &c
            .call("logs", json!({"run": id}))
            .await
            .unwrap()
            .to_string();
        let on_disk = d.path(&format!("state/logs/{id}.1.log"));
        seen += &std::fs::read_to_string(on_disk).unwrap_or_default();
    }
    seen += &c
        .call("get_dag", json!({"name": "secret"}))
        .await
        .unwrap()
        .to_string();
    seen += &c.call("list_dags", json!({})).await.unwrap().to_string();
    seen += &c
        .call("events", json!({"limit": 10000}))
        .await
        .unwrap()
        .to_string();
    seen + &d.log()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_file_and_secret_env_values_reach_the_job_but_are_never_shown() {
    // A variable of axd's own reaches a job only through `pass_env`.
    let config = format!(
        "pass_env = [\"DAEMON_SECRET\"]\n{BASE_CONFIG}\n[job_env]\nCONFIG_SECRET = \"{CONFIG_SECRET}\"\n"
    );
    let mut d = Daemon::prepare(&config, &[]);
    d.set_log_level("debug");
    d.set_env("DAEMON_SECRET", DAEMON_SECRET);
    let env_file = d.path("secrets.env");
    let received = d.path("received");
    write_mode(
        &env_file,
        &format!("# the job's token\nexport TOKEN='{TOKEN}'\n"),
        0o600,
    );
    // The token is printed whole, then split across two writes (two reads
    // of the pipe), then beside a plain value that stays visible.
    let job = format!(
        r#"env_file = "{env_file}"
secret_env = ["API_KEY", "DAEMON_SECRET", "CONFIG_SECRET"]
env = {{ API_KEY = "{API_KEY}", PLAIN = "visible-value" }}
command = """
printf '%s\n%s\n' "$TOKEN" "$API_KEY" > {received}
echo "token=$TOKEN key=$API_KEY plain=$PLAIN daemon=$DAEMON_SECRET config=$CONFIG_SECRET"
printf '%s' "$TOKEN" | head -c 5; sleep 0.2; printf '%s' "$TOKEN" | tail -c +6; echo '!'
"""
"#,
        env_file = env_file.display(),
        received = received.display(),
    );
    std::fs::write(d.path("jobs.d/secret.toml"), job).unwrap();
    d.spawn();
    let mut c = d.client().await;

    let first = trigger(&mut c, "secret").await[0];
    wait_state(&mut c, first, "success", 15).await;
    assert_eq!(
        std::fs::read_to_string(&received).unwrap(),
        format!("{TOKEN}\n{API_KEY}\n"),
        "the job got the real values"
    );
    let log = c.call("logs", json!({"run": first})).await.unwrap();
    assert_eq!(
        log["data"], "token=*** key=*** plain=visible-value daemon=*** config=***\n***!\n",
        "output is redacted, across reads too"
    );

    // Rotating the secret needs no reload: the file is read at each start.
    write_mode(&env_file, "TOKEN=\"rotated-value\"\n", 0o600);
    let second = trigger(&mut c, "secret").await[0];
    wait_state(&mut c, second, "success", 15).await;
    assert_eq!(
        std::fs::read_to_string(&received).unwrap(),
        format!("rotated-value\n{API_KEY}\n")
    );
    let log = c.call("logs", json!({"run": second})).await.unwrap();
    assert_eq!(
        log["data"],
        "token=*** key=*** plain=visible-value daemon=*** config=***\n***!\n"
    );

    let seen = everything_shown(&d, &mut c, &[first, second]).await;
    assert!(seen.contains("visible-value"), "the check sees job output");
    assert!(seen.contains("DAG loaded"), "the check sees the daemon log");
    for secret in [
        TOKEN,
        API_KEY,
        DAEMON_SECRET,
        CONFIG_SECRET,
        "rotated-value",
    ] {
        assert!(!seen.contains(secret), "{secret:?} leaked: {seen}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_env_file_others_can_read_or_that_is_missing_fails_the_attempt() {
    let d = Daemon::prepare(BASE_CONFIG, &[]);
    let open_file = d.path("group-readable.env");
    write_mode(&open_file, &format!("TOKEN={TOKEN}\n"), 0o640);
    let missing = d.path("missing.env");
    for (dag, path) in [("open", &open_file), ("missing", &missing)] {
        let job = format!(
            "env_file = \"{}\"\ncommand = \"echo started > {}\"\n",
            path.display(),
            d.path(dag).display()
        );
        std::fs::write(d.path(&format!("jobs.d/{dag}.toml")), job).unwrap();
    }
    let mut d = d;
    d.spawn();
    let mut c = d.client().await;
    for (dag, path, why) in [
        ("open", &open_file, "mode 0640"),
        ("missing", &missing, "No such file"),
    ] {
        let id = trigger(&mut c, dag).await[0];
        let reason = crate::wait_spawn_error(&mut c, id, 15).await;
        assert!(
            reason.contains(&path.display().to_string()) && reason.contains(why),
            "{dag}: {reason}"
        );
        assert!(!d.path(dag).exists(), "{dag}: the job never started");
    }
    let events = c.call("events", json!({"limit": 10000})).await.unwrap();
    assert!(!events.to_string().contains(TOKEN), "{events}");
}
