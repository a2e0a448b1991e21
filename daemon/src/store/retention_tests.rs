//! Retention against a real SQLite store holding a known set of DAG runs:
//! old, beyond `keep_runs`, recent (held by the engine), active, pinned.

use super::*;
use crate::store::sqlite::SqliteStore;
use rusqlite::{Connection, params};

const HOUR: Millis = 3_600_000;
const DAY: Millis = 24 * HOUR;
const NOW: Millis = 1_000 * DAY;
/// The engine holds finished DAG runs for ten minutes.
const HELD_BEFORE: Millis = NOW - 10 * 60_000;

struct Fixture {
    _dir: tempfile::TempDir,
    db: PathBuf,
    log_dir: PathBuf,
    conn: Connection,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ax.db");
        let log_dir = dir.path().join("logs");
        std::fs::create_dir_all(&log_dir).unwrap();
        // Creates and migrates the schema.
        SqliteStore::open(&db, false).unwrap();
        let conn = Connection::open(&db).unwrap();
        conn.execute("INSERT INTO specs (hash, spec) VALUES ('h', '{}')", [])
            .unwrap();
        Fixture {
            _dir: dir,
            db,
            log_dir,
            conn,
        }
    }

    /// A DAG run with two runs (`states`), two attempts each, an event per
    /// run and a log file per attempt. `finished` is `None` for an active
    /// DAG run.
    fn dag_run(&self, id: u64, dag: &str, finished: Option<Millis>, states: [&str; 2]) {
        let state = match finished {
            None => "active",
            Some(_) if states.contains(&"failed") => "failed",
            Some(_) => "success",
        };
        self.conn
            .execute(
                "INSERT INTO dag_runs (id, dag, spec_hash, state, trigger, created_at, finished_at)
                 VALUES (?1, ?2, 'h', ?3, 'manual', 0, ?4)",
                params![id as i64, dag, state, finished],
            )
            .unwrap();
        for (i, run_state) in states.iter().enumerate() {
            let run = id * 10 + i as u64;
            self.conn
                .execute(
                    "INSERT INTO runs (id, dag_run, dag, job, job_index, state, priority, pool, retries,
                       upstream, counted_failures, created_at, finished_at, reason)
                     VALUES (?1, ?2, ?3, 'j', ?4, ?5, 0, 'default', 0, '[]', 0, 0, ?6, '')",
                    params![run as i64, id as i64, dag, i as i64, run_state, finished],
                )
                .unwrap();
            for n in 1..=2u32 {
                self.conn
                    .execute(
                        "INSERT INTO attempts (run, n, started_at, slot) VALUES (?1, ?2, 0, 0)",
                        params![run as i64, n],
                    )
                    .unwrap();
                std::fs::write(self.log(run, n), b"output\n").unwrap();
            }
            self.conn
                .execute(
                    "INSERT INTO events (at, run, dag_run, reason, actor) VALUES (0, ?1, ?2, 'x', 'test')",
                    params![run as i64, id as i64],
                )
                .unwrap();
        }
    }

    fn log(&self, run: u64, attempt: u32) -> PathBuf {
        crate::logs::paths::log_path(&self.log_dir, RunId(run), attempt)
    }

    fn pruner(&self, shutdown: Shutdown) -> (Pruner, Link) {
        let store = SqliteStore::open(&self.db, false).unwrap();
        let (pruner, link, _orders) = Pruner::new(Box::new(store), &self.log_dir, shutdown);
        (pruner, link)
    }

    fn ids(&self, sql: &str) -> Vec<u64> {
        let mut stmt = self.conn.prepare(sql).unwrap();
        stmt.query_map([], |r| r.get::<_, i64>(0))
            .unwrap()
            .map(|r| r.unwrap() as u64)
            .collect()
    }
}

fn serving() -> Shutdown {
    Shutdown::new(|| {})
}

fn order(retain: Millis, keep_runs: &[(&str, u32)]) -> Order {
    Order {
        age_before: NOW - retain,
        held_before: HELD_BEFORE,
        keep_runs: keep_runs.iter().map(|(d, n)| (d.to_string(), *n)).collect(),
    }
}

