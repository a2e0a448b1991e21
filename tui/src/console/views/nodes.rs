//! The nodes view: the axd of a cluster (a shared PostgreSQL store) as
//! the answering node's last heartbeat read them: id, host, alive or DEAD,
//! heartbeat age and interval, slots, attempts running there, version,
//! start, and which node answered. On a single node (SQLite) one line says
//! there is no cluster.

use ax_protocol::api::NodeView;
use ax_shared::time::elapsed;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Block, Borders, Paragraph};

use super::{List, Styled, list_table, plain};
use crate::console::columns::{Kind, col};
use crate::console::state::App;
use crate::console::ui::{fg, local, parse};

/// A node's liveness as a mark and a word, coloured.
fn state_cell(app: &App, n: &NodeView) -> Styled {
    if n.alive {
        ("● alive".into(), fg(app, Color::Green))
    } else {
        (
            "✗ DEAD".into(),
            fg(app, Color::Red).add_modifier(Modifier::BOLD),
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
fn started(app: &App, n: &NodeView) -> String {
    match parse(Some(n.started_at)) {
        Some(t) => format!(
            "{} (up {})",
            local(app, t, "%H:%M"),
            elapsed((app.now - t).num_seconds())
        ),
        None => "—".into(),
    }
}

pub fn render(f: &mut Frame, app: &App, area: Rect) {
    let block = Block::default().borders(Borders::ALL).title(" nodes ");
    let Some(status) = &app.status else {
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
    let [top, bottom] = Layout::vertical([Constraint::Min(3), Constraint::Length(1)]).areas(area);
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
    let shown = app.shown_nodes();
    let rows: Vec<Vec<Styled>> = shown
        .iter()
        .map(|n| {
            let dim = if n.alive {
                Style::default()
            } else {
                fg(app, Color::DarkGray)
            };
            vec![
                (n.id.clone(), dim),
                (n.host.clone(), dim),
                state_cell(app, n),
                if n.alive {
                    plain(beat(n))
                } else {
                    (beat(n), fg(app, Color::Red))
                },
                (n.slots.to_string(), dim),
                (n.running.map_or("?".into(), |r| r.to_string()), dim),
                (n.version.clone(), dim),
                (started(app, n), dim),
                if n.this {
                    ("◀ this node".into(), fg(app, Color::Cyan))
                } else {
                    plain("")
                },
            ]
        })
        .collect();
    let alive = cluster.nodes.iter().filter(|n| n.alive).count();
    let title = format!(" nodes ({alive} alive of {}) ", cluster.nodes.len());
    let selected = (!shown.is_empty()).then_some(app.node_selected);
    list_table(
        f,
        app,
        top,
        List {
            title,
            cols: &cols,
            rows,
            selected,
            focused: true,
        },
    );
    f.render_widget(
        Paragraph::new(" DEAD: no heartbeat for 1.5 × its interval (the database server's clock)")
            .style(fg(app, Color::DarkGray)),
        bottom,
    );
}
