//! What the runs and events views read out of a run or an event, in one
//! place so that every cell and the detail pane say the same: the run's
//! name, its age and duration, its tries, why it is where it is (who
//! cancelled it), and what started a DAG run.

use ax_protocol::api::{EventView, RunView};
use ax_shared::time::elapsed;
use ax_shared::{Outcome, RunState};
use chrono::{DateTime, Utc};

use crate::console::theme::parse;

/// `dag/job`, or the DAG's name alone when the job is named by it: a
/// single-job DAG file's job id is the last path segment of its DAG name
/// (`team-a/cleanup`), and a hook's DAG run `<dag>:<hook>` runs one job
/// named `<hook>`.
pub fn run_name(dag: &str, job: &str) -> String {
    let last = dag.rsplit('/').next().unwrap_or(dag);
    let hook = dag.rsplit_once(':').map(|(_, h)| h);
    if last == job || hook == Some(job) {
        dag.to_string()
    } else {
        format!("{dag}/{job}")
    }
}

/// Time since the run was created.
pub fn age(r: &RunView, now: DateTime<Utc>) -> String {
    parse(r.created_at).map_or_else(|| "—".into(), |c| elapsed((now - c).num_seconds()))
}

/// How long the run ran, or has been running: its attempts' time
/// together (backoff between them not counted), else from its start;
/// `—` before it started.
pub fn duration(r: &RunView, now: DateTime<Utc>) -> String {
    let ran = |s: DateTime<Utc>, e: Option<DateTime<Utc>>| (e.unwrap_or(now) - s).num_seconds();
    let attempts: Vec<i64> = r
        .attempts
        .iter()
        .filter_map(|a| Some(ran(parse(a.started_at)?, parse(a.finished_at))))
        .collect();
    if !attempts.is_empty() {
        return elapsed(attempts.iter().map(|s| s.max(&0)).sum());
    }
    match parse(r.started_at) {
        Some(s) => elapsed(ran(s, parse(r.finished_at))),
        None => "—".into(),
    }
}

/// Whether an attempt used none of the run's tries: interrupted (axd
/// stopped, a node died) or preempted; the retry limit does not count it.
fn free(outcome: Option<Outcome>) -> bool {
    matches!(outcome, Some(Outcome::Interrupted | Outcome::Preempted))
}

/// The run's tries against the allowed ones (`retries + 1`), never more
/// than allowed: `2/4`; then `+N` for tries a manual retry granted past
/// the limit, and `↻N` for attempts interrupted or preempted, which use
/// no try (`1/1 ↻1`).
pub fn tries(r: &RunView) -> String {
    let allowed = r.retries.saturating_add(1) as usize;
    let interrupted = r.attempts.iter().filter(|a| free(a.outcome)).count();
    let counted = r.attempts.len() - interrupted;
    let mut out = format!("{}/{allowed}", counted.min(allowed));
    if counted > allowed {
        out.push_str(&format!(" +{}", counted - allowed));
    }
    if interrupted > 0 {
        out.push_str(&format!(" ↻{interrupted}"));
    }
    out
}

/// The detail pane's words for `tries`.
pub fn tries_line(r: &RunView) -> String {
    let interrupted = r.attempts.iter().filter(|a| free(a.outcome)).count();
    let mut out = format!("tries {}", tries(r));
    if r.attempts.len() > r.retries as usize + 1 + interrupted {
        out.push_str(" (+ granted by a manual retry)");
    }
    if interrupted > 0 {
        // Preempted attempts count as interrupted here: neither uses a try.
        out.push_str(&format!(" (↻ {interrupted} interrupted, no try used)"));
    }
    out
}

/// Who cancelled the run, from its events: who asked (`cancel requested`,
/// for a run that was running: its end is the scheduler's), else the
/// actor of the event that cancelled it.
pub fn cancelled_by(events: &[EventView]) -> Option<&str> {
    let newest = || events.iter().rev();
    newest()
        .find(|e| e.reason.starts_with("cancel requested"))
        .or_else(|| newest().find(|e| e.to == Some(RunState::Cancelled)))
        .map(|e| e.actor.as_str())
}

/// The WHY / MESSAGE of a run: a cancelled run says so and by whom
/// (`by`, from its events, once known); else the daemon's why, the job's
/// message, how long it has been running, or the reason of its last
/// change.
pub fn why(r: &RunView, by: Option<&str>, now: DateTime<Utc>) -> String {
    if r.state == RunState::Cancelled {
        let by = by.map(|a| format!(" by {a}")).unwrap_or_default();
        let because = match r.reason.as_deref() {
            Some(reason) if reason.starts_with("upstream_failed: ") => {
                format!(" ({reason})")
            }
            _ => String::new(),
        };
        return format!("cancelled{by}{because}");
    }
    if let Some(why) = &r.why {
        return why.clone();
    }
    if let Some(m) = &r.message {
        return match r.progress {
            Some(p) => format!("{:.0}% {m}", p * 100.0),
            None => m.clone(),
        };
    }
    if r.state == RunState::Running
        && let Some(s) = parse(r.started_at)
    {
        return format!("running for {}", elapsed((now - s).num_seconds()));
    }
    r.reason.clone().unwrap_or_default()
}