#[test]
fn retention_removes_exactly_what_is_past_its_rule() {
    let f = Fixture::new();
    // etl keeps its newest 2 DAG runs (5 and 6).
    f.dag_run(1, "etl", Some(NOW - 30 * DAY), ["success", "success"]); // past retain
    f.dag_run(2, "etl", Some(NOW - 2 * HOUR), ["success", "failed"]); // beyond keep_runs
    f.dag_run(3, "etl", Some(NOW - 2 * HOUR), ["success", "success"]); // beyond keep_runs
    f.dag_run(4, "etl", Some(NOW - 5 * 60_000), ["success", "success"]); // beyond, but held
    f.dag_run(5, "etl", None, ["success", "running"]); // active
    f.dag_run(6, "etl", Some(NOW - 2 * HOUR), ["success", "success"]); // newest
    // adhoc has no keep_runs: only retain applies.
    f.dag_run(7, "adhoc", Some(NOW - 30 * DAY), ["cancelled", "success"]); // past retain
    f.dag_run(8, "adhoc", Some(NOW - 2 * HOUR), ["success", "success"]); // recent
    f.dag_run(9, "adhoc", None, ["queued", "waiting"]); // active for a month
    f.dag_run(10, "adhoc", Some(NOW - 30 * DAY), ["success", "success"]); // pinned
    let (mut pruner, link) = f.pruner(serving());
    link.pins.lock().unwrap().insert(10);

    let totals = pruner.prune(&order(7 * DAY, &[("etl", 2)])).unwrap();

    assert_eq!(
        f.ids("SELECT id FROM dag_runs ORDER BY id"),
        [4, 5, 6, 8, 9, 10]
    );
    let kept_runs = [40, 41, 50, 51, 60, 61, 80, 81, 90, 91, 100, 101];
    assert_eq!(f.ids("SELECT id FROM runs ORDER BY id"), kept_runs);
    assert_eq!(
        f.ids("SELECT DISTINCT run FROM attempts ORDER BY run"),
        kept_runs
    );
    assert_eq!(f.ids("SELECT run FROM events ORDER BY run"), kept_runs);
    for dag_run in 1..=10u64 {
        let pruned = [1, 2, 3, 7].contains(&dag_run);
        for run in [dag_run * 10, dag_run * 10 + 1] {
            for n in 1..=2 {
                assert_eq!(
                    f.log(run, n).exists(),
                    !pruned,
                    "log of run {run} attempt {n}"
                );
            }
        }
    }
    assert_eq!(
        totals,
        Totals {
            dag_runs: 4,
            runs: 8,
            log_files: 16
        }
    );
    // The reports add up to the deleted runs, by state.
    let mut reported: BTreeMap<RunState, u64> = BTreeMap::new();
    while let Ok(r) = link.reports.try_recv() {
        for (s, n) in r.runs {
            *reported.entry(s).or_default() += n;
        }
    }
    let expected = BTreeMap::from([
        (RunState::Success, 6),
        (RunState::Failed, 1),
        (RunState::Cancelled, 1),
    ]);
    assert_eq!(reported, expected);
    // The spec is still used by the DAG runs that stay.
    assert_eq!(f.ids("SELECT COUNT(*) FROM specs"), [1]);

    // A second pass finds nothing more.
    let again = pruner.prune(&order(7 * DAY, &[("etl", 2)])).unwrap();
    assert_eq!(again, Totals::default());
}

#[test]
fn a_retain_shorter_than_the_engine_holds_runs_spares_held_runs() {
    let f = Fixture::new();
    f.dag_run(1, "d", Some(NOW - HOUR), ["success", "success"]);
    f.dag_run(2, "d", Some(NOW - 60_000), ["success", "success"]);
    let (mut pruner, _link) = f.pruner(serving());
    // logs.retain = 0: everything finished may go, but the engine still
    // holds DAG run 2.
    pruner.prune(&order(0, &[])).unwrap();
    assert_eq!(f.ids("SELECT id FROM dag_runs"), [2]);
}

