//! `App::update`: what each user action does to the state, and the
//! requests it needs. The view in front decides what an action applies to
//! (`t` triggers the selected run's DAG in the runs view, the selected DAG
//! in the DAGs view).

use super::state::{Action, App, CancelTarget, Command, Mode, Pane, TABS, View};

/// What `:` accepts besides the view names.
const COMMANDS: [&str; 2] = ["help", "quit"];

impl App {
    /// Leaves a sub-view (stopping a followed log) for the lists.
    fn leave_mode(&mut self) -> Vec<Command> {
        let was_log = self.mode == Mode::Log;
        self.mode = Mode::Main;
        if was_log {
            self.log_run = None;
            return vec![Command::StopLog];
        }
        vec![]
    }

    /// Brings a list to the front and asks for its data.
    fn show(&mut self, view: View) -> Vec<Command> {
        let mut c = self.leave_mode();
        self.view = view;
        c.extend(self.view_commands());
        c
    }

    /// The names `:` completes to.
    pub fn completions(&self) -> Vec<&'static str> {
        View::ALL
            .iter()
            .map(|v| v.name())
            .chain(COMMANDS)
            .filter(|n| n.starts_with(self.command.trim()))
            .collect()
    }

    fn run_command(&mut self) -> Vec<Command> {
        self.mode = Mode::Main;
        let typed = self.command.trim().to_string();
        self.command.clear();
        let found = {
            let mut all: Vec<&str> = View::ALL.iter().map(|v| v.name()).chain(COMMANDS).collect();
            // `:dag` and `:run` (singular) name their views too.
            all.retain(|n| n.starts_with(&typed) || n.trim_end_matches('s') == typed);
            all
        };
        match found.as_slice() {
            _ if typed.is_empty() => vec![],
            [name] => match View::ALL.iter().find(|v| v.name() == *name) {
                Some(v) => self.show(*v),
                None if *name == "quit" => {
                    self.quit = true;
                    vec![Command::Quit]
                }
                None => {
                    self.mode = Mode::Help;
                    vec![]
                }
            },
            [] => {
                self.say(
                    format!("unknown command :{typed} (try :runs :dags :pools :events :nodes)"),
                    true,
                );
                vec![]
            }
            many => {
                self.say(format!(":{typed} is ambiguous: {}", many.join(" ")), true);
                vec![]
            }
        }
    }

    /// Moves the selection of the list in front by `step`.
    fn move_in_list(&mut self, step: i64) -> Vec<Command> {
        let clamp = |at: usize, len: usize| -> usize {
            if len == 0 {
                0
            } else {
                (at as i64 + step).clamp(0, len as i64 - 1) as usize
            }
        };
        match self.view {
            View::Runs => {
                let next = clamp(self.selected, self.runs.len());
                if next == self.selected {
                    return vec![];
                }
                self.selected = next;
                self.log_tail.clear();
                self.detail_commands()
            }
            View::Dags => {
                self.dag_selected = clamp(self.dag_selected, self.shown_dags().len());
                vec![]
            }
            View::Pools => {
                let n = self.status.as_ref().map_or(0, |s| s.pools.len());
                self.pool_selected = clamp(self.pool_selected, n);
                vec![]
            }
            View::Events => {
                self.event_selected = clamp(self.event_selected, self.shown_events().len());
                vec![]
            }
            View::Nodes => {
                self.node_selected = clamp(self.node_selected, self.shown_nodes().len());
                vec![]
            }
        }
    }

    fn filter_changed(&mut self) -> Vec<Command> {
        match self.view {
            View::Runs => self.selected = 0,
            View::Dags => self.dag_selected = 0,
            View::Pools => self.pool_selected = 0,
            View::Events => self.event_selected = 0,
            View::Nodes => self.node_selected = 0,
        }
        self.view_commands()
    }

    /// Applies a user action; returns the requests it needs.
    pub fn update(&mut self, action: Action) -> Vec<Command> {
        match action {
            Action::Quit => match self.mode {
                Mode::Main if self.view != View::Runs => self.show(View::Runs),
                Mode::Main => {
                    self.quit = true;
                    vec![Command::StopLog, Command::Quit]
                }
                _ => self.leave_mode(),
            },
            Action::Back => {
                if self.mode != Mode::Main {
                    return self.leave_mode();
                }
                let f = self.view.index();
                if !self.filters[f].is_empty() {
                    self.filters[f].clear();
                    return self.filter_changed();
                }
                if self.view == View::Runs && self.runs_dag.take().is_some() {
                    return self.filter_changed();
                }
                if self.view != View::Runs {
                    return self.show(View::Runs);
                }
                vec![]
            }
            Action::Help => {
                if self.mode == Mode::Help {
                    self.mode = Mode::Main;
                    return vec![];
                }
                let c = self.leave_mode();
                self.mode = Mode::Help;
                self.scroll = (0, 0);
                c
            }
            Action::Up | Action::Down | Action::PageUp | Action::PageDown => {
                let step: i64 = match action {
                    Action::Up => -1,
                    Action::Down => 1,
                    Action::PageUp => -10,
                    _ => 10,
                };
                match self.mode {
                    Mode::Log => {
                        // scroll.0 counts lines up from the newest.
                        let held = self.log.len() as i64;
                        let back = (i64::from(self.scroll.0) - step).clamp(0, held);
                        self.scroll.0 = back as u16;
                        self.follow = back == 0;
                        vec![]
                    }
                    Mode::Dag | Mode::Help => {
                        let y = (i64::from(self.scroll.0.min(60_000)) + step).clamp(0, 60_000);
                        self.scroll.0 = y as u16;
                        vec![]
                    }
                    _ if self.view == View::Runs && self.focus == Pane::Detail => {
                        let y = (i64::from(self.scroll.0.min(60_000)) + step).clamp(0, 60_000);
                        self.scroll.0 = y as u16;
                        vec![]
                    }
                    _ => self.move_in_list(step),
                }
            }
            Action::Left | Action::Right => {
                let dx: i32 = if action == Action::Left { -4 } else { 4 };
                self.scroll.1 = (i32::from(self.scroll.1) + dx).clamp(0, 60_000) as u16;
                vec![]
            }
            Action::Detail => match self.view {
                View::Dags => match self.selected_dag().map(|d| d.name.clone()) {
                    Some(name) => {
                        self.runs_dag = Some(name);
                        self.tab = 0;
                        self.selected = 0;
                        self.filters[View::Runs.index()].clear();
                        self.show(View::Runs)
                    }
                    None => vec![],
                },
                _ => {
                    self.focus = Pane::Detail;
                    self.scroll = (0, 0);
                    self.detail_commands()
                }
            },
            Action::NextPane => {
                self.focus = if self.focus == Pane::Runs {
                    Pane::Detail
                } else {
                    Pane::Runs
                };
                self.scroll = (0, 0);
                vec![]
            }
            Action::SelectTab(i) => {
                self.tab = i.min(TABS.len() - 1);
                self.selected = 0;
                vec![self.window_command()]
            }
            Action::Show(v) => self.show(v),
            Action::StartFilter => {
                self.mode = Mode::Filter;
                vec![]
            }
            Action::FilterInput(c) => {
                self.filters[self.view.index()].push(c);
                self.filter_changed()
            }
            Action::FilterBackspace => {
                self.filters[self.view.index()].pop();
                self.filter_changed()
            }
            Action::FilterDone => {
                self.mode = Mode::Main;
                vec![]
            }
            Action::FilterCancel => {
                self.mode = Mode::Main;
                self.filters[self.view.index()].clear();
                self.filter_changed()
            }
            Action::StartCommand => {
                self.mode = Mode::Command;
                self.command.clear();
                vec![]
            }
            Action::CommandInput(c) => {
                self.command.push(c);
                vec![]
            }
            Action::CommandBackspace => {
                if self.command.pop().is_none() {
                    self.mode = Mode::Main;
                }
                vec![]
            }
            Action::CommandComplete => {
                let options = self.completions();
                if let Some(first) = options.first() {
                    // The longest prefix all candidates share.
                    let mut common = first.to_string();
                    for o in &options[1..] {
                        while !o.starts_with(&common) {
                            common.pop();
                        }
                    }
                    if common.len() > self.command.trim().len() {
                        self.command = common;
                    }
                }
                vec![]
            }
            Action::CommandDone => self.run_command(),
            Action::CommandCancel => {
                self.mode = Mode::Main;
                self.command.clear();
                vec![]
            }
            Action::AskCancel => match self.selected_run().cloned() {
                Some(r) if !r.state.is_terminal() => {
                    let id = r.id;
                    self.mode = Mode::ConfirmCancel(CancelTarget::Run(id));
                    self.say(format!("cancel run {id} ({}/{})? y/n", r.dag, r.job), false);
                    vec![]
                }
                Some(r) => {
                    let msg = format!("run {} already ended ({})", r.id, r.state);
                    self.say(msg, true);
                    vec![]
                }
                None => vec![],
            },
            // The daemon decides whether the DAG run has anything left to
            // cancel: the selected run may have ended while others have not.
            Action::AskCancelDagRun => match self.selected_run() {
                Some(r) => {
                    let (dag_run, dag) = (r.dag_run, r.dag.clone());
                    self.mode = Mode::ConfirmCancel(CancelTarget::DagRun(dag_run));
                    self.say(
                        format!("cancel DAG run {dag_run} ({dag}): all its unfinished runs? y/n"),
                        false,
                    );
                    vec![]
                }
                None => vec![],
            },
            Action::Confirm(yes) => {
                let Mode::ConfirmCancel(target) = self.mode else {
                    return vec![];
                };
                self.mode = Mode::Main;
                match (yes, target) {
                    (false, _) => {
                        self.say("not cancelled", false);
                        vec![]
                    }
                    (true, CancelTarget::Run(id)) => {
                        self.say(format!("cancelling run {id}…"), false);
                        vec![Command::Cancel(id)]
                    }
                    (true, CancelTarget::DagRun(id)) => {
                        self.say(format!("cancelling DAG run {id}…"), false);
                        vec![Command::CancelDagRun(id)]
                    }
                }
            }
            Action::Retry => match self.selected_run() {
                Some(r) => {
                    let id = r.id;
                    self.say(format!("retrying run {id}…"), false);
                    vec![Command::Retry(id)]
                }
                None => vec![],
            },
            Action::Trigger => {
                let dag = match self.view {
                    View::Dags => self.selected_dag().map(|d| d.name.clone()),
                    _ => self.selected_run().map(|r| r.dag.clone()),
                };
                match dag {
                    Some(dag) => {
                        self.say(format!("triggering {dag}…"), false);
                        vec![Command::Trigger(dag)]
                    }
                    None => vec![],
                }
            }
            // The DAGs view knows the DAG's paused state; from a run the
            // request task asks the daemon first (a run's text says
            // nothing reliable about its DAG).
            Action::TogglePause => match self.view {
                View::Dags => match self.selected_dag() {
                    Some(d) => {
                        let (dag, pause) = (d.name.clone(), !d.paused);
                        let verb = if pause { "pausing" } else { "resuming" };
                        self.say(format!("{verb} {dag}…"), false);
                        vec![Command::Pause { dag, pause }]
                    }
                    None => vec![],
                },
                _ => match self.selected_run() {
                    Some(r) => vec![Command::TogglePause(r.dag.clone())],
                    None => vec![],
                },
            },
            Action::OpenDag => {
                self.scroll = (0, 0);
                self.dag_run = None;
                self.dag_def = None;
                match self.view {
                    View::Dags => match self.selected_dag().cloned() {
                        Some(d) => {
                            self.mode = Mode::Dag;
                            let name = d.name.clone();
                            self.dag_def = Some(d);
                            vec![Command::FetchLatestDagRun(name)]
                        }
                        None => vec![],
                    },
                    _ => match self.selected_run().map(|r| r.dag_run) {
                        Some(dag_run) => {
                            self.mode = Mode::Dag;
                            vec![Command::FetchDagRun(dag_run)]
                        }
                        None => vec![],
                    },
                }
            }
            Action::OpenLog => match self.selected_run().map(|r| r.id) {
                Some(id) => {
                    self.mode = Mode::Log;
                    self.log.clear();
                    self.log_eof = false;
                    self.log_run = Some(id);
                    self.follow = true;
                    self.scroll = (0, 0);
                    vec![Command::FollowLog(id)]
                }
                None => vec![],
            },
            Action::ToggleFollow => {
                self.follow = !self.follow;
                if self.follow {
                    self.scroll.0 = 0;
                }
                vec![]
            }
        }
    }
}
