//! The console's state and how daemon events change it: every change goes
//! through `App::on_daemon`, `App::on_tick` or `App::update` (in
//! `update.rs`), which return the requests to send to the daemon.
//! Rendering (`ui.rs`, `views/`) only reads the state.

use std::collections::VecDeque;

use ax_protocol::api::{DagRunView, DagView, EventView, NodeView, RunView, StatusView};
use ax_shared::RunState;
use chrono::{DateTime, FixedOffset, Utc};

pub use super::action::{Action, CancelTarget, Mode, View};
use super::logbuf::LogBuf;

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
    /// New output of the followed log. `gap`: bytes jumped over first;
    /// `restart`: a new attempt began, its log replaces the old one.
    Log {
        run: u64,
        data: String,
        gap: u64,
        restart: bool,
        eof: bool,
    },
    DagRun(DagRunView),
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

#[derive(Clone, Debug, PartialEq)]
pub enum Conn {
    Connecting,
    Connected { version: String },
    Disconnected { reason: String },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pane {
    Runs,
    Detail,
}

/// The state tabs: title and the run states they show.
pub const TABS: [(&str, &[RunState]); 5] = [
    ("All", &[]),
    ("Running", &[RunState::Running]),
    (
        "Queued",
        &[RunState::Waiting, RunState::Delayed, RunState::Ready],
    ),
    (
        "Failed",
        &[RunState::Failed, RunState::TimedOut, RunState::Cancelled],
    ),
    ("Succeeded", &[RunState::Success]),
];

/// The states the queue chart counts, bottom to top.
pub const QUEUED: [RunState; 4] = [
    RunState::Waiting,
    RunState::Delayed,
    RunState::Ready,
    RunState::Running,
];

/// How long an action's result stays on the status line.
pub const SAY_FOR: chrono::TimeDelta = chrono::TimeDelta::seconds(10);

/// How many queue-depth samples the chart keeps (one per second).
pub const HISTORY: usize = 180;

/// One sample of queue depth: waiting, delayed, ready, running.
pub type Depth = [u64; 4];

pub struct App {
    pub conn: Conn,
    pub status: Option<StatusView>,
    /// When `status` arrived (its uptime counts on from there).
    pub status_at: DateTime<Utc>,
    pub history: VecDeque<Depth>,
    pub view: View,
    pub tab: usize,
    /// The text filter of each view, by `View::index`.
    pub filters: [String; View::ALL.len()],
    /// The runs view shows one DAG's runs only (Enter in the DAGs view).
    pub runs_dag: Option<String>,
    pub runs: Vec<RunView>,
    pub selected: usize,
    pub dags: Vec<DagView>,
    pub dag_selected: usize,
    pub pool_selected: usize,
    pub node_selected: usize,
    pub events: Vec<EventView>,
    pub event_selected: usize,
    /// The DAG lists or the events are out of date (refetched on the next
    /// tick, at most once a second).
    pub stale: bool,
    pub detail: Option<RunView>,
    pub log_tail: String,
    pub mode: Mode,
    /// What `:` has typed so far.
    pub command: String,
    pub focus: Pane,
    pub dag_run: Option<DagRunView>,
    /// The DAG drawn from its definition (it has no DAG run).
    pub dag_def: Option<DagView>,
    pub scroll: (u16, u16),
    pub log: LogBuf,
    pub log_run: Option<u64>,
    pub log_eof: bool,
    pub follow: bool,
    pub status_line: Option<(String, bool)>,
    /// When the status line was set: it clears itself after `SAY_FOR`.
    pub said_at: DateTime<Utc>,
    pub now: DateTime<Utc>,
    /// The local time zone's offset for shown times (`None`: the
    /// machine's, looked up per instant).
    pub local: Option<FixedOffset>,
    pub colour: bool,
    pub quit: bool,
    /// Rows the runs table can show (set by the renderer's caller).
    pub window: u32,
}

impl App {
    pub fn new(now: DateTime<Utc>, colour: bool) -> App {
        App {
            conn: Conn::Connecting,
            status: None,
            status_at: now,
            history: VecDeque::with_capacity(HISTORY),
            view: View::Runs,
            tab: 0,
            filters: Default::default(),
            runs_dag: None,
            runs: Vec::new(),
            selected: 0,
            dags: Vec::new(),
            dag_selected: 0,
            pool_selected: 0,
            node_selected: 0,
            events: Vec::new(),
            event_selected: 0,
            stale: false,
            detail: None,
            log_tail: String::new(),
            mode: Mode::Main,
            command: String::new(),
            focus: Pane::Runs,
            dag_run: None,
            dag_def: None,
            scroll: (0, 0),
            log: LogBuf::default(),
            log_run: None,
            log_eof: false,
            follow: true,
            status_line: None,
            said_at: now,
            now,
            local: None,
            colour,
            quit: false,
            window: 100,
        }
    }