#[test]
fn large_prunes_go_in_batches_each_reported() {
    let f = Fixture::new();
    let n = 2 * BATCH as u64 + 7;
    f.conn.execute_batch("BEGIN").unwrap();
    for id in 1..=n {
        f.dag_run(id, "d", Some(NOW - 30 * DAY), ["success", "failed"]);
    }
    f.conn.execute_batch("COMMIT").unwrap();
    let (mut pruner, link) = f.pruner(serving());
    let totals = pruner.prune(&order(7 * DAY, &[])).unwrap();
    assert_eq!(totals.dag_runs, n);
    let reports: Vec<Report> = link.reports.try_iter().collect();
    assert_eq!(reports.len(), 3, "one report per batch of {BATCH}");
    assert_eq!(reports[0].runs[&RunState::Success], BATCH as u64);
    assert_eq!(f.ids("SELECT COUNT(*) FROM runs"), [0]);
    assert_eq!(std::fs::read_dir(&f.log_dir).unwrap().count(), 0);
    // No DAG run is left to use the spec.
    assert_eq!(f.ids("SELECT COUNT(*) FROM specs"), [0]);
}

#[test]
fn keep_runs_counts_active_dag_runs_among_the_newest() {
    let f = Fixture::new();
    f.dag_run(1, "d", Some(NOW - 2 * HOUR), ["success", "success"]);
    f.dag_run(2, "d", Some(NOW - 2 * HOUR), ["success", "success"]);
    f.dag_run(3, "d", None, ["running", "waiting"]);
    f.dag_run(4, "other", Some(NOW - 2 * HOUR), ["success", "success"]);
    let (mut pruner, _link) = f.pruner(serving());
    pruner.prune(&order(7 * DAY, &[("d", 1)])).unwrap();
    assert_eq!(f.ids("SELECT id FROM dag_runs ORDER BY id"), [3, 4]);
}

#[test]
fn upstream_runs_of_active_dag_runs_stay() {
    let f = Fixture::new();
    f.dag_run(1, "up", Some(NOW - 30 * DAY), ["success", "success"]);
    f.dag_run(2, "up", Some(NOW - 30 * DAY), ["success", "success"]);
    f.dag_run(3, "down", None, ["waiting", "waiting"]);
    // Run 30 of the active DAG run 3 waits on run 11 of DAG run 1 and on
    // a run still to finish.
    f.conn
        .execute("UPDATE runs SET upstream = '[11,31]' WHERE id = 30", [])
        .unwrap();
    let (mut pruner, _link) = f.pruner(serving());
    pruner.prune(&order(7 * DAY, &[])).unwrap();
    assert_eq!(f.ids("SELECT id FROM dag_runs ORDER BY id"), [1, 3]);
}

#[test]
fn no_batch_starts_once_shutdown_begins() {
    let f = Fixture::new();
    f.dag_run(1, "d", Some(NOW - 30 * DAY), ["success", "success"]);
    let shutdown = serving();
    let (mut pruner, _link) = f.pruner(shutdown.clone());
    shutdown.drain();
    assert_eq!(
        pruner.prune(&order(7 * DAY, &[])).unwrap(),
        Totals::default()
    );
    assert_eq!(f.ids("SELECT id FROM dag_runs"), [1]);
}

#[test]
fn sizes_are_measured_from_the_files() {
    let f = Fixture::new();
    f.dag_run(1, "d", Some(NOW), ["success", "success"]);
    let (mut pruner, link) = f.pruner(serving());
    assert_eq!(link.sizes.store_bytes(), None, "unknown until measured");
    pruner.measure();
    let db = std::fs::metadata(&f.db).unwrap().len();
    assert!(link.sizes.store_bytes().unwrap() >= db);
    // Four attempts' logs of 7 bytes each.
    assert_eq!(link.sizes.log_bytes(), Some(4 * 7));
}
