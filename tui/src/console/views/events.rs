//! The events view: the audit log, newest first. Its filter sends
//! `dag:NAME`, `run:ID` and `actor:TEXT` to the daemon; other words must
//! all appear in an event's reason, actor or states. A trigger's events
//! show what triggered (`cron`, `after etl`, `on_failure hook`) as their
//! actor.

use crate::dagdraw::state_mark;
use ax_protocol::api::EventView;
use ratatui::Frame;
use ratatui::layout::Rect;

use super::context::Context;
use super::list::{List, Listing, Styled, list_table, plain};
use super::readings::event_actor;
use crate::console::columns::{Kind, REST_MIN, col};
use crate::console::event::EventQuery;
use crate::console::theme::{parse, state_colour};

#[derive(Debug, Default)]
pub(crate) struct EventsView {
    pub(crate) list: Listing,
    /// The daemon's answer to the last query, oldest first.
    events: Vec<EventView>,
}

impl EventsView {
    /// The question for the daemon: the filter, and at most `limit`
    /// events.
    pub(crate) fn query(&self, limit: u32) -> EventQuery {
        EventQuery::parse(&self.list.filter, limit)
    }

    /// The events the view lists (newest first).
    pub(crate) fn shown(&self) -> Vec<&EventView> {
        let q = self.query(0);
        self.events.iter().rev().filter(|e| q.matches(e)).collect()
    }

    pub(crate) fn set(&mut self, events: Vec<EventView>) {
        self.events = events;
        self.list.clamp(self.shown().len());
    }

    pub(crate) fn step(&mut self, step: i64) {
        self.list.step(step, self.shown().len());
    }

    pub(crate) fn render(&self, f: &mut Frame, cx: &Context, area: Rect) {
        let cols = [
            col("SEQ", Kind::Fixed),
            col("TIME", Kind::Fixed),
            col("RUN", Kind::Fixed),
            col("DAG RUN", Kind::Optional(2)),
            col("CHANGE", Kind::Fixed),
            col("ACTOR", Kind::Optional(1)).at_most(32),
            col("REASON", Kind::Rest).keeping(REST_MIN),
        ];
        let shown = self.shown();
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
                    plain(
                        parse(Some(e.time))
                            .map_or(String::new(), |t| cx.theme.local(t, "%H:%M:%S")),
                    ),
                    plain(e.run.map_or("—".into(), |r| r.to_string())),
                    plain(e.dag_run.to_string()),
                    match e.to {
                        Some(s) => (change, cx.theme.fg(state_colour(s))),
                        None => plain(change),
                    },
                    plain(event_actor(e)),
                    plain(e.reason.clone()),
                ]
            })
            .collect();
        let selected = self.list.shown(shown.len());
        list_table(
            f,
            cx,
            area,
            List::focused(
                format!(" events ({} newest) ", shown.len()),
                &cols,
                rows,
                selected,
            ),
        );
    }
}
