//! The events view: the audit log, newest first. Its filter sends
//! `dag:NAME`, `run:ID` and `actor:TEXT` to the daemon; other words must
//! all appear in an event's reason, actor or states.

use crate::dagdraw::state_mark;
use ratatui::Frame;
use ratatui::layout::Rect;

use super::{List, Styled, list_table, plain};
use crate::console::columns::{Kind, col};
use crate::console::state::App;
use crate::console::ui::{fg, local, parse, state_colour};

pub fn render(f: &mut Frame, app: &App, area: Rect) {
    let cols = [
        col("SEQ", Kind::Fixed),
        col("TIME", Kind::Fixed),
        col("RUN", Kind::Fixed),
        col("DAG RUN", Kind::Optional(2)),
        col("CHANGE", Kind::Fixed),
        col("ACTOR", Kind::Optional(1)).at_most(14),
        col("REASON", Kind::Rest),
    ];
    let shown = app.shown_events();
    let rows: Vec<Vec<Styled>> = shown
        .iter()
        .map(|e| {
            let change = match (e.from, e.to) {
                (None, None) => String::new(),
                (from, to) => format!(
                    "{} → {}",
                    from.map_or("·".into(), |s| s.as_str().to_string()),
                    to.map_or("·".into(), |s| format!("{} {}", state_mark(Some(s)), s))
                ),
            };
            vec![
                plain(e.seq.to_string()),
                plain(parse(Some(e.time)).map_or(String::new(), |t| local(app, t, "%H:%M:%S"))),
                plain(e.run.map_or("—".into(), |r| r.to_string())),
                plain(e.dag_run.to_string()),
                match e.to {
                    Some(s) => (change, fg(app, state_colour(s))),
                    None => plain(change),
                },
                plain(e.actor.clone()),
                plain(e.reason.clone()),
            ]
        })
        .collect();
    let selected = (!shown.is_empty()).then_some(app.event_selected);
    list_table(
        f,
        app,
        area,
        List {
            title: format!(" events ({} newest) ", shown.len()),
            cols: &cols,
            rows,
            selected,
            focused: true,
        },
    );
}
