//! JSON shapes of SPEC §6 (field names are part of the contract).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::jobfile::FileError;

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AttemptView {
    pub n: u32,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub outcome: Option<String>,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EventView {
    pub seq: i64,
    pub time: String,
    pub run: Option<u64>,
    pub dag_run: u64,
    pub from: Option<String>,
    pub to: Option<String>,
    pub reason: String,
    pub actor: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunView {
    pub id: u64,
    pub dag: String,
    pub job: String,
    pub dag_run: u64,
    pub state: String,
    pub priority: u8,
    pub effective_priority: u8,
    pub pool: String,
    pub attempts: Vec<AttemptView>,
    /// Retries allowed after the first attempt.
    #[serde(default)]
    pub retries: u32,
    pub created_at: Option<String>,
    pub ready_at: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub next_at: Option<String>,
    pub reason: Option<String>,
    pub why: Option<String>,
    pub message: Option<String>,
    pub progress: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<EventView>>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PoolView {
    pub name: String,
    pub slots: u32,
    pub running: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusView {
    pub version: String,
    pub uptime_s: u64,
    pub pools: Vec<PoolView>,
    pub max_concurrency: u32,
    #[serde(default)]
    pub burst_in_use: u32,
    #[serde(default)]
    pub burst_extra: u32,
    pub runs: BTreeMap<String, u64>,
    pub errors: Vec<FileError>,
    /// Set while the store refuses writes (disk full): new writes are
    /// refused until it recovers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_error: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DagView {
    pub name: String,
    pub file: String,
    pub jobs: Vec<String>,
    pub schedule: Option<String>,
    pub timezone: Option<String>,
    pub next_fire: Option<String>,
    pub paused: bool,
    pub last_run_state: Option<String>,
    pub error: Option<FileError>,
    /// Job id → its deps, for drawing.
    #[serde(default)]
    pub deps: BTreeMap<String, Vec<String>>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SubmitResult {
    pub dag_run: u64,
    pub runs: Vec<u64>,
    pub deduplicated: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LogChunk {
    pub run: u64,
    pub attempt: u32,
    pub offset: u64,
    pub data: String,
    /// The attempt has ended and everything was read.
    pub eof: bool,
}
