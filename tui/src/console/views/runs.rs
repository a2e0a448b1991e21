//! The runs view: the runs table and the selected run's detail (retry
//! timeline, log tail) below it, or beside it on terminals wider than 160
//! columns.

use crate::dagdraw::state_mark;
use std::collections::HashMap;

use ax_protocol::api::RunView;
use ax_shared::time::Timestamp;
use ax_shared::time::elapsed;
use ax_shared::{Outcome, RunState};
use chrono::{DateTime, Utc};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};

use super::context::{Context, scrolled};
use super::list::{List, Listing, Styled, list_table, plain};
use super::readings::{age, cancelled_by, duration, run_name, tries, tries_line, why};
use crate::console::columns::{Kind, REST_MIN, col};
use crate::console::event::Command;
use crate::console::theme::{outcome_colour, parse, state_colour};

/// Wider than this, the detail pane sits beside the table.
const SIDE_BY_SIDE: u16 = 160;

/// The state tabs: title and the run states they show.
pub(crate) const TABS: [(&str, &[RunState]); 5] = [
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

/// Which half of the runs view takes the arrow keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pane {
    Runs,
    Detail,
}

/// The runs view: a window of runs (a state tab, one DAG's runs or all,
/// the filter), the selected run's detail and its log tail.
#[derive(Debug)]
pub(crate) struct RunsView {
    pub(crate) list: Listing,
    runs: Vec<RunView>,
    /// Index into `TABS`.
    pub(crate) tab: usize,
    /// Only this DAG's runs (Enter in the DAGs view).
    pub(crate) dag: Option<String>,
    detail: Option<RunView>,
    log_tail: String,
    pub(crate) focus: Pane,
    /// Lines the focused detail pane is scrolled down.
    pub(crate) scroll: u16,
    /// Who cancelled the window's cancelled runs, asked once per run and
    /// end (a retried run that is cancelled again is asked again).
    cancels: HashMap<u64, Cancel>,
}

/// Who cancelled a run that ended at `finished_at` (`None` while asked).
#[derive(Debug)]
struct Cancel {
    finished_at: Option<Timestamp>,
    actor: Option<String>,
}

impl Default for RunsView {
    fn default() -> RunsView {
        RunsView {
            list: Listing::default(),
            runs: Vec::new(),
            tab: 0,
            dag: None,
            detail: None,
            log_tail: String::new(),
            focus: Pane::Runs,
            scroll: 0,
            cancels: HashMap::new(),
        }
    }
}

impl RunsView {
    pub(crate) fn runs(&self) -> &[RunView] {
        &self.runs
    }

    pub(crate) fn selected(&self) -> Option<&RunView> {
        self.runs.get(self.list.selected)
    }

    /// The request for the window of runs, at most `limit` of them.
    pub(crate) fn window_command(&self, limit: u32) -> Command {
        Command::FetchWindow {
            states: TABS[self.tab].1.to_vec(),
            dag: self.dag.clone(),
            filter: self.list.filter.clone(),
            limit,
        }
    }

    pub(crate) fn detail_commands(&self) -> Vec<Command> {
        match self.selected() {
            Some(r) => vec![Command::FetchDetail(r.id)],
            None => vec![],
        }
    }

    /// A new window: the selection follows the run, not the row.
    pub(crate) fn set_runs(&mut self, runs: Vec<RunView>) -> Vec<Command> {
        let keep = self.selected().map(|r| r.id);
        self.runs = runs;
        if let Some(id) = keep
            && let Some(i) = self.runs.iter().position(|r| r.id == id)
        {
            self.list.selected = i;
        }
        self.list.clamp(self.runs.len());
        let mut c = self.ask_cancels();
        if self.detail.as_ref().map(|d| d.id) != self.selected().map(|r| r.id) {
            c.extend(self.detail_commands());
        }
        c
    }

