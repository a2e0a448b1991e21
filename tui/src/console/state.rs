//! The console's state and how daemon events and the clock change it:
//! every change goes through `App::on_daemon`, `App::on_tick` or
//! `App::update` (in `update.rs`), which return the requests to send to
//! the daemon. Rendering (`ui.rs`, `views/`) only reads the state.
//!
//! The `App` holds the connection state, the mode and the views; each
//! view owns its list, filter and data (`views/`).

use std::collections::VecDeque;

use ax_protocol::api::{DagView, EventView, NodeView, RunView, StatusView};
use ax_shared::RunState;
use chrono::{DateTime, FixedOffset, Utc};

pub use super::action::{Action, CancelTarget, Mode, View};
pub use super::event::{Command, DaemonEvent, Event, EventQuery, LogChunk};
use super::logbuf::LogBuf;
use super::prompt::{CommandLine, StatusLine};
use super::theme::Theme;
use super::views::context::Context;
use super::views::dags::DagsView;
use super::views::events::EventsView;
use super::views::graph::GraphView;
use super::views::log::LogView;
use super::views::nodes::NodesView;
use super::views::pools::PoolsView;
pub use super::views::runs::Pane;
use super::views::runs::RunsView;

#[derive(Clone, Debug, PartialEq)]
pub enum Conn {
    Connecting,
    Connected { version: String },
    Disconnected { reason: String },
}

/// The states the queue chart counts, bottom to top.
const QUEUED: [RunState; 4] = [
    RunState::Waiting,
    RunState::Delayed,
    RunState::Ready,
    RunState::Running,
];

/// How many queue-depth samples the chart keeps (one per second).
const HISTORY: usize = 180;

/// One sample of queue depth: waiting, delayed, ready, running.
type Depth = [u64; 4];

/// The daemon as the console knows it: the connection, its last status
/// and the queue depth over the last minutes.
#[derive(Debug)]
pub(crate) struct Daemon {
    pub(crate) conn: Conn,
    pub(crate) status: Option<StatusView>,
    /// When `status` arrived (its uptime counts on from there).
    status_at: DateTime<Utc>,
    pub(crate) history: VecDeque<Depth>,
}

impl Daemon {
    fn set_status(&mut self, s: StatusView, now: DateTime<Utc>) {
        self.status = Some(s);
        self.status_at = now;
    }

    /// One queue-depth sample from the last status.
    fn sample(&mut self) {
        if let Some(s) = &self.status {
            let n = |state: RunState| s.runs.get(state.as_str()).copied().unwrap_or(0);
            if self.history.len() == HISTORY {
                self.history.pop_front();
            }
            self.history.push_back(QUEUED.map(n));
        }
    }

    /// The daemon's uptime at `now`: as last reported, plus the time since.
    pub(crate) fn uptime_s(&self, now: DateTime<Utc>) -> Option<i64> {
        let s = self.status.as_ref()?;
        Some(s.uptime_s as i64 + (now - self.status_at).num_seconds().max(0))
    }

    /// Job-file errors and store faults the daemon reports now.
    pub(crate) fn fault_count(&self) -> (usize, bool) {
        match &self.status {
            Some(s) => (s.errors.len(), s.store_error.is_some()),
            None => (0, false),
        }
    }
}

pub struct App {
    pub(crate) daemon: Daemon,
    pub(crate) mode: Mode,
    /// The list in front.
    pub(crate) view: View,
    pub(crate) runs: RunsView,
    pub(crate) dags: DagsView,
    pub(crate) pools: PoolsView,
    pub(crate) events: EventsView,
    pub(crate) nodes: NodesView,
    pub(crate) graph: GraphView,
    pub(crate) log: LogView,
    /// Lines the help is scrolled down.
    pub(crate) help_scroll: u16,
    pub(crate) command: CommandLine,
    pub(crate) status_line: StatusLine,
    /// The DAG list or the events are out of date (refetched on the next
    /// tick, at most once a second).
    stale: bool,
    pub(crate) theme: Theme,
    pub(crate) now: DateTime<Utc>,
    pub(crate) quit: bool,
    /// Rows the runs table can show (set by the run loop).
    pub(crate) window: u32,
}

