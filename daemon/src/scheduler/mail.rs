//! Mail about finished DAG runs (`crate::notifier`): the reports of the
//! DAG runs a step finished, handed to the notifier once that step is
//! committed, and what became of each mail, recorded in the DAG run's
//! events and the metrics. Neither touches a run.

use std::sync::Arc;
use std::sync::mpsc::Sender;

use ax_engine::{DagRunId, Effect, Event, Millis};

use super::Scheduler;
use crate::bus::Msg;
use crate::notifier::{DagRunReport, FailureKind, JobReport, Link, Mailed};

/// The actor of mail events.
const ACTOR: &str = "axd mail";

/// What a step hands the writer to run once it is committed.
pub(super) type OnCommit = Box<dyn FnOnce() + Send>;

/// Both, in order (either may be absent).
pub(super) fn then(first: Option<OnCommit>, second: Option<OnCommit>) -> Option<OnCommit> {
    match (first, second) {
        (Some(a), Some(b)) => Some(Box::new(move || {
            a();
            b();
        })),
        (a, b) => a.or(b),
    }
}

impl Scheduler {
    /// The reports of the DAG runs this step finished, from the engine's
    /// state (all their runs are held until eviction, minutes later).
    pub(super) fn finished_reports(&self, effects: &[Effect]) -> Vec<DagRunReport> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::DagRunFinished { dag_run, .. } => self.report(*dag_run),
                _ => None,
            })
            .collect()
    }

    /// `None` when no one is to be mailed about it: nothing is built.
    fn report(&self, id: DagRunId) -> Option<DagRunReport> {
        let dag_run = self.engine.dag_run(id)?;
        let from_folder = self.registry.get(&dag_run.dag).is_some();
        let notify = addressed(&dag_run.spec, &dag_run.dag, from_folder);
        let to = notify.as_ref().unwrap_or(&self.cfg.notify);
        if to.mail.is_empty() || to.on.is_empty() {
            return None;
        }
        let jobs = dag_run
            .runs
            .iter()
            .filter_map(|r| self.engine.run(*r))
            .map(|run| {
                let last = run.attempts.last();
                JobReport {
                    run: run.id,
                    job: run.spec.jobs[run.job_index as usize].id.clone(),
                    state: run.state,
                    attempts: last.map_or(0, |a| a.n),
                    exit_code: last.and_then(|a| a.exit_code),
                    signal: last.and_then(|a| a.signal),
                    error: last.and_then(|a| a.error.clone()),
                    reason: run.reason.clone(),
                    ran_ms: last.and_then(|a| Some(a.finished_at? - a.started_at)),
                    node: last.and_then(|a| a.node.clone()),
                }
            })
            .collect();
        Some(DagRunReport {
            dag: dag_run.dag.clone(),
            dag_run: id,
            state: dag_run.state,
            notify,
            jobs,
        })
    }

    /// What the writer runs once the step that finished these DAG runs
    /// is committed: hands their reports to the notifier, so no mail
    /// tells of an end a crash could still undo. A report the notifier's
    /// full queue refuses comes back to this thread as a failed mail.
    pub(super) fn on_commit_of_mails(&self, reports: Vec<DagRunReport>) -> Option<OnCommit> {
        if reports.is_empty() {
            return None;
        }
        let link: Link = self.mailer.clone();
        let queue: Sender<Msg> = self.own_queue.clone();
        let defaults = self.cfg.notify.clone();
        Some(Box::new(move || {
            for report in reports {
                let Err(report) = link.finished(report) else {
                    continue;
                };
                let to = report.notify.as_ref().unwrap_or(&defaults).mail.clone();
                if to.is_empty() {
                    continue;
                }
                let _ = queue.send(Msg::Mailed(Mailed {
                    dag_run: report.dag_run,
                    to,
                    result: Err((
                        FailureKind::QueueFull,
                        "the mail queue is full (mail_command is too slow or hangs)".into(),
                    )),
                }));
            }
        }))
    }

    /// Records what became of a DAG run's mail: an event of the DAG run
    /// and the mail metrics.
    pub(super) fn mailed(&mut self, now: Millis, m: Mailed, effects: &mut Vec<Effect>) {
        let to = m.to.join(", ");
        let reason = match &m.result {
            Ok(()) => format!("mail sent to {to}"),
            Err((_, why)) => {
                tracing::warn!(dag_run = m.dag_run.0, "mail to {to} not sent: {why}");
                format!("mail to {to} not sent: {why}")
            }
        };
        self.metrics
            .mailed(m.result.as_ref().map_err(|(kind, _)| *kind).copied());
        effects.push(Effect::Event(Event {
            at: self.engine.wall(now),
            run: None,
            dag_run: m.dag_run,
            from: None,
            to: None,
            reason,
            actor: Arc::from(ACTOR),
        }));
    }
}

