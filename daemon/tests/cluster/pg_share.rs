//! Work sharing between real axd nodes on one PostgreSQL database
//! (docs/operations.md, "Cluster"): submitted DAG runs are offered and
//! claimed so that every run runs exactly once and every node takes part; a
//! node killed with SIGKILL is declared dead and its runs finish elsewhere,
//! as `interrupted` attempts; cron fires each slot once, also across a
//! leader's death. Without a server each test says `skipped: …` and passes,
//! unless `AX_REQUIRE_PG=1`.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use crate::support::*;
use crate::{cluster_config, node_id, wait_count};
use ax_shared::RunState;
use ax_testkit::pg::TestDb;
use serde_json::json;

/// One test's cluster at a time: three axd with sub-second heartbeats
/// each, several tests at once on two cores, stall long enough for nodes
/// to be declared dead that are merely starved.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Three nodes on `db`, beating every `beat`, with `jobs` in each one's
/// jobs folder.
fn cluster(db: &TestDb, beat: &str, jobs: &[(&str, &str)]) -> Vec<Daemon> {
    // A pool's slots are the cluster's: room for every node in `default`.
    let base = BASE_CONFIG.replace("[pools.default]\nslots = 8", "[pools.default]\nslots = 24");
    assert_ne!(base, BASE_CONFIG);
    let config = format!(
        "store = \"{}\"\n{base}\n[cluster]\nheartbeat = \"{beat}\"\n",
        db.url
    );
    (0..3).map(|_| Daemon::start_with(&config, jobs)).collect()
}