impl App {
    pub fn new(now: DateTime<Utc>, colour: bool) -> App {
        App {
            daemon: Daemon {
                conn: Conn::Connecting,
                status: None,
                status_at: now,
                history: VecDeque::with_capacity(HISTORY),
            },
            mode: Mode::Main,
            view: View::Runs,
            runs: RunsView::default(),
            dags: DagsView::default(),
            pools: PoolsView::default(),
            events: EventsView::default(),
            nodes: NodesView::default(),
            graph: GraphView::default(),
            log: LogView::default(),
            help_scroll: 0,
            command: CommandLine::default(),
            status_line: StatusLine::new(now),
            stale: false,
            theme: Theme {
                colour,
                local: None,
            },
            now,
            quit: false,
            window: 100,
        }
    }

    /// What the views' render reads besides their own state.
    pub(crate) fn context(&self) -> Context<'_> {
        Context {
            theme: self.theme,
            now: self.now,
            status: self.daemon.status.as_ref(),
        }
    }

    pub(crate) fn window_command(&self) -> Command {
        self.runs.window_command(self.window.clamp(10, 1000))
    }

    fn event_query(&self) -> EventQuery {
        self.events.query(self.window.clamp(50, 1000))
    }

    /// What the list in front needs from the daemon (pools come with
    /// every status; nodes too, but heartbeats age while nothing changes,
    /// so the nodes view asks for the status itself).
    pub(crate) fn view_commands(&self) -> Vec<Command> {
        match self.view {
            View::Runs => vec![self.window_command()],
            View::Dags => vec![Command::FetchDags],
            View::Events => vec![Command::FetchEvents(self.event_query())],
            View::Pools => vec![],
            View::Nodes => vec![Command::FetchStatus],
        }
    }

    pub(crate) fn say(&mut self, text: impl Into<String>, error: bool) {
        self.status_line.say(text.into(), error, self.now);
    }

    /// A question or an action on its way (no `✓`: nothing is done yet).
    pub(crate) fn note(&mut self, text: impl Into<String>) {
        self.status_line.note(text.into(), self.now);
    }

    /// Applies a daemon event; returns follow-up requests.
    pub fn on_daemon(&mut self, ev: DaemonEvent) -> Vec<Command> {
        match ev {
            DaemonEvent::Connected { version } => {
                self.daemon.conn = Conn::Connected { version };
                let mut c = vec![self.window_command(), Command::FetchDags];
                if self.view == View::Events {
                    c.extend(self.view_commands());
                }
                c.extend(self.runs.detail_commands());
                c
            }
            DaemonEvent::Disconnected { reason } => {
                self.daemon.conn = Conn::Disconnected { reason };
                self.runs.forget_unanswered();
                vec![]
            }
            DaemonEvent::Changed {
                status,
                runs_changed,
            } => self.on_changed(status.map(|s| *s), &runs_changed),
            DaemonEvent::Status(s) => {
                self.daemon.set_status(*s, self.now);
                let n = self.nodes.shown(self.daemon.status.as_ref()).len();
                self.nodes.list.clamp(n);
                vec![]
            }
            DaemonEvent::Window(runs) => self.runs.set_runs(runs),
            DaemonEvent::Detail(r) => self.runs.set_detail(*r),
            DaemonEvent::Dags(dags) => {
                self.dags.set(dags);
                vec![]
            }
            DaemonEvent::Events(events) => {
                self.events.set(events);
                vec![]
            }
            DaemonEvent::LogTail { run, text } => {
                self.runs.set_log_tail(run, text);
                vec![]
            }
            DaemonEvent::Log(chunk) => {
                self.log.push(chunk);
                vec![]
            }
            DaemonEvent::CancelledBy { run, actor } => {
                self.runs.set_cancelled_by(run, actor);
                vec![]
            }
            DaemonEvent::DagRun(v) => {
                self.graph.set_dag_run(v);
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

    /// Something changed in the daemon: the window again, the selected
    /// run's detail when it is among the changed runs, the DAG drawn;
    /// the DAG list and the events on the next tick.
    fn on_changed(&mut self, status: Option<StatusView>, runs_changed: &[u64]) -> Vec<Command> {
        if let Some(s) = status {
            self.daemon.set_status(s, self.now);
        }
        self.stale = true;
        let mut c = vec![self.window_command()];
        if let Some(r) = self.runs.selected()
            && (runs_changed.is_empty() || runs_changed.contains(&r.id))
        {
            c.push(Command::FetchDetail(r.id));
        }
        if self.mode == Mode::Dag {
            c.extend(self.graph.refresh());
        }
        c
    }

    /// A clock tick: time moves (ages, uptime and countdowns are computed
    /// from `now` when drawn), the queue chart gets a sample, and a stale
    /// DAG or event list is fetched again.
    pub fn on_tick(&mut self, now: DateTime<Utc>) -> Vec<Command> {
        self.now = now;
        // An answer stays while it is asked (y/n).
        let asking = matches!(self.mode, Mode::ConfirmCancel(_));
        self.status_line.expire(now, asking);
        self.daemon.sample();
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

/// What tests, benchmarks and the binary read and set from outside.
impl App {
    pub fn mode(&self) -> &Mode {
        &self.mode
    }

    /// The list in front.
    pub fn view(&self) -> View {
        self.view
    }

    pub fn conn(&self) -> &Conn {
        &self.daemon.conn
    }

    /// The last action's answer and whether it is an error.
    pub fn status_line(&self) -> Option<&(String, bool)> {
        self.status_line.said.as_ref()
    }

    /// The status line as drawn (its mark included).
    pub fn status_text(&self) -> Option<String> {
        self.status_line.text()
    }

    pub fn clear_status_line(&mut self) {
        self.status_line.said = None;
    }

    /// The `:` command typed so far.
    pub fn command_line(&self) -> &str {
        &self.command.text
    }

    /// Whether the user asked to quit.
    pub fn quitting(&self) -> bool {
        self.quit
    }

    pub fn set_colour(&mut self, colour: bool) {
        self.theme.colour = colour;
    }

    /// The offset of shown times (`None`: the machine's time zone).
    pub fn set_time_zone(&mut self, offset: Option<FixedOffset>) {
        self.theme.local = offset;
    }

    /// The selected row of a list.
    pub fn selected_row(&self, view: View) -> usize {
        self.listing(view).selected
    }

    /// The text filter of a list.
    pub fn filter(&self, view: View) -> &str {
        &self.listing(view).filter
    }

    pub fn set_filter(&mut self, view: View, text: &str) {
        self.listing_mut(view).filter = text.to_string();
    }

    pub(crate) fn listing(&self, view: View) -> &super::views::list::Listing {
        match view {
            View::Runs => &self.runs.list,
            View::Dags => &self.dags.list,
            View::Pools => &self.pools.list,
            View::Events => &self.events.list,
            View::Nodes => &self.nodes.list,
        }
    }

    pub(crate) fn listing_mut(&mut self, view: View) -> &mut super::views::list::Listing {
        match view {
            View::Runs => &mut self.runs.list,
            View::Dags => &mut self.dags.list,
            View::Pools => &mut self.pools.list,
            View::Events => &mut self.events.list,
            View::Nodes => &mut self.nodes.list,
        }
    }

    /// The runs of the runs view's window.
    pub fn runs(&self) -> &[RunView] {
        self.runs.runs()
    }

    pub fn selected_run(&self) -> Option<&RunView> {
        self.runs.selected()
    }

    /// The state tab of the runs view.
    pub fn tab(&self) -> usize {
        self.runs.tab
    }

    /// Which pane of the runs view takes the arrow keys.
    pub fn focus(&self) -> Pane {
        self.runs.focus
    }

    /// The scroll (down, right) of the screen in front.
    pub fn scroll(&self) -> (u16, u16) {
        match self.mode {
            Mode::Dag => self.graph.scroll,
            Mode::Log => (self.log.back, 0),
            Mode::Help => (self.help_scroll, 0),
            _ => (self.runs.scroll, 0),
        }
    }

    pub fn selected_dag(&self) -> Option<&DagView> {
        self.dags.selected()
    }

    /// The events the events view lists (newest first).
    pub fn shown_events(&self) -> Vec<&EventView> {
        self.events.shown()
    }

    /// The nodes the nodes view lists; empty without a cluster.
    pub fn shown_nodes(&self) -> Vec<&NodeView> {
        self.nodes.shown(self.daemon.status.as_ref())
    }

    /// The followed log's text.
    pub fn log(&self) -> &LogBuf {
        &self.log.buf
    }

    /// Whether the log follows the newest output.
    pub fn following(&self) -> bool {
        self.log.follow
    }

    /// Opens the full-screen log of `run`.
    pub fn follow_log(&mut self, run: u64) -> Vec<Command> {
        self.mode = Mode::Log;
        self.log.open(run)
    }
}
