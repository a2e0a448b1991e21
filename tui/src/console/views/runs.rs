//! The runs view: the runs table and the selected run's detail (retry
//! timeline, log tail) below it, or beside it on terminals wider than 160
//! columns.

use crate::dagdraw::state_mark;
use ax_protocol::api::RunView;
use ax_shared::time::elapsed;
use ax_shared::{Outcome, RunState};
use chrono::{DateTime, Utc};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};

use super::{List, Styled, list_table, plain};
use crate::console::columns::{Kind, col};
use crate::console::state::{App, Pane};
use crate::console::ui::{fg, outcome_colour, parse, state_colour};

/// Wider than this, the detail pane sits beside the table.
pub const SIDE_BY_SIDE: u16 = 160;

pub fn render(f: &mut Frame, app: &App, area: Rect) {
    if area.width > SIDE_BY_SIDE {
        let [left, right] =
            Layout::horizontal([Constraint::Percentage(58), Constraint::Percentage(42)])
                .areas(area);
        render_table(f, app, left);
        render_detail(f, app, right);
    } else {
        // The table keeps most of the height; the detail gets enough for
        // its header, the timeline and a few log lines.
        let detail = (area.height * 2 / 5).clamp(7, 14).min(area.height / 2);
        let [top, bottom] =
            Layout::vertical([Constraint::Min(3), Constraint::Length(detail)]).areas(area);
        render_table(f, app, top);
        render_detail(f, app, bottom);
    }
}

/// A state as a mark and its name: tells states apart without colour.
pub fn state_text(state: RunState) -> String {
    format!("{} {}", state_mark(Some(state)), state.as_str())
}

pub fn run_detail_text(r: &RunView, now: DateTime<Utc>) -> String {
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

fn render_table(f: &mut Frame, app: &App, area: Rect) {
    let cols = [
        col("ID", Kind::Fixed),
        col("DAG/JOB", Kind::Name),
        col("STATE", Kind::Fixed),
        col("PRIO", Kind::Optional(2)),
        col("TRY", Kind::Optional(1)),
        col("POOL", Kind::Optional(3)),
        col("AGE", Kind::Fixed),
        col("WHY / MESSAGE", Kind::Rest),
    ];
    let rows: Vec<Vec<Styled>> = app
        .runs
        .iter()
        .map(|r| {
            let age = parse(r.finished_at)
                .zip(parse(r.started_at))
                .map(|(e, s)| elapsed((e - s).num_seconds()))
                .or_else(|| parse(r.created_at).map(|c| elapsed((app.now - c).num_seconds())))
                .unwrap_or_default();
            vec![
                plain(r.id.to_string()),
                plain(format!("{}/{}", r.dag, r.job)),
                (state_text(r.state), fg(app, state_colour(r.state))),
                plain(if r.effective_priority != r.priority {
                    format!("{}↑{}", r.priority, r.effective_priority)
                } else {
                    r.priority.to_string()
                }),
                plain(format!("{}/{}", r.attempts.len(), r.retries + 1)),
                plain(r.pool.clone()),
                plain(age),
                plain(run_detail_text(r, app.now)),
            ]
        })
        .collect();
    let selected = (!app.runs.is_empty()).then_some(app.selected);
    list_table(
        f,
        app,
        area,
        List {
            title: format!(" runs ({}) ", app.runs.len()),
            cols: &cols,
            rows,
            selected,
            focused: app.focus == Pane::Runs,
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
pub fn timeline(app: &App, r: &RunView, width: usize) -> Vec<Line<'static>> {
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
        .map(|a| parse(a.finished_at).unwrap_or(app.now))
        .chain(next)
        .max()
        .unwrap_or(app.now)
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
        let e = parse(a.finished_at).unwrap_or(app.now);
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
        .map(|(ch, c)| Span::styled(ch.to_string(), fg(app, c)))
        .collect();
    lines.push(Line::from(bar));
    let mut legend: Vec<Span> = Vec::new();
    for a in &r.attempts {
        let dur = parse(a.started_at)
            .map(|s| elapsed((parse(a.finished_at).unwrap_or(app.now) - s).num_seconds()))
            .unwrap_or_default();
        legend.push(Span::styled(
            format!(
                "{} #{} {} {dur}",
                outcome_fill(a.outcome),
                a.n,
                a.outcome.map_or("running", |o| o.as_str())
            ),
            fg(app, outcome_colour(a.outcome)),
        ));
        legend.push(Span::raw("  "));
    }
    if let Some(n) = next {
        let left = (n - app.now).num_seconds();
        legend.push(Span::styled(
            if left > 0 {
                format!("▷ next retry in {}", elapsed(left))
            } else {
                "▷ next retry due now".to_string()
            },
            fg(app, Color::Yellow),
        ));
    }
    lines.push(Line::from(legend));
    lines
}

fn render_detail(f: &mut Frame, app: &App, area: Rect) {
    let focused = app.focus == Pane::Detail;
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" detail ")
        .border_style(if focused {
            fg(app, Color::Cyan)
        } else {
            Style::default()
        });
    let Some(r) = app
        .detail
        .as_ref()
        .filter(|d| Some(d.id) == app.selected_run().map(|r| r.id))
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
            Span::raw(format!("{}/{} · DAG run {} · ", r.dag, r.job, r.dag_run)),
            Span::styled(state_text(r.state), fg(app, state_colour(r.state))),
        ]),
        Line::from(format!(
            "priority {} (effective {}) · pool {} · attempts {}/{}",
            r.priority,
            r.effective_priority,
            r.pool,
            r.attempts.len(),
            r.retries + 1
        )),
        Line::from(run_detail_text(r, app.now)),
    ];
    lines.extend(timeline(app, r, inner_w));
    lines.push(Line::from(Span::styled(
        "── log tail ──",
        fg(app, Color::DarkGray),
    )));
    let tail: Vec<&str> = app.log_tail.lines().collect();
    let room = (area.height as usize).saturating_sub(lines.len() + 2);
    for l in &tail[tail.len().saturating_sub(room)..] {
        lines.push(Line::from(l.to_string()));
    }
    f.render_widget(
        Paragraph::new(lines)
            .block(block)
            .scroll((if focused { app.scroll.0.min(1000) } else { 0 }, 0)),
        area,
    );
}
