//! `ax show` and `ax why`: one run, as a page of its fields or as a
//! sentence of why it is where it is.

use ax_protocol::api::RunView;
use ax_protocol::client::{Client, ClientError};
use ax_protocol::request::GetRun;

use super::out::Out;
use crate::cli::args::ShowArgs;
use crate::cli::exit;

/// Prints the run as `lines` has it (`format::runs::run_page`,
/// `format::why::why_lines`); with `--json`, the run itself.
pub(super) async fn run(
    c: &mut Client,
    o: &mut Out<'_>,
    args: &ShowArgs,
    lines: fn(&RunView) -> Vec<String>,
) -> Result<i32, ClientError> {
    let r = c.request(GetRun { id: args.run }).await?;
    if o.json {
        return Ok(o.print_json(&r));
    }
    o.say_all(lines(&r));
    Ok(exit::OK)
}