    /// Asks who cancelled each cancelled run of the window not asked yet.
    fn ask_cancels(&mut self) -> Vec<Command> {
        let mut c = Vec::new();
        for r in self.runs.iter().filter(|r| r.state == RunState::Cancelled) {
            let known = self.cancels.get(&r.id);
            if known.is_some_and(|k| k.finished_at == r.finished_at) {
                continue;
            }
            self.cancels.insert(
                r.id,
                Cancel {
                    finished_at: r.finished_at,
                    actor: None,
                },
            );
            c.push(Command::FetchCancelledBy(r.id));
        }
        c
    }

    /// Forgets the questions not answered (the connection went): they are
    /// asked again with the next window.
    pub(crate) fn forget_unanswered(&mut self) {
        self.cancels.retain(|_, c| c.actor.is_some());
    }

    /// The daemon's answer to `Command::FetchCancelledBy`.
    pub(crate) fn set_cancelled_by(&mut self, run: u64, actor: Option<String>) {
        if let Some(c) = self.cancels.get_mut(&run) {
            c.actor = actor;
        }
    }

    pub(crate) fn set_detail(&mut self, r: RunView) -> Vec<Command> {
        let run = r.id;
        let attempts = r.attempts.len();
        self.detail = Some(r);
        if attempts > 0 {
            vec![Command::FetchLogTail(run)]
        } else {
            self.log_tail.clear();
            vec![]
        }
    }

    pub(crate) fn set_log_tail(&mut self, run: u64, text: String) {
        if self.detail.as_ref().map(|d| d.id) == Some(run) {
            self.log_tail = text;
        }
    }

    /// ↑↓: scrolls the focused detail pane, or moves the selection.
    pub(crate) fn navigate(&mut self, step: i64) -> Vec<Command> {
        if self.focus == Pane::Detail {
            self.scroll = scrolled(self.scroll, step);
            return vec![];
        }
        self.step(step)
    }

    /// Moves the selection; a new run's detail is fetched.
    pub(crate) fn step(&mut self, step: i64) -> Vec<Command> {
        let before = self.list.selected;
        self.list.step(step, self.runs.len());
        if self.list.selected == before {
            return vec![];
        }
        self.log_tail.clear();
        self.detail_commands()
    }

    pub(crate) fn focus_detail(&mut self) -> Vec<Command> {
        self.focus = Pane::Detail;
        self.scroll = 0;
        self.detail_commands()
    }

    pub(crate) fn next_pane(&mut self) {
        self.focus = match self.focus {
            Pane::Runs => Pane::Detail,
            Pane::Detail => Pane::Runs,
        };
        self.scroll = 0;
    }

    pub(crate) fn select_tab(&mut self, tab: usize) {
        self.tab = tab.min(TABS.len() - 1);
        self.list.selected = 0;
    }

    /// Shows every run of one DAG, from the top.
    pub(crate) fn show_dag(&mut self, name: String) {
        self.dag = Some(name);
        self.tab = 0;
        self.list.selected = 0;
        self.list.filter.clear();
    }

    pub(crate) fn render(&self, f: &mut Frame, cx: &Context, area: Rect) {
        if area.width > SIDE_BY_SIDE {
            let [left, right] =
                Layout::horizontal([Constraint::Percentage(58), Constraint::Percentage(42)])
                    .areas(area);
            render_table(self, f, cx, left);
            render_detail(self, f, cx, right);
        } else {
            // The table keeps most of the height; the detail gets enough
            // for its header, the timeline and a few log lines.
            let detail = (area.height * 2 / 5).clamp(7, 14).min(area.height / 2);
            let [top, bottom] =
                Layout::vertical([Constraint::Min(3), Constraint::Length(detail)]).areas(area);
            render_table(self, f, cx, top);
            render_detail(self, f, cx, bottom);
        }
    }
}

/// A state as a mark and its name: tells states apart without colour.
pub fn state_text(state: RunState) -> String {
    format!("{} {}", state_mark(Some(state)), state.as_str())
}

