//! The PostgreSQL schema: the SQLite store's migrations expressed for
//! PostgreSQL (BIGINT for every integer, DOUBLE PRECISION for progress, a
//! sequence for event numbers), versioned in a `schema_version` table.
//! `daemon/tests/store_schema.rs` checks that both stores have the same
//! tables and columns, apart from those only a cluster needs.

use deadpool_postgres::Object;

use crate::store::StoreError;

/// Migration N is `MIGRATIONS[N - 1]`; the first four match the SQLite
/// store's, table for table and index for index; later ones are what only
/// a shared store has.
pub(super) const MIGRATIONS: &[&str] = &[
    // 1: the initial schema
    r#"
    CREATE TABLE specs (hash TEXT PRIMARY KEY, spec TEXT NOT NULL);
    CREATE TABLE dag_defs (name TEXT PRIMARY KEY, file TEXT NOT NULL, hash TEXT NOT NULL, loaded_at BIGINT NOT NULL);
    CREATE TABLE dag_runs (
        id BIGINT PRIMARY KEY, dag TEXT NOT NULL, spec_hash TEXT NOT NULL, state TEXT NOT NULL,
        trigger TEXT NOT NULL, unique_key TEXT, created_at BIGINT NOT NULL, finished_at BIGINT);
    CREATE INDEX dag_runs_dag ON dag_runs(dag, id);
    CREATE INDEX dag_runs_active ON dag_runs(state) WHERE state = 'active';
    CREATE TABLE runs (
        id BIGINT PRIMARY KEY, dag_run BIGINT NOT NULL, dag TEXT NOT NULL, job TEXT NOT NULL,
        job_index BIGINT NOT NULL, state TEXT NOT NULL, priority BIGINT NOT NULL, pool TEXT NOT NULL,
        retries BIGINT NOT NULL, upstream TEXT NOT NULL, counted_failures BIGINT NOT NULL,
        created_at BIGINT NOT NULL, ready_at BIGINT, started_at BIGINT, finished_at BIGINT,
        next_at BIGINT, delay TEXT, reason TEXT NOT NULL, message TEXT, progress DOUBLE PRECISION);
    CREATE INDEX runs_state ON runs(state, id);
    CREATE INDEX runs_dag ON runs(dag, id);
    CREATE INDEX runs_dag_run ON runs(dag_run);
    CREATE TABLE attempts (
        run BIGINT NOT NULL, n BIGINT NOT NULL, started_at BIGINT NOT NULL, finished_at BIGINT,
        outcome TEXT, exit_code BIGINT, signal BIGINT, pid BIGINT, pid_start BIGINT,
        slot BIGINT NOT NULL, error TEXT, PRIMARY KEY (run, n));
    CREATE TABLE events (
        seq BIGSERIAL PRIMARY KEY, at BIGINT NOT NULL, run BIGINT, dag_run BIGINT NOT NULL,
        from_state TEXT, to_state TEXT, reason TEXT NOT NULL, actor TEXT NOT NULL);
    CREATE INDEX events_run ON events(run) WHERE run IS NOT NULL;
    CREATE TABLE cron_marks (dag TEXT PRIMARY KEY, last_slot BIGINT NOT NULL);
    CREATE TABLE paused (dag TEXT PRIMARY KEY);
    "#,
    // 2: unique keys are looked up in the store
    r#"
    CREATE INDEX dag_runs_unique ON dag_runs(unique_key, id) WHERE unique_key IS NOT NULL;
    "#,
    // 3: queued triggers, one JSON list per DAG
    r#"
    CREATE TABLE trigger_queues (dag TEXT PRIMARY KEY, queue TEXT NOT NULL);
    "#,
    // 4: `events` filters by DAG and by time use an index
    r#"
    CREATE INDEX events_dag_run ON events(dag_run);
    CREATE INDEX events_at ON events(at);
    "#,
    // 5: the node registry (docs/config.md, "`[cluster]`"): one row per axd,
    // times in ms on the server's clock
    r#"
    CREATE TABLE nodes (
        id TEXT PRIMARY KEY, host TEXT NOT NULL, version TEXT NOT NULL, slots BIGINT NOT NULL,
        heartbeat_ms BIGINT NOT NULL, started_at BIGINT NOT NULL, last_beat BIGINT NOT NULL);
    "#,
    // 6: work sharing. Each node id keeps a small number (the offset of
    // its run ids) and an epoch raised at each registration and when the
    // node is declared dead (fencing); a DAG run has an owner (NULL:
    // offered to every node) and the priority its claim is ordered by; an
    // attempt records the node that ran it; `released` marks a dead
    // node whose DAG runs were handed back.
    r#"
    CREATE TABLE node_numbers (id TEXT PRIMARY KEY, no BIGINT NOT NULL UNIQUE, epoch BIGINT NOT NULL);
    ALTER TABLE nodes ADD COLUMN released BOOLEAN NOT NULL DEFAULT false;
    ALTER TABLE dag_runs ADD COLUMN owner TEXT;
    ALTER TABLE dag_runs ADD COLUMN priority BIGINT NOT NULL DEFAULT 0;
    CREATE INDEX dag_runs_offered ON dag_runs(priority DESC, created_at, id)
        WHERE owner IS NULL AND state = 'active';
    CREATE INDEX dag_runs_owner ON dag_runs(owner) WHERE state = 'active';
    ALTER TABLE attempts ADD COLUMN node TEXT;
    "#,
    // 7: pool slots leased to nodes (NULL: free), so that a pool's
    // `slots` hold across the cluster
    r#"
    CREATE TABLE pool_slots (pool TEXT NOT NULL, slot BIGINT NOT NULL, node TEXT, PRIMARY KEY (pool, slot));
    CREATE INDEX pool_slots_node ON pool_slots(node) WHERE node IS NOT NULL;
    "#,
    // 8: the version (definition hash, without the file's path) of each
    // DAG each node has loaded from its own jobs folder, written with
    // the node's `dag_defs` rows; a dead or departed node's rows go with
    // its DAG runs
    r#"
    CREATE TABLE node_dags (
        node TEXT NOT NULL, dag TEXT NOT NULL, hash TEXT NOT NULL, loaded_at BIGINT NOT NULL,
        PRIMARY KEY (node, dag));
    "#,
    // 9: attempt logs shipped by the node that ran them, readable through
    // any node; `log_done` marks a log wholly shipped (its length in bytes)
    r#"
    CREATE TABLE log_chunks (
        run BIGINT NOT NULL, attempt BIGINT NOT NULL, "offset" BIGINT NOT NULL, data BYTEA NOT NULL,
        PRIMARY KEY (run, attempt, "offset"));
    CREATE TABLE log_done (
        run BIGINT NOT NULL, attempt BIGINT NOT NULL, bytes BIGINT NOT NULL, PRIMARY KEY (run, attempt));
    "#,
    // 10: each node's unmet demand for a pool's slots (ready runs it
    // cannot lease for), read by the nodes holding that pool's slots to
    // share them fairly; a dead or departed node's rows go with its leases
    r#"
    CREATE TABLE pool_wants (
        pool TEXT NOT NULL, node TEXT NOT NULL, want BIGINT NOT NULL, PRIMARY KEY (pool, node));
    "#,
    // 11: output an attempt could not write to its log (a full disk)
    r#"
    ALTER TABLE attempts ADD COLUMN log_lost BIGINT NOT NULL DEFAULT 0;
    "#,
    // 12: each node's lease on the server's clock: how long a renewal
    // lasts, when the current one ends, and since when the node has held
    // one without a gap (a node judges others only after a whole lease of
    // its own). Rows of an earlier axd get the lease its beats implied.
    r#"
    ALTER TABLE nodes ADD COLUMN lease_ms BIGINT NOT NULL DEFAULT 0;
    ALTER TABLE nodes ADD COLUMN lease_until BIGINT NOT NULL DEFAULT 0;
    ALTER TABLE nodes ADD COLUMN valid_since BIGINT NOT NULL DEFAULT 0;
    UPDATE nodes SET lease_ms = heartbeat_ms * 3 / 2, lease_until = last_beat + heartbeat_ms * 3 / 2,
        valid_since = last_beat;
    "#,
    // 13: the boots each `@reboot` DAG saw; a hook's DAG run names
    // the DAG run whose end started it (`ax ls` leaves hooks out)
    r#"
    CREATE TABLE boot_marks (dag TEXT NOT NULL, boot_id TEXT NOT NULL, PRIMARY KEY (dag, boot_id));
    ALTER TABLE dag_runs ADD COLUMN hook_of BIGINT;
    CREATE INDEX dag_runs_hooks ON dag_runs(id) WHERE hook_of IS NOT NULL;
    "#,
];

/// The advisory lock key held while migrating ("axmigrat").
const MIGRATE_LOCK: i64 = 0x6178_6d69_6772_6174;

/// Brings the schema up to date in one transaction (PostgreSQL's DDL is
/// transactional: a failed migration leaves the schema as it was). The
/// advisory lock makes nodes that start together wait for each other
/// instead of racing to create the same tables.
pub(super) async fn migrate(client: &mut Object) -> Result<(), StoreError> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATE_LOCK])
        .await?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)")
        .await?;
    let version: i64 = match tx
        .query_opt("SELECT version FROM schema_version", &[])
        .await?
    {
        Some(row) => row.try_get(0)?,
        None => {
            tx.execute("INSERT INTO schema_version (version) VALUES (0)", &[])
                .await?;
            0
        }
    };
    if version < 0 || version as usize > MIGRATIONS.len() {
        return Err(StoreError::Corrupt(format!(
            "database schema version {version} is newer than this axd understands ({})",
            MIGRATIONS.len()
        )));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.batch_execute(sql).await?;
        tx.execute(
            "UPDATE schema_version SET version = $1",
            &[&((i + 1) as i64)],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(())
}
