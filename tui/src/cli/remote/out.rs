//! Where a remote command writes, and the helpers every command prints
//! through.

use std::io::{IsTerminal, Write};

use ax_protocol::Method;
use ax_protocol::client::{Client, ClientError};
use ax_shared::visible::visible;
use serde::Serialize;
use serde_json::json;

use crate::cli::exit;

/// `say!(o, "fmt", args…)`: a human line on stdout (see [`Out`]).
macro_rules! say {
    ($o:expr, $($arg:tt)*) => {
        $o.say(format_args!($($arg)*))
    };
}
pub(super) use say;

/// `tell!(o, "fmt", args…)`: a human line on stderr (see [`Out`]).
macro_rules! tell {
    ($o:expr, $($arg:tt)*) => {
        $o.tell(format_args!($($arg)*))
    };
}
pub(super) use tell;

/// What stdout is: a terminal (`ax logs` shows a job's output through
/// `terminal::TerminalText` instead of byte for byte), and whether colours
/// may be used on it (`ax dag --run`).
#[derive(Debug, Clone, Copy, Default)]
pub struct StdoutKind {
    pub terminal: bool,
    pub colour: bool,
}

impl StdoutKind {
    /// The process's stdout: colours on a terminal unless `NO_COLOR` is
    /// set to a non-empty value.
    pub fn detect() -> Self {
        let terminal = std::io::stdout().is_terminal();
        StdoutKind {
            terminal,
            colour: terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        }
    }
}

/// Where a command writes. Human output goes line by line through
/// [`say!`] (stdout) and [`tell!`] (stderr), which show control characters
/// from the daemon's answers (a DAG name, a heartbeat message, an error)
/// as visible escapes (`\e`, `\x07`, `\n`), so no answer can act on the
/// terminal or forge a line (`ax --help`, "Output", in docs/cli.md). `--json` documents and
/// a job's output (`ax logs`) are written to `out` as they are.
pub(super) struct Out<'a> {
    pub(super) out: &'a mut dyn Write,
    pub(super) err: &'a mut dyn Write,
    /// `--json`: one JSON document (NDJSON for streams) instead of text.
    pub(super) json: bool,
    pub(super) stdout: StdoutKind,
}

impl Out<'_> {
    /// One human line on stdout, escaped by `visible`.
    pub(super) fn say(&mut self, line: std::fmt::Arguments<'_>) {
        let _ = writeln!(self.out, "{}", visible(&line.to_string()));
    }

    /// One human line on stderr, escaped by `visible`.
    pub(super) fn tell(&mut self, line: std::fmt::Arguments<'_>) {
        let _ = writeln!(self.err, "{}", visible(&line.to_string()));
    }

    /// Human lines on stdout, each escaped by `visible`.
    pub(super) fn say_all(&mut self, lines: impl IntoIterator<Item = String>) {
        for line in lines {
            say!(self, "{line}");
        }
    }

    /// `--json`: the answer as the daemon sent it (keys sorted).
    pub(super) fn print_json<T: Serialize>(&mut self, answer: &T) -> i32 {
        let _ = writeln!(self.out, "{}", json!(answer));
        exit::OK
    }
}

/// A request whose answer is printed only with `--json`.
pub(super) async fn quiet_request<M: Method>(
    c: &mut Client,
    o: &mut Out<'_>,
    params: M,
) -> Result<i32, ClientError> {
    let answer = c.request(params).await?;
    if o.json {
        o.print_json(&answer);
    }
    Ok(exit::OK)
}