impl RunsView {
    /// Who cancelled `r`, once known: from the detail's events for the
    /// run shown there, else as asked of the daemon for the window.
    fn cancelled_by(&self, r: &RunView) -> Option<&str> {
        let detail = self
            .detail
            .as_ref()
            .filter(|d| d.id == r.id && d.finished_at == r.finished_at)
            .and_then(|d| cancelled_by(d.events.as_deref()?));
        detail.or_else(|| {
            self.cancels
                .get(&r.id)
                .filter(|c| c.finished_at == r.finished_at)
                .and_then(|c| c.actor.as_deref())
        })
    }
}

fn render_table(view: &RunsView, f: &mut Frame, cx: &Context, area: Rect) {
    // Optional columns go highest rank first: DURATION, POOL, PRIO, TRY;
    // WHY keeps `columns::REST_MIN` before any of them.
    let cols = [
        col("ID", Kind::Fixed),
        col("DAG/JOB", Kind::Name),
        col("STATE", Kind::Fixed),
        col("PRIO", Kind::Optional(2)),
        col("TRY", Kind::Optional(1)),
        col("POOL", Kind::Optional(3)),
        col("AGE", Kind::Fixed),
        col("DURATION", Kind::Optional(4)),
        col("WHY / MESSAGE", Kind::Rest).keeping(REST_MIN),
    ];
    let rows: Vec<Vec<Styled>> = view
        .runs
        .iter()
        .map(|r| {
            vec![
                plain(r.id.to_string()),
                plain(run_name(&r.dag, &r.job)),
                (state_text(r.state), cx.theme.fg(state_colour(r.state))),
                plain(if r.effective_priority != r.priority {
                    format!("{}↑{}", r.priority, r.effective_priority)
                } else {
                    r.priority.to_string()
                }),
                plain(tries(r)),
                plain(r.pool.clone()),
                plain(age(r, cx.now)),
                plain(duration(r, cx.now)),
                plain(why(r, view.cancelled_by(r), cx.now)),
            ]
        })
        .collect();
    let selected = view.list.shown(view.runs.len());
    list_table(
        f,
        cx,
        area,
        List {
            title: format!(" runs ({}) ", view.runs.len()),
            cols: &cols,
            rows,
            selected,
            focused: view.focus == Pane::Runs,
        },
    );
}

/// The fill of an attempt's bar: tells outcomes apart without colour.
fn outcome_fill(outcome: Option<Outcome>) -> char {
    match outcome {
        Some(Outcome::Success) => '█',
        Some(Outcome::Failed | Outcome::SpawnError) => '▓',
        Some(Outcome::TimedOut | Outcome::Stalled) => '▒',
        Some(Outcome::Cancelled) => '░',
        Some(Outcome::Preempted | Outcome::Interrupted) => '▚',
        None => '▇',
    }
}

