//! `ax ls`.

use ax_protocol::client::{Client, ClientError};
use ax_protocol::request::{ListRuns, StateFilter};

use super::format::runs::{run_header, run_line};
use super::out::{Out, say};
use crate::cli::args::LsArgs;
use crate::cli::exit;

pub(super) async fn run(
    c: &mut Client,
    o: &mut Out<'_>,
    args: &LsArgs,
) -> Result<i32, ClientError> {
    // An answer is cut at a frame's size: ask on from where it stopped
    // until `limit` runs are in.
    let mut runs = Vec::new();
    let mut before = None;
    loop {
        let page = c
            .request(ListRuns {
                state: args.state.clone().map(StateFilter::Text),
                dag: args.dag.clone(),
                limit: Some(u64::from(args.limit) - runs.len() as u64),
                before,
                ..ListRuns::default()
            })
            .await?;
        runs.extend(page);
        let next = c
            .truncated
            .as_ref()
            .and_then(|t| t["next"]["before"].as_u64());
        match next {
            Some(b) if runs.len() < args.limit as usize => before = Some(b),
            _ => break,
        }
    }
    if o.json {
        return Ok(o.print_json(&runs));
    }
    say!(o, "{}", run_header());
    o.say_all(runs.iter().map(run_line));
    Ok(exit::OK)
}
