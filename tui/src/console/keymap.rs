//! Key bindings as data: the dispatcher and the help screen both read this
//! table, so they cannot disagree.

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::action::{Action, Mode, View};

/// Where a binding applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// The runs list.
    Runs,
    /// The DAGs list.
    Dags,
    /// Every list (runs, DAGs, pools, events).
    Lists,
    /// DAG view.
    Dag,
    /// Full-screen log.
    Log,
    /// Everywhere (unless typing a filter or answering y/n).
    Global,
}

impl Scope {
    /// How the help screen names where the binding applies.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Scope::Runs => "runs",
            Scope::Dags => "DAGs",
            Scope::Lists => "lists",
            Scope::Dag => "DAG view",
            Scope::Log => "log view",
            Scope::Global => "",
        }
    }
}

pub(crate) struct Binding {
    pub(crate) keys: &'static [KeyCode],
    pub(crate) label: &'static str,
    pub(crate) action: Action,
    pub(crate) scope: Scope,
    pub(crate) help: &'static str,
    /// The word after the label in the main screen's footer ("" = not
    /// shown there).
    pub(crate) footer: &'static str,
}

use KeyCode::*;

pub(crate) const KEYMAP: &[Binding] = &[
    Binding {
        keys: &[Up, Char('k')],
        label: "↑/k",
        action: Action::Up,
        scope: Scope::Global,
        help: "move up / scroll",
        footer: "",
    },
    Binding {
        keys: &[Down, Char('j')],
        label: "↓/j",
        action: Action::Down,
        scope: Scope::Global,
        help: "move down / scroll",
        footer: "",
    },
    Binding {
        keys: &[Left, Char('h')],
        label: "←/h",
        action: Action::Left,
        scope: Scope::Dag,
        help: "scroll left",
        footer: "",
    },
    Binding {
        keys: &[Right],
        label: "→",
        action: Action::Right,
        scope: Scope::Dag,
        help: "scroll right",
        footer: "",
    },
    Binding {
        keys: &[PageUp],
        label: "PgUp",
        action: Action::PageUp,
        scope: Scope::Global,
        help: "page up",
        footer: "",
    },
    Binding {
        keys: &[PageDown],
        label: "PgDn",
        action: Action::PageDown,
        scope: Scope::Global,
        help: "page down",
        footer: "",
    },
    Binding {
        keys: &[Enter],
        label: "Enter",
        action: Action::Detail,
        scope: Scope::Runs,
        help: "detail of the selected run",
        footer: "",
    },
    Binding {
        keys: &[Tab],
        label: "Tab",
        action: Action::NextPane,
        scope: Scope::Runs,
        help: "switch pane (runs / detail)",
        footer: "",
    },
    Binding {
        keys: &[Char('1')],
        label: "1",
        action: Action::SelectTab(0),
        scope: Scope::Runs,
        help: "tab: all runs",
        footer: "",
    },
    Binding {
        keys: &[Char('2')],
        label: "2",
        action: Action::SelectTab(1),
        scope: Scope::Runs,
        help: "tab: running",
        footer: "",
    },
    Binding {
        keys: &[Char('3')],
        label: "3",
        action: Action::SelectTab(2),
        scope: Scope::Runs,
        help: "tab: queued (waiting, delayed, ready)",
        footer: "",
    },
    Binding {
        keys: &[Char('4')],
        label: "4",
        action: Action::SelectTab(3),
        scope: Scope::Runs,
        help: "tab: failed (failed, timed out, cancelled)",
        footer: "",
    },
    Binding {
        keys: &[Char('5')],
        label: "5",
        action: Action::SelectTab(4),
        scope: Scope::Runs,
        help: "tab: succeeded",
        footer: "",
    },
    Binding {
        keys: &[Char(':')],
        label: ":",
        action: Action::StartCommand,
        scope: Scope::Lists,
        help: "views: :runs :dags :pools :events :nodes (Tab completes)",
        footer: "view",
    },
    Binding {
        keys: &[Char('d')],
        label: "d",
        action: Action::Show(View::Dags),
        scope: Scope::Lists,
        help: "DAGs view",
        footer: "DAGs",
    },
    Binding {
        keys: &[Char('e')],
        label: "e",
        action: Action::Show(View::Events),
        scope: Scope::Lists,
        help: "events view (the audit log)",
        footer: "events",
    },
    Binding {
        keys: &[Enter],
        label: "Enter",
        action: Action::Detail,
        scope: Scope::Dags,
        help: "the selected DAG's runs",
        footer: "runs",
    },
    Binding {
        keys: &[Char('t')],
        label: "t",
        action: Action::Trigger,
        scope: Scope::Dags,
        help: "trigger the selected DAG now",
        footer: "trigger",
    },
    Binding {
        keys: &[Char('p')],
        label: "p",
        action: Action::TogglePause,
        scope: Scope::Dags,
        help: "pause / resume the selected DAG",
        footer: "pause/resume",
    },
    Binding {
        keys: &[Char('g')],
        label: "g",
        action: Action::OpenDag,
        scope: Scope::Dags,
        help: "draw the DAG (its newest DAG run, else its definition)",
        footer: "draw",
    },
    Binding {
        keys: &[Char('/')],
        label: "/",
        action: Action::StartFilter,
        scope: Scope::Lists,
        help: "filter the list (events: dag:NAME run:ID actor:TEXT or text)",
        footer: "filter",
    },
    Binding {
        keys: &[Char('c')],
        label: "c",
        action: Action::AskCancel,
        scope: Scope::Runs,
        help: "cancel the selected run (asks y/n)",
        footer: "cancel",
    },
    Binding {
        keys: &[Char('C')],
        label: "C",
        action: Action::AskCancelDagRun,
        scope: Scope::Runs,
        help: "cancel the selected run's whole DAG run (asks y/n)",
        footer: "cancel DAG run",
    },
    Binding {
        keys: &[Char('r')],
        label: "r",
        action: Action::Retry,
        scope: Scope::Runs,
        help: "retry the selected run",
        footer: "retry",
    },
    Binding {
        keys: &[Char('t')],
        label: "t",
        action: Action::Trigger,
        scope: Scope::Runs,
        help: "trigger the selected run's DAG",
        footer: "trigger",
    },
    Binding {
        keys: &[Char('p')],
        label: "p",
        action: Action::TogglePause,
        scope: Scope::Runs,
        help: "pause / resume the selected run's DAG",
        footer: "pause",
    },
    Binding {
        keys: &[Char('g')],
        label: "g",
        action: Action::OpenDag,
        scope: Scope::Runs,
        help: "DAG view of the selected run's DAG run",
        footer: "DAG",
    },
    Binding {
        keys: &[Char('l')],
        label: "l",
        action: Action::OpenLog,
        scope: Scope::Runs,
        help: "full log of the selected run (follows)",
        footer: "log",
    },
    Binding {
        keys: &[Char('f')],
        label: "f",
        action: Action::ToggleFollow,
        scope: Scope::Log,
        help: "follow the log on/off",
        footer: "",
    },
    Binding {
        keys: &[Char('?')],
        label: "?",
        action: Action::Help,
        scope: Scope::Global,
        help: "this help",
        footer: "help",
    },
    Binding {
        keys: &[Esc],
        label: "Esc",
        action: Action::Back,
        scope: Scope::Global,
        help: "back / clear the filter",
        footer: "",
    },
    Binding {
        keys: &[Char('q')],
        label: "q",
        action: Action::Quit,
        scope: Scope::Global,
        help: "quit (back to the runs from another view)",
        footer: "quit",
    },
];

