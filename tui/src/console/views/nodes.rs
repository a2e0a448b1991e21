//! The nodes view: the axd of a cluster (a shared PostgreSQL store) as
//! the answering node's last heartbeat read them: id, host, alive or DEAD,
//! heartbeat age and interval, slots, attempts running there, version,
//! start, and which node answered. On a single node (SQLite) one line says
//! there is no cluster.

use ax_protocol::api::{NodeView, StatusView};
use ax_shared::time::elapsed;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Block, Borders, Paragraph};

use super::context::Context;
use super::list::{List, Listing, Styled, list_table, plain};
use crate::console::columns::{Kind, col};
use crate::console::theme::parse;

/// A node's liveness as a mark and a word, coloured.
fn state_cell(cx: &Context, n: &NodeView) -> Styled {
    if n.alive {
        ("● alive".into(), cx.theme.fg(Color::Green))
    } else {
        (
            "✗ DEAD".into(),
            cx.theme.fg(Color::Red).add_modifier(Modifier::BOLD),
        )
    }
}

/// `0.4s / 2.0s`: the last beat's age and the node's interval.
fn beat(n: &NodeView) -> String {
    format!(
        "{:.1}s / {:.1}s",
        n.beat_age_ms as f64 / 1000.0,
        n.heartbeat_ms as f64 / 1000.0
    )
}

/// When the node started, in local time (the time of day: how long it
/// has run tells the day), and for how long it has run.
fn started(cx: &Context, n: &NodeView) -> String {
    match parse(Some(n.started_at)) {
        Some(t) => format!(
            "{} (up {})",
            cx.theme.local(t, "%H:%M"),
            elapsed((cx.now - t).num_seconds())
        ),
        None => "—".into(),
    }
}

/// The nodes come with every status; the view keeps its selection and
/// filter (on id and host).
#[derive(Debug, Default)]
pub(crate) struct NodesView {
    pub(crate) list: Listing,
}

impl NodesView {
    /// The nodes the view lists (its filter applied); empty without a
    /// cluster.
    pub(crate) fn shown<'a>(&self, status: Option<&'a StatusView>) -> Vec<&'a NodeView> {
        let Some(cluster) = status.and_then(|s| s.cluster.as_ref()) else {
            return vec![];
        };
        cluster
            .nodes
            .iter()
            .filter(|n| self.list.passes(&[&n.id, &n.host]))
            .collect()
    }

    pub(crate) fn step(&mut self, step: i64, status: Option<&StatusView>) {
        let n = self.shown(status).len();
        self.list.step(step, n);
    }

    pub(crate) fn render(&self, f: &mut Frame, cx: &Context, area: Rect) {
        let block = Block::default().borders(Borders::ALL).title(" nodes ");
        let Some(status) = cx.status else {
            f.render_widget(Paragraph::new("no status from axd yet").block(block), area);
            return;
        };
        let Some(cluster) = &status.cluster else {
            f.render_widget(
                Paragraph::new(
                    "no cluster: this axd runs alone on SQLite (see store = \"postgres://…\")",
                )
                .block(block),
                area,
            );
            return;
        };
        let [top, bottom] =
            Layout::vertical([Constraint::Min(3), Constraint::Length(1)]).areas(area);
        let cols = [
            col("NODE", Kind::Name),
            col("HOST", Kind::Optional(2)),
            col("STATE", Kind::Fixed),
            col("BEAT / EVERY", Kind::Fixed),
            col("SLOTS", Kind::Fixed),
            col("RUNNING", Kind::Fixed),
            col("VERSION", Kind::Optional(3)),
            col("STARTED", Kind::Optional(1)),
            col("", Kind::Rest),
        ];
        let shown = self.shown(cx.status);
        let rows: Vec<Vec<Styled>> = shown
            .iter()
            .map(|n| {
                let dim = if n.alive {
                    Style::default()
                } else {
                    cx.theme.fg(Color::DarkGray)
                };
                vec![
                    (n.id.clone(), dim),
                    (n.host.clone(), dim),
                    state_cell(cx, n),
                    if n.alive {
                        plain(beat(n))
                    } else {
                        (beat(n), cx.theme.fg(Color::Red))
                    },
                    (n.slots.to_string(), dim),
                    (n.running.map_or("?".into(), |r| r.to_string()), dim),
                    (n.version.clone(), dim),
                    (started(cx, n), dim),
                    if n.this {
                        ("◀ this node".into(), cx.theme.fg(Color::Cyan))
                    } else {
                        plain("")
                    },
                ]
            })
            .collect();
        let alive = cluster.nodes.iter().filter(|n| n.alive).count();
        let title = format!(" nodes ({alive} alive of {}) ", cluster.nodes.len());
        let selected = self.list.shown(shown.len());
        list_table(f, cx, top, List::focused(title, &cols, rows, selected));
        f.render_widget(
            Paragraph::new(
                " DEAD: no heartbeat for 1.5 × its interval (the database server's clock)",
            )
            .style(cx.theme.fg(Color::DarkGray)),
            bottom,
        );
    }
}
