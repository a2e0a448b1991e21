//! `ax dags`.

use ax_protocol::client::{Client, ClientError};

use super::format::dags::dags_table;
use super::out::Out;
use crate::cli::exit;

pub(super) async fn run(c: &mut Client, o: &mut Out<'_>) -> Result<i32, ClientError> {
    let dags = c.all_dags().await?;
    if o.json {
        return Ok(o.print_json(&dags));
    }
    o.say_all(dags_table(&dags));
    Ok(exit::OK)
}
