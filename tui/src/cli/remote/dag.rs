//! `ax dag`: the DAG drawn as text, with `--run` each node's state.

use ax_protocol::api::DagView;
use ax_protocol::client::{Client, ClientError};
use ax_protocol::request::{GetDag, GetDagRun};
use ax_shared::RunState;
use serde_json::json;

use super::format::cells::in_zone;
use super::out::{Out, say, tell};
use crate::cli::args::DagArgs;
use crate::cli::exit;
use crate::dagdraw::{
    DagNode, LEGEND, layout, nodes_of_dag, nodes_of_dag_run, render_text, state_ansi, state_mark,
};

pub(super) async fn run(
    c: &mut Client,
    o: &mut Out<'_>,
    args: &DagArgs,
) -> Result<i32, ClientError> {
    let DagArgs { dag, run } = args;
    let mut schedule = None;
    let (nodes, states): (Vec<DagNode>, Vec<Option<RunState>>) = match *run {
        None => {
            let v = c.request(GetDag { name: dag.clone() }).await?;
            schedule = schedule_line(&v);
            (nodes_of_dag(&v), vec![None; v.jobs.len()])
        }
        Some(id) => {
            let v = c.request(GetDagRun { id }).await?;
            if v.dag != *dag {
                tell!(
                    o,
                    "ax: DAG run {id} belongs to DAG {}, not {dag:?}",
                    json!(v.dag)
                );
                return Ok(exit::NOT_FOUND);
            }
            nodes_of_dag_run(&v)
        }
    };
    let grid = layout(&nodes, &|i| state_mark(states[i]));
    if o.json {
        let _ = writeln!(
            o.out,
            "{}",
            json!({"dag": dag, "run": run, "lines": grid.lines()})
        );
        return Ok(exit::OK);
    }
    let colour_of = |i: usize| state_ansi(states[i]);
    if o.stdout.colour && run.is_some() {
        // The colours are ax's own escapes around job ids, which
        // job files and `submit` hold to `[A-Za-z0-9_.-]`.
        let _ = write!(o.out, "{}", render_text(&grid, Some(&colour_of)));
    } else {
        for line in render_text(&grid, None).lines() {
            say!(o, "{line}");
        }
    }
    if run.is_some() {
        say!(o, "");
        say!(o, "{LEGEND}");
    }
    if let Some(line) = schedule {
        say!(o, "");
        say!(o, "{line}");
    }
    Ok(exit::OK)
}

/// `schedule "0 9 * * *" in Europe/Berlin, next fire 2026-12-02 09:00
/// +01:00 Europe/Berlin`, for a DAG with a schedule.
fn schedule_line(v: &DagView) -> Option<String> {
    let schedule = v.schedule.as_deref()?;
    let zone = v.timezone.as_deref();
    let next = v
        .next_fire
        .map_or_else(|| "none".into(), |t| in_zone(t, zone));
    let mut line = format!(
        "schedule {schedule:?} in {}, next fire {next}",
        zone.unwrap_or("UTC")
    );
    if let Some(j) = &v.jitter {
        line.push_str(&format!(", each slot delayed by up to {j} (jitter)"));
    }
    if let Some(t) = v.planned_start {
        line.push_str(&format!("; a DAG run starts at {}", in_zone(t, zone)));
    }
    Some(line)
}
