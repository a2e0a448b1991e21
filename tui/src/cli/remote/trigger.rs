//! `ax trigger`.

use ax_protocol::api::{SubmitResult, TriggerOutcome};
use ax_protocol::client::{Client, ClientError};
use ax_protocol::request::{GetDag, Trigger};

use super::format::dags::trigger_line;
use super::out::{Out, say, tell};
use crate::cli::args::TriggerArgs;
use crate::cli::exit;

pub(super) async fn run(
    c: &mut Client,
    o: &mut Out<'_>,
    args: &TriggerArgs,
) -> Result<i32, ClientError> {
    let dag = &args.dag;
    let r = c
        .request(Trigger {
            dag: dag.clone(),
            force: args.force.then_some(true),
        })
        .await?;
    let code = exit_code(&r);
    if o.json {
        o.print_json(&r);
        return Ok(code);
    }
    // A paused DAG's new run waits for `ax resume`.
    let paused = !r.runs.is_empty()
        && c.request(GetDag { name: dag.clone() })
            .await
            .is_ok_and(|d| d.paused);
    say!(o, "{}", dag_run_of(&r));
    tell!(o, "ax: {}", trigger_line(&r, dag, paused));
    Ok(code)
}

/// The DAG run a trigger is about, printed alone on stdout: the one it
/// started, else (queued, skipped) the active one it met.
fn dag_run_of(r: &SubmitResult) -> u64 {
    match r.trigger {
        Some(TriggerOutcome::Queued { behind }) => behind,
        Some(TriggerOutcome::Skipped { active }) => active,
        _ => r.dag_run,
    }
}

/// 0 when a DAG run started or waits to start (queued), 1 when the
/// trigger was skipped: nothing will run for it.
fn exit_code(r: &SubmitResult) -> i32 {
    match r.trigger {
        Some(TriggerOutcome::Skipped { .. }) => exit::FAILED,
        _ => exit::OK,
    }
}
