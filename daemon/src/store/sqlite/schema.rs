//! The SQLite schema, versioned in `user_version`: migration N is
//! `MIGRATIONS[N - 1]`. PostgreSQL's (`postgres/schema.rs`) has the same
//! tables and columns, and some only a cluster needs; the test
//! `daemon/tests/store_schema.rs` compares the two.

pub(super) const MIGRATIONS: &[&str] = &[
    // 1: the initial schema
    r#"
    CREATE TABLE specs (hash TEXT PRIMARY KEY, spec TEXT NOT NULL);
    CREATE TABLE dag_defs (name TEXT PRIMARY KEY, file TEXT NOT NULL, hash TEXT NOT NULL, loaded_at INTEGER NOT NULL);
    CREATE TABLE dag_runs (
        id INTEGER PRIMARY KEY, dag TEXT NOT NULL, spec_hash TEXT NOT NULL, state TEXT NOT NULL,
        trigger TEXT NOT NULL, unique_key TEXT, created_at INTEGER NOT NULL, finished_at INTEGER);
    CREATE INDEX dag_runs_dag ON dag_runs(dag, id);
    CREATE INDEX dag_runs_active ON dag_runs(state) WHERE state = 'active';
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY, dag_run INTEGER NOT NULL, dag TEXT NOT NULL, job TEXT NOT NULL,
        job_index INTEGER NOT NULL, state TEXT NOT NULL, priority INTEGER NOT NULL, pool TEXT NOT NULL,
        retries INTEGER NOT NULL, upstream TEXT NOT NULL, counted_failures INTEGER NOT NULL,
        created_at INTEGER NOT NULL, ready_at INTEGER, started_at INTEGER, finished_at INTEGER,
        next_at INTEGER, delay TEXT, reason TEXT NOT NULL, message TEXT, progress REAL);
    CREATE INDEX runs_state ON runs(state, id);
    CREATE INDEX runs_dag ON runs(dag, id);
    CREATE INDEX runs_dag_run ON runs(dag_run);
    CREATE TABLE attempts (
        run INTEGER NOT NULL, n INTEGER NOT NULL, started_at INTEGER NOT NULL, finished_at INTEGER,
        outcome TEXT, exit_code INTEGER, signal INTEGER, pid INTEGER, pid_start INTEGER,
        slot INTEGER NOT NULL, error TEXT, PRIMARY KEY (run, n)) WITHOUT ROWID;
    CREATE TABLE events (
        seq INTEGER PRIMARY KEY, at INTEGER NOT NULL, run INTEGER, dag_run INTEGER NOT NULL,
        from_state TEXT, to_state TEXT, reason TEXT NOT NULL, actor TEXT NOT NULL);
    CREATE INDEX events_run ON events(run) WHERE run IS NOT NULL;
    CREATE TABLE cron_marks (dag TEXT PRIMARY KEY, last_slot INTEGER NOT NULL);
    CREATE TABLE paused (dag TEXT PRIMARY KEY);
    "#,
    // 2: unique keys are looked up in the store (`--unique-for` spans
    // eviction from memory and restarts)
    r#"
    CREATE INDEX dag_runs_unique ON dag_runs(unique_key, id) WHERE unique_key IS NOT NULL;
    "#,
    // 3: queued triggers, one JSON list per DAG
    r#"
    CREATE TABLE trigger_queues (dag TEXT PRIMARY KEY, queue TEXT NOT NULL);
    "#,
    // 4: `events` filters by DAG and by time use an index (and pruning
    // finds a DAG run's events without a scan)
    r#"
    CREATE INDEX events_dag_run ON events(dag_run);
    CREATE INDEX events_at ON events(at);
    "#,
    // 5: output an attempt could not write to its log (a full disk)
    r#"
    ALTER TABLE attempts ADD COLUMN log_lost INTEGER NOT NULL DEFAULT 0;
    "#,
    // 6: the boots each `@reboot` DAG saw; a hook's DAG run names
    // the DAG run whose end started it (`ax ls` leaves hooks out)
    r#"
    CREATE TABLE boot_marks (dag TEXT NOT NULL, boot_id TEXT NOT NULL, PRIMARY KEY (dag, boot_id));
    ALTER TABLE dag_runs ADD COLUMN hook_of INTEGER;
    CREATE INDEX dag_runs_hooks ON dag_runs(id) WHERE hook_of IS NOT NULL;
    "#,
];
