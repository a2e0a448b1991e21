//! One suite of store behaviours, run against both stores
//! (docs/operations.md, "PostgreSQL"): every test body takes a `Backend`
//! and is instantiated twice, on SQLite in a temp dir and on PostgreSQL in
//! a database of its own (`ax_testkit::pg::TestDb`; without a server the
//! PostgreSQL half says `skipped: …` once and passes, unless
//! `AX_REQUIRE_PG=1`).
//!
//! The rows are made by the real engine on a virtual clock and committed
//! as the daemon commits them (`scheduler::commit_of`).

use std::sync::Arc;

use ax_daemon::scheduler::commit_of;
use ax_daemon::store::postgres::{PgStore, PgUrl};
use ax_daemon::store::prune::{BeyondNewest, Prune};
use ax_daemon::store::sqlite::SqliteStore;
use ax_daemon::store::{Commit, EventQuery, RunQuery, Store, StoreError};
use ax_engine::sim::*;
use ax_engine::*;
use ax_protocol::api::EventView;
use ax_shared::time::Timestamp;
use ax_shared::*;
use ax_testkit::pg::TestDb;

/// A store under test: handles opened on one database, as axd opens them.
trait Backend {
    /// A new handle on the same database (a restart's view of it).
    fn open(&self) -> Box<dyn Store>;
    fn pruner(&self) -> Box<dyn Prune>;
    /// Marks the schema as written by a newer axd.
    fn set_schema_version(&self, v: i64);
    /// Opens the store again, as a start-up does (migrations run).
    fn reopen(&self) -> Result<(), StoreError>;
}

struct Sqlite {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
}

impl Backend for Sqlite {
    fn open(&self) -> Box<dyn Store> {
        Box::new(SqliteStore::open(&self.path, false).unwrap())
    }
    fn pruner(&self) -> Box<dyn Prune> {
        Box::new(SqliteStore::open(&self.path, false).unwrap())
    }
    fn set_schema_version(&self, v: i64) {
        let conn = rusqlite::Connection::open(&self.path).unwrap();
        conn.execute_batch(&format!("PRAGMA user_version = {v}"))
            .unwrap();
    }
    fn reopen(&self) -> Result<(), StoreError> {
        SqliteStore::open(&self.path, false).map(drop)
    }
}

struct Postgres {
    db: TestDb,
    url: PgUrl,
}

impl Backend for Postgres {
    fn open(&self) -> Box<dyn Store> {
        Box::new(PgStore::open(&self.url).unwrap())
    }
    fn pruner(&self) -> Box<dyn Prune> {
        Box::new(PgStore::open(&self.url).unwrap())
    }
    fn set_schema_version(&self, v: i64) {
        self.db
            .execute(&format!("UPDATE schema_version SET version = {v}"))
            .unwrap();
    }
    fn reopen(&self) -> Result<(), StoreError> {
        PgStore::open(&self.url).map(drop)
    }
}

fn sqlite() -> Sqlite {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ax.db");
    Sqlite { _dir: dir, path }
}

fn postgres(test: &str) -> Option<Postgres> {
    let db = TestDb::create(test)?;
    let url = PgUrl::parse(&db.url).unwrap();
    Some(Postgres { db, url })
}

/// Each body, once per store.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod on_sqlite {
            $(#[test]
            fn $name() {
                super::$name(&super::sqlite());
            })*
        }
        mod on_postgres {
            $(#[test]
            fn $name() {
                if let Some(b) = super::postgres(stringify!($name)) {
                    super::$name(&b);
                }
            })*
        }
    };
}

conformance!(
    a_restart_loads_what_was_committed,
    events_are_numbered_in_order_and_filtered,
    runs_are_listed_filtered_and_paged,
    a_commit_keeps_the_last_version_of_each_row,
    definitions_unique_keys_and_history,
    retention_deletes_finished_dag_runs_but_not_awaited_upstreams,
    a_newer_schema_is_refused,
    text_with_a_nul_byte_commits,
    failures_are_read_back_by_when_they_ended,
);

