//! The jobs folder and cron through the real daemon (docs/job-files.md,
//! "Names and which files are read", "Cron schedules").

use std::sync::PoisonError;
use std::time::{Duration, Instant};

use crate::ms;
use crate::support::*;
use ax_protocol::api::DagView;
use ax_protocol::client::Client;
use serde_json::{Value, json};

async fn dags(c: &mut Client) -> Vec<DagView> {
    serde_json::from_value(c.call("list_dags", Value::Null).await.unwrap()).unwrap()
}

async fn wait_dag(c: &mut Client, secs: u64, pred: impl Fn(&[DagView]) -> bool) -> Vec<DagView> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let d = dags(c).await;
        if pred(&d) {
            return d;
        }
        assert!(Instant::now() < deadline, "condition not reached: {d:#?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn loads(d: &Daemon, dag: &str) -> usize {
    d.log().matches(&format!("DAG loaded dag={dag} ")).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_changed_broken_fixed_and_deleted_files() {
    let d = Daemon::start(&[]);
    let mut c = d.client().await;
    let jobs = d.path("jobs.d");
    // a file dropped in becomes a DAG
    let t = Instant::now();
    std::fs::write(jobs.join("etl.toml"), "command = \"echo v1\"\n").unwrap();
    wait_dag(&mut c, 5, |d| d.iter().any(|x| x.name == "etl")).await;
    eprintln!("new file in force after {:?}", t.elapsed());
    assert!(t.elapsed() < Duration::from_secs(2));
    // an atomic-rename save reloads once
    std::fs::write(jobs.join(".etl.toml.swp"), "junk").unwrap();
    std::fs::write(jobs.join("etl.toml.tmp"), "command = \"echo v2\"\n").unwrap();
    std::fs::rename(jobs.join("etl.toml.tmp"), jobs.join("etl.toml")).unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        loads(&d, "etl"),
        2,
        "one reload for a rename save:\n{}",
        d.log()
    );
    // an in-place save reloads once
    std::fs::write(jobs.join("etl.toml"), "command = \"echo v3\"\n").unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(loads(&d, "etl"), 3);
    // a broken save keeps v3 and shows the error with its line
    std::fs::write(
        jobs.join("etl.toml"),
        "command = \"echo v4\"\npriority = 500\n",
    )
    .unwrap();
    let list = wait_dag(&mut c, 5, |d| {
        d.iter().any(|x| x.name == "etl" && x.error.is_some())
    })
    .await;
    let e = list
        .iter()
        .find(|x| x.name == "etl")
        .unwrap()
        .error
        .clone()
        .unwrap();
    assert_eq!(e.line, Some(2));
    assert!(e.message.contains("priority 500"), "{e:?}");
    let status = c.call("status", Value::Null).await.unwrap();
    assert!(
        status["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("priority")
    );
    let id = trigger(&mut c, "etl").await[0];
    wait_state(&mut c, id, "success", 10).await;
    let log = c.call("logs", json!({"run": id})).await.unwrap();
    assert_eq!(log["data"], "v3\n", "the last good version still runs");
    // fixing it takes effect
    std::fs::write(jobs.join("etl.toml"), "command = \"echo v5\"\n").unwrap();
    wait_dag(&mut c, 5, |d| {
        d.iter().any(|x| x.name == "etl" && x.error.is_none())
    })
    .await;
    let id = trigger(&mut c, "etl").await[0];
    wait_state(&mut c, id, "success", 10).await;
    assert_eq!(
        c.call("logs", json!({"run": id})).await.unwrap()["data"],
        "v5\n"
    );

    // deleting cancels queued runs of that DAG only
    std::fs::write(
        jobs.join("gone.toml"),
        "command = \"true\"\npool = \"one\"\n",
    )
    .unwrap();
    std::fs::write(
        jobs.join("stays.toml"),
        "command = \"true\"\npool = \"one\"\n",
    )
    .unwrap();
    wait_dag(&mut c, 5, |d| {
        d.iter().any(|x| x.name == "gone") && d.iter().any(|x| x.name == "stays")
    })
    .await;
    let blocker = submit(&mut c, json!({"command": "sleep 1", "pool": "one"})).await[0];
    wait_state(&mut c, blocker, "running", 5).await;
    let gone = trigger(&mut c, "gone").await[0];
    let stays = trigger(&mut c, "stays").await[0];
    std::fs::remove_file(jobs.join("gone.toml")).unwrap();
    let r = wait_state(&mut c, gone, "cancelled", 5).await;
    assert_eq!(r.reason.as_deref(), Some("definition removed"));
    wait_state(&mut c, stays, "success", 10).await;
    assert!(!dags(&mut c).await.iter().any(|x| x.name == "gone"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_files_at_once_all_load() {
    let d = Daemon::start(&[]);
    let mut c = d.client().await;
    let dir = d.path("jobs.d/bulk");
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..1000 {
        std::fs::write(
            dir.join(format!("job{i:04}.toml")),
            format!("command = \"echo {i}\"\n"),
        )
        .unwrap();
    }
    let list = wait_dag(&mut c, 10, |d| d.len() == 1000).await;
    assert!(list.iter().all(|x| x.error.is_none()));
    assert!(list.iter().any(|x| x.name == "bulk/job0999"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_files_get_errors_and_do_not_disturb_others() {
    let d = Daemon::start(&[("good.toml", "command = \"true\"\n")]);
    let mut c = d.client().await;
    let jobs = d.path("jobs.d");
    std::fs::write(jobs.join("binary.toml"), [0xffu8, 0x00, 0xfe, 0x41]).unwrap();
    std::fs::write(jobs.join("empty.toml"), "").unwrap();
    let huge = std::fs::File::create(jobs.join("huge.toml")).unwrap();
    huge.set_len(50 << 20).unwrap();
    let list = wait_dag(&mut c, 5, |d| {
        d.iter().filter(|x| x.error.is_some()).count() == 3
    })
    .await;
    let err = |n: &str| {
        list.iter()
            .find(|x| x.name == n)
            .unwrap()
            .error
            .clone()
            .unwrap()
            .message
    };
    assert!(err("binary").contains("not UTF-8"));
    assert!(err("empty").contains("empty file"));
    assert!(err("huge").contains("limited to"));
    let id = trigger(&mut c, "good").await[0];
    wait_state(&mut c, id, "success", 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_second_schedule_fires_once_per_second_and_stops_when_paused() {
    let d = Daemon::start(&[(
        "tick.toml",
        "schedule = \"* * * * * *\"\ncommand = \"true\"\noverlap = \"allow\"\n",
    )]);
    let mut c = d.client().await;
    tokio::time::sleep(Duration::from_millis(3300)).await;
    c.call("pause", json!({"dag": "tick"})).await.unwrap();
    let runs: Vec<ax_protocol::api::RunView> = serde_json::from_value(
        c.call("list_runs", json!({"dag": "tick", "limit": 100}))
            .await
            .unwrap(),
    )
    .unwrap();
    assert!(
        (3..=4).contains(&runs.len()),
        "{} runs in 3.3 s",
        runs.len()
    );
    let mut created: Vec<i64> = runs.iter().map(|r| ms(&r.created_at)).collect();
    created.sort();
    for w in created.windows(2) {
        let gap = w[1] - w[0];
        assert!((900..=1100).contains(&gap), "one per second: {created:?}");
    }
    for t in &created {
        assert!(t % 1000 < 100, "fires close to the slot: {created:?}");
    }
    let paused_count = runs.len();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let runs = c
        .call("list_runs", json!({"dag": "tick", "limit": 100}))
        .await
        .unwrap();
    assert_eq!(
        runs.as_array().unwrap().len(),
        paused_count,
        "paused: no new runs"
    );
    let list = dags(&mut c).await;
    assert!(list[0].paused);
    assert_eq!(list[0].next_fire, None);
}

/// (slot key, created_at) of every cron-created DAG run, oldest first.
fn slots_in_db(d: &Daemon) -> Vec<(String, i64)> {
    let db = rusqlite::Connection::open(d.path("state/ax.db")).unwrap();
    let mut stmt = db
        .prepare(
            "SELECT unique_key, created_at FROM dag_runs WHERE unique_key IS NOT NULL ORDER BY id",
        )
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catchup_after_a_stop_and_no_slot_fires_twice() {
    for (policy, all) in [("latest", false), ("all", true)] {
        let job = format!(
            "schedule = \"* * * * * *\"\ncatchup = \"{policy}\"\noverlap = \"allow\"\ncommand = \"true\"\n"
        );
        let mut d = Daemon::start(&[("c.toml", &job)]);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(d.term(), Some(0));
        let before = slots_in_db(&d);
        tokio::time::sleep(Duration::from_millis(2600)).await; // at least two slots pass
        d.spawn();
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(d.client().await);
        d.kill9();
        let after = slots_in_db(&d);
        let mut keys: Vec<&String> = after.iter().map(|(k, _)| k).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(
            keys.len(),
            after.len(),
            "a slot never fires twice: {after:?}"
        );
        // The catch-up is one step at start-up: its DAG runs share one
        // creation instant.
        let first_new = &after[before.len()];
        let batch = after[before.len()..]
            .iter()
            .filter(|(_, t)| *t == first_new.1)
            .count();
        if all {
            assert!(
                batch >= 2,
                "catchup = all runs every missed slot: {after:?}"
            );
        } else {
            assert_eq!(batch, 1, "catchup = latest runs one: {after:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_skip_records_skipped_slots_and_after_chains_run_in_order() {
    let d = Daemon::start(&[
        (
            "slow.toml",
            "schedule = \"* * * * * *\"\ncommand = \"sleep 2.5\"\noverlap = \"skip\"\n",
        ),
        ("first.toml", "command = \"sleep 0.2\"\n"),
        ("second.toml", "after = [\"first\"]\ncommand = \"true\"\n"),
    ]);
    let mut c = d.client().await;
    let first = trigger(&mut c, "first").await[0];
    tokio::time::sleep(Duration::from_millis(3200)).await;
    c.call("pause", json!({"dag": "slow"})).await.unwrap();
    let events: Vec<ax_protocol::api::EventView> = serde_json::from_value(
        c.call("events", json!({"after": 0, "limit": 10000}))
            .await
            .unwrap(),
    )
    .unwrap();
    let skipped = events
        .iter()
        .filter(|e| e.reason.contains("skipped") && e.reason.contains("overlap = skip"))
        .count();
    assert!(skipped >= 1, "skipped slots are recorded as events");
    let f = wait_state(&mut c, first, "success", 10).await;
    let seconds: Vec<ax_protocol::api::RunView> =
        serde_json::from_value(c.call("list_runs", json!({"dag": "second"})).await.unwrap())
            .unwrap();
    assert_eq!(seconds.len(), 1, "after-trigger fired once");
    let s = wait_state(&mut c, seconds[0].id, "success", 10).await;
    assert!(
        ms(&s.created_at) >= ms(&f.finished_at),
        "second runs after first"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_survives_a_restart_and_holds_queued_runs() {
    let mut d = Daemon::start(&[("held.toml", "command = \"true\"\n")]);
    let mut c = d.client().await;
    c.call("pause", json!({"dag": "held"})).await.unwrap();
    let id = trigger(&mut c, "held").await[0];
    assert_eq!(get_run(&mut c, id).await.why.as_deref(), Some("DAG paused"));
    drop(c);
    assert_eq!(d.term(), Some(0));
    d.spawn();
    let mut c = d.client().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = get_run(&mut c, id).await;
    assert_eq!(
        r.state.as_str(),
        "ready",
        "still held after the restart: {r:?}"
    );
    assert_eq!(r.why.as_deref(), Some("DAG paused"));
    assert!(dags(&mut c).await[0].paused);
    c.call("resume", json!({"dag": "held"})).await.unwrap();
    wait_state(&mut c, id, "success", 10).await;
}

/// Jobs-folder chaos: random atomic and in-place saves, torn writes,
/// deletes, renames and symlink swaps; after the debounce, the loaded DAGs
/// must equal a fresh parse of the folder, every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn folder_chaos_converges_to_a_fresh_parse() {
    use ax_shared::jobfile::{ValidateOptions, load_file};
    let d = Daemon::start(&[]);
    let mut c = d.client().await;
    let dir = d.path("jobs.d");
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let valid = |k: u64| {
        format!(
            "[[job]]\nid = \"a{k}\"\ncommand = \"true\"\n[[job]]\nid = \"b\"\ncommand = \"true\"\ndeps = [\"a{k}\"]\n"
        )
    };
    let names = ["one", "two", "three", "sub/four", "sub/five"];
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    let opts = ValidateOptions {
        pools: Some(vec!["default".into(), "one".into(), "two".into()]),
    };
    // Sizes: AX_CHAOS_TRIALS × AX_CHAOS_OPS (RELIABILITY.md has the long run).
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let (trials, ops) = (env("AX_CHAOS_TRIALS", 8), env("AX_CHAOS_OPS", 40));
    let mut unintended = 0;
    let mut total_ops = 0;
    for trial in 0..trials {
        let log_before = d.log().len();
        // Names whose file went away at some point in this trial (removal
        // may then be right); any other removal is an unintended unschedule.
        let mut may_vanish = std::collections::HashSet::new();
        for _ in 0..ops {
            total_ops += 1;
            let name = names[rnd(names.len() as u64) as usize];
            let path = dir.join(format!("{name}.toml"));
            let op = rnd(7);
            if matches!(op, 3..=5) {
                may_vanish.insert(name);
            }
            match op {
                0 => {
                    // atomic save: temp file + rename
                    let tmp = dir.join(format!(".{}.tmp", name.replace('/', "_")));
                    std::fs::write(&tmp, valid(rnd(1000))).unwrap();
                    std::fs::rename(&tmp, &path).unwrap();
                }
                1 => std::fs::write(&path, valid(rnd(1000))).unwrap(),
                2 => {
                    // torn write, completed later in the burst (or not)
                    let text = valid(rnd(1000));
                    std::fs::write(&path, &text[..text.len() / 2]).unwrap();
                    if rnd(2) == 0 {
                        std::fs::write(&path, text).unwrap();
                    }
                }
                3 => {
                    let _ = std::fs::remove_file(&path);
                }
                4 => {
                    let other =
                        dir.join(format!("{}.toml", names[rnd(names.len() as u64) as usize]));
                    if path.exists() && other != path {
                        let _ = std::fs::rename(&path, &other);
                    }
                }
                5 => {
                    // symlink swap to a file outside the folder
                    let target = d.path(&format!("target-{}.toml", rnd(3)));
                    std::fs::write(&target, valid(rnd(1000))).unwrap();
                    let _ = std::fs::remove_file(&path);
                    std::os::unix::fs::symlink(&target, &path).unwrap();
                }
                _ => std::fs::write(
                    &path,
                    "[[job]]\nid = \"broken\"\npriority = 500\ncommand = \"x\"\n",
                )
                .unwrap(),
            }
        }
        // debounce + 1 s
        tokio::time::sleep(Duration::from_millis(1300)).await;
        let loaded = dags(&mut c).await;
        let log = d.log();
        for line in log[log_before..].lines() {
            if line.contains("DAG removed")
                && let Some(name) = names.iter().find(|n| {
                    line.contains(&format!("dag={n} ")) || line.ends_with(&format!("dag={n}"))
                })
                && !may_vanish.contains(name)
            {
                eprintln!("trial {trial}: unintended unschedule: {line}");
                unintended += 1;
            }
        }
        for name in names {
            let path = dir.join(format!("{name}.toml"));
            let got = loaded.iter().find(|v| v.name == name);
            if std::fs::symlink_metadata(&path).is_err() {
                assert!(
                    got.is_none(),
                    "trial {trial}: {name} was deleted but is loaded"
                );
                continue;
            }
            let got =
                got.unwrap_or_else(|| panic!("trial {trial}: {name} exists but is not loaded"));
            match load_file(&path, Some(&dir), &opts) {
                Ok(fresh) => {
                    let ids: Vec<String> = fresh.spec.jobs.iter().map(|j| j.id.clone()).collect();
                    assert_eq!(
                        got.jobs, ids,
                        "trial {trial}: {name} differs from a fresh parse"
                    );
                    assert!(
                        got.error.is_none(),
                        "trial {trial}: {name}: {:?}",
                        got.error
                    );
                }
                Err(_) => assert!(
                    got.error.is_some(),
                    "trial {trial}: {name} is broken but shows no error"
                ),
            }
        }
    }
    eprintln!(
        "folder chaos: {trials} trials, {total_ops} operations; every trial converged to a fresh parse; unintended unschedules: {unintended}"
    );
    assert_eq!(unintended, 0, "DAGs unscheduled whose file never went away");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_good_version_survives_a_restart_with_a_broken_file() {
    let mut d = Daemon::start(&[("etl.toml", "command = \"echo good\"\n")]);
    let mut c = d.client().await;
    wait_dag(&mut c, 5, |d| d.iter().any(|x| x.name == "etl")).await;
    drop(c);
    assert_eq!(d.term(), Some(0));
    std::fs::write(
        d.path("jobs.d/etl.toml"),
        "command = \"echo bad\"\npriority = 0\n",
    )
    .unwrap();
    d.spawn();
    let mut c = d.client().await;
    let list = dags(&mut c).await;
    let etl = list
        .iter()
        .find(|x| x.name == "etl")
        .expect("still defined");
    assert!(
        etl.error.as_ref().is_some_and(|e| e.line == Some(2)),
        "{etl:?}"
    );
    let id = trigger(&mut c, "etl").await[0];
    wait_state(&mut c, id, "success", 10).await;
    assert_eq!(
        c.call("logs", json!({"run": id})).await.unwrap()["data"],
        "good\n",
        "runs the last good version"
    );
}

/// A burst far past the kernel's inotify queue (shrunk to 16 events for
/// the daemon's watch, needs root): the overflow is reported, the folder is
/// rescanned, and every DAG of the burst is loaded, none lost or unscheduled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inotify_queue_overflow_forces_a_rescan_that_loads_everything() {
    const KNOB: &str = "/proc/sys/fs/inotify/max_queued_events";
    let Ok(saved) = std::fs::read_to_string(KNOB) else {
        eprintln!("skipped: no {KNOB}");
        return;
    };
    let mut d = Daemon::prepare(BASE_CONFIG, &[("keep.toml", "command = \"true\"\n")]);
    let alone = STARTS.write().unwrap_or_else(PoisonError::into_inner);
    if std::fs::write(KNOB, "16").is_err() {
        eprintln!("skipped: cannot shrink {KNOB} (needs root)");
        return;
    }
    // The limit is taken when the watch is created: restore it at once.
    // The harness's own start: `Daemon::spawn` would wait for `alone`.
    let started = ax_testkit::Daemon::spawn(&mut d);
    std::fs::write(KNOB, saved.trim()).unwrap();
    drop(alone);
    started.unwrap_or_else(|e| panic!("{e}"));
    let mut c = d.client().await;
    wait_dag(&mut c, 5, |l| l.iter().any(|x| x.name == "keep")).await;
    let n = 300;
    // Stopped, axd cannot drain the queue: the burst overflows it for sure.
    let pid = nix::unistd::Pid::from_raw(d.pid() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    for i in 0..n {
        std::fs::write(
            d.path(&format!("jobs.d/burst{i}.toml")),
            format!("command = \"echo {i}\"\n"),
        )
        .unwrap();
    }
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    let list = wait_dag(&mut c, 10, |l| l.len() == n + 1).await;
    assert!(list.iter().any(|x| x.name == "keep"));
    assert!(list.iter().all(|x| x.error.is_none()));
    let deadline = Instant::now() + Duration::from_secs(5);
    while !d.log().contains("overflow") && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let log = d.log();
    assert!(
        log.contains("overflow"),
        "the overflow is reported: {}",
        &log[log.len().saturating_sub(2000)..]
    );
    assert!(!log.contains("DAG removed"), "nothing was unscheduled");
}