    pub fn selected_run(&self) -> Option<&RunView> {
        self.runs.get(self.selected)
    }

    /// The DAGs the DAGs view lists (its filter applied).
    pub fn shown_dags(&self) -> Vec<&DagView> {
        let f = self.filters[View::Dags.index()].to_lowercase();
        self.dags
            .iter()
            .filter(|d| f.is_empty() || d.name.to_lowercase().contains(&f))
            .collect()
    }

    pub fn selected_dag(&self) -> Option<&DagView> {
        self.shown_dags().get(self.dag_selected).copied()
    }

    /// The nodes the nodes view lists (its filter applied to id and
    /// host); empty without a cluster.
    pub fn shown_nodes(&self) -> Vec<&NodeView> {
        let f = self.filters[View::Nodes.index()].to_lowercase();
        let Some(cluster) = self.status.as_ref().and_then(|s| s.cluster.as_ref()) else {
            return vec![];
        };
        cluster
            .nodes
            .iter()
            .filter(|n| {
                f.is_empty()
                    || n.id.to_lowercase().contains(&f)
                    || n.host.to_lowercase().contains(&f)
            })
            .collect()
    }

    /// The events the events view lists (newest first).
    pub fn shown_events(&self) -> Vec<&EventView> {
        let q = self.event_query();
        self.events.iter().rev().filter(|e| q.matches(e)).collect()
    }

    pub fn event_query(&self) -> EventQuery {
        EventQuery::parse(
            &self.filters[View::Events.index()],
            self.window.clamp(50, 1000),
        )
    }

    /// The daemon's uptime now: as last reported, plus the time since.
    pub fn uptime_s(&self) -> Option<i64> {
        let s = self.status.as_ref()?;
        Some(s.uptime_s as i64 + (self.now - self.status_at).num_seconds().max(0))
    }

    /// Job-file errors and store faults the daemon reports now.
    pub fn fault_count(&self) -> (usize, bool) {
        match &self.status {
            Some(s) => (s.errors.len(), s.store_error.is_some()),
            None => (0, false),
        }
    }

    pub(super) fn window_command(&self) -> Command {
        Command::FetchWindow {
            states: TABS[self.tab].1.to_vec(),
            dag: self.runs_dag.clone(),
            filter: self.filters[View::Runs.index()].clone(),
            limit: self.window.clamp(10, 1000),
        }
    }

    /// What the list in front needs from the daemon (pools come with
    /// every status; nodes too, but heartbeats age while nothing changes,
    /// so the nodes view asks for the status itself).
    pub(super) fn view_commands(&self) -> Vec<Command> {
        match self.view {
            View::Runs => vec![self.window_command()],
            View::Dags => vec![Command::FetchDags],
            View::Events => vec![Command::FetchEvents(self.event_query())],
            View::Pools => vec![],
            View::Nodes => vec![Command::FetchStatus],
        }
    }

    pub(super) fn detail_commands(&self) -> Vec<Command> {
        match self.selected_run() {
            Some(r) => vec![Command::FetchDetail(r.id)],
            None => vec![],
        }
    }

    pub(super) fn say(&mut self, text: impl Into<String>, error: bool) {
        self.status_line = Some((text.into(), error));
        self.said_at = self.now;
    }

    fn set_status(&mut self, s: StatusView) {
        self.status = Some(s);
        self.status_at = self.now;
    }

