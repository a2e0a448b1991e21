//! Job-folder definitions versioned per node (docs/operations.md,
//! "Cluster"): two real axd on one PostgreSQL database, each watching a
//! jobs folder of its own. With the same file they agree; when one node's
//! file changes (its watcher reloads it) `dags` and `ax dags` through
//! either node flag the DAG and name that node; fixed, they agree again; a
//! node that stops takes its record with it. Without a server the test says
//! `skipped: …` and passes, unless `AX_REQUIRE_PG=1`.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::*;
use crate::{cluster_config, node_id};
use ax_protocol::api::{DagVersions, DagView, NodeVersion};
use ax_protocol::client::Client;
use ax_testkit::pg::TestDb;
use serde_json::json;

const ETL: &str = "schedule = \"0 3 * * *\"\n\n[[job]]\nid = \"extract\"\ncommand = \"true\"\n";
const ETL_CHANGED: &str =
    "schedule = \"0 4 * * *\"\n\n[[job]]\nid = \"extract\"\ncommand = \"true\"\n";
const REPORT: &str = "command = \"true\"\n";

/// The `ax` binary of this build, beside the `deps/` folder this test
/// runs from (`cargo test --workspace` builds it).
fn ax_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let ax = exe.parent().unwrap().parent().unwrap().join("ax");
    assert!(
        ax.exists(),
        "{} is missing: build it with `cargo build -p ax-clients --bin ax`",
        ax.display()
    );
    ax
}

