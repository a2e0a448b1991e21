//! What the daemon tells subscribed clients without being asked.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::api::{EventView, StatusView};

/// A notification: `method` names the variant, `params` holds its fields.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "method", content = "params", rename_all = "snake_case")]
pub enum Notification {
    /// Something was committed: its events, the runs whose progress moved
    /// (not stored), and the status after it.
    Changed(Changed),
    /// The client read too slowly and notifications were dropped; it must
    /// subscribe again (and catch up from `events`).
    Lagged(Lagged),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Changed {
    pub events: Vec<EventView>,
    pub progress: Vec<u64>,
    /// Boxed: a status is most of a notification's size.
    pub status: Box<StatusView>,
}

impl Changed {
    /// Every run this change is about (events first, then progress).
    pub fn runs(&self) -> Vec<u64> {
        self.events
            .iter()
            .filter_map(|e| e.run)
            .chain(self.progress.iter().copied())
            .collect()
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Lagged {
    pub missed: u64,
    pub message: String,
}

impl Notification {
    /// The NDJSON line (without its newline).
    pub fn to_line(&self) -> String {
        let mut v = serde_json::to_value(self).unwrap_or(Value::Null);
        if let Value::Object(m) = &mut v {
            m.insert("jsonrpc".into(), Value::from("2.0"));
        }
        v.to_string()
    }

    /// Reads a notification's `method` and `params`.
    pub fn decode(method: &str, params: Value) -> Result<Notification, serde_json::Error> {
        serde_json::from_value(serde_json::json!({ "method": method, "params": params }))
    }
}