/// Runs per node that ran an attempt.
fn attempts_by_node(db: &TestDb) -> BTreeMap<String, u64> {
    db.query("SELECT node, count(*) FROM attempts GROUP BY node")
        .unwrap()
        .into_iter()
        .map(|r| (r[0].clone(), r[1].parse().unwrap()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_run_every_submitted_run_exactly_once() {
    let _turn = crate::module_turn(module_path!()).await;
    let _one_cluster_at_a_time = SERIAL.lock().await;
    let Some(db) = TestDb::create("pg_share_once") else {
        return;
    };
    let nodes = cluster(&db, "1s", &[]);
    let ledger = nodes[0].path("ledger");
    let command = format!("echo $AX_RUN_ID >> {}", ledger.display());
    const TOTAL: usize = 5000;
    const CLIENTS_PER_NODE: usize = 4;
    let per_client = TOTAL / (3 * CLIENTS_PER_NODE) + 1;
    let mut tasks = Vec::new();
    let mut left = TOTAL;
    for d in &nodes {
        for _ in 0..CLIENTS_PER_NODE {
            let n = per_client.min(left);
            left -= n;
            let mut c = d.client().await;
            let command = command.clone();
            tasks.push(tokio::spawn(async move {
                let mut ids = Vec::with_capacity(n);
                for _ in 0..n {
                    ids.extend(submit(&mut c, json!({"command": command, "name": "led"})).await);
                }
                ids
            }));
        }
    }
    let mut submitted = Vec::new();
    for t in tasks {
        submitted.extend(t.await.unwrap());
    }
    assert_eq!(submitted.len(), TOTAL);
    let unique: HashSet<u64> = submitted.iter().copied().collect();
    assert_eq!(unique.len(), TOTAL, "ids are unique across nodes");

    wait_count(
        &db,
        "SELECT count(*) FROM runs WHERE state = 'success'",
        120,
        |n| n == TOTAL as u64,
    );
    let text = std::fs::read_to_string(&ledger).unwrap();
    let mut ran: Vec<u64> = text.lines().map(|l| l.trim().parse().unwrap()).collect();
    ran.sort_unstable();
    let mut expected = submitted.clone();
    expected.sort_unstable();
    assert_eq!(ran, expected, "every id ran exactly once");
    let by_node = attempts_by_node(&db);
    assert_eq!(by_node.values().sum::<u64>(), TOTAL as u64, "{by_node:?}");
    for d in &nodes {
        let id = node_id(d);
        assert!(
            by_node.get(&id).is_some_and(|n| *n > 0),
            "node {id} ran nothing: {by_node:?}"
        );
    }
    assert_eq!(
        db.query("SELECT count(*) FROM dag_runs WHERE owner IS NULL")
            .unwrap()[0][0],
        "0",
        "every DAG run was claimed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_s_runs_finish_elsewhere_and_it_rejoins() {
    let _turn = crate::module_turn(module_path!()).await;
    let _one_cluster_at_a_time = SERIAL.lock().await;
    let Some(db) = TestDb::create("pg_share_dead") else {
        return;
    };
    let mut nodes = cluster(&db, "500ms", &[]);
    let victim = node_id(&nodes[1]);
    let mut c = nodes[0].client().await;
    const RUNS: usize = 30;
    let mut ids = Vec::new();
    for _ in 0..RUNS {
        ids.extend(submit(&mut c, json!({"command": "sleep 2", "name": "slow"})).await);
    }
    let running_on_victim = format!(
        "SELECT count(*) FROM attempts WHERE node = '{victim}' AND outcome IS NULL AND pid IS NOT NULL"
    );
    wait_count(&db, &running_on_victim, 30, |n| n > 0);
    nodes[1].kill9();

    wait_count(
        &db,
        "SELECT count(*) FROM runs WHERE state = 'success'",
        60,
        |n| n == RUNS as u64,
    );
    // The victim's attempts ended `interrupted`, its runs retried elsewhere
    // without using a retry (they have none).
    let interrupted = db
        .query("SELECT node, count(*) FROM attempts WHERE outcome = 'interrupted' GROUP BY node")
        .unwrap();
    assert_eq!(interrupted.len(), 1, "{interrupted:?}");
    assert_eq!(interrupted[0][0], victim, "{interrupted:?}");
    let again = db
        .query(&format!(
            "SELECT count(*) FROM attempts a JOIN attempts b ON b.run = a.run AND b.n = a.n + 1
             WHERE a.outcome = 'interrupted' AND b.outcome = 'success' AND b.node <> '{victim}'"
        ))
        .unwrap();
    assert_eq!(
        again[0][0], interrupted[0][1],
        "each finished on a survivor"
    );
    assert!(nodes[0].log().contains(&victim) || nodes[2].log().contains(&victim));

    // Restarted, the node registers with a new epoch and takes work again.
    nodes[1].spawn();
    let mut more = Vec::new();
    for _ in 0..40 {
        more.extend(submit(&mut c, json!({"command": "sleep 0.3", "name": "more"})).await);
    }
    wait_count(
        &db,
        "SELECT count(*) FROM runs WHERE state = 'success'",
        60,
        |n| n == (RUNS + 40) as u64,
    );
    let rejoined = db
        .query(&format!(
            "SELECT count(*) FROM attempts a JOIN runs r ON r.id = a.run
             WHERE a.node = '{victim}' AND a.outcome = 'success' AND r.job = 'more'"
        ))
        .unwrap();
    assert_ne!(rejoined[0][0], "0", "the restarted node ran none");
}

/// The jobs of a node killed with SIGKILL outlive it (their keeper holds
/// them), but not its lease: the keeper kills them before the lease could
/// end, so by the time another node takes the run over, nothing of the
/// first attempt runs (never two copies). The node restarted on that
/// machine finds nothing left to take over or kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_down_past_its_lease_has_its_jobs_killed_before_others_take_them() {
    let _turn = crate::module_turn(module_path!()).await;
    let _one_cluster_at_a_time = SERIAL.lock().await;
    let Some(db) = TestDb::create("pg_share_orphans") else {
        return;
    };
    let config = cluster_config(&db, "500ms");
    // Alone, the victim claims the run; the shell waits on its child.
    let mut victim = Daemon::start_with(&config, &[]);
    let mut c = victim.client().await;
    let run = submit(
        &mut c,
        json!({"command": "sleep 120; true", "name": "stuck"}),
    )
    .await[0];
    let with_pid = format!("SELECT count(*) FROM attempts WHERE run = {run} AND pid IS NOT NULL");
    wait_count(&db, &with_pid, 20, |n| n == 1);
    let pgid: i32 = db
        .query(&format!("SELECT pid FROM attempts WHERE run = {run}"))
        .unwrap()[0][0]
        .parse()
        .unwrap();
    // SAFETY: kill with signal 0 sends nothing; it only checks that the
    // group exists, and takes integers only.
    let group_alive = || unsafe { libc::kill(-pgid, 0) } == 0;
    assert!(group_alive());
    let survivor = Daemon::start_with(&config, &[]);
    victim.kill9();
    // Just after the kill the job still runs: a node back within its
    // lease would take it over.
    assert!(group_alive(), "the job outlived its axd");
    wait_count(
        &db,
        &format!("SELECT count(*) FROM attempts WHERE run = {run} AND outcome = 'interrupted'"),
        30,
        |n| n == 1,
    );
    assert!(
        !group_alive(),
        "the run was taken over while its first attempt still ran"
    );
    victim.spawn();
    assert!(
        victim.log().contains("0 still running (reattached)"),
        "{}",
        victim.log()
    );
    drop(survivor);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_fires_each_slot_once_across_a_leader_s_death() {
    let _turn = crate::module_turn(module_path!()).await;
    let _one_cluster_at_a_time = SERIAL.lock().await;
    let Some(db) = TestDb::create("pg_share_cron") else {
        return;
    };
    let tick = "schedule = \"* * * * * *\"\ncatchup = \"all\"\noverlap = \"allow\"\n\n[[job]]\nid = \"t\"\ncommand = \"true\"\n";
    let mut nodes = cluster(&db, "500ms", &[("tick.toml", tick)]);
    let fired = "SELECT count(*) FROM dag_runs WHERE dag = 'tick'";
    wait_count(&db, fired, 30, |n| n >= 4);
    let leader = nodes
        .iter()
        .position(|d| d.log().contains("cron leader"))
        .expect("a leader");
    assert_eq!(
        nodes
            .iter()
            .filter(|d| d.log().contains("now the cluster's cron leader"))
            .count(),
        1,
        "one leader"
    );
    let before: u64 = db.query(fired).unwrap()[0][0].parse().unwrap();
    nodes[leader].kill9();
    wait_count(&db, fired, 30, |n| n >= before + 4);
    // Every slot from the first to the last fired exactly once, the ones
    // due while no node led included (catchup = "all").
    let keys: Vec<String> = db
        .query("SELECT unique_key FROM dag_runs WHERE dag = 'tick' ORDER BY unique_key")
        .unwrap()
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    let slots: Vec<i64> = keys
        .iter()
        .map(|k| {
            let t = k.strip_prefix("tick@").unwrap();
            chrono::DateTime::parse_from_rfc3339(t).unwrap().timestamp()
        })
        .collect();
    for w in slots.windows(2) {
        assert_eq!(w[1] - w[0], 1, "slots fired twice or missed: {keys:?}");
    }
}

/// A cron DAG is offered like a submission, and its `overlap = "skip"`
/// still holds: the leader, busy, fires the slots; another node runs them;
/// a slot while one runs elsewhere is skipped, and the next one after its
/// end fires.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cron_dag_s_runs_go_to_any_node_and_skip_holds_across_nodes() {
    let _turn = crate::module_turn(module_path!()).await;
    let _one_cluster_at_a_time = SERIAL.lock().await;
    let Some(db) = TestDb::create("pg_share_cron_offer") else {
        return;
    };
    let tick = "schedule = \"* * * * * *\"\ncatchup = \"none\"\n\n[[job]]\nid = \"t\"\ncommand = \"sleep 1.5\"\n";
    // `replace` keeps its DAG runs on the node that triggers them.
    let hog = "overlap = \"replace\"\n\n[[job]]\nid = \"h\"\ncommand = \"sleep 60\"\n";
    let jobs = [("tick.toml", tick), ("hog.toml", hog)];
    let config = |concurrency: &str| {
        let base = BASE_CONFIG.replace("max_concurrency = 8", concurrency);
        assert!(base.contains(concurrency));
        format!(
            "store = \"{}\"\n{base}\n[cluster]\nheartbeat = \"1s\"\n",
            db.url
        )
    };
    // Alone, the first node takes the cron lock; its one slot is taken by
    // `hog` before the second node starts.
    let leader = Daemon::start_with(&config("max_concurrency = 1"), &jobs);
    let mut c = leader.client().await;
    let hog_run = trigger(&mut c, "hog").await[0];
    wait_run(&mut c, hog_run, 20, |r| r.state == RunState::Running).await;
    let other = Daemon::start_with(&config("max_concurrency = 8"), &jobs);
    let tick_attempts = |node: &Daemon| {
        format!(
            "SELECT count(*) FROM attempts a JOIN runs r ON r.id = a.run \
             WHERE r.dag = 'tick' AND a.node = '{}'",
            node_id(node)
        )
    };
    wait_count(&db, &tick_attempts(&other), 40, |n| n >= 3);
    assert!(leader.log().contains("now the cluster's cron leader"));
    assert!(!other.log().contains("now the cluster's cron leader"));
    assert_eq!(db.query(&tick_attempts(&leader)).unwrap()[0][0], "0");
    // Never two at once, and slots were skipped meanwhile.
    let spans: Vec<(i64, Option<i64>)> = db
        .query(
            "SELECT created_at, finished_at FROM dag_runs WHERE dag = 'tick' ORDER BY created_at",
        )
        .unwrap()
        .into_iter()
        .map(|r| (r[0].parse().unwrap(), r[1].parse().ok()))
        .collect();
    for w in spans.windows(2) {
        let ended = w[0].1.expect("an earlier DAG run ended before the next");
        assert!(w[1].0 >= ended, "overlapping DAG runs: {spans:?}");
    }
    let skipped = db
        .query("SELECT count(*) FROM events WHERE reason LIKE '%skipped: DAG run%overlap = skip%'")
        .unwrap();
    assert_ne!(
        skipped[0][0], "0",
        "slots skipped while a run was active elsewhere"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_cancelled_by_its_node_and_retried_by_any() {
    let _turn = crate::module_turn(module_path!()).await;
    let _one_cluster_at_a_time = SERIAL.lock().await;
    let Some(db) = TestDb::create("pg_share_cancel") else {
        return;
    };
    let nodes = cluster(&db, "1s", &[]);
    let mut c0 = nodes[0].client().await;
    let long = json!({"command": "sleep 30", "name": "long", "unique": "once"});
    let id = submit(&mut c0, long.clone()).await[0];
    let owner_sql = format!("SELECT count(*) FROM attempts WHERE run = {id} AND pid IS NOT NULL");
    wait_count(&db, &owner_sql, 30, |n| n == 1);
    let owner = db
        .query(&format!("SELECT node FROM attempts WHERE run = {id}"))
        .unwrap()[0][0]
        .clone();
    let at = nodes.iter().position(|d| node_id(d) == owner).unwrap();
    let other = (at + 1) % 3;
    let mut elsewhere = nodes[other].client().await;
    // A unique key held by another node's DAG run deduplicates here too.
    let again = elsewhere.call("submit", long).await.unwrap();
    assert_eq!(again["deduplicated"], true, "{again}");
    assert_eq!(run_ids(&again), vec![id]);
    // `--after` a run another node is running is refused here, not left
    // waiting for an end this node would never see.
    let err = elsewhere
        .call("submit", json!({"command": "true", "after": [id]}))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("submit through the node that runs it"),
        "{err}"
    );
    let err = elsewhere
        .call("cancel", json!({"id": id}))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(&format!("node {owner} is running")), "{err}");
    let mut home = nodes[at].client().await;
    home.call("cancel", json!({"id": id})).await.unwrap();
    wait_state(&mut home, id, "cancelled", 20).await;
    // `home` answers from its memory; the other node judges by the store,
    // so the end must be committed before it is asked.
    let ended_sql = format!(
        "SELECT count(*) FROM dag_runs WHERE id = (SELECT dag_run FROM runs WHERE id = {id}) AND state <> 'active'"
    );
    wait_count(&db, &ended_sql, 20, |n| n == 1);
    // Finished, it may be retried through any node, which then runs it.
    elsewhere.call("retry", json!({"id": id})).await.unwrap();
    wait_state(&mut elsewhere, id, "running", 20).await;
    wait_count(&db, &owner_sql, 20, |n| n == 2);
    let nodes_of = db
        .query(&format!(
            "SELECT node FROM attempts WHERE run = {id} ORDER BY n"
        ))
        .unwrap();
    assert_eq!(nodes_of.len(), 2, "{nodes_of:?}");
    assert_eq!(nodes_of[1][0], node_id(&nodes[other]));
    // `ax show` says where each attempt ran.
    let view = get_run(&mut elsewhere, id).await;
    let shown: Vec<Option<String>> = view.attempts.iter().map(|a| a.node.clone()).collect();
    assert_eq!(
        shown,
        vec![Some(owner.clone()), Some(node_id(&nodes[other]))]
    );
    // The first node still remembers the run as it cancelled it: a retry
    // there now is refused, the run being another node's again.
    let err = home
        .call("retry", json!({"id": id}))
        .await
        .unwrap_err()
        .to_string();
    let runner = format!("node {} is running", node_id(&nodes[other]));
    assert!(err.contains(&runner), "{err}");
    let err = home
        .call("cancel_dag_run", json!({"id": view.dag_run}))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains(&runner), "{err}");
    // Through its node, the whole DAG run is cancelled.
    elsewhere
        .call("cancel_dag_run", json!({"id": view.dag_run}))
        .await
        .unwrap();
    wait_state(&mut elsewhere, id, "cancelled", 20).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_through_one_node_holds_on_every_node() {
    let _turn = crate::module_turn(module_path!()).await;
    let _one_cluster_at_a_time = SERIAL.lock().await;
    let Some(db) = TestDb::create("pg_share_pause") else {
        return;
    };
    let job = "[[job]]\nid = \"j\"\ncommand = \"true\"\n";
    let nodes = cluster(&db, "300ms", &[("held.toml", job)]);
    let mut c0 = nodes[0].client().await;
    c0.call("pause", json!({"dag": "held"})).await.unwrap();
    let paused_on = |v: serde_json::Value| v["paused"].as_bool().unwrap();
    for (want, method) in [(true, "pause"), (false, "resume")] {
        if !want {
            c0.call(method, json!({"dag": "held"})).await.unwrap();
        }
        for d in &nodes[1..] {
            let mut c = d.client().await;
            // Beats every 300 ms; the bound is for a loaded CI machine.
            let deadline = Instant::now() + Duration::from_secs(30);
            while paused_on(c.call("get_dag", json!({"name": "held"})).await.unwrap()) != want {
                assert!(Instant::now() < deadline, "{method} never reached a node");
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_s_slots_hold_across_the_cluster() {
    let _turn = crate::module_turn(module_path!()).await;
    let _one_cluster_at_a_time = SERIAL.lock().await;
    let Some(db) = TestDb::create("pg_share_pool") else {
        return;
    };
    let nodes = cluster(&db, "300ms", &[]);
    // Each job counts the pool's jobs running at once, on any node, by
    // the files present in a shared folder while it runs.
    let dir = nodes[0].path("two");
    std::fs::create_dir_all(&dir).unwrap();
    let log = nodes[0].path("two.log");
    let command = format!(
        "touch {d}/$AX_RUN_ID; echo $(ls {d} | wc -l) $AX_SLOT >> {l}; sleep 0.2; rm {d}/$AX_RUN_ID",
        d = dir.display(),
        l = log.display()
    );
    const RUNS: usize = 24;
    for i in 0..RUNS {
        let mut c = nodes[i % 3].client().await;
        submit(
            &mut c,
            json!({"command": command, "name": "two", "pool": "two"}),
        )
        .await;
    }
    wait_count(
        &db,
        "SELECT count(*) FROM runs WHERE state = 'success'",
        60,
        |n| n == RUNS as u64,
    );
    let text = std::fs::read_to_string(&log).unwrap();
    let samples: Vec<(u32, u32)> = text
        .lines()
        .map(|l| {
            let (n, slot) = l.trim().split_once(' ').unwrap();
            (n.parse().unwrap(), slot.parse().unwrap())
        })
        .collect();
    assert_eq!(samples.len(), RUNS);
    assert!(
        samples.iter().all(|(n, _)| *n <= 2),
        "over 2 at once: {samples:?}"
    );
    assert!(
        samples.iter().all(|(_, s)| *s < 2),
        "AX_SLOT beyond the pool: {samples:?}"
    );
    let ran_on = db
        .query("SELECT count(DISTINCT node) FROM attempts")
        .unwrap();
    assert_ne!(ran_on[0][0], "1", "the slots moved between nodes");
    // `status` counts the pool over the cluster as of the last beat.
    let mut c = nodes[1].client().await;
    let status: ax_protocol::api::StatusView =
        serde_json::from_value(c.call("status", json!({})).await.unwrap()).unwrap();
    let two = status.pools.iter().find(|p| p.name == "two").unwrap();
    assert_eq!(two.slots, 2);
    assert!(two.cluster_running.is_some_and(|n| n <= 2), "{two:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_frozen_past_its_grace_is_fenced_and_kills_its_jobs() {
    let _turn = crate::module_turn(module_path!()).await;
    let _one_cluster_at_a_time = SERIAL.lock().await;
    let Some(db) = TestDb::create("pg_share_fence") else {
        return;
    };
    let mut nodes = cluster(&db, "300ms", &[]);
    let frozen = node_id(&nodes[1]);
    let mut c = nodes[0].client().await;
    for _ in 0..30 {
        submit(&mut c, json!({"command": "sleep 60", "name": "held"})).await;
    }
    let on_frozen = format!(
        "SELECT count(*) FROM attempts WHERE node = '{frozen}' AND outcome IS NULL AND pid IS NOT NULL"
    );
    wait_count(&db, &on_frozen, 30, |n| n > 0);
    let job: i32 = db
        .query(&format!(
            "SELECT pid FROM attempts WHERE node = '{frozen}' AND outcome IS NULL AND pid IS NOT NULL LIMIT 1"
        ))
        .unwrap()[0][0]
        .parse()
        .unwrap();
    assert!(pid_alive(job));
    let axd = nix::unistd::Pid::from_raw(nodes[1].pid() as i32);
    nix::sys::signal::kill(axd, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let released = format!("SELECT count(*) FROM nodes WHERE id = '{frozen}' AND released");
    wait_count(&db, &released, 30, |n| n == 1);
    nix::sys::signal::kill(axd, nix::sys::signal::Signal::SIGCONT).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    // Woken past its lease, the node fences itself (its guard) or learns
    // from its next write that it was declared dead, whichever comes first.
    let fenced = |log: &str| {
        log.contains("was declared dead by another node") || log.contains("fences itself")
    };
    while !fenced(&nodes[1].log()) {
        assert!(
            Instant::now() < deadline,
            "never fenced:\n{}",
            nodes[1].log()
        );
        std::thread::sleep(Duration::from_millis(25));
    }
    assert_eq!(nodes[1].term(), Some(1), "a fenced node exits non-zero");
    let deadline = Instant::now() + Duration::from_secs(5);
    while pid_alive(job) {
        assert!(
            Instant::now() < deadline,
            "job {job} outlived its fenced node"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}
