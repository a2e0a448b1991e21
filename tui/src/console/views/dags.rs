//! The DAGs view: every DAG of the jobs folder with its schedule, next
//! fire (in the DAG's zone), paused state, last DAG run, in a cluster whether
//! the alive nodes hold the same version, and its file's error; the
//! selected DAG's file, the nodes that differ and the whole error below.

use ax_protocol::api::{DagRunViewState, DagView};
use ax_shared::time::elapsed_coarse;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Wrap};

use super::context::Context;
use super::list::{List, Listing, Styled, list_table, plain};
use crate::console::columns::{Kind, col};
use crate::console::theme::{in_zone, parse};

/// A DAG run state as a mark and its name.
fn dag_run_text(s: DagRunViewState) -> String {
    let mark = match s {
        DagRunViewState::Active => '▶',
        DagRunViewState::Success => '✓',
        DagRunViewState::Failed => '✗',
        DagRunViewState::Cancelled => '⊘',
        DagRunViewState::Finished => '·',
    };
    format!("{mark} {}", s.as_str())
}

fn dag_run_colour(s: DagRunViewState) -> Color {
    match s {
        DagRunViewState::Active => Color::Cyan,
        DagRunViewState::Success => Color::Green,
        DagRunViewState::Failed => Color::Red,
        DagRunViewState::Cancelled | DagRunViewState::Finished => Color::DarkGray,
    }
}

/// The error of a DAG's file, located (`line 3:5: …`).
fn located(d: &DagView) -> Option<String> {
    let e = d.error.as_ref()?;
    Some(match (e.line, e.column) {
        (Some(l), Some(c)) => format!("line {l}:{c}: {}", e.message),
        (Some(l), None) => format!("line {l}: {}", e.message),
        _ => e.message.clone(),
    })
}

/// The next fire in the DAG's own zone, which its schedule is planned in.
fn next_fire(cx: &Context, d: &DagView) -> String {
    match parse(d.next_fire) {
        Some(t) => format!(
            "{} in {}",
            in_zone(t, d.timezone.as_deref(), "%a %H:%M"),
            elapsed_coarse((t - cx.now).num_seconds())
        ),
        None => "—".into(),
    }
}

/// The newest DAG run; one waiting out its `jitter` says when it starts.
fn last_run(cx: &Context, d: &DagView) -> String {
    if let Some(t) = parse(d.planned_start) {
        return format!(
            "starts {} in {}",
            in_zone(t, d.timezone.as_deref(), "%a %H:%M"),
            elapsed_coarse((t - cx.now).num_seconds())
        );
    }
    match d.last_run_state {
        None => "never ran".into(),
        Some(s) => match parse(d.last_run_at) {
            Some(t) => format!(
                "{} {} ago",
                dag_run_text(s),
                elapsed_coarse((cx.now - t).num_seconds())
            ),
            None => dag_run_text(s),
        },
    }
}

/// Faults that belong to no listed DAG: the store's, and job-file errors
/// of files the list does not show.
fn other_faults(cx: &Context, dags: &[DagView]) -> Vec<String> {
    let Some(s) = cx.status else {
        return vec![];
    };
    let mut out: Vec<String> = s
        .store_error
        .iter()
        .map(|e| format!("✗ store fault: {e} (new writes are refused until it recovers)"))
        .collect();
    out.extend(
        s.errors
            .iter()
            .filter(|e| !dags.iter().any(|d| d.file == e.file))
            .map(|e| format!("✗ {e}")),
    );
    out
}

/// Every DAG of the jobs folder, as the daemon last listed them.
#[derive(Debug, Default)]
pub(crate) struct DagsView {
    pub(crate) list: Listing,
    dags: Vec<DagView>,
    /// Whether the daemon has listed the DAGs yet.
    loaded: bool,
}

impl DagsView {
    /// The DAGs the view lists (its filter applied).
    pub(crate) fn shown(&self) -> Vec<&DagView> {
        self.dags
            .iter()
            .filter(|d| self.list.passes(&[&d.name]))
            .collect()
    }

    pub(crate) fn selected(&self) -> Option<&DagView> {
        self.shown().get(self.list.selected).copied()
    }

    /// Whether `name` is a DAG of the jobs folder (`None`: the daemon has
    /// not listed them yet).
    pub(crate) fn has_file(&self, name: &str) -> Option<bool> {
        self.loaded
            .then(|| self.dags.iter().any(|d| d.name == name))
    }

    /// A new list: the selection stays on the same DAG.
    pub(crate) fn set(&mut self, dags: Vec<DagView>) {
        let keep = self.selected().map(|d| d.name.clone());
        self.dags = dags;
        self.loaded = true;
        let names: Vec<String> = self.shown().iter().map(|d| d.name.clone()).collect();
        if let Some(name) = keep
            && let Some(i) = names.iter().position(|d| *d == name)
        {
            self.list.selected = i;
        }
        self.list.clamp(names.len());
    }

    pub(crate) fn step(&mut self, step: i64) {
        self.list.step(step, self.shown().len());
    }

    pub(crate) fn render(&self, f: &mut Frame, cx: &Context, area: Rect) {
        render(self, f, cx, area);
    }
}

