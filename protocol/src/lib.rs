//! The socket protocol (docs/protocol.md): JSON-RPC 2.0, one JSON object
//! per line. `api` holds the typed answers (views), `request` the typed
//! requests, `notification` what a subscriber is pushed, `client` the
//! async client the CLI, the console and the tests use, and `socket_dir`
//! where the socket lives and whether its folder can be trusted.
//!
//! JSON-RPC requires `error.code` to be an integer; the stable, documented
//! error code string that clients should match on is `error.data.code`
//! (`not_found`, `invalid_params`, …).
//!
//! Every line either side writes is encoded through `serde_json::Value`,
//! whose objects keep their keys sorted: the byte-exact lines are pinned by
//! `tests/protocol.rs`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub mod api;
pub mod client;
pub mod notification;
pub mod request;
pub mod socket_dir;

pub use notification::{Changed, Lagged, Notification};
pub use request::{Method, Request};

/// Bumped on incompatible changes; `hello` refuses a mismatch.
pub const PROTOCOL_VERSION: u32 = 1;

/// Largest frame (one line) either side accepts.
pub const MAX_FRAME: usize = 1 << 20;

/// One request line as framed, before its params are decoded.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RequestFrame {
    pub jsonrpc: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Value>,
    pub method: String,
    #[serde(default)]
    pub params: Value,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// Stable error codes (the `error.data.code` string).
pub mod codes {
    pub const PARSE_ERROR: &str = "parse_error";
    pub const INVALID_REQUEST: &str = "invalid_request";
    pub const METHOD_NOT_FOUND: &str = "method_not_found";
    pub const INVALID_PARAMS: &str = "invalid_params";
    pub const NOT_FOUND: &str = "not_found";
    pub const INVALID_STATE: &str = "invalid_state";
    /// `reload`: the config file is broken; the running config stays.
    pub const INVALID_CONFIG: &str = "invalid_config";
    pub const FORBIDDEN: &str = "forbidden";
    pub const HELLO_REQUIRED: &str = "hello_required";
    pub const VERSION_MISMATCH: &str = "version_mismatch";
    pub const FRAME_TOO_LARGE: &str = "frame_too_large";
    pub const STORE_ERROR: &str = "store_error";
    pub const SHUTTING_DOWN: &str = "shutting_down";
    /// An answer that would be larger than [`MAX_FRAME`] and has no
    /// paging to return part of it.
    pub const ANSWER_TOO_LARGE: &str = "answer_too_large";
    /// The peer's uid holds as many connections as axd allows one uid.
    pub const TOO_MANY_CONNECTIONS: &str = "too_many_connections";
    /// No `hello`, or no whole frame, within the time allowed.
    pub const TIMEOUT: &str = "timeout";
    pub const INTERNAL: &str = "internal";
}

impl RpcError {
    pub fn new(kind: &str, message: impl Into<String>) -> RpcError {
        let code = match kind {
            codes::PARSE_ERROR | codes::FRAME_TOO_LARGE => -32700,
            codes::INVALID_REQUEST => -32600,
            codes::METHOD_NOT_FOUND => -32601,
            codes::INVALID_PARAMS => -32602,
            codes::INTERNAL | codes::STORE_ERROR => -32603,
            _ => -32000,
        };
        RpcError {
            code,
            message: message.into(),
            data: Some(serde_json::json!({ "code": kind })),
        }
    }

    /// The stable code string.
    pub fn kind(&self) -> &str {
        self.data
            .as_ref()
            .and_then(|d| d.get("code"))
            .and_then(Value::as_str)
            .unwrap_or(codes::INTERNAL)
    }
}

/// An answer as it goes on the wire.
pub fn encode_answer<T: Serialize>(answer: T) -> Result<Value, RpcError> {
    serde_json::to_value(answer).map_err(|e| RpcError::new(codes::INTERNAL, e.to_string()))
}

/// Any line the daemon sends: a response (has `id`) or a notification
/// (has `method`, no `id`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Message {
    pub jsonrpc: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RpcError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
    /// Beside `result` when a list was cut to fit in [`MAX_FRAME`]:
    /// `{"returned": N, "next": {params}}`; the same request with `next`
    /// merged into its params returns what follows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<Value>,
}

impl Message {
    pub fn result(id: Value, result: Value) -> Message {
        Message {
            jsonrpc: "2.0".into(),
            id: Some(id),
            result: Some(result),
            error: None,
            method: None,
            params: None,
            truncated: None,
        }
    }
    pub fn error(id: Option<Value>, error: RpcError) -> Message {
        Message {
            jsonrpc: "2.0".into(),
            id: Some(id.unwrap_or(Value::Null)),
            result: None,
            error: Some(error),
            method: None,
            params: None,
            truncated: None,
        }
    }
    pub fn notification(method: &str, params: Value) -> Message {
        Message {
            jsonrpc: "2.0".into(),
            id: None,
            result: None,
            error: None,
            method: Some(method.into()),
            params: Some(params),
            truncated: None,
        }
    }
    /// The answer to a request.
    pub fn response(id: Value, answer: Result<Value, RpcError>) -> Message {
        match answer {
            Ok(v) => Message::result(id, v),
            Err(e) => Message::error(Some(id), e),
        }
    }
    pub fn is_notification(&self) -> bool {
        self.id.is_none() && self.method.is_some()
    }
}

/// Decodes one request line. On failure, the id to answer with (when the
/// line was JSON with an `id`) and the error, which names what was wrong.
/// Never panics, whatever the bytes (fuzzed: `fuzz/`).
pub fn decode_request(line: &str) -> Result<RequestFrame, (Option<Value>, RpcError)> {
    let v: Value = serde_json::from_str(line).map_err(|e| {
        (
            None,
            RpcError::new(codes::PARSE_ERROR, format!("malformed JSON: {e}")),
        )
    })?;
    let id = v.get("id").cloned();
    match serde_json::from_value::<RequestFrame>(v) {
        Ok(r) if r.jsonrpc == "2.0" => Ok(r),
        Ok(_) | Err(_) => Err((
            id,
            RpcError::new(
                codes::INVALID_REQUEST,
                "expected {\"jsonrpc\": \"2.0\", \"id\": …, \"method\": \"…\", \"params\": {…}}",
            ),
        )),
    }
}
