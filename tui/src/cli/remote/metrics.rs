//! `ax metrics`.

use ax_protocol::client::{Client, ClientError};
use ax_protocol::request::Metrics;

use super::out::Out;
use crate::cli::exit;

pub(super) async fn run(c: &mut Client, o: &mut Out<'_>) -> Result<i32, ClientError> {
    let answer = c.request(Metrics).await?;
    if o.json {
        return Ok(o.print_json(&answer));
    }
    o.say_all(answer.text.lines().map(str::to_owned));
    Ok(exit::OK)
}
