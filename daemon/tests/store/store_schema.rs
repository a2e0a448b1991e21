//! The two stores' schemas side by side: a fresh SQLite store and a fresh
//! PostgreSQL database (`ax_testkit::pg::TestDb`; skipped without a
//! server unless `AX_REQUIRE_PG=1`) must have the same tables and columns,
//! each column of the same kind (integer, text, real, bool, blob,
//! timestamp), apart from what only a cluster needs, which is listed here
//! column by column. A column added to one store only fails this test.

use std::collections::BTreeMap;

use ax_daemon::store::postgres::{PgStore, PgUrl};
use ax_daemon::store::sqlite::SqliteStore;
use ax_testkit::pg::TestDb;

/// table → column → kind.
type Schema = BTreeMap<String, BTreeMap<String, &'static str>>;

/// What only the PostgreSQL store has: (table, column, kind). A table
/// named here with all its columns is PostgreSQL's alone.
const CLUSTER_ONLY: &[(&str, &str, &str)] = &[
    ("schema_version", "version", "integer"),
    ("dag_runs", "owner", "text"),
    ("dag_runs", "priority", "integer"),
    ("attempts", "node", "text"),
    ("nodes", "id", "text"),
    ("nodes", "host", "text"),
    ("nodes", "version", "text"),
    ("nodes", "slots", "integer"),
    ("nodes", "heartbeat_ms", "integer"),
    ("nodes", "started_at", "integer"),
    ("nodes", "last_beat", "integer"),
    ("nodes", "released", "bool"),
    ("nodes", "lease_ms", "integer"),
    ("nodes", "lease_until", "integer"),
    ("nodes", "valid_since", "integer"),
    ("node_numbers", "id", "text"),
    ("node_numbers", "no", "integer"),
    ("node_numbers", "epoch", "integer"),
    ("pool_slots", "pool", "text"),
    ("pool_slots", "slot", "integer"),
    ("pool_slots", "node", "text"),
    ("node_dags", "node", "text"),
    ("node_dags", "dag", "text"),
    ("node_dags", "hash", "text"),
    ("node_dags", "loaded_at", "integer"),
    ("log_chunks", "run", "integer"),
    ("log_chunks", "attempt", "integer"),
    ("log_chunks", "offset", "integer"),
    ("log_chunks", "data", "blob"),
    ("log_done", "run", "integer"),
    ("log_done", "attempt", "integer"),
    ("log_done", "bytes", "integer"),
    ("pool_wants", "pool", "text"),
    ("pool_wants", "node", "text"),
    ("pool_wants", "want", "integer"),
];

/// A SQLite declared type's kind (by SQLite's affinity rules, roughly).
fn sqlite_kind(declared: &str) -> &'static str {
    let t = declared.to_ascii_uppercase();
    if t.contains("INT") {
        "integer"
    } else if t.contains("CHAR") || t.contains("TEXT") || t.contains("CLOB") {
        "text"
    } else if t.contains("REAL") || t.contains("FLOA") || t.contains("DOUB") {
        "real"
    } else if t.contains("BOOL") {
        "bool"
    } else if t.contains("BLOB") || t.is_empty() {
        "blob"
    } else if t.contains("TIME") || t.contains("DATE") {
        "timestamp"
    } else {
        "other"
    }
}

/// A PostgreSQL `information_schema` data type's kind.
fn postgres_kind(data_type: &str) -> &'static str {
    match data_type {
        "bigint" | "integer" | "smallint" => "integer",
        "text" | "character varying" | "character" => "text",
        "double precision" | "real" | "numeric" => "real",
        "boolean" => "bool",
        "bytea" => "blob",
        t if t.starts_with("timestamp") || t == "date" => "timestamp",
        _ => "other",
    }
}

fn sqlite_schema(path: &std::path::Path) -> Schema {
    let conn = rusqlite::Connection::open(path).unwrap();
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let mut schema = Schema::new();
    for table in tables {
        let mut stmt = conn
            .prepare(&format!(
                "SELECT name, type FROM pragma_table_info('{table}')"
            ))
            .unwrap();
        let columns = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .unwrap()
            .map(|c| {
                let (name, declared) = c.unwrap();
                (name, sqlite_kind(&declared))
            })
            .collect();
        schema.insert(table, columns);
    }
    schema
}

