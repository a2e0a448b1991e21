//! The pools view: each pool's slots, running runs and queue, and the
//! burst slots beyond `max_concurrency`.

use ax_protocol::api::StatusView;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Color;
use ratatui::widgets::Paragraph;

use super::context::Context;
use super::list::{List, Listing, Styled, list_table, plain};
use crate::console::columns::{Kind, col};
use crate::console::theme::gauge;

/// The pools come with every status; the view keeps its selection.
#[derive(Debug, Default)]
pub(crate) struct PoolsView {
    pub(crate) list: Listing,
}

impl PoolsView {
    pub(crate) fn step(&mut self, step: i64, status: Option<&StatusView>) {
        self.list.step(step, status.map_or(0, |s| s.pools.len()));
    }

    pub(crate) fn render(&self, f: &mut Frame, cx: &Context, area: Rect) {
        let [top, bottom] =
            Layout::vertical([Constraint::Min(3), Constraint::Length(1)]).areas(area);
        let cols = [
            col("POOL", Kind::Name),
            col("SLOTS", Kind::Fixed),
            col("RUNNING", Kind::Fixed),
            col("QUEUED", Kind::Fixed),
            col("FREE", Kind::Optional(1)),
            col("USE", Kind::Rest),
        ];
        let pools = cx.status.map(|s| s.pools.as_slice()).unwrap_or(&[]);
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
                        cx.theme.fg(if full { Color::Red } else { Color::Green }),
                    ),
                ]
            })
            .collect();
        let selected = self.list.shown(pools.len());
        list_table(
            f,
            cx,
            top,
            List::focused(format!(" pools ({}) ", pools.len()), &cols, rows, selected),
        );
        if let Some(s) = cx.status {
            f.render_widget(
            Paragraph::new(format!(
                " max_concurrency {} · burst slots in use {}/{} (beyond max_concurrency, for priority ≥ burst_priority)",
                s.max_concurrency, s.burst_in_use, s.burst_extra
            ))
            .style(cx.theme.fg(Color::DarkGray)),
            bottom,
        );
        }
    }
}
