//! Every method of the socket protocol (docs/protocol.md, "Methods"): its
//! name, its params (one struct per method, field names as on the wire) and
//! its answer.
//!
//! `Method` ties a params type to its name and answer type, so a client
//! writes `client.request(GetRun { id }).await?` and gets a `RunView`.
//! `Request` is the decoded request the daemon dispatches on.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{DeserializeOwned, IgnoredAny};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::api::{
    ApplyAnswer, DagRunView, DagText, DagView, Done, EventView, HelloAnswer, LogChunk, LogInfoView,
    MetricsText, PauseAnswer, ReloadAnswer, RunView, ShutdownAnswer, StatusView, SubmitResult,
    SubscribeAnswer,
};
use crate::{RpcError, codes};
use ax_shared::time::Timestamp;

/// A method's params, tied to the method's name and its answer's type.
pub trait Method: Serialize + DeserializeOwned + Into<Request> {
    const NAME: &'static str;
    type Answer: Serialize + DeserializeOwned;
}

macro_rules! methods {
    ($( $variant:ident($params:ty) = $name:literal -> $answer:ty, write: $write:expr; )*) => {
        /// A decoded request. Params are boxed: they differ much in size
        /// (a submit carries a whole job file).
        #[derive(Clone, Debug, PartialEq)]
        pub enum Request {
            $( $variant(Box<$params>), )*
        }

        $(
            impl Method for $params {
                const NAME: &'static str = $name;
                type Answer = $answer;
            }

            impl From<$params> for Request {
                fn from(params: $params) -> Request {
                    Request::$variant(Box::new(params))
                }
            }
        )*

        impl Request {
            /// Decodes a method's params; a bad part is refused as a whole
            /// with `invalid_params` naming it.
            pub fn decode(method: &str, params: Value) -> Result<Request, RpcError> {
                match method {
                    $( $name => decode_params::<$params>(method, params).map(Request::from), )*
                    other => Err(RpcError::new(
                        codes::METHOD_NOT_FOUND,
                        format!("unknown method {other:?}"),
                    )),
                }
            }

            pub fn method(&self) -> &'static str {
                match self {
                    $( Request::$variant(_) => $name, )*
                }
            }

            /// Changes state: refused to viewers and while the store
            /// cannot write.
            pub fn is_write(&self) -> bool {
                match self {
                    $( Request::$variant(_) => $write, )*
                }
            }

            /// The params as they go on the wire.
            pub fn params(&self) -> Value {
                match self {
                    $( Request::$variant(p) => serde_json::to_value(p).unwrap_or(Value::Null), )*
                }
            }
        }
    };
}

methods! {
    Hello(Hello) = "hello" -> HelloAnswer, write: false;
    Status(Status) = "status" -> StatusView, write: false;
    ListRuns(ListRuns) = "list_runs" -> Vec<RunView>, write: false;
    GetRun(GetRun) = "get_run" -> RunView, write: false;
    ListDags(ListDags) = "list_dags" -> Vec<DagView>, write: false;
    GetDag(GetDag) = "get_dag" -> DagView, write: false;
    GetDagRun(GetDagRun) = "get_dag_run" -> DagRunView, write: false;
    Submit(Submit) = "submit" -> SubmitResult, write: true;
    Trigger(Trigger) = "trigger" -> SubmitResult, write: true;
    Cancel(Cancel) = "cancel" -> Done, write: true;
    CancelDagRun(CancelDagRun) = "cancel_dag_run" -> Done, write: true;
    Retry(Retry) = "retry" -> Done, write: true;
    Pause(Pause) = "pause" -> PauseAnswer, write: true;
    Resume(Resume) = "resume" -> PauseAnswer, write: true;
    Reload(Reload) = "reload" -> ReloadAnswer, write: true;
    Heartbeat(Heartbeat) = "heartbeat" -> Done, write: true;
    Logs(Logs) = "logs" -> LogChunk, write: false;
    LogInfo(LogInfo) = "log_info" -> LogInfoView, write: false;
    Events(Events) = "events" -> Vec<EventView>, write: false;
    Subscribe(Subscribe) = "subscribe" -> SubscribeAnswer, write: false;
    Metrics(Metrics) = "metrics" -> MetricsText, write: false;
    ApplyDags(ApplyDags) = "apply_dags" -> ApplyAnswer, write: true;
    ExportDag(ExportDag) = "export_dag" -> DagText, write: false;
    RemoveDag(RemoveDag) = "remove_dag" -> Done, write: true;
    Shutdown(Shutdown) = "shutdown" -> ShutdownAnswer, write: true;
}

