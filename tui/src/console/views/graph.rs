//! The DAG drawing, a full-body sub-screen: a DAG run with each job's
//! state, or a DAG's definition when it never ran.

use crate::dagdraw::{LEGEND, layout, nodes_of_dag, nodes_of_dag_run, state_mark};
use ax_protocol::api::{DagRunView, DagView};
use ax_shared::RunState;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier};
use ratatui::widgets::{Block, Borders, Paragraph};

use super::context::{Context, scrolled};
use crate::console::event::Command;
use crate::console::theme::state_colour;

/// What the DAG drawing shows, and how far it is scrolled.
#[derive(Debug, Default)]
pub(crate) struct GraphView {
    dag_run: Option<DagRunView>,
    /// The DAG drawn from its definition (it has no DAG run).
    dag_def: Option<DagView>,
    /// Lines down, columns right.
    pub(crate) scroll: (u16, u16),
}

impl GraphView {
    /// Draws a DAG run (once the daemon sends it).
    pub(crate) fn open_dag_run(&mut self, dag_run: u64) -> Vec<Command> {
        *self = GraphView::default();
        vec![Command::FetchDagRun(dag_run)]
    }

    /// Draws a DAG's definition until the daemon sends its newest run.
    pub(crate) fn open_dag(&mut self, dag: DagView) -> Vec<Command> {
        let name = dag.name.clone();
        *self = GraphView {
            dag_def: Some(dag),
            ..GraphView::default()
        };
        vec![Command::FetchLatestDagRun(name)]
    }

    pub(crate) fn set_dag_run(&mut self, v: DagRunView) {
        self.dag_run = Some(v);
    }

    /// What to fetch again when something changed: the DAG run, or for a
    /// definition the DAG's first run, which may have begun.
    pub(crate) fn refresh(&self) -> Option<Command> {
        match (&self.dag_run, &self.dag_def) {
            (Some(dr), _) => Some(Command::FetchDagRun(dr.id)),
            (None, Some(d)) => Some(Command::FetchLatestDagRun(d.name.clone())),
            (None, None) => None,
        }
    }

    pub(crate) fn scroll_down(&mut self, step: i64) {
        self.scroll.0 = scrolled(self.scroll.0, step);
    }

    pub(crate) fn scroll_right(&mut self, step: i64) {
        self.scroll.1 = scrolled(self.scroll.1, step);
    }

    pub(crate) fn render(&self, f: &mut Frame, cx: &Context, area: Rect) {
        render(self, f, cx, area);
    }
}

fn render(view: &GraphView, f: &mut Frame, cx: &Context, area: Rect) {
    let (nodes, states, title) = match (&view.dag_run, &view.dag_def) {
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
        (view.scroll.0 as usize).min(max_y),
        (view.scroll.1 as usize).min(max_x),
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
                Some(i) => cx
                    .theme
                    .fg(state_colour(states[i].unwrap_or(RunState::Waiting)))
                    .add_modifier(Modifier::BOLD),
                None => cx.theme.fg(Color::DarkGray),
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
        Paragraph::new(format!("{LEGEND}{more}")).style(cx.theme.fg(Color::DarkGray)),
        legend,
    );
}
