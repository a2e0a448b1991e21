//! Runs and events: `ax ls`'s table, `ax show`'s page and the event lines
//! of `ax show` and `ax events`.

use ax_protocol::api::{AttemptView, EventView, RunView};
use ax_shared::Outcome;

use super::cells::{age, truncate};

/// The widths of `ax ls`'s name columns, and of its last one (`None`:
/// uncut).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RunColumns {
    pub(crate) dag: usize,
    pub(crate) job: usize,
    pub(crate) detail: Option<usize>,
}

/// What the columns other than DAG, JOB and WHY take, separators included.
const FIXED_WIDTH: usize = 50;
/// The narrowest the name columns get on a narrow terminal, and the
/// room kept for WHY / MESSAGE before they shrink.
const MIN_DAG: usize = 20;
const MIN_JOB: usize = 16;
const MIN_DETAIL: usize = 24;

impl RunColumns {
    /// Each name column as wide as its longest name; within `width`
    /// (a terminal's, or `COLUMNS`), WHY / MESSAGE gives way first, down
    /// to `MIN_DETAIL`, then the longer name column, then the other, down
    /// to their minimums (a line still too long wraps). Without `width`
    /// (a pipe, a file) nothing is cut.
    pub(crate) fn fit(runs: &[RunView], width: Option<usize>) -> RunColumns {
        let longest = |f: fn(&RunView) -> &str, header: &str| {
            runs.iter()
                .map(|r| f(r).chars().count())
                .chain([header.len()])
                .max()
                .unwrap_or(0)
        };
        let (mut dag, mut job) = (longest(|r| &r.dag, "DAG"), longest(|r| &r.job, "JOB"));
        let Some(width) = width else {
            return RunColumns {
                dag,
                job,
                detail: None,
            };
        };
        let room = width.saturating_sub(FIXED_WIDTH + MIN_DETAIL);
        while dag + job > room {
            let shrink_dag = dag > MIN_DAG && (dag >= job || job <= MIN_JOB);
            if shrink_dag {
                dag -= 1;
            } else if job > MIN_JOB {
                job -= 1;
            } else {
                break;
            }
        }
        let detail = width
            .saturating_sub(FIXED_WIDTH + dag + job)
            .max(MIN_DETAIL);
        RunColumns {
            dag,
            job,
            detail: Some(detail),
        }
    }
}

/// The header of `ax ls`'s table, over [`run_line`]s.
pub(crate) fn run_header(c: &RunColumns) -> String {
    format!(
        "{:>7}  {:<dw$} {:<jw$} {:<9} {:>7} {:>5} {:<8} {:>4}  WHY / MESSAGE",
        "ID",
        "DAG",
        "JOB",
        "STATE",
        "PRIO",
        "TRY",
        "POOL",
        "AGE",
        dw = c.dag,
        jw = c.job
    )
}

/// One run as a row of `ax ls`: id, DAG, job, state, priorities, attempts,
/// pool, age, and why it waits (or its message, or its end's reason).
pub(crate) fn run_line(r: &RunView, c: &RunColumns) -> String {
    let detail = r
        .why
        .clone()
        .or_else(|| {
            r.message.clone().map(|m| match r.progress {
                Some(p) => format!("{:.0}% {m}", p * 100.0),
                None => m,
            })
        })
        .or_else(|| r.reason.clone())
        .unwrap_or_default();
    let detail = match c.detail {
        Some(n) => truncate(&detail, n),
        None => detail,
    };
    format!(
        "{:>7}  {:<dw$} {:<jw$} {:<9} {:>3}/{:<3} {:>2}/{:<2} {:<8} {:>4}  {}",
        r.id,
        truncate(&r.dag, c.dag),
        truncate(&r.job, c.job),
        r.state,
        r.priority,
        r.effective_priority,
        r.attempts.len(),
        r.retries + 1,
        truncate(&r.pool, 8),
        age(r.created_at),
        detail,
        dw = c.dag,
        jw = c.job
    )
}

/// `ax show`: the run's fields, then one line per attempt and per event.
pub(crate) fn run_page(r: &RunView) -> Vec<String> {
    let mut lines = vec![
        format!("run {}  {}/{}  (DAG run {})", r.id, r.dag, r.job, r.dag_run),
        format!("  state       {}", r.state),
    ];
    if let Some(why) = &r.why {
        lines.push(format!("  why         {why}"));
    }
    lines.push(format!(
        "  priority    {} (effective {})",
        r.priority, r.effective_priority
    ));
    lines.push(format!("  pool        {}", r.pool));
    if let Some(user) = &r.user {
        lines.push(format!("  user        {user}"));
    }
    lines.push(format!("  attempts    {}", attempts_line(r)));
    for (k, t) in [
        ("created", r.created_at),
        ("ready", r.ready_at),
        ("started", r.started_at),
        ("finished", r.finished_at),
        ("next", r.next_at),
    ] {
        if let Some(t) = t {
            lines.push(format!("  {k:<11} {t}"));
        }
    }
    if let Some(m) = &r.message {
        let progress = r
            .progress
            .map(|p| format!(" ({:.0}%)", p * 100.0))
            .unwrap_or_default();
        lines.push(format!("  message     {m}{progress}"));
    }
    if let Some(reason) = &r.reason {
        lines.push(format!("  reason      {reason}"));
    }
    lines.push("attempts:".into());
    lines.extend(r.attempts.iter().map(attempt_line));
    lines.push("events:".into());
    lines.extend(
        r.events
            .iter()
            .flatten()
            .map(|e| format!("  {}", event_line(e))),
    );
    lines
}