fn render(view: &DagsView, f: &mut Frame, cx: &Context, area: Rect) {
    let faults = other_faults(cx, &view.dags);
    let [top, middle, bottom] = Layout::vertical([
        Constraint::Min(3),
        Constraint::Length((faults.len() as u16).min(4)),
        Constraint::Length(6),
    ])
    .areas(area);
    f.render_widget(
        Paragraph::new(
            faults
                .into_iter()
                .map(|t| Line::from(Span::styled(t, cx.theme.fg(Color::Red))))
                .collect::<Vec<_>>(),
        ),
        middle,
    );
    // In a cluster, a column says whether the alive nodes agree.
    let cluster = view.dags.iter().any(|d| d.versions.is_some());
    let mut cols = vec![
        col("NAME", Kind::Name),
        col("SCHEDULE", Kind::Optional(2)),
        col("NEXT FIRE", Kind::Optional(1)),
        col("PAUSED", Kind::Fixed),
        col("LAST RUN", Kind::Fixed),
        col("JOBS", Kind::Optional(3)),
        col("ERROR", Kind::Rest),
    ];
    if cluster {
        cols.insert(5, col("NODES", Kind::Fixed));
    }
    let shown = view.shown();
    let red = cx.theme.fg(Color::Red);
    let rows: Vec<Vec<Styled>> = shown
        .iter()
        .map(|d| {
            let mut row = vec![
                (
                    d.name.clone(),
                    if d.error.is_some() || differs(d) {
                        red
                    } else {
                        Style::default()
                    },
                ),
                plain(d.schedule.clone().unwrap_or_else(|| "—".into())),
                plain(next_fire(cx, d)),
                if d.paused {
                    ("⏸ paused".into(), cx.theme.fg(Color::Yellow))
                } else {
                    plain("no")
                },
                match d.last_run_state {
                    Some(s) => (last_run(cx, d), cx.theme.fg(dag_run_colour(s))),
                    None => plain(last_run(cx, d)),
                },
                plain(d.jobs.len().to_string()),
                match located(d) {
                    Some(e) => (format!("✗ {e}"), red),
                    None => plain(""),
                },
            ];
            if cluster {
                row.insert(5, nodes_cell(cx, d));
            }
            row
        })
        .collect();
    let errors = view.dags.iter().filter(|d| d.error.is_some()).count();
    let differing = view.dags.iter().filter(|d| differs(d)).count();
    let mut notes = Vec::new();
    if errors > 0 {
        notes.push(format!("{errors} with errors"));
    }
    if differing > 0 {
        notes.push(format!("{differing} differ across nodes"));
    }
    let title = if notes.is_empty() {
        format!(" DAGs ({}) ", view.dags.len())
    } else {
        format!(" DAGs ({}, {}) ", view.dags.len(), notes.join(", "))
    };
    let selected = view.list.shown(shown.len());
    list_table(f, cx, top, List::focused(title, &cols, rows, selected));
    render_selected(f, cx, view.selected(), bottom);
}

/// Whether the alive nodes of a cluster hold different versions of `d`.
fn differs(d: &DagView) -> bool {
    d.versions.as_ref().is_some_and(|v| !v.agrees())
}

/// `✓ 3 nodes agree`, or `≠ DIFFERS` in red.
fn nodes_cell(cx: &Context, d: &DagView) -> Styled {
    match &d.versions {
        Some(v) if v.agrees() => (format!("✓ {}", v.summary()), Style::default()),
        Some(v) => (format!("≠ {}", v.summary()), cx.theme.fg(Color::Red)),
        None => plain("—"),
    }
}

/// The selected DAG: its file, schedule and the whole error.
fn render_selected(f: &mut Frame, cx: &Context, selected: Option<&DagView>, area: Rect) {
    let block = Block::default().borders(Borders::ALL).title(" DAG ");
    let Some(d) = selected else {
        f.render_widget(
            Paragraph::new("no DAGs in the jobs folder").block(block),
            area,
        );
        return;
    };
    let mut lines = vec![Line::from(vec![
        Span::styled(
            format!("{} ", d.name),
            Style::default().add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!("· {}", d.file)),
    ])];
    // Before the schedule: at 80 columns the panel's last lines are cut.
    if let Some(v) = d.versions.as_ref().filter(|v| !v.agrees()) {
        lines.push(Line::from(Span::styled(
            format!("≠ nodes differ: {}", v.describe()),
            cx.theme.fg(Color::Red),
        )));
    }
    lines.extend([Line::from(format!(
        "schedule {} {}{} · next {} · {} · last run {}",
        d.schedule.as_deref().unwrap_or("none"),
        d.timezone.as_deref().unwrap_or(""),
        d.jitter
            .as_ref()
            .map(|j| format!(" (jitter {j})"))
            .unwrap_or_default(),
        next_fire(cx, d),
        if d.paused { "paused" } else { "not paused" },
        last_run(cx, d)
    ))]);
    match (&d.error, located(d)) {
        (Some(e), Some(text)) => lines.push(Line::from(Span::styled(
            format!("✗ {}: {text}", e.file),
            cx.theme.fg(Color::Red),
        ))),
        _ => lines.push(Line::from(format!("jobs: {}", d.jobs.join(", ")))),
    }
    f.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(block),
        area,
    );
}
