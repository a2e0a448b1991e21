//! `ax why RUN`: where a run is and why, in a sentence, with what to do
//! next: what it waits on (its deps, a full pool, a paused DAG, a backoff
//! or the retry budget until a time), or how it ended (exit code, signal,
//! timeout, cancelled by whom).

use ax_protocol::api::{AttemptView, EventView, RunView};
use ax_shared::{Outcome, RunState};

/// Every line of `ax why`: the run, then why, then the next step.
pub(crate) fn why_lines(r: &RunView) -> Vec<String> {
    let mut lines = vec![format!(
        "run {} ({}/{}, DAG run {}) is {}",
        r.id, r.dag, r.job, r.dag_run, r.state
    )];
    lines.extend(explanation(r));
    lines
}

fn explanation(r: &RunView) -> Vec<String> {
    let id = r.id;
    let last = r.attempts.last();
    match r.state {
        RunState::Waiting | RunState::Delayed | RunState::Ready => {
            let why = r
                .why
                .clone()
                .unwrap_or_else(|| r.reason.clone().unwrap_or_default());
            let mut out = vec![format!("because: {why}")];
            if why.starts_with("DAG paused") {
                out.push(format!("`ax resume {}` lets it start", r.dag));
            }
            if let Some(a) = last.filter(|a| a.outcome.is_some()) {
                out.push(format!("its last attempt: {}", attempt_end(a)));
            }
            out
        }
        RunState::Running => {
            let mut out = vec![format!(
                "attempt {} of at most {}, started {}",
                r.attempts.len(),
                r.retries + 1,
                r.started_at.map_or("-".into(), |t| t.to_string())
            )];
            if let Some(m) = &r.message {
                out.push(format!("its last heartbeat said: {m}"));
            }
            out.push(format!("`ax logs -f {id}` follows its output"));
            out
        }
        RunState::Success => vec![format!(
            "it succeeded at {} on attempt {}",
            finished(r),
            r.attempts.len()
        )],
        RunState::Failed | RunState::TimedOut => {
            let how = last.map_or_else(|| r.reason.clone().unwrap_or_default(), attempt_end);
            vec![
                format!(
                    "it {how} at {}, attempt {} of at most {}",
                    finished(r),
                    r.attempts.len(),
                    r.retries + 1
                ),
                format!("`ax logs {id}` shows its output; `ax retry {id}` runs it again"),
            ]
        }
        RunState::Cancelled => vec![cancelled(r)],
    }
}

/// How an ended attempt ended: `failed with exit 3`, `was killed by
/// signal 9`, `timed out`, `stalled (no heartbeat)`, …
fn attempt_end(a: &AttemptView) -> String {
    let code = match (a.exit_code, a.signal) {
        (_, Some(s)) => format!(" (signal {s})"),
        (Some(c), None) => format!(" with exit {c}"),
        (None, None) => String::new(),
    };
    match a.outcome {
        Some(Outcome::Success) => "succeeded".into(),
        Some(Outcome::Failed) => format!("failed{code}"),
        Some(Outcome::TimedOut) => format!("timed out (its timeout killed it){code}"),
        Some(Outcome::Stalled) => format!("stalled: no heartbeat in time{code}"),
        Some(Outcome::SpawnError) => "could not be started".into(),
        Some(Outcome::Cancelled) => format!("was cancelled{code}"),
        Some(Outcome::Preempted) => "was preempted".into(),
        Some(Outcome::Interrupted) => "was interrupted (axd stopped it)".into(),
        None => "is running".into(),
    }
}

