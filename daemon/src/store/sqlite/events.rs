//! The event log query behind `events` (docs/cli.md, "ax events"): every
//! filter runs in SQL, on an index where one exists (`run`: `events_run`;
//! DAG: `dag_runs_dag` then `events_dag_run`; `since`: `events_at`), so a
//! filtered read never ships the whole log to the client.

use ax_protocol::api::EventView;
use rusqlite::Connection;
use rusqlite::types::Value;

use super::all;
use crate::store::rows::{EVENT_COLUMNS, event_view};
use crate::store::{EventQuery, StoreError, actor_matches, owner_match};

/// The events matching `q`, oldest first.
pub(super) fn query(conn: &Connection, q: &EventQuery) -> Result<Vec<EventView>, StoreError> {
    let mut conditions = vec!["seq > ?".to_string()];
    let mut values = vec![Value::Integer(q.after)];
    if let Some(run) = q.run {
        conditions.push("run = ?".into());
        values.push(Value::Integer(run as i64));
    }
    if let Some(dag) = &q.dag {
        conditions.push("dag_run IN (SELECT id FROM dag_runs WHERE dag = ?)".into());
        values.push(Value::Text(dag.clone()));
    }
    if let Some(actor) = &q.actor {
        // `instr`, not LIKE: the text is matched literally (`%` and `_`
        // in an actor name mean themselves) and with its case.
        let any: Vec<String> = actor_matches(actor)
            .iter()
            .map(|m| {
                m.sql("instr", "actor", |t| {
                    values.push(Value::Text(t));
                    "?".into()
                })
            })
            .collect();
        conditions.push(format!("({})", any.join(" OR ")));
    }
    if let Some(owner) = &q.owner {
        let sql = owner_match(owner).sql("instr", "dag", |t| {
            values.push(Value::Text(t));
            "?".into()
        });
        conditions.push(format!("dag_run IN (SELECT id FROM dag_runs WHERE {sql})"));
    }
    if let Some(since) = q.since {
        conditions.push("at >= ?".into());
        values.push(Value::Integer(since.millis()));
    }
    let order = if q.newest { "DESC" } else { "ASC" };
    values.push(Value::Integer(q.limit as i64));
    let sql = format!(
        "SELECT {EVENT_COLUMNS} FROM events WHERE {} ORDER BY seq {order} LIMIT ?",
        conditions.join(" AND ")
    );
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut events = all(&mut stmt, rusqlite::params_from_iter(values), event_view)?;
    if q.newest {
        events.reverse();
    }
    Ok(events)
}