/// `ax dags` through `d`, its output.
fn ax_dags(d: &Daemon) -> String {
    let out = Command::new(ax_binary())
        .arg("--socket")
        .arg(&d.socket)
        .arg("dags")
        .output()
        .expect("run ax");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

async fn versions(c: &mut Client, dag: &str) -> Option<DagVersions> {
    let dags: Vec<DagView> =
        serde_json::from_value(c.call("list_dags", json!(null)).await.unwrap()).unwrap();
    dags.into_iter().find(|d| d.name == dag)?.versions
}

/// Polls `dags` through `c` until `dag`'s versions satisfy `pred`.
async fn wait_versions(
    c: &mut Client,
    dag: &str,
    what: &str,
    pred: impl Fn(&DagVersions) -> bool,
) -> DagVersions {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let v = versions(c, dag).await;
        if let Some(v) = &v
            && pred(v)
        {
            return v.clone();
        }
        assert!(Instant::now() < deadline, "never {what}: {v:#?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_that_load_different_versions_of_a_dag_are_flagged() {
    let _turn = crate::module_turn(module_path!()).await;
    let Some(db) = TestDb::create("pg_dags_versions") else {
        return;
    };
    let config = cluster_config(&db, "200ms");
    let jobs = [("etl.toml", ETL), ("report.toml", REPORT)];
    let a = Daemon::start_with(&config, &jobs);
    let mut b = Daemon::start_with(&config, &jobs);
    assert_ne!(a.path("jobs.d"), b.path("jobs.d"), "a jobs folder each");
    let (id_a, id_b) = (node_id(&a), node_id(&b));
    let mut ca = a.client().await;
    let mut cb = b.client().await;

    // The same file on both: they agree, whatever the folders' paths.
    let both = |v: &DagVersions| v.agree == 2 && v.agrees();
    let agreed = wait_versions(&mut ca, "etl", "agreed through A", both).await;
    wait_versions(&mut cb, "etl", "agreed through B", both).await;
    wait_versions(&mut ca, "report", "report agreed", both).await;
    let v1 = agreed.hash.clone().unwrap();
    let rows = db
        .query("SELECT node, hash FROM node_dags WHERE dag = 'etl' ORDER BY node")
        .unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows.iter().all(|r| r[1] == v1), "{rows:?}");
    let out = ax_dags(&a);
    assert!(out.lines().next().unwrap().contains("NODES"), "{out}");
    assert!(
        out.contains("2 nodes agree") && !out.contains("DIFFERS"),
        "{out}"
    );

    // B's file changes; its watcher reloads it.
    std::fs::write(b.path("jobs.d/etl.toml"), ETL_CHANGED).unwrap();
    let seen_by_a = wait_versions(&mut ca, "etl", "A flags B", |v| !v.agrees()).await;
    assert_eq!(seen_by_a.hash.as_deref(), Some(v1.as_str()));
    assert_eq!(seen_by_a.agree, 1);
    let [
        NodeVersion {
            node,
            hash: Some(v2),
        },
    ] = seen_by_a.differ.as_slice()
    else {
        panic!("{seen_by_a:?}");
    };
    assert_eq!(*node, id_b);
    assert_ne!(*v2, v1);
    let seen_by_b = wait_versions(&mut cb, "etl", "B flags A", |v| !v.agrees()).await;
    assert_eq!(seen_by_b.hash.as_ref(), Some(v2));
    assert_eq!(
        seen_by_b.differ,
        vec![NodeVersion {
            node: id_a.clone(),
            hash: Some(v1.clone()),
        }]
    );
    assert!(versions(&mut ca, "report").await.unwrap().agrees());
    let short = |h: &str| h[..DagVersions::SHORT].to_string();
    for (through, other, theirs, mine) in [(&a, &id_b, v2, &v1), (&b, &id_a, &v1, v2)] {
        let out = ax_dags(through);
        let want = format!(
            "etl: DIFFERS: {other} has {} (this node {})",
            short(theirs),
            short(mine)
        );
        assert!(out.contains(&want), "want {want:?} in:\n{out}");
        assert!(out.contains("DIFFERS"), "{out}");
    }

    // Fixed: they agree again.
    std::fs::write(b.path("jobs.d/etl.toml"), ETL).unwrap();
    wait_versions(&mut ca, "etl", "agreed again through A", both).await;
    wait_versions(&mut cb, "etl", "agreed again through B", both).await;
    assert!(!ax_dags(&b).contains("DIFFERS"));

    // A DAG only one node has: the other lacks it.
    std::fs::remove_file(b.path("jobs.d/report.toml")).unwrap();
    let lacking = wait_versions(&mut ca, "report", "B lacks report", |v| !v.agrees()).await;
    assert_eq!(
        lacking.differ,
        vec![NodeVersion {
            node: id_b.clone(),
            hash: None,
        }]
    );
    assert!(
        ax_dags(&a).contains(&format!("report: DIFFERS: {id_b} lacks it")),
        "{}",
        ax_dags(&a)
    );

    // A clean stop takes B's record with it; A is alone.
    drop(cb);
    assert_eq!(b.term(), Some(0));
    let alone = wait_versions(&mut ca, "etl", "A alone", |v| v.agree == 1 && v.agrees()).await;
    assert_eq!(alone.summary(), "1 node");
    let left = db
        .query(&format!(
            "SELECT count(*) FROM node_dags WHERE node = '{id_b}'"
        ))
        .unwrap();
    assert_eq!(left[0][0], "0");
}

/// A node restarted defines its DAGs from its own folder, never from the
/// file another node last stored for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_keeps_its_own_files() {
    let _turn = crate::module_turn(module_path!()).await;
    let Some(db) = TestDb::create("pg_dags_own_files") else {
        return;
    };
    let config = cluster_config(&db, "500ms");
    let mut a = Daemon::start_with(&config, &[("etl.toml", ETL)]);
    let b = Daemon::start_with(&config, &[("etl.toml", ETL)]);
    let stored_by_b = |db: &TestDb| {
        db.query("SELECT file FROM dag_defs WHERE name = 'etl'")
            .unwrap()[0][0]
            .starts_with(&*b.path("jobs.d").to_string_lossy())
    };
    // B started last: the shared row names B's file.
    wait_until(10, "B stores its file", || stored_by_b(&db));
    a.stop();
    a.spawn();
    let mut c = a.client().await;
    let dags: Vec<DagView> =
        serde_json::from_value(c.call("list_dags", json!(null)).await.unwrap()).unwrap();
    let etl = dags.iter().find(|d| d.name == "etl").unwrap();
    assert!(
        etl.file.starts_with(&*a.path("jobs.d").to_string_lossy()),
        "{} is not A's own file",
        etl.file
    );
}
