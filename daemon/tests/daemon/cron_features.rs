//! What a crontab needs of axd beyond five fields (docs/job-files.md,
//! "Schedules" and `jitter`): `@reboot` fires once per boot of the machine,
//! by its boot id, not on every start of axd.

use ax_protocol::api::RunView;
use serde_json::json;

use crate::support::*;

async fn runs_of(d: &Daemon, dag: &str) -> Vec<RunView> {
    let mut c = d.client().await;
    serde_json::from_value(c.call("list_runs", json!({"dag": dag})).await.unwrap()).unwrap()
}

/// The runs of `dag` once axd has certainly taken its first steps: a job
/// submitted after start-up has succeeded, and so every step before it
/// (the jobs folder's first load among them) is committed.
async fn settled_runs_of(d: &Daemon, dag: &str) -> Vec<RunView> {
    let mut c = d.client().await;
    let probe = submit(&mut c, json!({"command": "true", "name": "probe"})).await[0];
    wait_state(&mut c, probe, "success", 15).await;
    runs_of(d, dag).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reboot_fires_once_per_boot_id_and_never_on_a_restart() {
    let mut d = Daemon::prepare(BASE_CONFIG, &[]);
    let boot_file = d.path("boot_id");
    let marker = d.path("warmed");
    std::fs::write(&boot_file, "boot-a\n").unwrap();
    d.set_env("AX_BOOT_ID_FILE", boot_file.as_os_str());
    let job = format!(
        "schedule = \"@reboot\"\ncommand = \"echo $AX_DAG_RUN >> {}\"\n",
        marker.display()
    );
    std::fs::write(d.path("jobs.d/warm.toml"), job).unwrap();

    // First seen in boot A: it waits for the next boot, as cron's @reboot.
    d.spawn();
    assert!(settled_runs_of(&d, "warm").await.is_empty());
    assert_eq!(d.term(), Some(0));
    // axd restarts within boot A: nothing.
    d.spawn();
    assert!(settled_runs_of(&d, "warm").await.is_empty());
    assert_eq!(d.term(), Some(0));

    // The machine rebooted (boot B): one DAG run.
    std::fs::write(&boot_file, "boot-b\n").unwrap();
    d.spawn();
    let runs = settled_runs_of(&d, "warm").await;
    assert_eq!(runs.len(), 1, "{runs:#?}");
    let mut c = d.client().await;
    wait_state(&mut c, runs[0].id, "success", 15).await;
    drop(c);
    // kill -9 and a restart within boot B: still one.
    d.kill9();
    d.spawn();
    assert_eq!(settled_runs_of(&d, "warm").await.len(), 1);
    assert_eq!(d.term(), Some(0));
    let lines = std::fs::read_to_string(&marker).unwrap();
    assert_eq!(lines.lines().count(), 1, "ran once: {lines}");
}
