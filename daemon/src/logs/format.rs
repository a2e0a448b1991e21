//! How axd's log lines show their fields: every value (the message too)
//! goes through [`ax_shared::visible::visible`], so a DAG name, a job id
//! or a message holding a newline or a terminal escape shows as `\n` or
//! `\e` on its own line instead of forging a line of the log or acting on
//! the terminal that reads it (docs/operations.md, "Hostile local users").

use ax_shared::visible::visible;
use tracing_subscriber::field::MakeExt;
use tracing_subscriber::fmt::format::{FormatFields, debug_fn};

/// The field formatter of axd's log: the message as is, the other fields
/// as `name=value`, each escaped.
pub fn fields() -> impl for<'w> FormatFields<'w> + Send + Sync + 'static {
    debug_fn(|w, field, value| {
        let text = format!("{value:?}");
        if field.name() == "message" {
            write!(w, "{}", visible(&text))
        } else {
            write!(w, "{}={}", field.name(), visible(&text))
        }
    })
    .delimited(" ")
}
