//! What the user can do (`Action`) and the screen that decides what a key
//! means (`Mode`): shared by the keymap and the state, which depend on
//! this module and not on each other's internals.

/// User intents (from the keymap) and daemon events, in one enum.
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
    StartFilter,
    FilterInput(char),
    FilterBackspace,
    FilterDone,
    FilterCancel,
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
