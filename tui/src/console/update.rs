//! `App::update`: what each user action does to the state, and the
//! requests it needs. Actions on a list go to the view in front, which
//! decides what they apply to (`t` triggers the selected run's DAG in the
//! runs view, the selected DAG in the DAGs view); the console's own
//! actions (modes, the filter, the `:` line, the cancel question) are
//! handled here.

use super::prompt::Named;
use super::state::{Action, App, CancelTarget, Command, Mode, View};
use super::views::context::scrolled;
use super::views::readings::run_name;

impl App {
    /// Applies a user action; returns the requests it needs.
    pub fn update(&mut self, action: Action) -> Vec<Command> {
        match action {
            Action::Quit => self.quit_or_back(),
            Action::Back => self.back(),
            Action::Help => self.toggle_help(),
            Action::Up => self.navigate(-1),
            Action::Down => self.navigate(1),
            Action::PageUp => self.navigate(-10),
            Action::PageDown => self.navigate(10),
            Action::Left => self.scroll_sideways(-4),
            Action::Right => self.scroll_sideways(4),
            Action::Detail => self.detail(),
            Action::NextPane => {
                self.runs.next_pane();
                vec![]
            }
            Action::SelectTab(i) => {
                self.runs.select_tab(i);
                vec![self.window_command()]
            }
            Action::Show(v) => self.show(v),
            Action::StartFilter
            | Action::FilterInput(_)
            | Action::FilterBackspace
            | Action::FilterDone
            | Action::FilterCancel => self.filter_action(action),
            Action::StartCommand
            | Action::CommandInput(_)
            | Action::CommandBackspace
            | Action::CommandComplete
            | Action::CommandDone
            | Action::CommandCancel => self.command_action(action),
            Action::AskCancel => self.ask_cancel(),
            Action::AskCancelDagRun => self.ask_cancel_dag_run(),
            Action::Confirm(yes) => self.confirm(yes),
            Action::Retry => match self.runs.selected() {
                Some(r) => {
                    let id = r.id;
                    self.note(format!("retrying run {id}…"));
                    vec![Command::Retry(id)]
                }
                None => vec![],
            },
            Action::Trigger => self.trigger(),
            Action::TogglePause => self.toggle_pause(),
            Action::OpenDag => self.open_dag(),
            Action::OpenLog => match self.runs.selected().map(|r| r.id) {
                Some(id) => self.follow_log(id),
                None => vec![],
            },
            Action::ToggleFollow => {
                self.log.toggle_follow();
                vec![]
            }
        }
    }