/// The scopes whose bindings apply in `mode` with `view` in front, most
/// specific first.
pub(crate) fn scopes(mode: &Mode, view: View) -> &'static [Scope] {
    match (mode, view) {
        (Mode::Dag, _) => &[Scope::Dag, Scope::Global],
        (Mode::Log, _) => &[Scope::Log, Scope::Global],
        (Mode::Help, _) => &[Scope::Global],
        (_, View::Runs) => &[Scope::Runs, Scope::Lists, Scope::Global],
        (_, View::Dags) => &[Scope::Dags, Scope::Lists, Scope::Global],
        _ => &[Scope::Lists, Scope::Global],
    }
}

/// The footer in `width` cells: the bindings with a footer word that
/// apply to the screen in front, the most specific first. When they do
/// not all fit, as many whole ones as fit and then `? help`, which lists
/// them all: a binding is never cut.
pub(crate) fn footer(mode: &Mode, view: View, width: usize) -> String {
    const SEP: &str = " · ";
    let items: Vec<(Action, String)> = scopes(mode, view)
        .iter()
        .flat_map(|scope| KEYMAP.iter().filter(move |b| b.scope == *scope))
        .filter(|b| !b.footer.is_empty())
        .map(|b| (b.action, format!("{} {}", b.label, b.footer)))
        .collect();
    let len = |s: &str| s.chars().count();
    let all = items
        .iter()
        .map(|(_, t)| t.as_str())
        .collect::<Vec<_>>()
        .join(SEP);
    if len(&all) <= width {
        return all;
    }
    let help = items
        .iter()
        .find(|(a, _)| *a == Action::Help)
        .map_or_else(|| "? help".to_string(), |(_, t)| t.clone());
    let mut out = String::new();
    for (action, text) in &items {
        if *action == Action::Help {
            continue;
        }
        let with = if out.is_empty() {
            text.clone()
        } else {
            format!("{out}{SEP}{text}")
        };
        if len(&with) + len(SEP) + len(&help) > width {
            break;
        }
        out = with;
    }
    if out.is_empty() {
        return help;
    }
    format!("{out}{SEP}{help}")
}

/// The action for a key in a mode, if any. Typing a filter or a command
/// and answering the cancel question are handled before the table.
pub fn action_for(mode: &Mode, view: View, key: KeyEvent) -> Option<Action> {
    if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == Char('c') {
        return Some(Action::Quit);
    }
    match mode {
        Mode::Filter => {
            return Some(match key.code {
                Enter => Action::FilterDone,
                Esc => Action::FilterCancel,
                Backspace => Action::FilterBackspace,
                Char(c) => Action::FilterInput(c),
                _ => return None,
            });
        }
        Mode::Command => {
            return Some(match key.code {
                Enter => Action::CommandDone,
                Esc => Action::CommandCancel,
                Backspace => Action::CommandBackspace,
                Tab => Action::CommandComplete,
                Char(c) => Action::CommandInput(c),
                _ => return None,
            });
        }
        Mode::ConfirmCancel(_) => {
            return Some(match key.code {
                Char('y') | Char('Y') => Action::Confirm(true),
                _ => Action::Confirm(false),
            });
        }
        _ => {}
    }
    scopes(mode, view)
        .iter()
        .flat_map(|scope| KEYMAP.iter().filter(move |b| b.scope == *scope))
        .find(|b| b.keys.contains(&key.code))
        .map(|b| b.action)
}

/// The keymap as a Markdown table (docs/console.md), in keymap order.
pub fn reference_markdown() -> String {
    let mut out = String::from("| key | where | does |\n|---|---|---|\n");
    for b in KEYMAP {
        let scope = match b.scope {
            Scope::Global => "everywhere",
            s => s.label(),
        };
        out.push_str(&format!("| `{}` | {scope} | {} |\n", b.label, b.help));
    }
    out
}
