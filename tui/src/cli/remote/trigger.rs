//! `ax trigger`.

use ax_protocol::client::{Client, ClientError};
use ax_protocol::request::{GetDag, Trigger};

use super::format::dags::trigger_line;
use super::out::{Out, tell};
use super::submit::print_submitted;
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
    if !o.json {
        // A paused DAG's new run waits for `ax resume`.
        let paused = !r.runs.is_empty()
            && c.request(GetDag { name: dag.clone() })
                .await
                .is_ok_and(|d| d.paused);
        tell!(o, "ax: {}", trigger_line(&r, dag, paused));
        if r.runs.is_empty() {
            return Ok(exit::OK);
        }
    }
    Ok(print_submitted(o, r))
}
