//! `ax heartbeat`: from inside a job, for the run in `$AX_RUN_ID`.

use ax_protocol::client::{Client, ClientError};
use ax_protocol::request::Heartbeat;

use super::out::{Out, quiet_request, tell};
use crate::cli::args::HeartbeatArgs;
use crate::cli::exit;

pub(super) async fn run(
    c: &mut Client,
    o: &mut Out<'_>,
    args: &HeartbeatArgs,
) -> Result<i32, ClientError> {
    let Some(run) = std::env::var("AX_RUN_ID")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    else {
        tell!(
            o,
            "ax heartbeat: $AX_RUN_ID is not set; run this from inside an ax job"
        );
        return Ok(exit::USAGE);
    };
    let beat = Heartbeat {
        run,
        message: args.message.clone(),
        progress: args.progress,
    };
    quiet_request(c, o, beat).await
}
