//! Rendering: a pure function of `&App` (and the frame size).

use ax_shared::api::RunView;
use ax_shared::dagdraw::{LEGEND, layout, nodes_of_dag_run, state_mark};
use ax_shared::time::{Timestamp, elapsed};
use ax_shared::{Outcome, RunState};
use chrono::{DateTime, Utc};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Block, Borders, Cell, Clear, Paragraph, Row, Sparkline, Table, TableState, Tabs, Wrap,
};

use super::keymap::{KEYMAP, Scope, main_footer as main_footer_text};
use super::state::{App, Conn, Mode, Pane, TABS};

fn fg(app: &App, c: Color) -> Style {
    if app.colour {
        Style::default().fg(c)
    } else {
        Style::default()
    }
}

fn state_colour(state: RunState) -> Color {
    match state {
        RunState::Success => Color::Green,
        RunState::Failed | RunState::TimedOut => Color::Red,
        RunState::Running => Color::Cyan,
        RunState::Delayed => Color::Yellow,
        RunState::Cancelled => Color::DarkGray,
        RunState::Ready => Color::Blue,
        RunState::Waiting => Color::Gray,
    }
}

/// `None`: the attempt runs.
fn outcome_colour(outcome: Option<Outcome>) -> Color {
    match outcome {
        Some(Outcome::Success) => Color::Green,
        Some(Outcome::Failed | Outcome::SpawnError) => Color::Red,
        Some(Outcome::TimedOut | Outcome::Stalled) => Color::Magenta,
        Some(Outcome::Cancelled) => Color::DarkGray,
        Some(Outcome::Preempted | Outcome::Interrupted) => Color::Yellow,
        None => Color::Cyan,
    }
}

fn parse(t: Option<Timestamp>) -> Option<DateTime<Utc>> {
    t.and_then(Timestamp::to_datetime)
}

/// Draws the whole screen.
pub fn render(f: &mut Frame, app: &App) {
    let area = f.area();
    let [header, pools, chart, tabs, body, status] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Length(3),
        Constraint::Length(1),
        Constraint::Min(6),
        Constraint::Length(1),
    ])
    .areas(area);
    render_header(f, app, header);
    render_pools(f, app, pools);
    render_chart(f, app, chart);
    render_tabs(f, app, tabs);
    match app.mode {
        Mode::Dag => render_dag(f, app, body),
        Mode::Log => render_log(f, app, body),
        _ => {
            if body.width >= 140 {
                let [left, right] =
                    Layout::horizontal([Constraint::Percentage(55), Constraint::Percentage(45)])
                        .areas(body);
                render_runs(f, app, left);
                render_detail(f, app, right);
            } else {
                let [top, bottom] =
                    Layout::vertical([Constraint::Percentage(50), Constraint::Percentage(50)])
                        .areas(body);
                render_runs(f, app, top);
                render_detail(f, app, bottom);
            }
        }
    }
    render_status(f, app, status);
    if app.mode == Mode::Help {
        render_help(f, app, area);
    }
    if let Conn::Disconnected { reason } = &app.conn {
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
                    .border_style(fg(app, Color::Red)),
            ),
            popup,
        );
    }
}

fn render_header(f: &mut Frame, app: &App, area: Rect) {
    let conn = match &app.conn {
        Conn::Connecting => Span::styled("connecting…", fg(app, Color::Yellow)),
        Conn::Connected { .. } => Span::styled("connected", fg(app, Color::Green)),
        Conn::Disconnected { .. } => Span::styled("disconnected — retrying", fg(app, Color::Red)),
    };
    let version = match (&app.conn, &app.status) {
        (_, Some(s)) => format!("axd {} · up {}", s.version, elapsed(s.uptime_s as i64)),
        (Conn::Connected { version }, None) => format!("axd {version}"),
        _ => "axd".into(),
    };
    let line = Line::from(vec![
        Span::styled(
            " ax ",
            fg(app, Color::Black)
                .bg(if app.colour {
                    Color::Cyan
                } else {
                    Color::Reset
                })
                .add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!(" {version} · ")),
        conn,
        Span::raw(format!(" · {}", app.now.format("%H:%M:%S UTC"))),
    ]);
    f.render_widget(Paragraph::new(line), area);
}

