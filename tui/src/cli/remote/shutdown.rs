//! `ax shutdown`.

use ax_protocol::client::{Client, ClientError};
use ax_protocol::request::Shutdown;

use super::out::{Out, say};
use crate::cli::exit;

/// Asks axd to stop, then waits until it has (its connection closes).
/// Running jobs keep running for the next axd unless `stop_jobs`.
pub(super) async fn run(
    c: &mut Client,
    o: &mut Out<'_>,
    stop_jobs: bool,
) -> Result<i32, ClientError> {
    let answer = c.request(Shutdown { stop_jobs }).await?;
    if o.json {
        o.print_json(&answer);
    } else if answer.stop_jobs {
        say!(
            o,
            "axd is stopping its {} running jobs (SIGTERM, shutdown_grace, SIGKILL), then itself",
            answer.running
        );
    } else {
        say!(
            o,
            "axd is stopping; its {} running jobs keep running and the next axd takes them over",
            answer.running
        );
    }
    // axd closes the connection as it exits.
    while c.next_notification().await.is_ok() {}
    Ok(exit::OK)
}
