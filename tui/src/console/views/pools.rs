//! The pools view: each pool's slots, running runs and queue, and the
//! burst slots beyond `max_concurrency`.

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Color;
use ratatui::widgets::Paragraph;

use super::{List, Styled, list_table, plain};
use crate::console::columns::{Kind, col};
use crate::console::state::App;
use crate::console::ui::{fg, gauge};

pub fn render(f: &mut Frame, app: &App, area: Rect) {
    let [top, bottom] = Layout::vertical([Constraint::Min(3), Constraint::Length(1)]).areas(area);
    let cols = [
        col("POOL", Kind::Name),
        col("SLOTS", Kind::Fixed),
        col("RUNNING", Kind::Fixed),
        col("QUEUED", Kind::Fixed),
        col("FREE", Kind::Optional(1)),
        col("USE", Kind::Rest),
    ];
    let pools = app
        .status
        .as_ref()
        .map(|s| s.pools.as_slice())
        .unwrap_or(&[]);
    let rows: Vec<Vec<Styled>> = pools
        .iter()
        .map(|p| {
            let full = p.running >= p.slots;
            vec![
                plain(p.name.clone()),
                plain(p.slots.to_string()),
                plain(p.running.to_string()),
                plain(p.queued.map_or("?".into(), |q| q.to_string())),
                plain(p.slots.saturating_sub(p.running).to_string()),
                (
                    format!(
                        "{} {}",
                        gauge(p.running, p.slots, 20),
                        if full { "full" } else { "" }
                    ),
                    fg(app, if full { Color::Red } else { Color::Green }),
                ),
            ]
        })
        .collect();
    let selected = (!pools.is_empty()).then_some(app.pool_selected);
    list_table(
        f,
        app,
        top,
        List {
            title: format!(" pools ({}) ", pools.len()),
            cols: &cols,
            rows,
            selected,
            focused: true,
        },
    );
    if let Some(s) = &app.status {
        f.render_widget(
            Paragraph::new(format!(
                " max_concurrency {} · burst slots in use {}/{} (beyond max_concurrency, for priority ≥ burst_priority)",
                s.max_concurrency, s.burst_in_use, s.burst_extra
            ))
            .style(fg(app, Color::DarkGray)),
            bottom,
        );
    }
}
