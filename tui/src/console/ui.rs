//! Rendering: a pure function of `&App` (and the frame size). The frame
//! (header, fault banner, pool gauges, queue chart, view bar, footer,
//! pop-ups) is drawn here; each view's body in `views/`.

use ax_protocol::api::RunView;
use ax_shared::RunState;
use ax_shared::time::elapsed;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Sparkline, Tabs, Wrap};

use super::columns::fit;
use super::keymap::{KEYMAP, Scope, footer, scopes};
use super::state::{App, Conn, Mode, View};
use super::theme::gauge;
use super::views::runs::TABS;

/// The retry timeline of `r` as the runs view draws it (`width` cells).
pub fn timeline(app: &App, r: &RunView, width: usize) -> Vec<Line<'static>> {
    super::views::runs::timeline(&app.context(), r, width)
}

/// Draws the whole screen.
pub fn render(f: &mut Frame, app: &App) {
    let area = f.area();
    let (errors, store_fault) = app.daemon.fault_count();
    let banner = errors > 0 || store_fault;
    let [header, banner_row, pools, chart, bar, body, status] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(u16::from(banner)),
        Constraint::Length(1),
        Constraint::Length(3),
        Constraint::Length(1),
        Constraint::Min(6),
        Constraint::Length(1),
    ])
    .areas(area);
    render_header(f, app, header);
    if banner {
        render_banner(f, app, banner_row, errors);
    }
    render_pools(f, app, pools);
    render_chart(f, app, chart);
    render_bar(f, app, bar);
    let cx = app.context();
    match app.mode {
        Mode::Dag => app.graph.render(f, &cx, body),
        Mode::Log => app.log.render(f, body),
        _ => match app.view {
            View::Runs => app.runs.render(f, &cx, body),
            View::Dags => app.dags.render(f, &cx, body),
            View::Pools => app.pools.render(f, &cx, body),
            View::Events => app.events.render(f, &cx, body),
            View::Nodes => app.nodes.render(f, &cx, body),
        },
    }
    render_status(f, app, status);
    if app.mode == Mode::Help {
        render_help(f, app, area);
    }
    if let Conn::Disconnected { reason } = &app.daemon.conn {
        let w = 60.min(area.width);
        let popup = Rect {
            x: area.x + (area.width - w) / 2,
            y: area.y + area.height / 2 - 2,
            width: w,
            height: 4.min(area.height),
        };
        f.render_widget(Clear, popup);
        f.render_widget(
            Paragraph::new(vec![
                Line::from("disconnected — retrying"),
                Line::from(reason.as_str()),
            ])
            .wrap(Wrap { trim: true })
            .block(
                Block::default()
                    .borders(Borders::ALL)
                    .border_style(app.theme.fg(Color::Red)),
            ),
            popup,
        );
    }
}

fn render_header(f: &mut Frame, app: &App, area: Rect) {
    let conn = match &app.daemon.conn {
        Conn::Connecting => Span::styled("connecting…", app.theme.fg(Color::Yellow)),
        Conn::Connected { .. } => Span::styled("connected", app.theme.fg(Color::Green)),
        Conn::Disconnected { .. } => {
            Span::styled("disconnected — retrying", app.theme.fg(Color::Red))
        }
    };
    let version = match (
        &app.daemon.conn,
        &app.daemon.status,
        app.daemon.uptime_s(app.now),
    ) {
        (_, Some(s), Some(up)) => format!("axd {} · up {}", s.version, elapsed(up)),
        (Conn::Connected { version }, _, _) => format!("axd {version}"),
        _ => "axd".into(),
    };
    let line = Line::from(vec![
        Span::styled(
            " ax ",
            app.theme
                .fg(Color::Black)
                .bg(if app.theme.colour {
                    Color::Cyan
                } else {
                    Color::Reset
                })
                .add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!(" {version} · ")),
        conn,
        Span::raw(format!(" · {}", app.theme.local(app.now, "%H:%M:%S"))),
    ]);
    f.render_widget(Paragraph::new(line), area);
}

