//! Mail about DAG runs, as cron's `MAILTO` (docs/job-files.md, "Mail"):
//! one thread, `ax-notifier`, owns every send.
//!
//! The scheduler sends a [`DagRunReport`] for each DAG run that finished,
//! once the step that finished it is committed (the writer's `on_commit`),
//! through a bounded queue, and puts a reloaded config's [`Settings`] in
//! force for the reports the notifier takes after that. The notifier
//! decides from the DAG's `notify` (else the daemon's
//! `[notify]`) whether to mail, composes the message (`message`) and runs
//! `mail_command` with it (`send`): at most `MAX_SENDS` at once, each
//! killed after `SEND_LIMIT`. What became of each mail goes back to the
//! scheduler as `Msg::Mailed`, which records it in the DAG run's events
//! and the metrics. Nothing here changes a run, and the scheduler never
//! waits for it: a full queue loses the mail (said as a failed one), not
//! a step.

mod message;
mod send;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ax_engine::{DagRunId, DagRunState, Millis, RunId};
use ax_shared::{Notify, NotifyOn, RunState};
use tokio::sync::{Semaphore, mpsc};

use crate::bus::Msg;

/// Mails being sent at once at most; more wait their turn in the queue.
const MAX_SENDS: usize = 4;

/// How long one run of `mail_command` may take before it is killed.
const SEND_LIMIT: Duration = Duration::from_secs(60);

/// Orders waiting for the notifier at most.
const QUEUE: usize = 1024;

/// What the scheduler knows of a finished DAG run, for its mail.
#[derive(Clone, Debug)]
pub struct DagRunReport {
    pub dag: Arc<str>,
    pub dag_run: DagRunId,
    pub state: DagRunState,
    /// The DAG's own `notify`; `None`: the daemon's `[notify]` applies.
    pub notify: Option<Notify>,
    pub jobs: Vec<JobReport>,
}

/// One run of the DAG run, as it ended.
#[derive(Clone, Debug)]
pub struct JobReport {
    pub run: RunId,
    pub job: String,
    pub state: RunState,
    /// Its attempts; the last one's log is the one shown.
    pub attempts: u32,
    /// The last attempt's exit code or signal.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Why the last attempt did not run (a spawn error), if it did not.
    pub error: Option<String>,
    /// Why the run ended (`upstream_failed: fetch`, …).
    pub reason: String,
    /// How long the last attempt ran.
    pub ran_ms: Option<Millis>,
    /// The cluster node that ran the last attempt (`None` alone).
    pub node: Option<String>,
}

/// The mail settings of `axd.toml` in force.
#[derive(Clone, Debug)]
pub struct Settings {
    pub defaults: Notify,
    pub command: Vec<String>,
}

impl Settings {
    pub fn of(cfg: &crate::config::Config) -> Settings {
        Settings {
            defaults: cfg.notify.clone(),
            command: cfg.mail_command.clone(),
        }
    }
}

/// Why a mail was not sent: the `reason` label of
/// `ax_mail_failures_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// The command could not be started (not found, not executable).
    Start,
    /// It exited non-zero or was killed by a signal.
    Exit,
    /// It ran past `SEND_LIMIT` and was killed.
    Timeout,
    /// The notifier's queue was full.
    QueueFull,
}

impl FailureKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Start => "start",
            FailureKind::Exit => "exit",
            FailureKind::Timeout => "timeout",
            FailureKind::QueueFull => "queue_full",
        }
    }
}

/// What became of one DAG run's mail (only DAG runs that mail someone
/// have one).
#[derive(Debug)]
pub struct Mailed {
    pub dag_run: DagRunId,
    pub to: Vec<String>,
    /// `Err`: why it was not sent, in words.
    pub result: Result<(), (FailureKind, String)>,
}

/// The settings in force, shared by the scheduler (who replaces them on
/// reload) and the notifier (who reads them for each report it takes).
type Shared = Arc<std::sync::RwLock<Arc<Settings>>>;

/// The scheduler's end of the notifier's queue.
#[derive(Clone)]
pub struct Link {
    tx: mpsc::Sender<Box<DagRunReport>>,
    settings: Shared,
}

/// The notifier's end.
pub struct Inbox {
    rx: mpsc::Receiver<Box<DagRunReport>>,
    settings: Shared,
}

/// The queue, with `settings` in force until a reload replaces them.
pub fn channel(settings: Settings) -> (Link, Inbox) {
    let (tx, rx) = mpsc::channel(QUEUE);
    let settings: Shared = Arc::new(std::sync::RwLock::new(Arc::new(settings)));
    (
        Link {
            tx,
            settings: settings.clone(),
        },
        Inbox { rx, settings },
    )
}

impl Link {
    /// Hands a finished DAG run to the notifier without waiting; `Err`
    /// with the report when the queue is full (or the notifier is gone).
    pub fn finished(&self, report: DagRunReport) -> Result<(), Box<DagRunReport>> {
        self.tx
            .try_send(Box::new(report))
            .map_err(|e| e.into_inner())
    }

