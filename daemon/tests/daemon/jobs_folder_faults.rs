//! Faults of the jobs folder through the real daemon (docs/operations.md,
//! "Jobs folder: loops, huge files, unreadable folders"): directory link
//! loops, reads that must not rescan, huge files, folders axd cannot read.

use std::os::unix::fs::symlink;
use std::time::{Duration, Instant};

use crate::support::*;
use ax_protocol::api::{DagView, StatusView};
use ax_protocol::client::Client;
use serde_json::Value;

async fn dags(c: &mut Client) -> Vec<DagView> {
    serde_json::from_value(c.call("list_dags", Value::Null).await.unwrap()).unwrap()
}

async fn names(c: &mut Client) -> Vec<String> {
    dags(c).await.into_iter().map(|d| d.name).collect()
}

async fn status(c: &mut Client) -> StatusView {
    serde_json::from_value(c.call("status", Value::Null).await.unwrap()).unwrap()
}

/// Polls `status` until `pred` holds; fails with the last one after `secs`.
async fn wait_status(
    c: &mut Client,
    secs: u64,
    what: &str,
    pred: impl Fn(&StatusView) -> bool,
) -> StatusView {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let s = status(c).await;
        if pred(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "never: {what}: {s:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A link to the folder itself, and two links that cross (`team/up` back
/// to the root, `loop` to the root): each DAG is loaded once, by its
/// physical path, and axd keeps answering. A link to a regular file still
/// loads; a link to a folder is not followed (docs/job-files.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_link_loops_load_each_dag_once() {
    let mut d = Daemon::prepare(
        BASE_CONFIG,
        &[
            ("a.toml", "command = \"true\"\n"),
            ("team/b.toml", "command = \"true\"\n"),
        ],
    );
    let jobs = d.path("jobs.d");
    std::fs::create_dir_all(d.path("elsewhere")).unwrap();
    std::fs::write(d.path("elsewhere/c.toml"), "command = \"true\"\n").unwrap();
    std::fs::write(d.path("outside.toml"), "command = \"true\"\n").unwrap();
    symlink(d.path("outside.toml"), jobs.join("linked.toml")).unwrap();
    symlink(d.path("elsewhere"), jobs.join("linkdir")).unwrap();
    symlink(".", jobs.join("loop")).unwrap();
    d.spawn();
    let mut c = d.client().await;
    let expected = ["a", "linked", "team/b"];
    assert_eq!(names(&mut c).await, expected);

    // A second loop, crossing the first, and a change that rescans.
    symlink("..", jobs.join("team/up")).unwrap();
    std::fs::write(jobs.join("team/b.toml"), "command = \"echo b\"\n").unwrap();
    let t = Instant::now();
    wait_status(&mut c, 10, "the rescan after the second loop", |s| {
        s.jobs_folder.scans >= 2 && !s.jobs_folder.scanning
    })
    .await;
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "rescan took {:?}",
        t.elapsed()
    );
    assert_eq!(names(&mut c).await, expected);
    assert!(status(&mut c).await.errors.is_empty());
    let loads = d.log().matches("DAG loaded dag=team/b ").count();
    assert_eq!(loads, 2, "team/b loaded at start and after its change");
}

/// The metrics text, through the socket.
async fn metrics(c: &mut Client) -> String {
    let m = c.call("metrics", Value::Null).await.unwrap();
    m["text"].as_str().unwrap().to_string()
}

/// The value of an unlabelled series in the metrics text.
fn series(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
}

/// Long enough for a scan that the watch would start (debounce 200 ms),
/// and for the scan that scan's own reads would start, to be in force.
const QUIET: Duration = Duration::from_millis(1500);

/// `ls` and `cat` of every file (a scan opens every file too) start no
/// scan; a write, a rename and a permission change each do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_the_jobs_folder_never_start_a_scan() {
    let files: Vec<(String, String)> = (0..20)
        .map(|i| {
            let dir = if i % 2 == 0 { "" } else { "team/" };
            (
                format!("{dir}d{i}.toml"),
                "command = \"true\"\n".to_string(),
            )
        })
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    let d = Daemon::start(&refs);
    let mut c = d.client().await;
    let jobs = d.path("jobs.d");
    tokio::time::sleep(QUIET).await;
    let settled = status(&mut c).await.jobs_folder.scans;
    assert_eq!(settled, 1, "only the scan at start");

    for args in [
        vec!["ls", "-la"],
        vec!["ls", "-R"],
        vec!["sh", "-c", "cat *.toml team/*.toml >/dev/null"],
        vec!["find", ".", "-type", "f", "-exec", "cat", "{}", "+"],
    ] {
        let out = std::process::Command::new(args[0])
            .args(&args[1..])
            .current_dir(&jobs)
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(out.success(), "{args:?}");
    }
    for (name, _) in &files {
        std::fs::read(jobs.join(name)).unwrap();
    }
    tokio::time::sleep(QUIET).await;
    let s = status(&mut c).await;
    assert_eq!(s.jobs_folder.scans, settled, "reads started a scan");
    assert_eq!(series(&metrics(&mut c).await, "ax_jobs_scans_total"), 1.0);

    // A write starts one scan; the reads of that scan start none.
    std::fs::write(jobs.join("d0.toml"), "command = \"echo changed\"\n").unwrap();
    wait_status(&mut c, 10, "a scan after a write", |s| {
        s.jobs_folder.scans > settled
    })
    .await;
    tokio::time::sleep(QUIET).await;
    let after_write = status(&mut c).await.jobs_folder.scans;
    assert_eq!(after_write, settled + 1, "one write, one scan");

    // A rename and a permission change are changes too.
    std::fs::rename(jobs.join("team/d1.toml"), jobs.join("team/e1.toml")).unwrap();
    wait_status(&mut c, 10, "a scan after a rename", |s| {
        s.jobs_folder.scans > after_write
    })
    .await;
    assert!(names(&mut c).await.contains(&"team/e1".to_string()));
    let after_rename = status(&mut c).await.jobs_folder.scans;
    let f = jobs.join("d2.toml");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    wait_status(&mut c, 10, "a scan after a chmod", |s| {
        s.jobs_folder.scans > after_rename
    })
    .await;
}

