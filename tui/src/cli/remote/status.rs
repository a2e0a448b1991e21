//! `ax status`.

use ax_protocol::client::{Client, ClientError};
use ax_protocol::request::Status;

use super::format::status::status_page;
use super::out::Out;
use crate::cli::exit;

pub(super) async fn run(c: &mut Client, o: &mut Out<'_>) -> Result<i32, ClientError> {
    let s = c.request(Status).await?;
    if o.json {
        return Ok(o.print_json(&s));
    }
    o.say_all(status_page(&s));
    Ok(exit::OK)
}
