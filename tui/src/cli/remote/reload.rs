//! `ax reload`.

use ax_protocol::client::{Client, ClientError};
use ax_protocol::request::Reload;

use super::out::{Out, say, tell};
use crate::cli::exit;

pub(super) async fn run(c: &mut Client, o: &mut Out<'_>) -> Result<i32, ClientError> {
    let answer = c.request(Reload).await?;
    if o.json {
        return Ok(o.print_json(&answer));
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
    Ok(exit::OK)
}