fn chmod(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A sub-folder, then the jobs folder itself, that axd cannot list
/// (EACCES: axd runs without the capability that lets root ignore file
/// modes): the DAGs below it stay and can be triggered, the error is in
/// `status` and the metrics, other files still load; readable again, the
/// error clears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_folder_keeps_its_dags_and_is_reported() {
    let Some(wrapper) = ax_testkit::daemon::without_file_override() else {
        eprintln!("skipped: needs root and setpriv to take file overrides from axd");
        return;
    };
    let mut d = Daemon::prepare(
        BASE_CONFIG,
        &[
            ("a.toml", "command = \"true\"\n"),
            ("team/b.toml", "command = \"echo b\"\n"),
            ("team/c.toml", "command = \"true\"\n"),
        ],
    );
    d.set_wrapper(wrapper);
    d.spawn();
    let mut c = d.client().await;
    let jobs = d.path("jobs.d");
    let all = ["a", "team/b", "team/c"];
    assert_eq!(names(&mut c).await, all);

    chmod(&jobs.join("team"), 0o000);
    let s = wait_status(&mut c, 10, "the folder error", |s| !s.errors.is_empty()).await;
    assert_eq!(s.errors.len(), 1, "{:?}", s.errors);
    let e = &s.errors[0];
    assert_eq!(e.file, jobs.join("team").display().to_string());
    assert!(
        e.message.contains("Permission denied") && e.message.contains("stay as last loaded"),
        "{e:?}"
    );
    assert_eq!(names(&mut c).await, all, "the folder's DAGs stay");
    let m = metrics(&mut c).await;
    assert_eq!(series(&m, "ax_jobs_folder_errors"), 1.0, "{m}");
    assert!(series(&m, "ax_jobs_scan_failures_total") >= 1.0, "{m}");
    assert_eq!(series(&m, "ax_job_file_errors"), 0.0, "{m}");
    let id = trigger(&mut c, "team/b").await[0];
    wait_state(&mut c, id, "success", 10).await;
    // Other files still load meanwhile.
    std::fs::write(jobs.join("new.toml"), "command = \"true\"\n").unwrap();
    wait_dag_names(&mut c, &["a", "new", "team/b", "team/c"]).await;

    chmod(&jobs.join("team"), 0o755);
    wait_status(&mut c, 10, "the error clears", |s| s.errors.is_empty()).await;
    assert_eq!(series(&metrics(&mut c).await, "ax_jobs_folder_errors"), 0.0);

    // The jobs folder itself: every DAG stays.
    chmod(&jobs, 0o000);
    let s = wait_status(&mut c, 10, "the root's error", |s| !s.errors.is_empty()).await;
    assert_eq!(
        s.errors[0].file,
        jobs.display().to_string(),
        "{:?}",
        s.errors
    );
    assert_eq!(names(&mut c).await, ["a", "new", "team/b", "team/c"]);
    chmod(&jobs, 0o755);
    wait_status(&mut c, 10, "the root's error clears", |s| {
        s.errors.is_empty()
    })
    .await;
    assert_eq!(names(&mut c).await, ["a", "new", "team/b", "team/c"]);
}

async fn wait_dag_names(c: &mut Client, want: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = names(c).await;
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "DAGs {got:?}, not {want:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A 10 MiB job file is read, parsed and validated off the scheduler
/// thread: `status` is answered while the scan runs (the answers say a
/// scan is under way), each promptly, and the DAG then loads whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_answers_while_a_10_mib_file_loads() {
    let d = Daemon::start(&[]);
    let mut c = d.client().await;
    let jobs = d.path("jobs.d");
    let (text, n) = ax_testkit::jobfiles::chain_of_bytes(10 << 20);
    // Written under a dot name (never read), then renamed in: one scan.
    std::fs::write(jobs.join(".big.toml.tmp"), &text).unwrap();
    std::fs::rename(jobs.join(".big.toml.tmp"), jobs.join("big.toml")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(600);
    let (mut during, mut slowest) = (0, Duration::ZERO);
    loop {
        let asked = Instant::now();
        let s = status(&mut c).await;
        slowest = slowest.max(asked.elapsed());
        if s.jobs_folder.scanning {
            during += 1;
        } else if s.jobs_folder.scans >= 2 {
            break;
        }
        assert!(Instant::now() < deadline, "the big file never loaded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("{during} answers during the scan; slowest {slowest:?}");
    assert!(
        during >= 3,
        "status was answered {during} times during the scan"
    );
    assert!(
        slowest < Duration::from_secs(2),
        "a status took {slowest:?}"
    );
    // (Its view, every job id and dep, is beyond an answer's size.)
    assert!(status(&mut c).await.errors.is_empty());
    assert!(d.log().contains("DAG loaded dag=big "), "{}", d.log());
    assert!(n > 50_000, "{n} jobs");
}
