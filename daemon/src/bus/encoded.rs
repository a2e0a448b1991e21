//! List answers the scheduler encodes itself, and the requests that count
//! as large in a connection's budget.

use ax_protocol::{Request, RpcError};
use serde_json::Value;

/// Requests whose answer may be as large as a frame, and whose work grows
/// with it: they count as a whole frame in a connection's budget
/// (`server`), and the scheduler answers them after everything else of a
/// step, for a bounded time per step (`Scheduler::answer_big_reads`).
pub(crate) fn answers_big(request: &Request) -> bool {
    matches!(
        request,
        Request::ListRuns(_) | Request::Events(_) | Request::GetDagRun(_) | Request::ListDags(_)
    )
}

/// The largest list answer the scheduler encodes: a frame, less room for
/// the response around it (`jsonrpc`, `id`, `truncated`).
pub(crate) const ANSWER_BUDGET: usize = ax_protocol::MAX_FRAME - 16 * 1024;

/// A list answer the scheduler encoded itself, cut to fit in a frame
/// (`list_runs`, `events`, `list_dags`): its JSON text, and the `truncated`
/// marker when items were left out. It reaches the connection as
/// `Answer::List`, which writes it out as `"result": TEXT, "truncated":
/// MARKER` (`Encoded::line`). It is encoded on the scheduler thread
/// because only there, item by item as the rows are read, is it known
/// where a frame ends; encoding elsewhere would need an owned copy of
/// every row and a second pass to cut it.
#[derive(Debug, Default)]
pub struct Encoded {
    pub(crate) json: String,
    count: usize,
    truncated: Option<Value>,
}

impl Encoded {
    /// Appends `item` unless that would take the text past
    /// `ANSWER_BUDGET`; the first item always goes in (an answer too large
    /// even so becomes `answer_too_large` on the way out). Keys are sorted,
    /// as in every other answer (they go through `Value`).
    pub(crate) fn push<T: serde::Serialize>(&mut self, item: &T) -> Result<bool, RpcError> {
        let text = ax_protocol::encode_answer(item)?.to_string();
        if self.count > 0 && self.json.len() + text.len() + 2 > ANSWER_BUDGET {
            return Ok(false);
        }
        self.json.push(if self.count == 0 { '[' } else { ',' });
        self.json.push_str(&text);
        self.count += 1;
        Ok(true)
    }

    /// Marks the answer cut: `next` holds the params that continue it.
    pub(crate) fn cut(&mut self, next: Option<Value>) {
        let mut marker = serde_json::json!({ "returned": self.count });
        if let Some(next) = next {
            marker["next"] = next;
        }
        self.truncated = Some(marker);
    }

    /// The whole response line for request `id`, fields in the order of
    /// `Message`.
    pub fn line(&self, id: &Value) -> String {
        let open = if self.count == 0 { "[" } else { "" };
        let json = &self.json;
        let mut line = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{open}{json}]");
        if let Some(t) = &self.truncated {
            line.push_str(&format!(",\"truncated\":{t}"));
        }
        line.push('}');
        line
    }
}
