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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jitter_holds_no_slot_and_shows_the_planned_start() {
    // Every second, delayed by up to ten days: the first slot's DAG run
    // waits (delayed), later slots are skipped by overlap, and a job of
    // the one-slot pool runs meanwhile.
    let d = Daemon::start(&[(
        "renew.toml",
        "schedule = \"* * * * * *\"\njitter = \"10d\"\npool = \"one\"\ncommand = \"true\"\n",
    )]);
    let mut c = d.client().await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let waiting = loop {
        if let Some(r) = runs_of(&d, "renew").await.into_iter().next() {
            break r;
        }
        assert!(std::time::Instant::now() < deadline, "no DAG run");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let waiting = wait_state(&mut c, waiting.id, "delayed", 15).await;
    assert!(
        waiting
            .why
            .as_deref()
            .unwrap_or("")
            .contains("planned start"),
        "{waiting:#?}"
    );
    let other = submit(
        &mut c,
        json!({"command": "true", "pool": "one", "name": "other"}),
    )
    .await[0];
    wait_state(&mut c, other, "success", 15).await;
    let dags: Vec<ax_protocol::api::DagView> =
        serde_json::from_value(c.call("list_dags", json!({})).await.unwrap()).unwrap();
    let renew = dags.iter().find(|v| v.name == "renew").unwrap();
    assert_eq!(renew.jitter.as_deref(), Some("10d"));
    let planned = renew.planned_start.expect("planned start shown");
    assert_eq!(Some(planned), waiting.next_at);
    assert!(planned.millis() > waiting.created_at.unwrap().millis());
    assert_eq!(runs_of(&d, "renew").await.len(), 1, "later slots skipped");
}
