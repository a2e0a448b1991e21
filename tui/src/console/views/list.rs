//! What the five lists share: the selection and filter (`Listing`) and
//! drawing a list as a table whose column widths come from its content.

use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Block, Borders, Cell, Row, Table, TableState};

use super::context::Context;
use crate::console::columns::{Column, fit, widths};

/// A list's selected row and text filter.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    pub(crate) selected: usize,
    pub(crate) filter: String,
}

impl Listing {
    /// Moves the selection by `step` within `len` rows.
    pub(crate) fn step(&mut self, step: i64, len: usize) {
        self.selected = if len == 0 {
            0
        } else {
            (self.selected as i64 + step).clamp(0, len as i64 - 1) as usize
        };
    }

    /// Keeps the selection within `len` rows.
    pub(crate) fn clamp(&mut self, len: usize) {
        self.selected = self.selected.min(len.saturating_sub(1));
    }

    /// The selected row, when the list has any.
    pub(crate) fn shown(&self, len: usize) -> Option<usize> {
        (len > 0).then_some(self.selected)
    }

    /// Whether `text` contains the filter (case-insensitive).
    pub(crate) fn passes(&self, text: &[&str]) -> bool {
        let f = self.filter.to_lowercase();
        f.is_empty() || text.iter().any(|t| t.to_lowercase().contains(&f))
    }
}

/// One table cell: its text and style.
pub(crate) type Styled = (String, Style);

/// What a list shows.
pub(crate) struct List<'a> {
    pub(crate) title: String,
    pub(crate) cols: &'a [Column],
    pub(crate) rows: Vec<Vec<Styled>>,
    pub(crate) selected: Option<usize>,
    pub(crate) focused: bool,
}

impl<'a> List<'a> {
    /// A list that has the keyboard (every list but the runs, whose
    /// detail pane can take it).
    pub(crate) fn focused(
        title: String,
        cols: &'a [Column],
        rows: Vec<Vec<Styled>>,
        selected: Option<usize>,
    ) -> List<'a> {
        List {
            title,
            cols,
            rows,
            selected,
            focused: true,
        }
    }
}

/// A list as a table whose column widths come from its content
/// (`columns::widths`); the selected row is reversed and kept in sight.
pub(crate) fn list_table(f: &mut Frame, cx: &Context, area: Rect, list: List) {
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
                    cx.theme.fg(Color::Cyan)
                } else {
                    Style::default()
                }),
        );
    let mut state = TableState::default();
    state.select(selected);
    f.render_stateful_widget(table, area, &mut state);
}

/// A plain cell.
pub(crate) fn plain(text: impl Into<String>) -> Styled {
    (text.into(), Style::default())
}
