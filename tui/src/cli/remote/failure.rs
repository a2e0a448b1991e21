//! A failed request: its exit code, and how it is told on stderr.

use ax_protocol::client::ClientError;
use ax_protocol::codes;
use serde_json::json;

use super::out::{Out, tell};
use crate::cli::exit;

/// Tells `e` on stderr (a JSON document with `--json`) and returns its
/// exit code.
pub(super) fn fail(o: &mut Out<'_>, e: ClientError) -> i32 {
    let code = exit_code(&e);
    if o.json {
        let doc = match &e {
            ClientError::Rpc(r) => json!({"error": {"code": r.kind(), "message": r.message}}),
            ClientError::UnsafeSocket(_) => {
                json!({"error": {"code": "unsafe_socket", "message": e.to_string()}})
            }
            other => {
                json!({"error": {"code": if code == exit::UNREACHABLE { "unreachable" } else { "failed" }, "message": other.to_string()}})
            }
        };
        let _ = writeln!(o.err, "{doc}");
    } else {
        tell!(o, "ax: {}", message(&e));
        if matches!(e, ClientError::Unreachable { .. }) {
            tell!(
                o,
                "ax: is axd running? start it with `axd --config PATH`, or pass --socket"
            );
        }
    }
    code
}

/// The daemon's own message for a refused request, else the error's text.
pub(super) fn message(e: &ClientError) -> String {
    match e {
        ClientError::Rpc(r) => r.message.clone(),
        other => other.to_string(),
    }
}

/// The exit code of a failed request (`ax --help`, "Exit codes").
pub(super) fn exit_code(e: &ClientError) -> i32 {
    match e {
        ClientError::Unreachable { .. } | ClientError::UnsafeSocket(_) => exit::UNREACHABLE,
        ClientError::Rpc(r) if r.kind() == codes::NOT_FOUND => exit::NOT_FOUND,
        // The daemon refused the request's parts: the command line was wrong.
        ClientError::Rpc(r) if r.kind() == codes::INVALID_PARAMS => exit::USAGE,
        // A broken axd.toml is a usage error of the operator's.
        ClientError::Rpc(r) if r.kind() == codes::INVALID_CONFIG => exit::USAGE,
        _ => exit::FAILED,
    }
}
