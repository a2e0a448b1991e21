//! The body of each view: the five lists (runs, DAGs, pools, events,
//! nodes) and the two sub-screens (DAG drawing, full log).

pub mod dags;
pub mod events;
pub mod graph;
pub mod nodes;
pub mod pools;
pub mod runs;

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Block, Borders, Cell, Row, Table, TableState};

use super::columns::{Column, fit, widths};
use super::state::App;
use super::ui::fg;

/// One table cell: its text and style.
pub type Styled = (String, Style);

/// What a list shows.
pub struct List<'a> {
    pub title: String,
    pub cols: &'a [Column],
    pub rows: Vec<Vec<Styled>>,
    pub selected: Option<usize>,
    pub focused: bool,
}

/// A list as a table whose column widths come from its content
/// (`columns::widths`); the selected row is reversed and kept in sight.
pub fn list_table(f: &mut Frame, app: &App, area: Rect, list: List) {
    let List {
        title,
        cols,
        rows,
        selected,
        focused,
    } = list;
    let inner = area.width.saturating_sub(2);
    let texts: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| c.0.clone()).collect())
        .collect();
    let w = widths(cols, &texts, inner);
    let shown: Vec<usize> = (0..cols.len()).filter(|i| w[*i].is_some()).collect();
    let header = Row::new(
        shown
            .iter()
            .map(|i| Cell::from(fit(cols[*i].title, w[*i].unwrap_or(0) as usize)))
            .collect::<Vec<_>>(),
    )
    .style(Style::default().add_modifier(Modifier::BOLD));
    let body: Vec<Row> = rows
        .into_iter()
        .map(|r| {
            Row::new(
                shown
                    .iter()
                    .map(|i| {
                        let (text, style) = &r[*i];
                        Cell::from(fit(text, w[*i].unwrap_or(0) as usize)).style(*style)
                    })
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    let constraints: Vec<Constraint> = shown
        .iter()
        .map(|i| Constraint::Length(w[*i].unwrap_or(0)))
        .collect();
    let table = Table::new(body, constraints)
        .header(header)
        .column_spacing(1)
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED))
        .block(
            Block::default()
                .borders(Borders::ALL)
                .title(title)
                .border_style(if focused {
                    fg(app, Color::Cyan)
                } else {
                    Style::default()
                }),
        );
    let mut state = TableState::default();
    state.select(selected);
    f.render_stateful_widget(table, area, &mut state);
}

/// A plain cell.
pub fn plain(text: impl Into<String>) -> Styled {
    (text.into(), Style::default())
}
