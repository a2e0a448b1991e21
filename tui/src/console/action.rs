//! What the user can do (`Action`), the resource a list shows (`View`) and
//! the screen that decides what a key means (`Mode`): shared by the keymap
//! and the state, which depend on this module and not on each other's
//! internals.

/// The resources the console lists (k9s style), switched with `:NAME`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    Runs,
    Dags,
    Pools,
    Events,
    /// The nodes of a cluster (a PostgreSQL store).
    Nodes,
}

impl View {
    pub const ALL: [View; 5] = [
        View::Runs,
        View::Dags,
        View::Pools,
        View::Events,
        View::Nodes,
    ];

    /// The name typed after `:`.
    pub fn name(self) -> &'static str {
        match self {
            View::Runs => "runs",
            View::Dags => "dags",
            View::Pools => "pools",
            View::Events => "events",
            View::Nodes => "nodes",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// User intents (from the keymap); the view in front decides what an
/// intent such as `Trigger` applies to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Up,
    Down,
    Left,
    Right,
    PageUp,
    PageDown,
    Detail,
    NextPane,
    SelectTab(usize),
    Show(View),
    StartFilter,
    FilterInput(char),
    FilterBackspace,
    FilterDone,
    FilterCancel,
    StartCommand,
    CommandInput(char),
    CommandBackspace,
    CommandComplete,
    CommandDone,
    CommandCancel,
    AskCancel,
    AskCancelDagRun,
    Confirm(bool),
    Retry,
    Trigger,
    TogglePause,
    OpenDag,
    OpenLog,
    ToggleFollow,
    Help,
    Back,
    Quit,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Mode {
    Main,
    Filter,
    /// Typing a `:` command.
    Command,
    ConfirmCancel(CancelTarget),
    Help,
    Dag,
    Log,
}

/// What the cancel question is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CancelTarget {
    Run(u64),
    /// Every unfinished run of the DAG run.
    DagRun(u64),
}
