//! Runs and events: `ax ls`'s table, `ax show`'s page and the event lines
//! of `ax show` and `ax events`.

use ax_protocol::api::{AttemptView, EventView, RunView};
use ax_shared::Outcome;

use super::cells::{age, truncate};

/// The header of `ax ls`'s table, over [`run_line`]s.
pub(crate) fn run_header() -> String {
    format!(
        "{:>7}  {:<20} {:<16} {:<9} {:>7} {:>5} {:<8} {:>4}  WHY / MESSAGE",
        "ID", "DAG", "JOB", "STATE", "PRIO", "TRY", "POOL", "AGE"
    )
}

/// One run as a row of `ax ls`: id, DAG, job, state, priorities, attempts,
/// pool, age, and why it waits (or its message, or its end's reason).
pub(crate) fn run_line(r: &RunView) -> String {
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
    format!(
        "{:>7}  {:<20} {:<16} {:<9} {:>3}/{:<3} {:>2}/{:<2} {:<8} {:>4}  {}",
        r.id,
        truncate(&r.dag, 20),
        truncate(&r.job, 16),
        r.state,
        r.priority,
        r.effective_priority,
        r.attempts.len(),
        r.retries + 1,
        truncate(&r.pool, 8),
        age(r.created_at),
        detail
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