fn gauge(used: u32, total: u32, width: usize) -> String {
    let filled = if total == 0 {
        0
    } else {
        ((used as usize * width) / total as usize).min(width)
    };
    format!("{}{}", "█".repeat(filled), "░".repeat(width - filled))
}

fn render_pools(f: &mut Frame, app: &App, area: Rect) {
    let mut spans = Vec::new();
    if let Some(s) = &app.status {
        for p in &s.pools {
            spans.push(Span::raw(format!("{} ", p.name)));
            spans.push(Span::styled(
                gauge(p.running, p.slots, 8),
                fg(
                    app,
                    if p.running >= p.slots {
                        Color::Red
                    } else {
                        Color::Green
                    },
                ),
            ));
            spans.push(Span::raw(format!(" {}/{}  ", p.running, p.slots)));
        }
        spans.push(Span::styled(
            format!("burst {}/{}", s.burst_in_use, s.burst_extra),
            fg(
                app,
                if s.burst_in_use > 0 {
                    Color::Yellow
                } else {
                    Color::DarkGray
                },
            ),
        ));
    }
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

fn render_chart(f: &mut Frame, app: &App, area: Rect) {
    let colours = [Color::Gray, Color::Yellow, Color::Blue, Color::Cyan];
    let last = app.history.back().copied().unwrap_or_default();
    let label_w = 14u16;
    let [labels, sparks] =
        Layout::horizontal([Constraint::Length(label_w * 2), Constraint::Min(10)]).areas(area);
    let mut lines = vec![Line::from(Span::styled(
        format!("queue, last {}s", app.history.len()),
        fg(app, Color::DarkGray),
    ))];
    lines.push(Line::from(vec![
        Span::styled(format!("wait {:<6}", last[0]), fg(app, colours[0])),
        Span::styled(format!("delay {:<6}", last[1]), fg(app, colours[1])),
    ]));
    lines.push(Line::from(vec![
        Span::styled(format!("ready {:<5}", last[2]), fg(app, colours[2])),
        Span::styled(format!(" run {:<7}", last[3]), fg(app, colours[3])),
    ]));
    f.render_widget(Paragraph::new(lines), labels);
    // Total queued (waiting+delayed+ready) on top, running below.
    let width = sparks.width as usize;
    let take = |k: &dyn Fn(&[u64; 4]) -> u64| -> Vec<u64> {
        let v: Vec<u64> = app.history.iter().map(k).collect();
        v[v.len().saturating_sub(width)..].to_vec()
    };
    let queued = take(&|d| d[0] + d[1] + d[2]);
    let running = take(&|d| d[3]);
    let [a, b] = Layout::vertical([Constraint::Length(2), Constraint::Length(1)]).areas(sparks);
    f.render_widget(
        Sparkline::default()
            .data(&queued)
            .style(fg(app, Color::Blue)),
        a,
    );
    f.render_widget(
        Sparkline::default()
            .data(&running)
            .style(fg(app, Color::Cyan)),
        b,
    );
}

fn render_tabs(f: &mut Frame, app: &App, area: Rect) {
    let counts = |states: &[RunState]| -> Option<u64> {
        let s = app.status.as_ref()?;
        Some(if states.is_empty() {
            s.runs.values().sum()
        } else {
            states
                .iter()
                .map(|k| s.runs.get(k.as_str()).copied().unwrap_or(0))
                .sum()
        })
    };
    let titles: Vec<Line> = TABS
        .iter()
        .enumerate()
        .map(|(i, (name, states))| {
            Line::from(format!(
                "{} {name} {}",
                i + 1,
                counts(states).map(|c| c.to_string()).unwrap_or_default()
            ))
        })
        .collect();
    let filter = match (&app.mode, app.filter.is_empty()) {
        (Mode::Filter, _) => format!("  /{}▏", app.filter),
        (_, false) => format!("  /{}", app.filter),
        _ => String::new(),
    };
    let [t, fl] = Layout::horizontal([
        Constraint::Min(10),
        Constraint::Length(filter.chars().count() as u16),
    ])
    .areas(area);
    f.render_widget(
        Tabs::new(titles)
            .select(app.tab)
            .highlight_style(
                fg(app, Color::Yellow).add_modifier(Modifier::BOLD | Modifier::REVERSED),
            )
            .divider("│"),
        t,
    );
    f.render_widget(Paragraph::new(filter).style(fg(app, Color::Yellow)), fl);
}

fn run_detail_text(r: &RunView, now: DateTime<Utc>) -> String {
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

fn render_runs(f: &mut Frame, app: &App, area: Rect) {
    let header = Row::new([
        "ID",
        "DAG/JOB",
        "STATE",
        "PRIO",
        "TRY",
        "POOL",
        "AGE",
        "WHY / MESSAGE",
    ])
    .style(Style::default().add_modifier(Modifier::BOLD));
    let rows: Vec<Row> = app
        .runs
        .iter()
        .map(|r| {
            let age = parse(r.finished_at)
                .zip(parse(r.started_at))
                .map(|(e, s)| elapsed((e - s).num_seconds()))
                .or_else(|| parse(r.created_at).map(|c| elapsed((app.now - c).num_seconds())))
                .unwrap_or_default();
            Row::new(vec![
                Cell::from(r.id.to_string()),
                Cell::from(format!("{}/{}", r.dag, r.job)),
                Cell::from(r.state.as_str()).style(fg(app, state_colour(r.state))),
                Cell::from(if r.effective_priority != r.priority {
                    format!("{}↑{}", r.priority, r.effective_priority)
                } else {
                    r.priority.to_string()
                }),
                Cell::from(format!("{}/{}", r.attempts.len(), r.retries + 1)),
                Cell::from(r.pool.clone()),
                Cell::from(age),
                Cell::from(run_detail_text(r, app.now)),
            ])
        })
        .collect();
    let widths = [
        Constraint::Length(6),
        Constraint::Fill(2),
        Constraint::Length(9),
        Constraint::Length(5),
        Constraint::Length(4),
        Constraint::Length(7),
        Constraint::Length(5),
        Constraint::Fill(3),
    ];
    let focused = app.focus == Pane::Runs;
    let table = Table::new(rows, widths)
        .header(header)
        .column_spacing(1)
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED))
        .block(
            Block::default()
                .borders(Borders::ALL)
                .title(format!(" runs ({}) ", app.runs.len()))
                .border_style(if focused {
                    fg(app, Color::Cyan)
                } else {
                    Style::default()
                }),
        );
    let mut state = TableState::default();
    if !app.runs.is_empty() {
        state.select(Some(app.selected));
    }
    f.render_stateful_widget(table, area, &mut state);
}