/// `shutdown`: stop axd. Running jobs keep running (the next axd takes them
/// over) unless `stop_jobs`, which stops them as at a timeout
/// (SIGTERM, `shutdown_grace`, SIGKILL) and records them `interrupted`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shutdown {
    #[serde(default)]
    pub stop_jobs: bool,
}

fn decode_params<P: DeserializeOwned>(method: &str, params: Value) -> Result<P, RpcError> {
    // Absent params are no params.
    let params = match params {
        Value::Null => Value::Object(Default::default()),
        other => other,
    };
    serde_path_to_error::deserialize(params).map_err(|e| {
        let path = e.path().to_string();
        let error = e.into_inner();
        let message = if path == "." {
            format!("{method}: {error}")
        } else {
            format!("{method}: `{path}`: {error}")
        };
        RpcError::new(codes::INVALID_PARAMS, message)
    })
}

/// Methods without params: `null` on the wire; whatever a client sends
/// instead is ignored.
macro_rules! no_params {
    ($( $(#[$doc:meta])* $name:ident; )*) => {$(
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct $name;

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_unit()
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<$name, D::Error> {
                IgnoredAny::deserialize(d).map(|_| $name)
            }
        }
    )*};
}

no_params! {
    /// The daemon's state: pools, counts, job-file errors.
    Status;
    /// Reads `axd.toml` and the jobs folder again.
    Reload;
    /// Starts change notifications on this connection.
    Subscribe;
    /// The Prometheus text exposition.
    Metrics;
}

/// Every DAG of the jobs folder, by name; `after`: only those whose name
/// sorts after it (paging, when an answer was cut to fit in a frame).
/// Without `after` it is `null` on the wire; any params other than an
/// object with `after` are ignored.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListDags {
    pub after: Option<String>,
}

impl Serialize for ListDags {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.after {
            None => s.serialize_unit(),
            Some(after) => {
                let mut map = std::collections::BTreeMap::new();
                map.insert("after", after);
                map.serialize(s)
            }
        }
    }
}

impl<'de> Deserialize<'de> for ListDags {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ListDags, D::Error> {
        let v = Value::deserialize(d)?;
        match v.get("after") {
            None | Some(Value::Null) => Ok(ListDags::default()),
            Some(Value::String(after)) => Ok(ListDags {
                after: Some(after.clone()),
            }),
            Some(_) => Err(serde::de::Error::custom("`after` must be a DAG name")),
        }
    }
}

/// Run ids are numbers; a decimal string is taken too.
mod run_id {
    use super::*;

    struct Visitor;

    impl serde::de::Visitor<'_> for Visitor {
        type Value = u64;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a run id (a positive integer)")
        }

        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }

        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<u64, E> {
            v.parse()
                .map_err(|_| E::invalid_value(serde::de::Unexpected::Str(v), &self))
        }
    }

    pub(super) fn serialize<S: Serializer>(id: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(*id)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        d.deserialize_any(Visitor)
    }

    pub(super) mod option {
        use super::*;

        pub(crate) fn serialize<S: Serializer>(id: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
            id.serialize(s)
        }

        pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<u64>, D::Error> {
            #[derive(Deserialize)]
            struct Id(#[serde(with = "super")] u64);
            Ok(Option::<Id>::deserialize(d)?.map(|Id(id)| id))
        }
    }
}

/// The first request of every connection.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// `PROTOCOL_VERSION`; another (or none) is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<u64>,
    /// The client's name, shown as the actor of what it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
}

/// Run states to list: one name, a comma-separated list, or an array.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StateFilter {
    Text(String),
    List(Vec<String>),
}

impl StateFilter {
    pub fn names(&self) -> Vec<&str> {
        match self {
            StateFilter::Text(s) => s.split(',').map(str::trim).collect(),
            StateFilter::List(l) => l.iter().map(|s| s.trim()).collect(),
        }
    }
}

