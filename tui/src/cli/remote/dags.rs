//! `ax dags`.

use ax_protocol::client::{Client, ClientError};
use ax_protocol::request::Status;

use super::format::dags::{dags_table, other_errors};
use super::out::Out;
use crate::cli::exit;

pub(super) async fn run(c: &mut Client, o: &mut Out<'_>) -> Result<i32, ClientError> {
    let dags = c.all_dags().await?;
    if o.json {
        return Ok(o.print_json(&dags));
    }
    o.say_all(dags_table(&dags));
    // Errors of the jobs folder that name no DAG (a refused `@` name, a
    // folder that cannot be read) are listed below the table.
    let status = c.request(Status).await?;
    o.say_all(other_errors(&dags, &status.errors));
    Ok(exit::OK)
}
