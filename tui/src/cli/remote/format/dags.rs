//! DAGs: `ax dags`'s table and what `ax trigger` did.

use ax_protocol::api::{DagView, SubmitResult, TriggerOutcome};
use ax_shared::jobfile::FileError;

use super::cells::{in_zone, truncate};
use super::cluster;

/// `ax dags`: a header, one row per DAG, then one line per DAG the
/// cluster's alive nodes hold in different versions. The NODES column is
/// shown only in a cluster.
pub(crate) fn dags_table(dags: &[DagView]) -> Vec<String> {
    let cluster = dags.iter().any(|d| d.versions.is_some());
    let nodes_of = |d: &DagView| match (&d.versions, cluster) {
        (_, false) => String::new(),
        (Some(v), true) => format!("{:<16} ", v.summary()),
        (None, true) => format!("{:<16} ", "-"),
    };
    // Fire times in each DAG's zone, with its offset and name.
    let next_of = |d: &DagView| {
        d.next_fire
            .map_or("-".into(), |t| in_zone(t, d.timezone.as_deref()))
    };
    let next_width = dags
        .iter()
        .map(|d| next_of(d).chars().count())
        .chain([22])
        .max()
        .unwrap_or(22);
    let mut lines = vec![format!(
        "{:<24} {:<16} {:<nw$} {:<7} {:<10} {:<24} {}ERROR",
        "DAG",
        "SCHEDULE",
        "NEXT FIRE",
        "PAUSED",
        "LAST RUN",
        "AT",
        if cluster {
            format!("{:<16} ", "NODES")
        } else {
            String::new()
        },
        nw = next_width
    )];
    for d in dags {
        lines.push(format!(
            "{:<24} {:<16} {:<nw$} {:<7} {:<10} {:<24} {}{}",
            truncate(&d.name, 24),
            d.schedule.as_deref().unwrap_or("-"),
            next_of(d),
            if d.paused { "yes" } else { "no" },
            d.last_run_state.map_or("-", |s| s.as_str()),
            match d.planned_start {
                Some(t) => format!("starts {}", in_zone(t, d.timezone.as_deref())),
                None => d.last_run_at.map_or("-".into(), |t| t.to_string()),
            },
            nodes_of(d),
            d.error.as_ref().map(|e| e.to_string()).unwrap_or_default(),
            nw = next_width
        ));
    }
    lines.extend(cluster::differences(dags));
    lines
}

/// The jobs folder's errors of files no DAG of `dags` comes from: names
/// starting with `@`, folders that cannot be read (docs/users.md).
pub(crate) fn other_errors(dags: &[DagView], errors: &[FileError]) -> Vec<String> {
    errors
        .iter()
        .filter(|e| !dags.iter().any(|d| d.file == e.file))
        .map(|e| format!("error: {e}"))
        .collect()
}

/// What a trigger did, in words (`ax trigger` prints it on stderr), with
/// the way around a queue or a skip, and why the new run waits when its
/// DAG is `paused`.
pub(crate) fn trigger_line(r: &SubmitResult, dag: &str, paused: bool) -> String {
    let summary = r.trigger_summary();
    let summary = match r.trigger {
        Some(TriggerOutcome::Queued { .. } | TriggerOutcome::Skipped { .. }) => {
            format!("{summary}; use --force to start one now")
        }
        _ => summary,
    };
    if paused {
        format!("{summary} (held: {dag} is paused; `ax resume {dag}` lets it run)")
    } else {
        summary
    }
}
