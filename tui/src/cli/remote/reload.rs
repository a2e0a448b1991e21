//! `ax reload`.

use ax_protocol::client::{Client, ClientError};
use ax_protocol::request::{Reload, Status};

use super::out::{Out, say, tell};
use crate::cli::exit;

/// Exit 0 when every job file loaded; 1 when any has an error (each is
/// named on stderr: the last good version of its DAG stays in force).
pub(super) async fn run(c: &mut Client, o: &mut Out<'_>) -> Result<i32, ClientError> {
    let answer = c.request(Reload).await?;
    let code = if answer.errors > 0 {
        exit::FAILED
    } else {
        exit::OK
    };
    if o.json {
        o.print_json(&answer);
        return Ok(code);
    }
    say!(
        o,
        "reloaded: {} DAGs, {} with errors",
        answer.dags,
        answer.errors
    );
    if !answer.not_applied.is_empty() {
        tell!(
            o,
            "ax: changed but not applied until axd restarts: {}",
            answer.not_applied.join(", ")
        );
    }
    if answer.errors > 0 {
        // The reload's answer counts them; the status names them.
        let status = c.request(Status).await?;
        for e in &status.errors {
            tell!(o, "ax: error: {e}");
        }
    }
    Ok(code)
}