/// The fault banner: shown while the daemon reports job-file errors or a
/// store fault.
fn render_banner(f: &mut Frame, app: &App, area: Rect, errors: usize) {
    let mut parts = Vec::new();
    if errors > 0 {
        parts.push(format!(
            "{errors} job-file error{}",
            if errors == 1 { "" } else { "s" }
        ));
    }
    if let Some(e) = app
        .daemon
        .status
        .as_ref()
        .and_then(|s| s.store_error.as_ref())
    {
        parts.push(format!("store fault: {e}"));
    }
    let text = format!(" ⚠ {} — d: DAGs view ", parts.join(" · "));
    let style = if app.theme.colour {
        Style::default().fg(Color::White).bg(Color::Red)
    } else {
        Style::default().add_modifier(Modifier::REVERSED)
    };
    f.render_widget(
        Paragraph::new(fit(&text, area.width as usize)).style(style.add_modifier(Modifier::BOLD)),
        area,
    );
}

fn render_pools(f: &mut Frame, app: &App, area: Rect) {
    let mut spans = Vec::new();
    if let Some(s) = &app.daemon.status {
        for p in &s.pools {
            spans.push(Span::raw(format!("{} ", p.name)));
            spans.push(Span::styled(
                gauge(p.running, p.slots, 8),
                app.theme.fg(if p.running >= p.slots {
                    Color::Red
                } else {
                    Color::Green
                }),
            ));
            spans.push(Span::raw(format!(" {}/{}  ", p.running, p.slots)));
        }
        spans.push(Span::styled(
            format!("burst {}/{}", s.burst_in_use, s.burst_extra),
            app.theme.fg(if s.burst_in_use > 0 {
                Color::Yellow
            } else {
                Color::DarkGray
            }),
        ));
    }
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

fn render_chart(f: &mut Frame, app: &App, area: Rect) {
    let colours = [Color::Gray, Color::Yellow, Color::Blue, Color::Cyan];
    let last = app.daemon.history.back().copied().unwrap_or_default();
    let label_w = 14u16;
    let [labels, sparks] =
        Layout::horizontal([Constraint::Length(label_w * 2), Constraint::Min(10)]).areas(area);
    let mut lines = vec![Line::from(Span::styled(
        format!("queue, last {}s", app.daemon.history.len()),
        app.theme.fg(Color::DarkGray),
    ))];
    lines.push(Line::from(vec![
        Span::styled(format!("wait {:<6}", last[0]), app.theme.fg(colours[0])),
        Span::styled(format!("delay {:<6}", last[1]), app.theme.fg(colours[1])),
    ]));
    lines.push(Line::from(vec![
        Span::styled(format!("ready {:<5}", last[2]), app.theme.fg(colours[2])),
        Span::styled(format!(" run {:<7}", last[3]), app.theme.fg(colours[3])),
    ]));
    f.render_widget(Paragraph::new(lines), labels);
    // Total queued (waiting+delayed+ready) on top, running below.
    let width = sparks.width as usize;
    let take = |k: &dyn Fn(&[u64; 4]) -> u64| -> Vec<u64> {
        let v: Vec<u64> = app.daemon.history.iter().map(k).collect();
        v[v.len().saturating_sub(width)..].to_vec()
    };
    let queued = take(&|d| d[0] + d[1] + d[2]);
    let running = take(&|d| d[3]);
    let [a, b] = Layout::vertical([Constraint::Length(2), Constraint::Length(1)]).areas(sparks);
    f.render_widget(
        Sparkline::default()
            .data(&queued)
            .style(app.theme.fg(Color::Blue)),
        a,
    );
    f.render_widget(
        Sparkline::default()
            .data(&running)
            .style(app.theme.fg(Color::Cyan)),
        b,
    );
}

/// The line above the body: the state tabs in the runs view, the view
/// names elsewhere; then the filter.
fn render_bar(f: &mut Frame, app: &App, area: Rect) {
    let highlight = app
        .theme
        .fg(Color::Yellow)
        .add_modifier(Modifier::BOLD | Modifier::REVERSED);
    let filter_text = app.filter(app.view);
    let mut filter = match (&app.mode, filter_text.is_empty()) {
        (Mode::Filter, _) => format!("  /{filter_text}▏"),
        (_, false) => format!("  /{filter_text}"),
        _ => String::new(),
    };
    if app.view == View::Runs
        && let Some(d) = &app.runs.dag
    {
        filter = format!("  DAG {d} (Esc: all){filter}");
    }
    let [t, fl] = Layout::horizontal([
        Constraint::Min(10),
        Constraint::Length(filter.chars().count() as u16),
    ])
    .areas(area);
    let tabs = if app.view == View::Runs {
        let counts = |states: &[RunState]| -> Option<u64> {
            let s = app.daemon.status.as_ref()?;
            Some(if states.is_empty() {
                s.runs.values().sum()
            } else {
                states
                    .iter()
                    .map(|k| s.runs.get(k.as_str()).copied().unwrap_or(0))
                    .sum()
            })
        };
        // The list holds a window of the newest runs (as many as the
        // screen can use) and may be filtered: the selected tab says how
        // many of its runs the list holds when that is not all of them.
        let held = app.runs.runs().len() as u64;
        let titles: Vec<Line> = TABS
            .iter()
            .enumerate()
            .map(|(i, (name, states))| {
                let count = match counts(states) {
                    Some(c) if i == app.runs.tab && c != held => format!("{held} of {c}"),
                    Some(c) => c.to_string(),
                    None => String::new(),
                };
                Line::from(format!("{} {name} {count}", i + 1))
            })
            .collect();
        Tabs::new(titles).select(app.runs.tab)
    } else {
        let titles: Vec<Line> = View::ALL
            .iter()
            .map(|v| Line::from(format!(":{}", v.name())))
            .collect();
        Tabs::new(titles).select(app.view.index())
    };
    f.render_widget(tabs.highlight_style(highlight).divider("│"), t);
    f.render_widget(
        Paragraph::new(filter).style(app.theme.fg(Color::Yellow)),
        fl,
    );
}

fn render_status(f: &mut Frame, app: &App, area: Rect) {
    let width = area.width as usize;
    let line = if app.mode == Mode::Command {
        let options = app.command.completions();
        Line::from(vec![
            Span::styled(
                format!(":{}▏", app.command.text),
                app.theme.fg(Color::Yellow),
            ),
            Span::styled(
                format!(
                    "  {}",
                    if options.is_empty() {
                        "no such view".to_string()
                    } else {
                        options.join(" ")
                    }
                ),
                app.theme.fg(Color::DarkGray),
            ),
        ])
    } else {
        match (app.status_line.text(), &app.status_line.said) {
            // The mark tells ok from error without colour.
            (Some(text), Some((_, error))) => Line::from(Span::styled(
                fit(&text, width),
                app.theme.fg(match (*error, app.status_line.answer) {
                    (true, _) => Color::Red,
                    (false, true) => Color::Green,
                    (false, false) => Color::Yellow,
                }),
            )),
            _ => Line::from(Span::styled(
                footer(&app.mode, app.view, width),
                app.theme.fg(Color::DarkGray),
            )),
        }
    };
    f.render_widget(Paragraph::new(line), area);
}

/// The help: every binding from the keymap, those of the view in front
/// first; ↑↓ scroll it when it is taller than the screen.
fn render_help(f: &mut Frame, app: &App, area: Rect) {
    let w = 78.min(area.width);
    let h = (KEYMAP.len() as u16 + 6).min(area.height);
    let popup = Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    };
    let here = scopes(&Mode::Main, app.view);
    let line = |b: &super::keymap::Binding| {
        let scope = match b.scope {
            Scope::Global => String::new(),
            s => format!(" ({})", s.label()),
        };
        Line::from(vec![
            Span::styled(format!("{:>7}  ", b.label), app.theme.fg(Color::Yellow)),
            Span::raw(format!("{}{scope}", b.help)),
        ])
    };
    let mut lines: Vec<Line> = vec![Line::from(Span::styled(
        format!("── the {} view ──", app.view.name()),
        app.theme.fg(Color::DarkGray),
    ))];
    lines.extend(KEYMAP.iter().filter(|b| here.contains(&b.scope)).map(line));
    lines.push(Line::from(Span::styled(
        "── elsewhere ──",
        app.theme.fg(Color::DarkGray),
    )));
    lines.extend(KEYMAP.iter().filter(|b| !here.contains(&b.scope)).map(line));
    lines.push(Line::from(Span::styled(
        "  y/n answers the cancel question; Esc closes this help",
        app.theme.fg(Color::DarkGray),
    )));
    f.render_widget(Clear, popup);
    f.render_widget(
        Paragraph::new(lines)
            .scroll((app.help_scroll.min(KEYMAP.len() as u16), 0))
            .block(
                Block::default()
                    .borders(Borders::ALL)
                    .title(" keys (↑↓ scroll) "),
            ),
        popup,
    );
}
