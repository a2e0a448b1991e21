//! `ax submit`, and the answer it shares with `ax trigger`.

use ax_protocol::api::SubmitResult;
use ax_protocol::client::{Client, ClientError};
use ax_protocol::request::Submit;

use super::out::{Out, say, tell};
use crate::cli::args::SubmitArgs;
use crate::cli::exit;

pub(super) async fn run(
    c: &mut Client,
    o: &mut Out<'_>,
    args: &SubmitArgs,
) -> Result<i32, ClientError> {
    let r = c.request(params(args)?).await?;
    Ok(print_submitted(o, r))
}

/// The request: a job file's text (named after the file unless
/// `--name`), or one command (a single word list runs with `sh -c`).
fn params(args: &SubmitArgs) -> Result<Submit, ClientError> {
    let mut p = Submit {
        priority: args.priority.map(u64::from),
        pool: args.pool.clone(),
        timeout: args.timeout.clone(),
        retries: args.retries.map(u64::from),
        heartbeat: args.heartbeat.clone(),
        unique: args.unique.clone(),
        unique_for: args.unique_for.clone(),
        after: (!args.after.is_empty()).then(|| args.after.clone()),
        name: args.name.clone(),
        env: (!args.env.is_empty()).then(|| args.env.iter().cloned().collect()),
        secret_env: (!args.secret_env.is_empty()).then(|| args.secret_env.clone()),
        user: args.user.clone(),
        ..Submit::default()
    };
    match &args.file {
        Some(f) => {
            p.toml =
                Some(std::fs::read_to_string(f).map_err(|e| {
                    ClientError::Protocol(format!("cannot read {}: {e}", f.display()))
                })?);
            p.name = Some(
                args.name
                    .clone()
                    .or_else(|| f.file_stem().and_then(|s| s.to_str()).map(str::to_string))
                    .unwrap_or_else(|| "adhoc".into()),
            );
            p.file = Some(f.display().to_string());
        }
        None => match args.command.as_slice() {
            [one] => p.command = Some(one.clone()),
            all => p.argv = Some(all.to_vec()),
        },
    }
    Ok(p)
}

/// The new run's id (the DAG run's when it has several runs) on stdout,
/// and on stderr whether an unfinished run with the same key was
/// returned instead.
fn print_submitted(o: &mut Out<'_>, r: SubmitResult) -> i32 {
    if o.json {
        return o.print_json(&r);
    }
    let ids: Vec<String> = r.runs.iter().map(u64::to_string).collect();
    if r.runs.len() == 1 {
        say!(o, "{}", ids[0]);
    } else {
        say!(o, "{}", r.dag_run);
    }
    if r.deduplicated {
        tell!(
            o,
            "ax: deduplicated: an unfinished run with this key exists (DAG run {}, runs {})",
            r.dag_run,
            ids.join(" ")
        );
    }
    exit::OK
}
