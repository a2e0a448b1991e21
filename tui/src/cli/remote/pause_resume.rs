//! `ax pause` and `ax resume`: one DAG, or every DAG with `--all`.

use ax_protocol::Method;
use ax_protocol::client::{Client, ClientError};
use ax_protocol::request::DagTarget;

use super::out::{Out, quiet_request, tell};
use crate::cli::args::DagTargetArgs;
use crate::cli::exit;

/// Sends `request` (`Pause` or `Resume`) for the DAG or `--all`; the
/// answer is printed only with `--json`.
pub(super) async fn run<M: Method>(
    c: &mut Client,
    o: &mut Out<'_>,
    args: &DagTargetArgs,
    request: impl FnOnce(DagTarget) -> M,
) -> Result<i32, ClientError> {
    if args.dag.is_none() && !args.all {
        tell!(o, "ax: name a DAG or give --all");
        return Ok(exit::USAGE);
    }
    let target = DagTarget {
        dag: args.dag.clone(),
        all: args.all,
    };
    quiet_request(c, o, request(target)).await
}