/// Commits what the Sim's steps decided since the last commit.
fn commit(sim: &mut Sim, store: &mut dyn Store) -> Vec<i64> {
    let seqs = store
        .commit(&commit_of(&sim.engine, &sim.effects).commit())
        .unwrap();
    sim.effects.clear();
    seqs
}

/// `fetch` (one retry) → `load`, on a DAG `etl`.
fn etl() -> Arc<DagSpec> {
    let mut fetch = job("fetch");
    fetch.retries = 1;
    let mut load = job("load");
    load.deps = vec!["fetch".into()];
    dag("etl", vec![fetch, load])
}

fn start(sim: &mut Sim, run: RunId, pid: u32) {
    let attempt = sim.engine.run(run).unwrap().attempts.len() as u32;
    sim.input(Input::Started {
        run,
        attempt,
        pid,
        pid_start: Some(777),
    })
    .unwrap();
}

fn a_restart_loads_what_was_committed(b: &dyn Backend) {
    let mut store = b.open();
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let runs = sim.submit(etl());
    let (fetch, load) = (runs[0], runs[1]);
    assert_eq!(sim.take_spawns().len(), 1);
    start(&mut sim, fetch, 4242);
    // The first attempt fails: a retry waits out its backoff.
    sim.exit(fetch, 3);
    assert_eq!(sim.state(fetch), RunState::Delayed);
    sim.advance(60_000);
    assert_eq!(sim.take_spawns().len(), 1, "the retry starts");
    start(&mut sim, fetch, 4343);
    sim.input(Input::Beat {
        run: fetch,
        message: Some("half way".into()),
        progress: Some(0.5),
    })
    .unwrap();
    sim.input(Input::Pause { dag: "etl".into() }).unwrap();
    let mut c = commit_of(&sim.engine, &sim.effects);
    c.paused.push(("etl".into(), true));
    c.cron_marks.push(("nightly".into(), 1_700_000_060_000));
    c.trigger_queues
        .push(("nightly".into(), vec![Trigger::Slot(1_700_000_120_000)]));
    store.commit(&c.commit()).unwrap();
    sim.effects.clear();

    let loaded = b.open().load().unwrap();
    assert_eq!(loaded.dag_runs.len(), 1);
    let d = &loaded.dag_runs[0];
    let held = sim.engine.dag_run(d.id).unwrap();
    assert_eq!(d.spec.name, "etl");
    assert_eq!(d.created_at, held.created_at);
    assert_eq!(d.trigger, held.trigger);
    assert_eq!(d.runs.iter().map(|r| r.id).collect::<Vec<_>>(), runs);
    for r in &d.runs {
        let e = sim.engine.run(r.id).unwrap();
        assert_eq!(r.state, e.state, "run {:?}", r.id);
        assert_eq!(r.attempts, e.attempts, "run {:?}", r.id);
        assert_eq!(r.counted_failures, e.counted_failures);
        assert_eq!(
            (r.ready_at, r.started_at, r.finished_at, r.next_at),
            (e.ready_at, e.started_at, e.finished_at, e.next_at)
        );
        assert_eq!(
            (&r.reason, &r.message, r.progress),
            (&e.reason, &e.message, e.progress)
        );
        assert_eq!(r.upstream, e.upstream);
        assert_eq!(r.delay, e.delay);
    }
    let f = d.runs.iter().find(|r| r.id == fetch).unwrap();
    assert_eq!(f.attempts.len(), 2, "the failed attempt and the retry");
    assert_eq!(f.attempts[0].exit_code, Some(3));
    assert_eq!(f.message.as_deref(), Some("half way"));
    assert_eq!(f.progress, Some(0.5));
    let l = d.runs.iter().find(|r| r.id == load).unwrap();
    assert_eq!(l.upstream, vec![fetch]);
    assert_eq!(l.state, RunState::Waiting);
    assert_eq!(
        loaded.orphans,
        vec![(4343, Some(777))],
        "the running attempt's process"
    );
    assert_eq!(loaded.next_run, load.0 + 1);
    assert_eq!(loaded.next_dag_run, d.id.0 + 1);
    assert_eq!(loaded.paused, vec!["etl".to_string()]);
    assert_eq!(loaded.marks.slots.get("nightly"), Some(&1_700_000_060_000));
    assert_eq!(
        loaded.trigger_queues.get("nightly"),
        Some(&vec![Trigger::Slot(1_700_000_120_000)])
    );
    assert!(loaded.external.is_empty());

    // A later DAG run (held: its DAG is paused) waits on `load` of the
    // first one (`--after`); once the first one is finished, its state
    // comes back as external.
    sim.input(Input::Resume { dag: "etl".into() }).unwrap();
    sim.exit(fetch, 0);
    start(&mut sim, load, 4444);
    sim.exit(load, 0);
    assert_eq!(sim.state(load), RunState::Success);
    sim.input(Input::Pause {
        dag: "report".into(),
    })
    .unwrap();
    let later = sim.submit_with(dag("report", vec![job("r")]), None, vec![load]);
    commit(&mut sim, &mut *store);
    let loaded = b.open().load().unwrap();
    assert_eq!(loaded.dag_runs.len(), 1, "only the later DAG run is active");
    assert_eq!(loaded.dag_runs[0].runs[0].id, later[0]);
    assert_eq!(loaded.external, vec![(load, RunState::Success)]);

    // Unpausing and an empty queue remove the rows.
    let c = Commit {
        paused: vec![("etl".into(), false)],
        trigger_queues: vec![("nightly".into(), vec![])],
        ..Commit::default()
    };
    store.commit(&c).unwrap();
    let loaded = b.open().load().unwrap();
    assert!(loaded.paused.is_empty());
    assert!(loaded.trigger_queues.is_empty());
}