fn postgres_schema(db: &TestDb) -> Schema {
    let rows = db
        .query(
            "SELECT table_name, column_name, data_type FROM information_schema.columns
             WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position",
        )
        .unwrap();
    let mut schema = Schema::new();
    for row in rows {
        let [table, column, data_type] = &row[..] else {
            panic!("unexpected row {row:?}");
        };
        schema
            .entry(table.clone())
            .or_default()
            .insert(column.clone(), postgres_kind(data_type));
    }
    schema
}

/// `postgres` less what only a cluster needs (each such column must be
/// there, of its kind).
fn shared_part(mut postgres: Schema) -> Result<Schema, String> {
    for &(table, column, kind) in CLUSTER_ONLY {
        let columns = postgres
            .get_mut(table)
            .ok_or_else(|| format!("PostgreSQL has no table {table}"))?;
        match columns.remove(column) {
            Some(k) if k == kind => {}
            Some(k) => return Err(format!("PostgreSQL's {table}.{column} is {k}, not {kind}")),
            None => return Err(format!("PostgreSQL has no column {table}.{column}")),
        }
        if columns.is_empty() {
            postgres.remove(table);
        }
    }
    Ok(postgres)
}

/// Every table and column one store has and the other has not, or has of
/// another kind.
fn differences(sqlite: &Schema, postgres: &Schema) -> Vec<String> {
    let mut out = Vec::new();
    let none = BTreeMap::new();
    let tables: std::collections::BTreeSet<&String> =
        sqlite.keys().chain(postgres.keys()).collect();
    for table in tables {
        let s = sqlite.get(table).unwrap_or(&none);
        let p = postgres.get(table).unwrap_or(&none);
        let columns: std::collections::BTreeSet<&String> = s.keys().chain(p.keys()).collect();
        for column in columns {
            match (s.get(column), p.get(column)) {
                (Some(a), Some(b)) if a == b => {}
                (Some(a), Some(b)) => out.push(format!(
                    "{table}.{column}: {a} in SQLite, {b} in PostgreSQL"
                )),
                (Some(_), None) => out.push(format!("{table}.{column}: only in SQLite")),
                (None, Some(_)) => out.push(format!("{table}.{column}: only in PostgreSQL")),
                (None, None) => unreachable!(),
            }
        }
    }
    out
}

/// A fresh store of each kind; `None` when PostgreSQL is skipped.
fn fresh(hint: &str) -> Option<(tempfile::TempDir, std::path::PathBuf, TestDb)> {
    let db = TestDb::create(hint)?;
    PgStore::open(&PgUrl::parse(&db.url).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ax.db");
    SqliteStore::open(&path, false).unwrap();
    Some((dir, path, db))
}

#[test]
fn both_stores_have_the_same_tables_and_columns() {
    let Some((_dir, path, db)) = fresh("store_schema_same") else {
        return;
    };
    let sqlite = sqlite_schema(&path);
    let postgres = shared_part(postgres_schema(&db)).unwrap();
    let diff = differences(&sqlite, &postgres);
    assert!(
        diff.is_empty(),
        "the stores' schemas differ:\n{}",
        diff.join("\n")
    );
    // The comparison covers the tables every store has.
    for table in [
        "dag_runs", "runs", "attempts", "events", "specs", "dag_defs",
    ] {
        assert!(sqlite.contains_key(table), "{table}");
    }
}

#[test]
fn a_column_added_to_one_store_only_is_a_difference() {
    let Some((_dir, path, db)) = fresh("store_schema_added") else {
        return;
    };
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("ALTER TABLE runs ADD COLUMN extra TEXT")
        .unwrap();
    db.execute("ALTER TABLE events ADD COLUMN weight DOUBLE PRECISION")
        .unwrap();
    db.execute("ALTER TABLE nodes ADD COLUMN zone TEXT")
        .unwrap();
    let diff = differences(
        &sqlite_schema(&path),
        &shared_part(postgres_schema(&db)).unwrap(),
    );
    assert_eq!(
        diff,
        [
            "events.weight: only in PostgreSQL",
            "nodes.zone: only in PostgreSQL",
            "runs.extra: only in SQLite",
        ]
    );
}