    /// The settings of a reloaded config, for the DAG runs the notifier
    /// takes from now on.
    pub fn configure(&self, settings: Settings) {
        *self.settings.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(settings);
    }
}

/// To whom the DAG run's mail goes and whether it is sent for output
/// (`with_output`); `None`: no mail.
fn recipients(
    report: &DagRunReport,
    defaults: &Notify,
    log_dir: &std::path::Path,
) -> Option<(Vec<String>, bool)> {
    let notify = report.notify.as_ref().unwrap_or(defaults);
    if notify.mail.is_empty() {
        return None;
    }
    let failed = report.state != DagRunState::Success;
    let on = |o| notify.on.contains(&o);
    let with_output = on(NotifyOn::Output);
    let mail = (failed && on(NotifyOn::Failure))
        || (!failed && on(NotifyOn::Success))
        || (with_output
            && report
                .jobs
                .iter()
                .any(|j| message::wrote_output(log_dir, j)));
    mail.then(|| (notify.mail.clone(), with_output))
}

/// The notifier thread's body: takes orders until the scheduler's end is
/// dropped, then finishes the sends under way. `tx` is the scheduler's
/// queue, for what became of each mail.
pub fn run(mut inbox: Inbox, log_dir: PathBuf, tx: std::sync::mpsc::Sender<Msg>) -> bool {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("cannot start the notifier's runtime ({e}): no mail is sent");
            return false;
        }
    };
    runtime.block_on(async move {
        let sends = Arc::new(Semaphore::new(MAX_SENDS));
        let log_dir = Arc::new(log_dir);
        let mut tasks = tokio::task::JoinSet::new();
        while let Some(report) = inbox.rx.recv().await {
            let settings = inbox
                .settings
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            let Some((to, with_output)) = recipients(&report, &settings.defaults, &log_dir) else {
                continue;
            };
            // Waiting here keeps the rest in the queue.
            let Ok(permit) = sends.clone().acquire_owned().await else {
                break;
            };
            let (log_dir, tx) = (log_dir.clone(), tx.clone());
            tasks.spawn(async move {
                let text = message::compose(&report, &to, &log_dir, with_output);
                let result = send::send(&settings.command, &text, SEND_LIMIT)
                    .await
                    .map_err(|e| (e.kind, e.message));
                drop(permit);
                let _ = tx.send(Msg::Mailed(Mailed {
                    dag_run: report.dag_run,
                    to,
                    result,
                }));
            });
            while tasks.try_join_next().is_some() {}
        }
        while tasks.join_next().await.is_some() {}
    });
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(state: DagRunState, notify: Option<Notify>) -> DagRunReport {
        DagRunReport {
            dag: "d".into(),
            dag_run: DagRunId(1),
            state,
            notify,
            jobs: vec![JobReport {
                run: RunId(9),
                job: "j".into(),
                state: RunState::Success,
                attempts: 1,
                exit_code: Some(0),
                signal: None,
                error: None,
                reason: String::new(),
                ran_ms: Some(5),
                node: None,
            }],
        }
    }

    fn notify(mail: &[&str], on: &[NotifyOn]) -> Notify {
        Notify {
            mail: mail.iter().map(|m| m.to_string()).collect(),
            on: on.to_vec(),
        }
    }

    #[test]
    fn who_is_mailed_follows_the_dag_then_the_daemon() {
        let dir = tempfile::tempdir().unwrap();
        let defaults = notify(&["ops@example.com"], &[NotifyOn::Failure]);
        let to = |r: &DagRunReport| recipients(r, &defaults, dir.path()).map(|(to, _)| to);
        assert_eq!(
            to(&report(DagRunState::Failed, None)),
            Some(vec!["ops@example.com".to_string()])
        );
        assert!(to(&report(DagRunState::Cancelled, None)).is_some());
        assert_eq!(to(&report(DagRunState::Success, None)), None);
        let off = Some(notify(&[], &[NotifyOn::Failure]));
        assert_eq!(to(&report(DagRunState::Failed, off)), None);
        let success = Some(notify(&["a@b"], &[NotifyOn::Success]));
        assert_eq!(
            to(&report(DagRunState::Success, success.clone())),
            Some(vec!["a@b".to_string()])
        );
        assert_eq!(to(&report(DagRunState::Failed, success)), None);
        let output = Some(notify(&["a@b"], &[NotifyOn::Output]));
        assert_eq!(to(&report(DagRunState::Success, output.clone())), None);
        std::fs::write(
            crate::logs::paths::log_path(dir.path(), RunId(9), 1),
            "hi\n",
        )
        .unwrap();
        assert_eq!(
            to(&report(DagRunState::Success, output)),
            Some(vec!["a@b".to_string()])
        );
    }
}
