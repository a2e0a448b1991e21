//! `ax cancel` and `ax retry`: one request per run, or one for a whole
//! DAG run (`ax cancel --dag-run`).

use ax_protocol::Method;
use ax_protocol::client::{Client, ClientError};
use ax_protocol::request::{Cancel, CancelDagRun, Retry};
use serde_json::{Value, json};

use super::failure;
use super::out::{Out, say, tell};
use crate::cli::args::{CancelArgs, RetryArgs};
use crate::cli::exit;

pub(super) async fn cancel(
    c: &mut Client,
    o: &mut Out<'_>,
    args: &CancelArgs,
) -> Result<i32, ClientError> {
    if let Some(dag_run) = args.dag_run {
        return cancel_dag_run(c, o, dag_run).await;
    }
    each(c, o, "cancelled", &args.runs, |id| Cancel {
        id: Some(id),
        ids: None,
    })
    .await
}

pub(super) async fn retry(
    c: &mut Client,
    o: &mut Out<'_>,
    args: &RetryArgs,
) -> Result<i32, ClientError> {
    each(c, o, "retried", &args.runs, |id| Retry { id }).await
}

async fn cancel_dag_run(c: &mut Client, o: &mut Out<'_>, dag_run: u64) -> Result<i32, ClientError> {
    c.request(CancelDagRun { id: dag_run }).await?;
    if o.json {
        let _ = writeln!(o.out, "{}", json!({"dag_run": dag_run, "ok": true}));
    } else {
        say!(o, "cancelled DAG run {dag_run}");
    }
    Ok(exit::OK)
}

/// One request per run (at least one); the exit code is the worst of them.
async fn each<M: Method>(
    c: &mut Client,
    o: &mut Out<'_>,
    past: &str,
    runs: &[u64],
    params: impl Fn(u64) -> M,
) -> Result<i32, ClientError> {
    if runs.is_empty() {
        tell!(o, "ax: give at least one run id");
        return Ok(exit::USAGE);
    }
    let mut worst = exit::OK;
    let mut results = Vec::new();
    for &id in runs {
        match c.request(params(id)).await {
            Ok(_) => {
                results.push(json!({"id": id, "ok": true}));
                if !o.json {
                    say!(o, "{past} {id}");
                }
            }
            Err(e) => {
                worst = worst.max(failure::exit_code(&e));
                results.push(json!({"id": id, "ok": false, "error": e.to_string()}));
                if !o.json {
                    let message = failure::message(&e);
                    // Named once: axd's message may already begin with it.
                    if message.starts_with(&format!("run {id} ")) {
                        tell!(o, "ax: {message}");
                    } else {
                        tell!(o, "ax: run {id}: {message}");
                    }
                }
            }
        }
    }
    if o.json {
        let _ = writeln!(o.out, "{}", Value::Array(results));
    }
    Ok(worst)
}