/// Who cancelled it and why: from the event that ended it, and for a
/// run that was running, who asked (the `cancel requested` event: the
/// end itself is the scheduler's, once the process is gone).
fn cancelled(r: &RunView) -> String {
    let events = || r.events.iter().flatten().rev();
    let end: Option<&EventView> = events().find(|e| e.to == Some(RunState::Cancelled));
    let asked = events().find(|e| e.reason.starts_with("cancel requested"));
    let reason = end
        .map(|e| e.reason.clone())
        .or_else(|| r.reason.clone())
        .unwrap_or_default();
    let because = match reason.strip_prefix("upstream_failed: ") {
        Some(job) => format!("because its dependency {job} did not succeed"),
        None if reason == "cancelled" || reason.is_empty() => String::new(),
        None => format!("({reason})"),
    };
    let by = asked
        .or(end)
        .map(|e| format!(" by {}", e.actor))
        .unwrap_or_default();
    let mut line = format!("it was cancelled{by} at {}", finished(r));
    if !because.is_empty() {
        line.push(' ');
        line.push_str(&because);
    }
    line
}

fn finished(r: &RunView) -> String {
    r.finished_at.map_or("-".into(), |t| t.to_string())
}

#[cfg(test)]
mod tests {
    use super::why_lines;
    use ax_protocol::api::{AttemptView, EventView, RunView};
    use ax_shared::time::Timestamp;
    use ax_shared::{Outcome, RunState};

    fn run(state: RunState) -> RunView {
        RunView {
            id: 12,
            dag: "etl".into(),
            job: "load".into(),
            dag_run: 3,
            state,
            finished_at: Some(Timestamp::from_millis(0)),
            ..RunView::default()
        }
    }

    #[test]
    fn each_state_says_why_in_words() {
        let mut r = run(RunState::Waiting);
        r.why = Some("waiting for extract (running)".into());
        assert_eq!(
            why_lines(&r),
            [
                "run 12 (etl/load, DAG run 3) is waiting",
                "because: waiting for extract (running)"
            ]
        );
        r.state = RunState::Ready;
        r.why = Some("DAG paused".into());
        assert_eq!(why_lines(&r)[2], "`ax resume etl` lets it start");

        let mut r = run(RunState::Failed);
        r.retries = 2;
        r.attempts = (1..=3)
            .map(|n| AttemptView {
                n,
                outcome: Some(Outcome::Failed),
                exit_code: Some(3),
                ..AttemptView::default()
            })
            .collect();
        let l = why_lines(&r);
        assert!(l[1].starts_with("it failed with exit 3 at "), "{l:?}");
        assert!(l[1].ends_with("attempt 3 of at most 3"), "{l:?}");

        let mut r = run(RunState::Cancelled);
        r.events = Some(vec![EventView {
            to: Some(RunState::Cancelled),
            reason: "cancelled".into(),
            actor: "alice (uid 1000) via ax".into(),
            ..EventView::default()
        }]);
        let l = why_lines(&r);
        assert!(
            l[1].starts_with("it was cancelled by alice (uid 1000) via ax at "),
            "{l:?}"
        );
        // A running run: the scheduler ends it once the process is gone.
        let mut ended = r.clone();
        let ask = EventView {
            reason: "cancel requested: stopping the process group".into(),
            ..ended.events.as_ref().unwrap()[0].clone()
        };
        let end = EventView {
            reason: "attempt 1 cancelled (signal 15)".into(),
            actor: "scheduler".into(),
            ..ask.clone()
        };
        ended.events = Some(vec![
            EventView {
                to: Some(RunState::Running),
                ..ask
            },
            end,
        ]);
        let l = why_lines(&ended);
        assert!(
            l[1].starts_with("it was cancelled by alice (uid 1000) via ax at "),
            "{l:?}"
        );
        assert!(l[1].ends_with("(attempt 1 cancelled (signal 15))"), "{l:?}");
        r.events.as_mut().unwrap()[0].reason = "upstream_failed: extract".into();
        r.events.as_mut().unwrap()[0].actor = "scheduler".into();
        let l = why_lines(&r);
        assert!(
            l[1].ends_with("because its dependency extract did not succeed"),
            "{l:?}"
        );
    }
}
