//! The console's state and `update`: every change goes through
//! `App::update(action)`, which returns the requests to send to the daemon.
//! Rendering (`ui.rs`) only reads the state.

use std::collections::VecDeque;

use ax_shared::RunState;
use ax_shared::api::{DagRunView, RunView, StatusView};
use chrono::{DateTime, Utc};

pub use super::action::{Action, CancelTarget, Mode};

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
    LogTail {
        run: u64,
        text: String,
    },
    Log {
        run: u64,
        offset: u64,
        data: String,
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
        filter: String,
        limit: u32,
    },
    FetchDetail(u64),
    FetchLog {
        run: u64,
        attempt: Option<u32>,
        offset: u64,
    },
    FetchDagRun(u64),
    Cancel(u64),
    CancelDagRun(u64),
    Retry(u64),
    Trigger(String),
    Pause {
        dag: String,
        pause: bool,
    },
    Quit,
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

/// How many queue-depth samples the chart keeps (one per second).
pub const HISTORY: usize = 180;

/// One sample of queue depth: waiting, delayed, ready, running.
pub type Depth = [u64; 4];

pub struct App {
    pub conn: Conn,
    pub status: Option<StatusView>,
    pub history: VecDeque<Depth>,
    pub tab: usize,
    pub filter: String,
    pub runs: Vec<RunView>,
    pub selected: usize,
    pub detail: Option<RunView>,
    pub log_tail: String,
    pub mode: Mode,
    pub focus: Pane,
    pub dag_run: Option<DagRunView>,
    pub scroll: (u16, u16),
    pub log: String,
    pub log_run: Option<u64>,
    pub log_offset: u64,
    pub log_eof: bool,
    pub follow: bool,
    pub status_line: Option<(String, bool)>,
    pub now: DateTime<Utc>,
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
            history: VecDeque::with_capacity(HISTORY),
            tab: 0,
            filter: String::new(),
            runs: Vec::new(),
            selected: 0,
            detail: None,
            log_tail: String::new(),
            mode: Mode::Main,
            focus: Pane::Runs,
            dag_run: None,
            scroll: (0, 0),
            log: String::new(),
            log_run: None,
            log_offset: 0,
            log_eof: false,
            follow: true,
            status_line: None,
            now,
            colour,
            quit: false,
            window: 100,
        }
    }

    pub fn selected_run(&self) -> Option<&RunView> {
        self.runs.get(self.selected)
    }

    fn window_command(&self) -> Command {
        Command::FetchWindow {
            states: TABS[self.tab].1.to_vec(),
            filter: self.filter.clone(),
            limit: self.window.clamp(10, 1000),
        }
    }

    fn detail_commands(&self) -> Vec<Command> {
        match self.selected_run() {
            Some(r) => vec![Command::FetchDetail(r.id)],
            None => vec![],
        }
    }

    fn say(&mut self, text: impl Into<String>, error: bool) {
        self.status_line = Some((text.into(), error));
    }

    /// Applies a daemon event; returns follow-up requests.
    pub fn on_daemon(&mut self, ev: DaemonEvent) -> Vec<Command> {
        match ev {
            DaemonEvent::Connected { version } => {
                self.conn = Conn::Connected { version };
                let mut c = vec![self.window_command()];
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
                    self.status = Some(*s);
                }
                let mut c = vec![self.window_command()];
                if let Some(r) = self.selected_run()
                    && (runs_changed.is_empty() || runs_changed.contains(&r.id))
                {
                    c.push(Command::FetchDetail(r.id));
                }
                if self.mode == Mode::Dag
                    && let Some(dr) = self.dag_run.as_ref().map(|d| d.id)
                {
                    c.push(Command::FetchDagRun(dr));
                }
                if self.mode == Mode::Log
                    && self.follow
                    && let Some(run) = self.log_run
                    && (runs_changed.is_empty() || runs_changed.contains(&run) || !self.log_eof)
                {
                    c.push(Command::FetchLog {
                        run,
                        attempt: None,
                        offset: self.log_offset,
                    });
                }
                c
            }
            DaemonEvent::Status(s) => {
                self.status = Some(*s);
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
                let attempt = r.attempts.len() as u32;
                self.detail = Some(*r);
                if attempt > 0 {
                    vec![Command::FetchLog {
                        run,
                        attempt: Some(attempt),
                        offset: u64::MAX,
                    }]
                } else {
                    self.log_tail.clear();
                    vec![]
                }
            }
            DaemonEvent::LogTail { run, text } => {
                if self.detail.as_ref().map(|d| d.id) == Some(run) {
                    self.log_tail = text;
                }
                vec![]
            }
            DaemonEvent::Log {
                run,
                offset,
                data,
                eof,
            } => {
                if self.log_run == Some(run) {
                    self.log.push_str(&data);
                    self.log_offset = offset;
                    self.log_eof = eof;
                    if self.follow {
                        self.scroll.0 = u16::MAX;
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
                vec![self.window_command()]
            }
        }
    }

    /// A clock tick: time moves, the queue chart gets a sample.
    pub fn on_tick(&mut self, now: DateTime<Utc>) -> Vec<Command> {
        self.now = now;
        if let Some(s) = &self.status {
            let n = |state: RunState| s.runs.get(state.as_str()).copied().unwrap_or(0);
            if self.history.len() == HISTORY {
                self.history.pop_front();
            }
            self.history.push_back(QUEUED.map(n));
        }
        vec![]
    }

    /// Applies a user action; returns the requests it needs.
    pub fn update(&mut self, action: Action) -> Vec<Command> {
        match action {
            Action::Quit => match self.mode {
                Mode::Main => {
                    self.quit = true;
                    vec![Command::Quit]
                }
                _ => {
                    self.mode = Mode::Main;
                    vec![]
                }
            },
            Action::Back => {
                if self.mode == Mode::Main && !self.filter.is_empty() {
                    self.filter.clear();
                    return vec![self.window_command()];
                }
                self.mode = Mode::Main;
                vec![]
            }
            Action::Help => {
                self.mode = if self.mode == Mode::Help {
                    Mode::Main
                } else {
                    Mode::Help
                };
                vec![]
            }
            Action::Up | Action::Down | Action::PageUp | Action::PageDown => {
                let step: i64 = match action {
                    Action::Up => -1,
                    Action::Down => 1,
                    Action::PageUp => -10,
                    _ => 10,
                };
                match self.mode {
                    Mode::Dag | Mode::Log => {
                        if self.mode == Mode::Log {
                            self.follow = false;
                        }
                        let y = (i64::from(self.scroll.0.min(60_000)) + step).clamp(0, 60_000);
                        self.scroll.0 = y as u16;
                        vec![]
                    }
                    _ if self.focus == Pane::Detail => {
                        let y = (i64::from(self.scroll.0.min(60_000)) + step).clamp(0, 60_000);
                        self.scroll.0 = y as u16;
                        vec![]
                    }
                    _ => {
                        if self.runs.is_empty() {
                            return vec![];
                        }
                        let max = self.runs.len() as i64 - 1;
                        let next = (self.selected as i64 + step).clamp(0, max) as usize;
                        if next == self.selected {
                            return vec![];
                        }
                        self.selected = next;
                        self.log_tail.clear();
                        self.detail_commands()
                    }
                }
            }
            Action::Left | Action::Right => {
                let dx: i32 = if action == Action::Left { -4 } else { 4 };
                self.scroll.1 = (i32::from(self.scroll.1) + dx).clamp(0, 60_000) as u16;
                vec![]
            }
            Action::Detail => {
                self.focus = Pane::Detail;
                self.scroll = (0, 0);
                self.detail_commands()
            }
            Action::NextPane => {
                self.focus = if self.focus == Pane::Runs {
                    Pane::Detail
                } else {
                    Pane::Runs
                };
                self.scroll = (0, 0);
                vec![]
            }
            Action::SelectTab(i) => {
                self.tab = i.min(TABS.len() - 1);
                self.selected = 0;
                vec![self.window_command()]
            }
            Action::StartFilter => {
                self.mode = Mode::Filter;
                vec![]
            }
            Action::FilterInput(c) => {
                self.filter.push(c);
                self.selected = 0;
                vec![self.window_command()]
            }
            Action::FilterBackspace => {
                self.filter.pop();
                vec![self.window_command()]
            }
            Action::FilterDone => {
                self.mode = Mode::Main;
                vec![]
            }
            Action::FilterCancel => {
                self.mode = Mode::Main;
                self.filter.clear();
                vec![self.window_command()]
            }
            Action::AskCancel => match self.selected_run().cloned() {
                Some(r) if !r.state.is_terminal() => {
                    let id = r.id;
                    self.mode = Mode::ConfirmCancel(CancelTarget::Run(id));
                    self.say(format!("cancel run {id} ({}/{})? y/n", r.dag, r.job), false);
                    vec![]
                }
                Some(r) => {
                    let msg = format!("run {} already ended ({})", r.id, r.state);
                    self.say(msg, true);
                    vec![]
                }
                None => vec![],
            },
            // The daemon decides whether the DAG run has anything left to
            // cancel: the selected run may have ended while others have not.
            Action::AskCancelDagRun => match self.selected_run() {
                Some(r) => {
                    let (dag_run, dag) = (r.dag_run, r.dag.clone());
                    self.mode = Mode::ConfirmCancel(CancelTarget::DagRun(dag_run));
                    self.say(
                        format!("cancel DAG run {dag_run} ({dag}): all its unfinished runs? y/n"),
                        false,
                    );
                    vec![]
                }
                None => vec![],
            },
            Action::Confirm(yes) => {
                let Mode::ConfirmCancel(target) = self.mode else {
                    return vec![];
                };
                self.mode = Mode::Main;
                match (yes, target) {
                    (false, _) => {
                        self.say("not cancelled", false);
                        vec![]
                    }
                    (true, CancelTarget::Run(id)) => {
                        self.say(format!("cancelling run {id}…"), false);
                        vec![Command::Cancel(id)]
                    }
                    (true, CancelTarget::DagRun(id)) => {
                        self.say(format!("cancelling DAG run {id}…"), false);
                        vec![Command::CancelDagRun(id)]
                    }
                }
            }
            Action::Retry => match self.selected_run() {
                Some(r) => {
                    let id = r.id;
                    self.say(format!("retrying run {id}…"), false);
                    vec![Command::Retry(id)]
                }
                None => vec![],
            },
            Action::Trigger => match self.selected_run() {
                Some(r) => {
                    let dag = r.dag.clone();
                    self.say(format!("triggering {dag}…"), false);
                    vec![Command::Trigger(dag)]
                }
                None => vec![],
            },
            Action::TogglePause => match self.selected_run() {
                Some(r) => {
                    let dag = r.dag.clone();
                    let paused = r.why.as_deref() == Some("DAG paused");
                    vec![Command::Pause {
                        dag,
                        pause: !paused,
                    }]
                }
                None => vec![],
            },
            Action::OpenDag => match self.selected_run().map(|r| r.dag_run) {
                Some(dag_run) => {
                    self.mode = Mode::Dag;
                    self.scroll = (0, 0);
                    self.dag_run = None;
                    vec![Command::FetchDagRun(dag_run)]
                }
                None => vec![],
            },
            Action::OpenLog => match self.selected_run().map(|r| r.id) {
                Some(id) => {
                    self.mode = Mode::Log;
                    self.log.clear();
                    self.log_offset = 0;
                    self.log_eof = false;
                    self.log_run = Some(id);
                    self.follow = true;
                    self.scroll = (u16::MAX, 0);
                    vec![Command::FetchLog {
                        run: id,
                        attempt: None,
                        offset: 0,
                    }]
                }
                None => vec![],
            },
            Action::ToggleFollow => {
                self.follow = !self.follow;
                if self.follow {
                    self.scroll.0 = u16::MAX;
                    if let Some(run) = self.log_run {
                        return vec![Command::FetchLog {
                            run,
                            attempt: None,
                            offset: self.log_offset,
                        }];
                    }
                }
                vec![]
            }
        }
    }

    /// Routes any event; the run loop calls this.
    pub fn handle(&mut self, event: Event) -> Vec<Command> {
        match event {
            Event::Key(k) => match super::keymap::action_for(&self.mode, k) {
                Some(a) => self.update(a),
                None => vec![],
            },
            Event::Resize => vec![self.window_command()],
            Event::Tick(now) => self.on_tick(now),
            Event::Daemon(d) => self.on_daemon(d),
        }
    }
}
