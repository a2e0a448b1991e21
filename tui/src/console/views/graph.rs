//! The two full-body sub-screens: the ASCII DAG (a DAG run with each
//! job's state, or a DAG's definition when it never ran) and the followed
//! log.

use crate::dagdraw::{LEGEND, layout, nodes_of_dag, nodes_of_dag_run, state_mark};
use ax_shared::RunState;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph};

use crate::console::state::App;
use crate::console::ui::{fg, state_colour};

pub fn render_dag(f: &mut Frame, app: &App, area: Rect) {
    let (nodes, states, title) = match (&app.dag_run, &app.dag_def) {
        (Some(v), _) => {
            let (nodes, states) = nodes_of_dag_run(v);
            (
                nodes,
                states,
                format!(" DAG {} · run {} · {} ", v.dag, v.id, v.state),
            )
        }
        (None, Some(d)) => {
            let nodes = nodes_of_dag(d);
            let states = vec![None; nodes.len()];
            (
                nodes,
                states,
                format!(" DAG {} · definition (no run yet) ", d.name),
            )
        }
        (None, None) => {
            f.render_widget(
                Paragraph::new("loading the DAG run…")
                    .block(Block::default().borders(Borders::ALL).title(" DAG ")),
                area,
            );
            return;
        }
    };
    let grid = layout(&nodes, &|i| state_mark(states[i]));
    let block = Block::default().borders(Borders::ALL).title(title);
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

/// The followed log: the newest lines while following; scrolled back,
/// the same lines stay in place as output arrives.
pub fn render_log(f: &mut Frame, app: &App, area: Rect) {
    let state = if app.log_eof {
        "(ended)"
    } else if app.follow {
        "(following — f to stop)"
    } else {
        "(paused — f to follow)"
    };
    let skipped = if app.log.skipped > 0 {
        format!("· {} bytes skipped to keep up ", app.log.skipped)
    } else {
        String::new()
    };
    let title = format!(
        " log of run {} {state} {skipped}",
        app.log_run.map(|r| r.to_string()).unwrap_or_default(),
    );
    let block = Block::default().borders(Borders::ALL).title(title);
    let height = area.height.saturating_sub(2) as usize;
    let back = if app.follow { 0 } else { app.scroll.0 as usize };
    let end = app.log.len().saturating_sub(back);
    let text: Vec<Line> = app
        .log
        .window(end.saturating_sub(height), height.min(end))
        .into_iter()
        .map(|l| Line::from(l.to_string()))
        .collect();
    f.render_widget(Paragraph::new(text).block(block), area);
}
