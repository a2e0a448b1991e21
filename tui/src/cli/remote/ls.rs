//! `ax ls`.

use ax_protocol::api::RunView;
use ax_protocol::client::{Client, ClientError};
use ax_protocol::request::{ListRuns, StateFilter};

use super::dag_match::DagPattern;
use super::format::runs::{RunColumns, run_header, run_line};
use super::out::{Out, say, tell};
use crate::cli::args::LsArgs;
use crate::cli::exit;

pub(super) async fn run(
    c: &mut Client,
    o: &mut Out<'_>,
    args: &LsArgs,
) -> Result<i32, ClientError> {
    let runs = match &args.dag {
        None => runs_where(c, args, None, None, |_| true).await?,
        Some(text) => match of_dags(c, args, &DagPattern::new(text)).await? {
            Some(runs) => runs,
            None => {
                tell!(o, "ax: DAG {text:?} not found: no DAG or run matches it");
                return Ok(exit::NOT_FOUND);
            }
        },
    };
    if o.json {
        return Ok(o.print_json(&runs));
    }
    let columns = RunColumns::fit(&runs, table_width(o.stdout.terminal));
    say!(o, "{}", run_header(&columns));
    o.say_all(runs.iter().map(|r| run_line(r, &columns)));
    Ok(exit::OK)
}

/// The runs of the DAGs `pattern` names: a literal is a DAG's name when
/// runs or a DAG have it, else a prefix; a glob matches whole names.
/// `None` when no DAG and no run matches.
async fn of_dags(
    c: &mut Client,
    args: &LsArgs,
    pattern: &DagPattern,
) -> Result<Option<Vec<RunView>>, ClientError> {
    if let DagPattern::Literal(name) = pattern {
        let exact = runs_where(c, args, Some(name), None, |_| true).await?;
        if !exact.is_empty() {
            return Ok(Some(exact));
        }
    }
    let dags = c.all_dags().await?;
    if let DagPattern::Literal(name) = pattern
        && dags.iter().any(|d| d.name == *name)
    {
        return Ok(Some(Vec::new()));
    }
    let needle = Some(pattern.needle()).filter(|n| !n.is_empty());
    let runs = runs_where(c, args, None, needle, |r| pattern.matches(&r.dag)).await?;
    let known = dags.iter().any(|d| pattern.matches(&d.name));
    Ok((known || !runs.is_empty()).then_some(runs))
}

/// Up to `--limit` runs, newest first, of DAG `dag` and with `needle` in
/// their DAG or job name, that `keep` keeps. An answer is cut at a
/// frame's size, and `keep` may drop some: ask on from where it stopped.
async fn runs_where(
    c: &mut Client,
    args: &LsArgs,
    dag: Option<&String>,
    needle: Option<&str>,
    keep: impl Fn(&RunView) -> bool,
) -> Result<Vec<RunView>, ClientError> {
    let limit = args.limit as usize;
    let mut runs = Vec::new();
    let mut before = None;
    loop {
        let page = c
            .request(ListRuns {
                state: args.state.clone().map(StateFilter::Text),
                dag: dag.cloned(),
                filter: needle.map(str::to_string),
                limit: Some((limit - runs.len()) as u64),
                before,
                hooks: Some(args.hooks),
                dag_run: None,
            })
            .await?;
        let full = page.len() == limit - runs.len();
        let last = page.last().map(|r| r.id);
        runs.extend(page.into_iter().filter(&keep));
        let next = c
            .truncated
            .as_ref()
            .and_then(|t| t["next"]["before"].as_u64())
            .or(last.filter(|_| full));
        match next {
            Some(b) if runs.len() < limit => before = Some(b),
            _ => return Ok(runs),
        }
    }
}

/// The width `ax ls` fits its table to: `COLUMNS` when set, else the
/// terminal's when stdout is one; `None` (cut nothing) for a pipe or a
/// file.
fn table_width(terminal: bool) -> Option<usize> {
    let columns = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok());
    columns.filter(|&n: &usize| n > 0).or_else(|| {
        terminal
            .then(|| crossterm::terminal::size().ok())
            .flatten()
            .map(|(w, _)| usize::from(w))
    })
}