/// The retry timeline: each attempt a bar on a time axis (fill and colour
/// by outcome), gaps (backoff) as dots, then the countdown to the next
/// retry, which ticks with the clock.
pub(crate) fn timeline(cx: &Context, r: &RunView, width: usize) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    let starts: Vec<Option<DateTime<Utc>>> =
        r.attempts.iter().map(|a| parse(a.started_at)).collect();
    let Some(t0) = starts.iter().flatten().min().copied() else {
        lines.push(Line::from("no attempts yet"));
        return lines;
    };
    let next = parse(r.next_at);
    let end = r
        .attempts
        .iter()
        .map(|a| parse(a.finished_at).unwrap_or(cx.now))
        .chain(next)
        .max()
        .unwrap_or(cx.now)
        .max(t0 + chrono::Duration::milliseconds(1));
    let span_ms = (end - t0).num_milliseconds().max(1) as f64;
    let width = width.max(10);
    let col = |t: DateTime<Utc>| {
        (((t - t0).num_milliseconds() as f64 / span_ms) * (width - 1) as f64).round() as usize
    };
    let mut cells: Vec<(char, Color)> = vec![('·', Color::DarkGray); width];
    for a in &r.attempts {
        let Some(s) = parse(a.started_at) else {
            continue;
        };
        let e = parse(a.finished_at).unwrap_or(cx.now);
        let (c0, c1) = (col(s), col(e).max(col(s)));
        for c in cells.iter_mut().take(c1 + 1).skip(c0) {
            *c = (outcome_fill(a.outcome), outcome_colour(a.outcome));
        }
    }
    if let Some(n) = next {
        let c = col(n).min(width - 1);
        cells[c] = ('▷', Color::Yellow);
    }
    let bar: Vec<Span> = cells
        .into_iter()
        .map(|(ch, c)| Span::styled(ch.to_string(), cx.theme.fg(c)))
        .collect();
    lines.push(Line::from(bar));
    let mut legend: Vec<Span> = Vec::new();
    for a in &r.attempts {
        let dur = parse(a.started_at)
            .map(|s| elapsed((parse(a.finished_at).unwrap_or(cx.now) - s).num_seconds()))
            .unwrap_or_default();
        legend.push(Span::styled(
            format!(
                "{} #{} {} {dur}",
                outcome_fill(a.outcome),
                a.n,
                a.outcome.map_or("running", |o| o.as_str())
            ),
            cx.theme.fg(outcome_colour(a.outcome)),
        ));
        legend.push(Span::raw("  "));
    }
    if let Some(n) = next {
        let left = (n - cx.now).num_seconds();
        legend.push(Span::styled(
            if left > 0 {
                format!("▷ next retry in {}", elapsed(left))
            } else {
                "▷ next retry due now".to_string()
            },
            cx.theme.fg(Color::Yellow),
        ));
    }
    lines.push(Line::from(legend));
    lines
}

fn render_detail(view: &RunsView, f: &mut Frame, cx: &Context, area: Rect) {
    let focused = view.focus == Pane::Detail;
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" detail ")
        .border_style(if focused {
            cx.theme.fg(Color::Cyan)
        } else {
            Style::default()
        });
    let Some(r) = view
        .detail
        .as_ref()
        .filter(|d| Some(d.id) == view.selected().map(|r| r.id))
    else {
        f.render_widget(Paragraph::new("select a run").block(block), area);
        return;
    };
    let inner_w = area.width.saturating_sub(2) as usize;
    let mut lines = vec![
        Line::from(vec![
            Span::styled(
                format!("run {} ", r.id),
                Style::default().add_modifier(Modifier::BOLD),
            ),
            Span::raw(format!(
                "{} · DAG run {} · ",
                run_name(&r.dag, &r.job),
                r.dag_run
            )),
            Span::styled(state_text(r.state), cx.theme.fg(state_colour(r.state))),
        ]),
        // What is read most comes first: a narrow pane cuts the end.
        Line::from(format!(
            "age {} · duration {} · {} · pool {} · priority {} (effective {})",
            age(r, cx.now),
            duration(r, cx.now),
            tries_line(r),
            r.pool,
            r.priority,
            r.effective_priority,
        )),
        Line::from(why(r, r.events.as_deref().and_then(cancelled_by), cx.now)),
    ];
    lines.extend(timeline(cx, r, inner_w));
    lines.push(Line::from(Span::styled(
        "── log tail ──",
        cx.theme.fg(Color::DarkGray),
    )));
    let tail: Vec<&str> = view.log_tail.lines().collect();
    let room = (area.height as usize).saturating_sub(lines.len() + 2);
    for l in &tail[tail.len().saturating_sub(room)..] {
        lines.push(Line::from(l.to_string()));
    }
    f.render_widget(
        Paragraph::new(lines)
            .block(block)
            .scroll((if focused { view.scroll.min(1000) } else { 0 }, 0)),
        area,
    );
}