    /// Leaves a sub-view (stopping a followed log) for the lists.
    fn leave_mode(&mut self) -> Vec<Command> {
        let was_log = self.mode == Mode::Log;
        self.mode = Mode::Main;
        if was_log {
            return self.log.close();
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

    /// `q`: leaves a sub-view, then goes back to the runs, then quits.
    fn quit_or_back(&mut self) -> Vec<Command> {
        match self.mode {
            Mode::Main if self.view != View::Runs => self.show(View::Runs),
            Mode::Main => {
                self.quit = true;
                vec![Command::StopLog, Command::Quit]
            }
            _ => self.leave_mode(),
        }
    }

    /// Esc: leaves a sub-view, else clears the filter, else shows all
    /// DAGs' runs again, else goes back to the runs.
    fn back(&mut self) -> Vec<Command> {
        if self.mode != Mode::Main {
            return self.leave_mode();
        }
        let view = self.view;
        if !self.filter(view).is_empty() {
            self.listing_mut(view).filter.clear();
            return self.filter_changed();
        }
        if view == View::Runs && self.runs.dag.take().is_some() {
            return self.filter_changed();
        }
        if view != View::Runs {
            return self.show(View::Runs);
        }
        vec![]
    }

    fn toggle_help(&mut self) -> Vec<Command> {
        if self.mode == Mode::Help {
            self.mode = Mode::Main;
            return vec![];
        }
        let c = self.leave_mode();
        self.mode = Mode::Help;
        self.help_scroll = 0;
        c
    }

    /// ↑↓ and the page keys: scroll a sub-screen or the focused detail
    /// pane, else move the selection of the list in front.
    fn navigate(&mut self, step: i64) -> Vec<Command> {
        match self.mode {
            Mode::Log => self.log.scroll_down(step),
            Mode::Dag => self.graph.scroll_down(step),
            Mode::Help => self.help_scroll = scrolled(self.help_scroll, step),
            _ => {
                return match self.view {
                    View::Runs => self.runs.navigate(step),
                    View::Dags => {
                        self.dags.step(step);
                        vec![]
                    }
                    View::Pools => {
                        self.pools.step(step, self.daemon.status.as_ref());
                        vec![]
                    }
                    View::Events => {
                        self.events.step(step);
                        vec![]
                    }
                    View::Nodes => {
                        self.nodes.step(step, self.daemon.status.as_ref());
                        vec![]
                    }
                };
            }
        }
        vec![]
    }

    /// ←→: only the DAG drawing is wider than the screen.
    fn scroll_sideways(&mut self, step: i64) -> Vec<Command> {
        if self.mode == Mode::Dag {
            self.graph.scroll_right(step);
        }
        vec![]
    }

    /// Enter: a DAG's runs in the DAGs view, else the selected run's
    /// detail pane.
    fn detail(&mut self) -> Vec<Command> {
        if self.view != View::Dags {
            return self.runs.focus_detail();
        }
        match self.dags.selected().map(|d| d.name.clone()) {
            Some(name) => {
                self.runs.show_dag(name);
                self.show(View::Runs)
            }
            None => vec![],
        }
    }

    /// The filter changed: the list starts at its top again.
    fn filter_changed(&mut self) -> Vec<Command> {
        self.listing_mut(self.view).selected = 0;
        self.view_commands()
    }

    fn filter_action(&mut self, action: Action) -> Vec<Command> {
        let view = self.view;
        match action {
            Action::StartFilter => self.mode = Mode::Filter,
            Action::FilterInput(c) => {
                self.listing_mut(view).filter.push(c);
                return self.filter_changed();
            }
            Action::FilterBackspace => {
                self.listing_mut(view).filter.pop();
                return self.filter_changed();
            }
            Action::FilterCancel => {
                self.mode = Mode::Main;
                self.listing_mut(view).filter.clear();
                return self.filter_changed();
            }
            _ => self.mode = Mode::Main,
        }
        vec![]
    }

    fn command_action(&mut self, action: Action) -> Vec<Command> {
        match action {
            Action::StartCommand => {
                self.mode = Mode::Command;
                self.command.text.clear();
            }
            Action::CommandInput(c) => self.command.text.push(c),
            Action::CommandBackspace => {
                if self.command.text.pop().is_none() {
                    self.mode = Mode::Main;
                }
            }
            Action::CommandComplete => self.command.complete(),
            Action::CommandDone => return self.run_command(),
            _ => {
                self.mode = Mode::Main;
                self.command.text.clear();
            }
        }
        vec![]
    }

    fn run_command(&mut self) -> Vec<Command> {
        self.mode = Mode::Main;
        match self.command.take() {
            Named::Nothing => vec![],
            Named::Show(v) => self.show(v),
            Named::Help => {
                self.mode = Mode::Help;
                vec![]
            }
            Named::Quit => {
                self.quit = true;
                vec![Command::Quit]
            }
            Named::Error(text) => {
                self.say(text, true);
                vec![]
            }
        }
    }

    fn ask_cancel(&mut self) -> Vec<Command> {
        match self.runs.selected().cloned() {
            Some(r) if !r.state.is_terminal() => {
                let id = r.id;
                self.mode = Mode::ConfirmCancel(CancelTarget::Run(id));
                self.note(format!(
                    "cancel run {id} ({})? y/n",
                    run_name(&r.dag, &r.job)
                ));
            }
            Some(r) => {
                let msg = format!("run {} already ended ({})", r.id, r.state);
                self.say(msg, true);
            }
            None => {}
        }
        vec![]
    }

    /// The daemon decides whether the DAG run has anything left to
    /// cancel: the selected run may have ended while others have not.
    fn ask_cancel_dag_run(&mut self) -> Vec<Command> {
        if let Some(r) = self.runs.selected() {
            let (dag_run, dag) = (r.dag_run, r.dag.clone());
            self.mode = Mode::ConfirmCancel(CancelTarget::DagRun(dag_run));
            self.note(format!(
                "cancel DAG run {dag_run} ({dag}): all its unfinished runs? y/n"
            ));
        }
        vec![]
    }

    fn confirm(&mut self, yes: bool) -> Vec<Command> {
        let Mode::ConfirmCancel(target) = self.mode else {
            return vec![];
        };
        self.mode = Mode::Main;
        match (yes, target) {
            (false, _) => {
                self.note("not cancelled");
                vec![]
            }
            (true, CancelTarget::Run(id)) => {
                self.note(format!("cancelling run {id}…"));
                vec![Command::Cancel(id)]
            }
            (true, CancelTarget::DagRun(id)) => {
                self.note(format!("cancelling DAG run {id}…"));
                vec![Command::CancelDagRun(id)]
            }
        }
    }

    /// `t`: the selected DAG, or the selected run's DAG. A run of a DAG
    /// the jobs folder does not hold (an ad-hoc `ax submit`, a hook's DAG
    /// run) has no file to trigger: the console says so instead of asking.
    fn trigger(&mut self) -> Vec<Command> {
        let dag = match self.view {
            View::Dags => self.dags.selected().map(|d| d.name.clone()),
            _ => match self.runs.selected() {
                Some(r) if self.dags.has_file(&r.dag) == Some(false) => {
                    let what = if r.dag.contains(':') {
                        "a hook's DAG run"
                    } else {
                        "an ad-hoc DAG run (ax submit)"
                    };
                    let msg = format!(
                        "cannot trigger {}: {what} has no DAG file to trigger; r retries run {}",
                        r.dag, r.id
                    );
                    self.say(msg, true);
                    return vec![];
                }
                r => r.map(|r| r.dag.clone()),
            },
        };
        match dag {
            Some(dag) => {
                self.note(format!("triggering {dag}…"));
                vec![Command::Trigger(dag)]
            }
            None => vec![],
        }
    }

    /// The DAGs view knows the DAG's paused state; from a run the request
    /// task asks the daemon first (a run's text says nothing reliable
    /// about its DAG).
    fn toggle_pause(&mut self) -> Vec<Command> {
        if self.view != View::Dags {
            return match self.runs.selected() {
                Some(r) => vec![Command::TogglePause(r.dag.clone())],
                None => vec![],
            };
        }
        match self.dags.selected() {
            Some(d) => {
                let (dag, pause) = (d.name.clone(), !d.paused);
                let verb = if pause { "pausing" } else { "resuming" };
                self.note(format!("{verb} {dag}…"));
                vec![Command::Pause { dag, pause }]
            }
            None => vec![],
        }
    }

    /// The DAG drawing: the selected DAG in the DAGs view (its newest run,
    /// or its definition), else the selected run's DAG run.
    fn open_dag(&mut self) -> Vec<Command> {
        let opened = match self.view {
            View::Dags => self
                .dags
                .selected()
                .cloned()
                .map(|d| self.graph.open_dag(d)),
            _ => self
                .runs
                .selected()
                .map(|r| r.dag_run)
                .map(|id| self.graph.open_dag_run(id)),
        };
        match opened {
            Some(c) => {
                self.mode = Mode::Dag;
                c
            }
            None => {
                self.graph = Default::default();
                vec![]
            }
        }
    }
}
