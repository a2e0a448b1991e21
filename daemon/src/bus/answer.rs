//! An answer as the scheduler (or the connection itself) gives it: typed,
//! one variant per answer type of the protocol's methods. The daemon's own
//! callers (`logs`, the systemd status loop, metrics) take the typed value
//! out (`Handle::ask`); only the socket edge (`server::connection`) turns
//! it into JSON. Lists are the exception: the scheduler encodes them item
//! by item while it reads them, to cut them at a frame (`Encoded`).

use ax_protocol::api::{
    ApplyAnswer, DagRunView, DagText, DagView, Done, HelloAnswer, LogChunk, LogInfoView,
    MetricsText, PauseAnswer, ReloadAnswer, RunView, ShutdownAnswer, StatusView, SubmitResult,
    SubscribeAnswer,
};
use ax_protocol::{Message, RpcError, codes, encode_answer};
use serde_json::Value;

use super::encoded::Encoded;

macro_rules! answers {
    ($( $(#[$doc:meta])* $variant:ident($ty:ty), )*) => {
        /// One method's answer (`list_runs`, `events` and `list_dags` are
        /// `List`, encoded by the scheduler).
        #[derive(Debug)]
        pub enum Answer {
            $( $(#[$doc])* $variant($ty), )*
            /// A list the scheduler encoded itself, cut to fit in a frame.
            List(Encoded),
        }

        $(
            impl From<$ty> for Answer {
                fn from(answer: $ty) -> Answer {
                    Answer::$variant(answer)
                }
            }

            impl TryFrom<Answer> for $ty {
                type Error = Answer;

                fn try_from(answer: Answer) -> Result<$ty, Answer> {
                    match answer {
                        Answer::$variant(a) => Ok(a),
                        other => Err(other),
                    }
                }
            }
        )*

        impl Answer {
            /// The response line that answers request `id` with it.
            pub(crate) fn line(self, id: &Value) -> Result<String, RpcError> {
                let value = match self {
                    $( Answer::$variant(a) => encode_answer(a)?, )*
                    Answer::List(encoded) => return Ok(encoded.line(id)),
                };
                serde_json::to_string(&Message::result(id.clone(), value))
                    .map_err(|e| RpcError::new(codes::INTERNAL, e.to_string()))
            }

            /// The variant's name, for an internal error.
            fn kind(&self) -> &'static str {
                match self {
                    $( Answer::$variant(_) => stringify!($variant), )*
                    Answer::List(_) => "List",
                }
            }
        }
    };
}

answers! {
    Hello(HelloAnswer),
    Status(StatusView),
    Metrics(MetricsText),
    Run(RunView),
    Dag(DagView),
    DagRun(DagRunView),
    Submitted(SubmitResult),
    Done(Done),
    Paused(PauseAnswer),
    Reloaded(ReloadAnswer),
    Log(LogChunk),
    LogInfo(LogInfoView),
    Subscribed(SubscribeAnswer),
    Applied(ApplyAnswer),
    DagText(DagText),
    ShuttingDown(ShutdownAnswer),
}

impl From<Encoded> for Answer {
    fn from(encoded: Encoded) -> Answer {
        Answer::List(encoded)
    }
}

impl Answer {
    /// The typed answer a caller inside the daemon asked for; another
    /// variant is a bug (the scheduler answered a request with the wrong
    /// type), reported as `internal`.
    pub(crate) fn typed<T: TryFrom<Answer, Error = Answer>>(self) -> Result<T, RpcError> {
        T::try_from(self).map_err(|other| {
            RpcError::new(
                codes::INTERNAL,
                format!(
                    "expected a {} answer, got {}",
                    std::any::type_name::<T>(),
                    other.kind()
                ),
            )
        })
    }
}
