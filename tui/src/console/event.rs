//! The console's one event enum and the requests it sends: what happens
//! to the console (`Event`, `DaemonEvent`) and what it asks the daemon
//! tasks for (`Command`).

use ax_protocol::api::{DagRunView, DagView, EventView, RunView, StatusView};
use ax_shared::RunState;
use chrono::{DateTime, Utc};

/// What happens to the console.
#[derive(Clone, Debug)]
pub enum Event {
    Key(crossterm::event::KeyEvent),
    Resize,
    /// Clock tick (1 s): clocks, countdowns, queue-depth samples.
    Tick(DateTime<Utc>),
    Daemon(DaemonEvent),
}

/// What the daemon tasks report.
#[derive(Clone, Debug)]
pub enum DaemonEvent {
    Connected {
        version: String,
    },
    Disconnected {
        reason: String,
    },
    /// A change notification (with the daemon's status).
    Changed {
        status: Option<Box<StatusView>>,
        runs_changed: Vec<u64>,
    },
    Status(Box<StatusView>),
    Window(Vec<RunView>),
    Detail(Box<RunView>),
    Dags(Vec<DagView>),
    Events(Vec<EventView>),
    LogTail {
        run: u64,
        text: String,
    },
    /// New output of the followed log.
    Log(LogChunk),
    DagRun(DagRunView),
    /// Who cancelled a run (`None`: its events do not say).
    CancelledBy {
        run: u64,
        actor: Option<String>,
    },
    /// The daemon's answer to an action.
    ActionResult {
        ok: bool,
        message: String,
    },
}

/// Requests for the daemon tasks.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    FetchWindow {
        states: Vec<RunState>,
        dag: Option<String>,
        filter: String,
        limit: u32,
    },
    FetchDetail(u64),
    /// Who cancelled a cancelled run of the window (from its events).
    FetchCancelledBy(u64),
    /// The last few KiB of a run's newest attempt (the detail pane).
    FetchLogTail(u64),
    /// Follow a run's log (newest attempt) until `StopLog`.
    FollowLog(u64),
    StopLog,
    FetchDagRun(u64),
    /// The newest DAG run of a DAG, if it has one.
    FetchLatestDagRun(String),
    FetchDags,
    FetchEvents(EventQuery),
    /// The daemon's status now (the nodes view's heartbeat ages).
    FetchStatus,
    Cancel(u64),
    CancelDagRun(u64),
    Retry(u64),
    Trigger(String),
    Pause {
        dag: String,
        pause: bool,
    },
    /// Pause or resume from the DAG's state as the daemon has it now.
    TogglePause(String),
    Quit,
}

/// The events view's question: `dag:NAME`, `run:ID` and `actor:TEXT`
/// words go to the daemon, other words must all appear in the event.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EventQuery {
    pub dag: Option<String>,
    pub run: Option<u64>,
    pub actor: Option<String>,
    pub words: Vec<String>,
    pub limit: u32,
}

impl EventQuery {
    pub fn parse(filter: &str, limit: u32) -> EventQuery {
        let mut q = EventQuery {
            limit,
            ..EventQuery::default()
        };
        for word in filter.split_whitespace() {
            match word.split_once(':') {
                Some(("dag", v)) if !v.is_empty() => q.dag = Some(v.into()),
                Some(("run", v)) if v.parse::<u64>().is_ok() => q.run = v.parse().ok(),
                Some(("actor", v)) if !v.is_empty() => q.actor = Some(v.into()),
                _ => q.words.push(word.to_lowercase()),
            }
        }
        q
    }

    /// Whether an event has every plain word (in its reason, actor or
    /// states).
    pub fn matches(&self, e: &EventView) -> bool {
        if self.words.is_empty() {
            return true;
        }
        let text = format!(
            "{} {} {} {}",
            e.reason,
            e.actor,
            e.from.map_or("", |s| s.as_str()),
            e.to.map_or("", |s| s.as_str())
        )
        .to_lowercase();
        self.words.iter().all(|w| text.contains(w.as_str()))
    }
}

/// New output of a followed log.
#[derive(Clone, Debug, PartialEq)]
pub struct LogChunk {
    pub run: u64,
    pub data: String,
    /// Bytes jumped over before `data`.
    pub gap: u64,
    /// A new attempt began: its log replaces the old one.
    pub restart: bool,
    /// The attempt ended and all of its log was read.
    pub eof: bool,
}