/// One attempt of `ax show`: number, start → end, outcome, exit code or
/// signal, node, and the output lost when the log is incomplete.
fn attempt_line(a: &AttemptView) -> String {
    format!(
        "  #{:<2} {} → {}  {}{}{}{}{}",
        a.n,
        a.started_at.map_or("-".into(), |t| t.to_string()),
        a.finished_at.map_or("running".into(), |t| t.to_string()),
        a.outcome.map_or("", |o| o.as_str()),
        a.exit_code
            .map(|c| format!(" exit {c}"))
            .unwrap_or_default(),
        a.signal.map(|s| format!(" signal {s}")).unwrap_or_default(),
        a.node
            .as_deref()
            .map(|n| format!(" on {n}"))
            .unwrap_or_default(),
        if a.log_lost > 0 {
            format!("  log incomplete: {} bytes of output lost", a.log_lost)
        } else {
            String::new()
        }
    )
}

/// `3 of at most 4`; attempts that used no retry (interrupted by a stop
/// or a dead node, preempted) are set apart, as the limit does not count
/// them: `2 (1 of at most 1 counted; 1 interrupted or preempted)`.
fn attempts_line(r: &RunView) -> String {
    let free = r
        .attempts
        .iter()
        .filter(|a| matches!(a.outcome, Some(Outcome::Interrupted | Outcome::Preempted)))
        .count();
    let all = r.attempts.len();
    let most = r.retries + 1;
    if free == 0 {
        format!("{all} of at most {most}")
    } else {
        format!(
            "{all} ({} of at most {most} counted; {free} interrupted or preempted)",
            all - free
        )
    }
}

/// One event: seq, time, subject (run, DAG run or `-`), state change,
/// reason and actor.
pub(crate) fn event_line(e: &EventView) -> String {
    let subject = match e.run {
        Some(r) => format!("run {r}"),
        // About axd or a DAG (a pause, a reload): the reason says which.
        None if e.dag_run == 0 => "-".to_string(),
        None => format!("dag run {}", e.dag_run),
    };
    let change = match (&e.from, &e.to) {
        (Some(f), Some(t)) if f != t => format!("{f} → {t}"),
        (None, Some(t)) => format!("→ {t}"),
        _ => String::new(),
    };
    format!(
        "{:>6} {} {subject:<12} {change:<22} {} [{}]",
        e.seq, e.time, e.reason, e.actor
    )
}

#[cfg(test)]
mod tests {
    use super::attempts_line;
    use ax_protocol::api::{AttemptView, RunView};
    use ax_shared::Outcome;

    #[test]
    fn attempts_that_used_no_retry_are_set_apart() {
        let attempt = |outcome| AttemptView {
            outcome: Some(outcome),
            ..AttemptView::default()
        };
        let mut r = RunView {
            retries: 0,
            attempts: vec![attempt(Outcome::Failed)],
            ..RunView::default()
        };
        assert_eq!(attempts_line(&r), "1 of at most 1");
        r.attempts.insert(0, attempt(Outcome::Interrupted));
        assert_eq!(
            attempts_line(&r),
            "2 (1 of at most 1 counted; 1 interrupted or preempted)"
        );
    }
}

#[cfg(test)]
mod width_tests {
    use super::{RunColumns, run_header, run_line};
    use ax_protocol::api::RunView;

    fn run(dag: &str, job: &str) -> RunView {
        RunView {
            id: 7,
            dag: dag.into(),
            job: job.into(),
            pool: "default".into(),
            why: Some("waiting on deps: extract".into()),
            ..RunView::default()
        }
    }

    #[test]
    fn names_are_whole_without_a_width_and_fit_within_one() {
        let runs = [run(
            "team-a/nightly-warehouse-rebuild",
            "load-customers-full",
        )];
        let all = RunColumns::fit(&runs, None);
        let line = run_line(&runs[0], &all);
        assert!(
            line.contains("team-a/nightly-warehouse-rebuild load-customers-full "),
            "{line}"
        );
        assert!(line.ends_with("waiting on deps: extract"), "{line}");
        assert_eq!(run_header(&all).find("JOB"), line.find("load-"));

        // Wide enough: nothing cut.
        assert_eq!(RunColumns::fit(&runs, Some(200)).dag, 32);
        // 130 columns: the names keep their width, WHY gives way.
        let c = RunColumns::fit(&runs, Some(130));
        assert_eq!((c.dag, c.job), (32, 19));
        // 80 columns: the longer name shrinks first, to its minimum.
        let c = RunColumns::fit(&runs, Some(80));
        assert_eq!((c.dag, c.job, c.detail), (20, 16, Some(24)));
        let line = run_line(&runs[0], &c);
        assert!(
            line.contains("team-a/nightly-ware… load-customers-… "),
            "{line}"
        );
        // Between: the longer name gives way until the line fits.
        let c = RunColumns::fit(&runs, Some(120));
        assert_eq!((c.dag, c.job, c.detail), (27, 19, Some(24)));
        assert_eq!(run_line(&runs[0], &c).chars().count(), 120);
    }
}