/// The DAG run of `run`, as its events say.
fn g_dag_run(events: &[EventView], run: u64) -> u64 {
    events
        .iter()
        .find(|e| e.run == Some(run))
        .map(|e| e.dag_run)
        .expect("an event of the run")
}

fn events_are_numbered_in_order_and_filtered(b: &dyn Backend) {
    let mut store = b.open();
    // One slot: `two` waits in the queue, so its cancel is immediate.
    let mut sim = Sim::new(cfg(1, &[("default", 1)]));
    let expected = sim.events().len();
    assert_eq!(expected, 0);
    let a = sim.submit(dag("alpha", vec![job("one"), job("two")]));
    let events = sim.events();
    let seqs = commit(&mut sim, &mut *store);
    assert_eq!(seqs.len(), events.len());
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    // Another actor, with LIKE's wildcards in its name.
    sim.input(Input::Cancel {
        run: a[1],
        actor: Arc::from("uid 5%_x via ax"),
    })
    .unwrap();
    let cancel = commit(&mut sim, &mut *store);
    // A user's DAG, its runs cancelled by two users whose names share a
    // prefix.
    let g = sim.submit(dag("@alice/gamma", vec![job("one"), job("two")]));
    for (run, who) in [
        (g[0], "alice (uid 1042) via ax"),
        (g[1], "alice2 (uid 1001) via ax"),
    ] {
        sim.input(Input::Cancel {
            run,
            actor: Arc::from(who),
        })
        .unwrap();
    }
    let mine = commit(&mut sim, &mut *store);
    sim.now += 60_000;
    let since = sim.now;
    let b_runs = sim.submit(dag("beta", vec![job("one")]));
    let more = commit(&mut sim, &mut *store);
    assert!(more[0] > *seqs.last().unwrap());

    let all = store
        .events(&EventQuery {
            limit: 1000,
            ..EventQuery::default()
        })
        .unwrap();
    let got: Vec<i64> = all.iter().map(|e| e.seq).collect();
    assert_eq!(
        got,
        [seqs.clone(), cancel, mine, more.clone()].concat(),
        "oldest first, as numbered"
    );
    let first = &all[0];
    assert_eq!(first.actor, actor().to_string());
    assert_eq!(first.time, Timestamp::from_millis(events[0].at));
    assert_eq!((first.from, first.to), (events[0].from, events[0].to));

    let q = |q: EventQuery| -> Vec<EventView> {
        b.open().events(&EventQuery { limit: 1000, ..q }).unwrap()
    };
    let by_run = q(EventQuery {
        run: Some(a[1].0),
        ..Default::default()
    });
    assert!(!by_run.is_empty() && by_run.iter().all(|e| e.run == Some(a[1].0)));
    assert!(by_run.iter().any(|e| e.to == Some(RunState::Cancelled)));
    let by_dag = q(EventQuery {
        dag: Some("beta".into()),
        ..Default::default()
    });
    assert!(!by_dag.is_empty());
    assert!(
        by_dag
            .iter()
            .all(|e| e.run == Some(b_runs[0].0) || e.run.is_none())
    );
    let literal = q(EventQuery {
        actor: Some("5%_x".into()),
        ..Default::default()
    });
    assert!(!literal.is_empty() && literal.iter().all(|e| e.actor == "uid 5%_x via ax"));
    assert!(
        q(EventQuery {
            actor: Some("5%x".into()),
            ..Default::default()
        })
        .is_empty()
    );
    // A user name or a uid is who asked, as a whole word.
    for who in ["alice", "1042"] {
        let by = q(EventQuery {
            actor: Some(who.into()),
            ..Default::default()
        });
        assert!(
            !by.is_empty() && by.iter().all(|e| e.actor == "alice (uid 1042) via ax"),
            "{who}: {by:#?}"
        );
    }
    let owned = q(EventQuery {
        owner: Some("alice".into()),
        ..Default::default()
    });
    assert!(!owned.is_empty());
    assert!(owned.iter().all(|e| e.dag_run == g_dag_run(&all, g[0].0)));
    assert!(
        q(EventQuery {
            owner: Some("alic".into()),
            ..Default::default()
        })
        .is_empty()
    );
    let recent = q(EventQuery {
        since: Some(Timestamp::from_millis(since)),
        ..Default::default()
    });
    assert_eq!(recent.iter().map(|e| e.seq).collect::<Vec<_>>(), more);
    let after = q(EventQuery {
        after: seqs[1],
        ..Default::default()
    });
    assert_eq!(after.first().map(|e| e.seq), Some(seqs[2]));
    let newest = b
        .open()
        .events(&EventQuery {
            limit: 2,
            newest: true,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        newest.iter().map(|e| e.seq).collect::<Vec<_>>(),
        more[more.len() - 2..]
    );
    let oldest = b
        .open()
        .events(&EventQuery {
            limit: 2,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(oldest.iter().map(|e| e.seq).collect::<Vec<_>>(), seqs[..2]);

    let run_events = store.run_events(a[1].0, 1000).unwrap();
    assert_eq!(run_events, by_run);
    assert_eq!(store.run_events(a[1].0, 1).unwrap().len(), 1);
}

fn runs_are_listed_filtered_and_paged(b: &dyn Backend) {
    let mut store = b.open();
    let mut sim = Sim::new(cfg(1, &[("default", 1)]));
    let etl_runs = sim.submit(dag("ETL_daily", vec![job("Fetch"), job("load")]));
    let other = sim.submit(dag("other", vec![job("x")]));
    let bobs = sim.submit(dag("@bob/nightly", vec![job("x")]));
    start(&mut sim, etl_runs[0], 10);
    sim.exit(etl_runs[0], 0);
    commit(&mut sim, &mut *store);
    let list = |q: RunQuery| -> Vec<u64> {
        let mut s = b.open();
        let limit = if q.limit == 0 { 100 } else { q.limit };
        s.list_runs(&RunQuery { limit, ..q })
            .unwrap()
            .iter()
            .map(|v| v.id)
            .collect()
    };
    let ids = |r: &[RunId]| r.iter().rev().map(|r| r.0).collect::<Vec<_>>();
    let everything = list(RunQuery::default());
    assert_eq!(
        everything,
        ids(&[etl_runs.clone(), other.clone(), bobs.clone()].concat()),
        "newest first"
    );
    // A user's: the DAGs named in their namespace only.
    for (owner, want) in [("bob", ids(&bobs)), ("bo", vec![]), ("other", vec![])] {
        let got = list(RunQuery {
            owner: Some(owner.into()),
            ..Default::default()
        });
        assert_eq!(got, want, "owner {owner}");
    }
    assert_eq!(
        list(RunQuery {
            dag: Some("other".into()),
            ..Default::default()
        }),
        ids(&other)
    );
    let dr = sim.engine.run(other[0]).unwrap().dag_run.0;
    assert_eq!(
        list(RunQuery {
            dag_run: Some(dr),
            ..Default::default()
        }),
        ids(&other)
    );
    assert_eq!(
        list(RunQuery {
            states: vec![RunState::Success],
            ..Default::default()
        }),
        vec![etl_runs[0].0]
    );
    // Text matches DAG or job names, ignoring ASCII case, `_` literally.
    assert_eq!(
        list(RunQuery {
            text: Some("fetch".into()),
            ..Default::default()
        }),
        vec![etl_runs[0].0]
    );
    assert_eq!(
        list(RunQuery {
            text: Some("l_d".into()),
            ..Default::default()
        }),
        ids(&etl_runs)
    );
    assert_eq!(
        list(RunQuery {
            text: Some("l_daily".into()),
            ..Default::default()
        }),
        ids(&etl_runs)
    );
    assert!(
        list(RunQuery {
            text: Some("%".into()),
            ..Default::default()
        })
        .is_empty()
    );
    let page = list(RunQuery {
        before: Some(everything[0]),
        limit: 1,
        ..Default::default()
    });
    assert_eq!(page, vec![everything[1]]);

    let v = store.get_run(etl_runs[0].0).unwrap().unwrap();
    assert_eq!(
        (v.dag.as_str(), v.job.as_str(), v.state),
        ("ETL_daily", "Fetch", RunState::Success)
    );
    assert_eq!(v.attempts.len(), 1);
    assert_eq!(v.attempts[0].exit_code, Some(0));
    assert_eq!(v.attempts[0].outcome, Some(Outcome::Success));
    assert!(v.started_at.is_some() && v.finished_at.is_some());
    assert!(store.get_run(999_999).unwrap().is_none());
    assert_eq!(
        store.run_state(etl_runs[1].0).unwrap(),
        Some(sim.state(etl_runs[1]))
    );
    assert_eq!(store.run_state(999_999).unwrap(), None);
    let counts = store.state_counts().unwrap();
    assert_eq!(
        counts.len(),
        RunState::ALL.len(),
        "every state, zero or not"
    );
    assert_eq!(counts["success"], 1);
    assert_eq!(counts.values().sum::<u64>(), 4);
}

fn a_commit_keeps_the_last_version_of_each_row(b: &dyn Backend) {
    let mut store = b.open();
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let runs = sim.submit(dag("d", vec![job("j")]));
    commit(&mut sim, &mut *store);
    // A group of steps may name one row more than once; the last wins.
    let mut first = sim.engine.run(runs[0]).unwrap().clone();
    first.message = Some("first".into());
    let mut last = first.clone();
    last.message = Some("last".into());
    let c = Commit {
        runs: vec![&first, &last],
        paused: vec![("d".into(), true), ("d".into(), false), ("e".into(), true)],
        cron_marks: vec![("d".into(), 1), ("d".into(), 2)],
        boot_marks: vec![
            ("d".into(), "boot-a".into()),
            ("d".into(), "boot-b".into()),
            ("d".into(), "boot-a".into()),
        ],
        trigger_queues: vec![("d".into(), vec![Trigger::Slot(5)]), ("d".into(), vec![])],
        ..Commit::default()
    };
    store.commit(&c).unwrap();
    assert_eq!(
        store
            .get_run(runs[0].0)
            .unwrap()
            .unwrap()
            .message
            .as_deref(),
        Some("last")
    );
    let loaded = b.open().load().unwrap();
    assert_eq!(loaded.paused, vec!["e".to_string()]);
    assert_eq!(loaded.marks.slots.get("d"), Some(&2));
    let mut boots: Vec<&str> = loaded.marks.boots["d"].iter().map(|b| &**b).collect();
    boots.sort();
    assert_eq!(boots, ["boot-a", "boot-b"], "every boot seen, once");
    assert!(loaded.trigger_queues.is_empty());
    assert!(store.commit(&Commit::default()).unwrap().is_empty());
}

fn definitions_unique_keys_and_history(b: &dyn Backend) {
    let mut store = b.open();
    let one = dag("one", vec![job("a")]);
    let two = dag("two", vec![job("b")]);
    let c = Commit {
        dag_defs: vec![(&*one, String::new()), (&*two, String::new())],
        ..Commit::default()
    };
    store.commit(&c).unwrap();
    let names = |s: &mut dyn Store| -> Vec<String> {
        s.load_dag_defs()
            .unwrap()
            .into_iter()
            .map(|d| d.name)
            .collect()
    };
    assert_eq!(names(&mut *b.open()), ["one", "two"]);
    // Defined again and removed in one commit: removed.
    let c = Commit {
        dag_defs: vec![(&*two, String::new())],
        removed_defs: vec!["two".into()],
        ..Commit::default()
    };
    store.commit(&c).unwrap();
    assert_eq!(names(&mut *b.open()), ["one"]);

    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let unique = |key: &str| Unique {
        key: key.into(),
        within: None,
        stored: None,
    };
    let first = sim.submit_with(one.clone(), Some(unique("k")), vec![]);
    start(&mut sim, first[0], 1);
    sim.exit(first[0], 0);
    sim.now += 1000;
    let second = sim.submit(one.clone());
    start(&mut sim, second[0], 2);
    sim.exit(second[0], 1);
    commit(&mut sim, &mut *store);
    let holder = store.newest_with_unique_key("k").unwrap().unwrap();
    let dr1 = sim.engine.run(first[0]).unwrap().dag_run;
    assert_eq!(holder.dag_run, dr1);
    assert_eq!(holder.runs, first);
    assert!(store.newest_with_unique_key("nope").unwrap().is_none());
    let spec = store.dag_run_spec(dr1.0).unwrap().unwrap();
    assert_eq!(*spec, *one);
    assert!(store.dag_run_spec(999).unwrap().is_none());
    let restored = store.load_dag_run(dr1.0).unwrap().unwrap();
    assert_eq!(restored.runs[0].state, RunState::Success);
    assert!(store.load_dag_run(999).unwrap().is_none());
    let finished = |r: RunId| sim.engine.run(r).unwrap().finished_at;
    let last = store.last_dag_runs().unwrap();
    assert_eq!(
        last.get("one").map(|l| (l.state, Some(l.at))),
        Some((DagRunState::Failed, finished(second[0])))
    );
    let history = store.dag_history().unwrap();
    let h = &history["one"];
    assert_eq!(h.last_success, finished(first[0]));
    assert_eq!(h.last_failure, finished(second[0]));
}

fn retention_deletes_finished_dag_runs_but_not_awaited_upstreams(b: &dyn Backend) {
    let mut store = b.open();
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let mut finished = Vec::new();
    for i in 0..3 {
        // A spec of its own for each (same content would share one row).
        let r = sim.submit(dag("old", vec![job(&format!("j{i}"))]));
        start(&mut sim, r[0], 1);
        sim.exit(r[0], 0);
        finished.push(r[0]);
        sim.now += 1000;
    }
    // An active DAG run waits on the second one's run.
    sim.submit_with(dag("waits", vec![job("w")]), None, vec![finished[1]]);
    commit(&mut sim, &mut *store);
    let dr = |r: RunId| sim.engine.run(r).unwrap().dag_run.0;
    let ids: Vec<u64> = finished.iter().map(|&r| dr(r)).collect();

    let mut p = b.pruner();
    let cutoff = sim.now + 1;
    assert_eq!(p.finished_before(cutoff, 0, 10).unwrap(), ids);
    assert_eq!(p.finished_before(cutoff, ids[0], 1).unwrap(), vec![ids[1]]);
    assert!(p.finished_before(0, 0, 10).unwrap().is_empty());
    let old = BeyondNewest {
        dag: "old",
        keep: 1,
        before: cutoff,
        limit: 10,
    };
    assert_eq!(p.beyond_newest(&old).unwrap(), ids[..2]);
    let pruned = p.delete_dag_runs(&ids, cutoff).unwrap();
    assert_eq!(pruned.dag_runs, 2, "the awaited upstream's DAG run stays");
    assert_eq!(pruned.runs.get(&RunState::Success), Some(&2));
    let mut attempts = pruned.attempts.clone();
    attempts.sort();
    assert_eq!(attempts, vec![(finished[0].0, 1), (finished[2].0, 1)]);
    assert!(store.get_run(finished[0].0).unwrap().is_none());
    assert!(store.get_run(finished[1].0).unwrap().is_some());
    assert!(store.run_events(finished[0].0, 10).unwrap().is_empty());
    assert_eq!(p.delete_dag_runs(&ids, cutoff).unwrap().dag_runs, 0);
    // Specs: the deleted DAG runs' specs go once nothing refers to them.
    assert_eq!(p.delete_unused_specs().unwrap(), 2);
    assert_eq!(p.delete_unused_specs().unwrap(), 0);
    assert!(store.dag_run_spec(ids[1]).unwrap().is_some());
    assert!(p.store_bytes().is_some_and(|n| n > 0));
}

fn a_newer_schema_is_refused(b: &dyn Backend) {
    drop(b.open());
    b.reopen().expect("a second start migrates nothing");
    b.set_schema_version(99);
    let err = b.reopen().expect_err("refused").to_string();
    assert!(err.contains("schema version 99 is newer"), "{err}");
}

fn text_with_a_nul_byte_commits(b: &dyn Backend) {
    let mut store = b.open();
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let runs = sim.submit(dag("d", vec![job("j")]));
    start(&mut sim, runs[0], 1);
    sim.input(Input::Beat {
        run: runs[0],
        message: Some("a\0b".into()),
        progress: None,
    })
    .unwrap();
    commit(&mut sim, &mut *store);
    let message = store.get_run(runs[0].0).unwrap().unwrap().message.unwrap();
    assert!(
        message.starts_with('a') && message.ends_with('b'),
        "{message:?}"
    );
}

fn failures_are_read_back_by_when_they_ended(b: &dyn Backend) {
    let mut store = b.open();
    let mut sim = Sim::new(cfg(8, &[("default", 8)]));
    let mut ended = Vec::new();
    for (i, code) in [1, 0, 1, 2].into_iter().enumerate() {
        sim.now += 1000;
        let runs = sim.submit(dag(&format!("d{i}"), vec![job("j")]));
        start(&mut sim, runs[0], 10 + i as u32);
        sim.exit(runs[0], code);
        ended.push(sim.engine.run(runs[0]).unwrap().finished_at.unwrap());
    }
    // One still running counts for nothing.
    let running = sim.submit(dag("busy", vec![job("j")]));
    start(&mut sim, running[0], 99);
    commit(&mut sim, &mut *store);
    let failed = [ended[0], ended[2], ended[3]];
    assert_eq!(store.failed_since(0).unwrap(), failed);
    assert_eq!(b.open().failed_since(ended[0] + 1).unwrap(), failed[1..]);
    assert!(store.failed_since(ended[3] + 1).unwrap().is_empty());
}