/// Runs, newest first, from the store (live ones as the engine has them).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ListRuns {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<StateFilter>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dag: Option<String>,
    /// Text to find in the DAG, job or message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dag_run: Option<u64>,
    /// 1-10000 (default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Only runs with a smaller id (paging).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<u64>,
    /// `false`: leave out the runs of hooks (`on_failure`/`on_success`),
    /// unless `dag`, `dag_run` or `filter` says what to list. Absent: all
    /// runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<bool>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GetRun {
    #[serde(with = "run_id")]
    pub id: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GetDag {
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GetDagRun {
    #[serde(with = "run_id")]
    pub id: u64,
}

/// `submit`: one ad-hoc job (`command` or `argv`, with the job options),
/// or a whole job file (`toml`, named by `name` and `file`). Durations are
/// texts such as `90s` or `1h30m`; `timeout` may also be `none`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Submit {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A shell command line (run with `/bin/sh -c`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// A program and its arguments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    /// A job file's text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toml: Option<String>,
    /// Where the job file was read from (for its errors).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// 1-100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// 0-10000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retries: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill_grace: Option<String>,
    /// An absolute directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<BTreeMap<String, String>>,
    /// Runs that must succeed first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Vec<u64>>,
    /// Deduplication key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unique_for: Option<String>,
    /// The user every job runs as (root only; anyone else's jobs run as
    /// themselves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Names of `env` whose values are secret: axd keeps them in memory
    /// only, never in the store (an ad-hoc job only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_env: Option<Vec<String>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trigger {
    pub dag: String,
    /// Start a DAG run even while one is active, whatever the DAG's
    /// `overlap` says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force: Option<bool>,
}

/// One run (`id`) or several (`ids`, all or none).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Cancel {
    #[serde(
        default,
        with = "run_id::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ids: Option<Vec<u64>>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CancelDagRun {
    #[serde(with = "run_id")]
    pub id: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Retry {
    #[serde(with = "run_id")]
    pub id: u64,
}

/// One DAG by name, or every DAG (`all`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DagTarget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dag: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all: bool,
}

/// Stops triggering DAGs (cron and `after`); their runs go on.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Pause(pub DagTarget);

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Resume(pub DagTarget);

/// From inside a job: it is alive, with an optional message and progress.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Heartbeat {
    #[serde(with = "run_id")]
    pub run: u64,
    #[serde(default)]
    pub message: Option<String>,
    /// 0.0-1.0.
    #[serde(default)]
    pub progress: Option<f64>,
}

/// A range of an attempt's log (default: the last attempt, from 0).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Logs {
    pub run: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
    /// The last this many bytes instead of `offset`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
    /// Wait (up to `wait_ms`, default 10 s) for output before answering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
}

/// How many attempts a run has and whether it runs (what `logs` needs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LogInfo {
    #[serde(with = "run_id")]
    pub run: u64,
    /// The attempt whose node the answer names (default: the last).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u64>,
}

/// Events after a sequence number that match every filter given, oldest
/// first. The filters are optional: a client that sends only `after` and
/// `limit` gets what it always got.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Events {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<i64>,
    /// At most 10000 (default 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Only this run's events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<u64>,
    /// Only events of this DAG's DAG runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dag: Option<String>,
    /// Only events whose actor contains this text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// Only events at or after this instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Timestamp>,
    /// `true`: the newest `limit` matching events instead of the oldest
    /// (the answer is still oldest first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newest: Option<bool>,
}

/// One job file of `apply_dags`: the DAG's short name (`standup`, kept as
/// `@user/standup`), the file's text, and where the client read it from
/// (for its errors).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DagFileText {
    pub name: String,
    pub text: String,
    pub file: String,
}

/// `apply_dags`: stores and loads a user's own DAGs (docs/users.md, "User
/// DAGs"), all of them or, if any file has an error, none.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApplyDags {
    pub files: Vec<DagFileText>,
    /// Whose DAGs (owners and admins only); default: the caller's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The apply ends an `ax edit` (its event says `edited`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub edit: bool,
}

/// `export_dag`: the stored text of one user DAG, by its short name or
/// its full `@user/name`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExportDag {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}

/// `remove_dag`: deletes one user DAG, as a deleted job file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RemoveDag {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
}
