//! `ax show`.

use ax_protocol::client::{Client, ClientError};
use ax_protocol::request::GetRun;

use super::format::runs::run_page;
use super::out::Out;
use crate::cli::args::ShowArgs;
use crate::cli::exit;

pub(super) async fn run(
    c: &mut Client,
    o: &mut Out<'_>,
    args: &ShowArgs,
) -> Result<i32, ClientError> {
    let r = c.request(GetRun { id: args.run }).await?;
    if o.json {
        return Ok(o.print_json(&r));
    }
    o.say_all(run_page(&r));
    Ok(exit::OK)
}
