//! Watches the jobs folder (SPEC §5.4) with `notify`, debounced by
//! `notify-debouncer-full` (200 ms), so an editor's write-temp-then-rename or
//! a burst of 1,000 files becomes one rescan. Every batch of events — and
//! every error, including the kernel queue overflowing — triggers a full
//! rescan of the folder; the rescan compares content hashes, so unchanged
//! DAGs are untouched.

use std::path::Path;
use std::time::Duration;

use notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, new_debouncer};

pub const DEBOUNCE: Duration = Duration::from_millis(200);

/// Keeps the watch alive while held.
pub struct Watch {
    _debouncer: Box<dyn std::any::Any + Send>,
}

pub fn watch(dir: &Path, on_change: impl Fn() + Send + 'static) -> notify::Result<Watch> {
    let mut debouncer =
        new_debouncer(
            DEBOUNCE,
            None,
            move |result: DebounceEventResult| match result {
                Ok(events) if events.is_empty() => {}
                Ok(events) => {
                    // The kernel queue overflowed (IN_Q_OVERFLOW): events
                    // were lost, which the full rescan makes up for.
                    if events.iter().any(|e| e.need_rescan()) {
                        tracing::warn!("jobs folder watch: event queue overflow; full rescan");
                    }
                    on_change()
                }
                Err(errors) => {
                    for e in errors {
                        tracing::warn!("jobs folder watch: {e}; rescanning");
                    }
                    on_change();
                }
            },
        )?;
    debouncer.watch(dir, RecursiveMode::Recursive)?;
    Ok(Watch {
        _debouncer: Box::new(debouncer),
    })
}