/// Whom a DAG run's end may be mailed to, ahead of the daemon's
/// `[notify]` (`None`: those defaults apply):
/// - a user's DAG mails only its owner's local mailbox, whatever addresses
///   it names, and never by default: axd sends as its own user, so a user
///   must not mail others in its name;
/// - an ad-hoc DAG run (`ax submit`, `ax run`) or a hook's mails only when
///   its spec asks;
/// - a DAG of the jobs folder (`from_folder`): its `notify`, else the
///   defaults.
fn addressed(spec: &ax_shared::DagSpec, dag: &str, from_folder: bool) -> Option<ax_shared::Notify> {
    let none = || ax_shared::Notify {
        mail: Vec::new(),
        on: Vec::new(),
    };
    if let Some(owner) = ax_shared::users::user_dag_owner(dag) {
        return Some(match &spec.notify {
            Some(n) if !n.mail.is_empty() => ax_shared::Notify {
                mail: vec![owner.to_string()],
                on: n.on.clone(),
            },
            _ => none(),
        });
    }
    if !from_folder {
        return Some(spec.notify.clone().unwrap_or_else(none));
    }
    spec.notify.clone()
}

#[cfg(test)]
mod tests {
    use super::addressed;
    use ax_shared::{DagSpec, Notify, NotifyOn};

    fn spec(file: &str, notify: Option<Vec<&str>>) -> DagSpec {
        let mut s = DagSpec::adhoc("x", Vec::new());
        s.file = file.into();
        s.notify = notify.map(|m| Notify {
            mail: m.into_iter().map(String::from).collect(),
            on: vec![NotifyOn::Failure],
        });
        s
    }

    fn to(n: Option<Notify>) -> Option<Vec<String>> {
        n.map(|n| n.mail)
    }

    #[test]
    fn a_user_dag_mails_only_its_owner_and_ad_hoc_runs_only_when_asked() {
        let file = "/etc/ax/jobs.d/x.toml";
        assert_eq!(
            to(addressed(&spec(file, None), "x", true)),
            None,
            "defaults apply"
        );
        assert_eq!(
            to(addressed(
                &spec(file, Some(vec!["ops@example.com"])),
                "x",
                true
            )),
            Some(vec!["ops@example.com".into()])
        );
        let user = spec("", Some(vec!["boss@example.com", "alice"]));
        assert_eq!(
            to(addressed(&user, "@alice/standup", true)),
            Some(vec!["alice".into()])
        );
        assert_eq!(
            to(addressed(&spec("", None), "@alice/standup", true)),
            Some(vec![])
        );
        // `ax submit FILE.toml` names its file, but is no DAG of the folder.
        assert_eq!(
            to(addressed(&spec("/tmp/adhoc.toml", None), "adhoc", false)),
            Some(vec![]),
            "no defaults"
        );
        assert_eq!(
            to(addressed(
                &spec("", None),
                "@alice/standup:on_failure",
                false
            )),
            Some(vec![]),
            "a user's hook"
        );
    }
}