/// The retry timeline: each attempt a bar on a time axis coloured by its
/// outcome, gaps (backoff) as dots, then the countdown to the next retry.
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
            *c = ('█', outcome_colour(a.outcome));
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
                "#{} {} {dur}",
                a.n,
                a.outcome.map_or("running", |o| o.as_str())
            ),
            fg(app, outcome_colour(a.outcome)),
        ));
        legend.push(Span::raw("  "));
    }
    if let Some(n) = next {
        legend.push(Span::styled(
            format!("next retry in {}", elapsed((n - app.now).num_seconds())),
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
            Span::styled(r.state.as_str(), fg(app, state_colour(r.state))),
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

fn render_dag(f: &mut Frame, app: &App, area: Rect) {
    let Some(v) = &app.dag_run else {
        f.render_widget(
            Paragraph::new("loading the DAG run…")
                .block(Block::default().borders(Borders::ALL).title(" DAG ")),
            area,
        );
        return;
    };
    let (nodes, states) = nodes_of_dag_run(v);
    let grid = layout(&nodes, &|i| state_mark(states[i]));
    let block = Block::default()
        .borders(Borders::ALL)
        .title(format!(" DAG {} · run {} · {} ", v.dag, v.id, v.state));
    let inner = block.inner(area);
    f.render_widget(block, area);
    let [canvas, legend] =
        Layout::vertical([Constraint::Min(1), Constraint::Length(1)]).areas(inner);
    let max_y = grid.height.saturating_sub(canvas.height as usize);
    let max_x = grid.width.saturating_sub(canvas.width as usize);
    let (sy, sx) = (
        (app.scroll.0 as usize).min(max_y),
        (app.scroll.1 as usize).min(max_x),
    );
    let buf = f.buffer_mut();
    for y in 0..canvas.height as usize {
        for x in 0..canvas.width as usize {
            let (gx, gy) = (x + sx, y + sy);
            if gx >= grid.width || gy >= grid.height {
                continue;
            }
            let ch = grid.at(gx, gy);
            if ch == ' ' {
                continue;
            }
            let style = match grid.owner_at(gx, gy) {
                Some(i) => fg(app, state_colour(states[i].unwrap_or(RunState::Waiting)))
                    .add_modifier(Modifier::BOLD),
                None => fg(app, Color::DarkGray),
            };
            if let Some(cell) = buf.cell_mut((canvas.x + x as u16, canvas.y + y as u16)) {
                cell.set_char(ch).set_style(style);
            }
        }
    }
    let more = if max_x > 0 || max_y > 0 {
        "  (scroll: arrows / hjkl)"
    } else {
        ""
    };
    f.render_widget(
        Paragraph::new(format!("{LEGEND}{more}")).style(fg(app, Color::DarkGray)),
        legend,
    );
}

fn render_log(f: &mut Frame, app: &App, area: Rect) {
    let title = format!(
        " log of run {} {} ",
        app.log_run.map(|r| r.to_string()).unwrap_or_default(),
        if app.log_eof {
            "(ended)"
        } else if app.follow {
            "(following — f to stop)"
        } else {
            "(paused — f to follow)"
        }
    );
    let block = Block::default().borders(Borders::ALL).title(title);
    let lines: Vec<&str> = app.log.lines().collect();
    let height = area.height.saturating_sub(2) as usize;
    let max = lines.len().saturating_sub(height);
    let top = (app.scroll.0 as usize).min(max);
    let text: Vec<Line> = lines[top..]
        .iter()
        .take(height)
        .map(|l| Line::from(l.to_string()))
        .collect();
    f.render_widget(Paragraph::new(text).block(block), area);
}

fn render_status(f: &mut Frame, app: &App, area: Rect) {
    let main_footer;
    let line = match &app.status_line {
        Some((text, error)) => Line::from(Span::styled(
            text.clone(),
            fg(app, if *error { Color::Red } else { Color::Green }),
        )),
        None => Line::from(Span::styled(
            match app.mode {
                Mode::Dag => "arrows/hjkl scroll · q/Esc back · ? help",
                Mode::Log => "↑↓ scroll · f follow · q/Esc back · ? help",
                _ => {
                    main_footer = main_footer_text();
                    main_footer.as_str()
                }
            },
            fg(app, Color::DarkGray),
        )),
    };
    f.render_widget(Paragraph::new(line), area);
}

fn render_help(f: &mut Frame, app: &App, area: Rect) {
    let w = 66.min(area.width);
    let h = (KEYMAP.len() as u16 + 4).min(area.height);
    let popup = Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    };
    let mut lines: Vec<Line> = KEYMAP
        .iter()
        .map(|b| {
            let scope = match b.scope {
                Scope::Main => "",
                Scope::Dag => " (DAG view)",
                Scope::Log => " (log view)",
                Scope::Global => "",
            };
            Line::from(vec![
                Span::styled(format!("{:>7}  ", b.label), fg(app, Color::Yellow)),
                Span::raw(format!("{}{scope}", b.help)),
            ])
        })
        .collect();
    lines.push(Line::from(Span::styled(
        "  y/n answers the cancel question; Esc closes this help",
        fg(app, Color::DarkGray),
    )));
    f.render_widget(Clear, popup);
    f.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(" keys ")),
        popup,
    );
}