/// What started a DAG run, from the trigger text its creation events
/// carry (`DAG run created by …`, `created by …`, `… skipped: …`): a cron
/// slot, an `after` trigger, a manual trigger or a hook. Triggers other
/// than manual ones all act as the daemon's one trigger actor, so the
/// text, not the actor, tells them apart.
pub fn trigger_source(reason: &str) -> Option<String> {
    let text = reason
        .strip_prefix("DAG run created by ")
        .or_else(|| reason.strip_prefix("created by "))
        .unwrap_or(reason);
    if text.starts_with("cron slot ") {
        return Some("cron".into());
    }
    if let Some(rest) = text.strip_prefix("after ") {
        let dag = rest.split_whitespace().next().unwrap_or("");
        return Some(format!("after {dag}"));
    }
    if let Some((hook, _)) = text.split_once(" hook of DAG run ") {
        let hook = hook.rsplit(' ').next().unwrap_or(hook);
        return Some(format!("{hook} hook"));
    }
    None
}

/// The actor axd's triggers (cron slots, `after`, hooks) act as.
const TRIGGER_ACTOR: &str = "cron";

/// The actor an event is shown with: for an event of a trigger, what
/// triggered (`cron`, `after etl`, `on_failure hook`), from its text.
pub fn event_actor(e: &EventView) -> String {
    match trigger_source(&e.reason) {
        Some(source) if e.actor == TRIGGER_ACTOR => source,
        _ => e.actor.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ax_protocol::api::AttemptView;

    fn attempt(outcome: Option<Outcome>) -> AttemptView {
        AttemptView {
            outcome,
            ..AttemptView::default()
        }
    }

    #[test]
    fn tries_never_exceed_the_allowed_and_set_interruptions_apart() {
        let mut r = RunView {
            retries: 0,
            attempts: vec![attempt(Some(Outcome::Interrupted)), attempt(None)],
            ..RunView::default()
        };
        assert_eq!(tries(&r), "1/1 ↻1");
        r.retries = 3;
        r.attempts = vec![
            attempt(Some(Outcome::Failed)),
            attempt(Some(Outcome::Interrupted)),
            attempt(Some(Outcome::Preempted)),
            attempt(Some(Outcome::Failed)),
            attempt(Some(Outcome::Interrupted)),
            attempt(Some(Outcome::Failed)),
            attempt(Some(Outcome::Failed)),
        ];
        assert_eq!(tries(&r), "4/4 ↻3");
        // A manual retry after the limit grants more tries.
        r.retries = 0;
        r.attempts = vec![attempt(Some(Outcome::Failed)), attempt(None)];
        assert_eq!(tries(&r), "1/1 +1");
        assert!(tries_line(&r).contains("manual retry"));
    }

    #[test]
    fn single_job_dags_and_hooks_show_their_name_once() {
        assert_eq!(run_name("team-a/cleanup", "cleanup"), "team-a/cleanup");
        assert_eq!(run_name("cleanup", "cleanup"), "cleanup");
        assert_eq!(run_name("etl:on_failure", "on_failure"), "etl:on_failure");
        assert_eq!(run_name("etl", "load"), "etl/load");
        assert_eq!(run_name("team-a/etl", "cleanup"), "team-a/etl/cleanup");
    }

    #[test]
    fn trigger_text_tells_cron_after_and_hooks_apart() {
        let src = |s: &str| trigger_source(s);
        assert_eq!(
            src("DAG run created by cron slot 2026-01-01T00:02:00Z").as_deref(),
            Some("cron")
        );
        assert_eq!(
            src("DAG run created by after etl (DAG run 3)").as_deref(),
            Some("after etl")
        );
        assert_eq!(
            src("created by on_failure hook of DAG run 5").as_deref(),
            Some("on_failure hook")
        );
        assert_eq!(src("no dependencies"), None);
        let e = |reason: &str| EventView {
            reason: reason.into(),
            actor: "cron".into(),
            ..EventView::default()
        };
        assert_eq!(
            event_actor(&e("DAG run created by after etl (DAG run 3)")),
            "after etl"
        );
        assert_eq!(
            event_actor(&e("DAG run created by on_success hook of DAG run 9")),
            "on_success hook"
        );
        let manual = EventView {
            actor: "alice via ax".into(),
            ..e("DAG run created by manual trigger by alice via ax")
        };
        assert_eq!(event_actor(&manual), "alice via ax");
    }
}