    /// Applies a daemon event; returns follow-up requests.
    pub fn on_daemon(&mut self, ev: DaemonEvent) -> Vec<Command> {
        match ev {
            DaemonEvent::Connected { version } => {
                self.conn = Conn::Connected { version };
                let mut c = vec![self.window_command(), Command::FetchDags];
                if self.view == View::Events {
                    c.extend(self.view_commands());
                }
                c.extend(self.detail_commands());
                c
            }
            DaemonEvent::Disconnected { reason } => {
                self.conn = Conn::Disconnected { reason };
                vec![]
            }
            DaemonEvent::Changed {
                status,
                runs_changed,
            } => {
                if let Some(s) = status {
                    self.set_status(*s);
                }
                self.stale = true;
                let mut c = vec![self.window_command()];
                if let Some(r) = self.selected_run()
                    && (runs_changed.is_empty() || runs_changed.contains(&r.id))
                {
                    c.push(Command::FetchDetail(r.id));
                }
                if self.mode == Mode::Dag {
                    match (&self.dag_run, &self.dag_def) {
                        (Some(dr), _) => c.push(Command::FetchDagRun(dr.id)),
                        // Drawn from its definition: a first DAG run may
                        // have begun.
                        (None, Some(d)) => c.push(Command::FetchLatestDagRun(d.name.clone())),
                        (None, None) => {}
                    }
                }
                c
            }
            DaemonEvent::Status(s) => {
                self.set_status(*s);
                self.node_selected = self
                    .node_selected
                    .min(self.shown_nodes().len().saturating_sub(1));
                vec![]
            }
            DaemonEvent::Window(runs) => {
                let keep = self.selected_run().map(|r| r.id);
                self.runs = runs;
                if let Some(id) = keep
                    && let Some(i) = self.runs.iter().position(|r| r.id == id)
                {
                    self.selected = i;
                }
                self.selected = self.selected.min(self.runs.len().saturating_sub(1));
                if self.detail.as_ref().map(|d| d.id) != self.selected_run().map(|r| r.id) {
                    return self.detail_commands();
                }
                vec![]
            }
            DaemonEvent::Detail(r) => {
                let run = r.id;
                let attempts = r.attempts.len();
                self.detail = Some(*r);
                if attempts > 0 {
                    vec![Command::FetchLogTail(run)]
                } else {
                    self.log_tail.clear();
                    vec![]
                }
            }
            DaemonEvent::Dags(dags) => {
                let keep = self.selected_dag().map(|d| d.name.clone());
                self.dags = dags;
                let names: Vec<String> = self.shown_dags().iter().map(|d| d.name.clone()).collect();
                if let Some(name) = keep
                    && let Some(i) = names.iter().position(|d| *d == name)
                {
                    self.dag_selected = i;
                }
                self.dag_selected = self.dag_selected.min(names.len().saturating_sub(1));
                vec![]
            }
            DaemonEvent::Events(events) => {
                self.events = events;
                let n = self.shown_events().len();
                self.event_selected = self.event_selected.min(n.saturating_sub(1));
                vec![]
            }
            DaemonEvent::LogTail { run, text } => {
                if self.detail.as_ref().map(|d| d.id) == Some(run) {
                    self.log_tail = text;
                }
                vec![]
            }
            DaemonEvent::Log {
                run,
                data,
                gap,
                restart,
                eof,
            } => {
                if self.log_run == Some(run) {
                    if restart {
                        self.log.clear();
                    }
                    let before = self.log.received;
                    if gap > 0 {
                        self.log.gap(gap);
                    }
                    self.log.push(&data);
                    self.log_eof = eof;
                    if !self.follow {
                        // Paused: the lines shown stay where they are.
                        let added = (self.log.received - before).min(u64::from(u16::MAX)) as u16;
                        let held = self.log.len().min(usize::from(u16::MAX)) as u16;
                        self.scroll.0 = self.scroll.0.saturating_add(added).min(held);
                    }
                }
                vec![]
            }
            DaemonEvent::DagRun(v) => {
                self.dag_run = Some(v);
                vec![]
            }
            DaemonEvent::ActionResult { ok, message } => {
                self.say(message, !ok);
                let mut c = vec![self.window_command()];
                if self.view != View::Runs {
                    c.extend(self.view_commands());
                }
                c
            }
        }
    }

    /// A clock tick: time moves (ages, uptime and countdowns are computed
    /// from `now` when drawn), the queue chart gets a sample, and a stale
    /// DAG or event list is fetched again.
    pub fn on_tick(&mut self, now: DateTime<Utc>) -> Vec<Command> {
        self.now = now;
        // An answer stays while it is asked (y/n), else for SAY_FOR.
        if !matches!(self.mode, Mode::ConfirmCancel(_)) && now - self.said_at > SAY_FOR {
            self.status_line = None;
        }
        if let Some(s) = &self.status {
            let n = |state: RunState| s.runs.get(state.as_str()).copied().unwrap_or(0);
            if self.history.len() == HISTORY {
                self.history.pop_front();
            }
            self.history.push_back(QUEUED.map(n));
        }
        if self.stale && matches!(self.view, View::Dags | View::Events) {
            self.stale = false;
            return self.view_commands();
        }
        // Once a second: a node's heartbeat age and liveness change with
        // no change notification.
        if self.view == View::Nodes && self.mode != Mode::Dag && self.mode != Mode::Log {
            return self.view_commands();
        }
        vec![]
    }

    /// Routes any event; the run loop calls this.
    pub fn handle(&mut self, event: Event) -> Vec<Command> {
        match event {
            Event::Key(k) => match super::keymap::action_for(&self.mode, self.view, k) {
                Some(a) => self.update(a),
                None => vec![],
            },
            Event::Resize => self.view_commands(),
            Event::Tick(now) => self.on_tick(now),
            Event::Daemon(d) => self.on_daemon(d),
        }
    }
}
