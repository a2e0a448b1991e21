//! The daemon's message bus: what its threads send each other. The
//! scheduler thread receives `Msg` (from the socket server through
//! `Handle`, and from the executor, the scanner, the claimer, the
//! heartbeat and the feed); the writer thread receives `Step`; answers go
//! back, typed (`Answer`), through `ReplyTo`; the store `Fault` is one value the writer, the
//! heartbeat and the scheduler share. The types live here, apart from
//! their consumers, so that every sender imports them without importing
//! the thread that receives them.

pub(crate) mod answer;
pub(crate) mod encoded;
pub(crate) mod fault;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::Sender;

use ax_protocol::api::{Role, StatusView};
use ax_protocol::{Method, Request, RpcError, codes};
use tokio::sync::{broadcast, oneshot};

use answer::Answer;
use ax_engine::{DagRunId, Input};

/// Who is asking.
#[derive(Clone, Debug)]
pub struct Peer {
    pub role: Role,
    /// The peer's uid as the kernel recorded it at connect (axd's own for
    /// requests axd makes itself).
    pub uid: u32,
    /// The name of `uid` in the password database, or `uid N` without one.
    pub user: Arc<str>,
    /// Who the event log says asked: `alice (uid 1000) via ax`.
    pub actor: Arc<str>,
    /// The run whose running attempt the peer was part of at connect: it
    /// may heartbeat it whatever its role (with `Role::Job`, that is all
    /// it may do).
    pub run: Option<u64>,
}

impl Peer {
    /// A request axd makes of itself (systemd's status, the metrics
    /// endpoint), as axd's own user.
    pub fn internal(role: Role, what: &str) -> Peer {
        let uid = nix::unistd::getuid().as_raw();
        Peer {
            role,
            uid,
            user: Arc::from(crate::accounts::user_name(uid)),
            actor: Arc::from(what),
            run: None,
        }
    }
}

pub enum Msg {
    Request {
        peer: Peer,
        request: Request,
        reply: ReplyTo,
    },
    Exec(ExecEvent),
    /// Look at the shutdown value (it has changed).
    Wake,
    /// The wall clock was set (a step, a resume from suspend): the step
    /// this message starts hands it to the engine.
    WallStepped,
    Reload,
    /// A scan of the jobs folder (the scanner thread), to put in force;
    /// `ticket` is the highest reload ticket it answers.
    Scanned {
        scan: Box<crate::jobs_folder::scan::Scan>,
        ticket: Option<u64>,
    },
    /// The writer committed the step that created these triggered DAG
    /// runs: they may start.
    TriggersDurable(Vec<DagRunId>),
    /// An engine input from a cluster's threads, applied as it is: DAG
    /// runs the claimer claimed for this node (`Input::Adopt`), the pool
    /// slots it may use from now on (`Input::Leases`), watched DAG runs
    /// of other nodes that ended (`Input::EndedElsewhere`), the cron
    /// leadership gained or lost (`Input::Lead`, `Msg::lead`). `done`,
    /// when given, is dropped once it is applied and the new state
    /// published.
    Cluster {
        input: Input,
        done: Option<Sender<()>>,
    },
    /// The stored set of paused DAGs changed (another node paused or
    /// resumed some): what it was at the last beat, and now.
    Paused {
        before: Vec<String>,
        now: Vec<String>,
    },
    /// The highest run and DAG run ids any node has stored (a cluster).
    IdsSeen {
        run: u64,
        dag_run: u64,
    },
    /// Events other nodes committed (a cluster), for this node's
    /// subscribers.
    RemoteEvents(Vec<ax_protocol::api::EventView>),
    /// The run whose running attempt has process group `pgid`, if any
    /// (a role-less peer's `hello`, docs/protocol.md, "Access").
    AttemptOf {
        pgid: u32,
        reply: oneshot::Sender<Option<u64>>,
    },
    /// The DAG names of these runs and DAG runs (a user's notifications
    /// are filtered by them).
    DagNames {
        runs: Vec<u64>,
        dag_runs: Vec<u64>,
        reply: oneshot::Sender<DagNames>,
    },
    /// What became of a finished DAG run's mail (the notifier), for its
    /// events and the metrics.
    Mailed(crate::notifier::Mailed),
}

/// The answer to `Msg::DagNames`: each id's DAG name, `None` for an id
/// unknown here.
#[derive(Debug, Default)]
pub struct DagNames {
    pub runs: Vec<(u64, Option<String>)>,
    pub dag_runs: Vec<(u64, Option<String>)>,
}

impl Msg {
    /// The claimer claimed these DAG runs for this node.
    pub fn adopt(claimed: crate::store::postgres::Claimed, done: Sender<()>) -> Msg {
        Msg::Cluster {
            input: Input::Adopt {
                dag_runs: claimed.dag_runs,
                external: claimed.external,
            },
            done: Some(done),
        }
    }

    /// This node became the cron leader, with the stored cron marks and
    /// active DAG runs, or stopped being it.
    pub fn lead(leader: bool, leading: crate::store::postgres::Leading) -> Msg {
        let active = leading.active.into_iter();
        Msg::Cluster {
            input: Input::Lead {
                leader,
                marks: leading.marks,
                active: active.map(|(dag, id)| (dag, DagRunId(id as u64))).collect(),
            },
            done: None,
        }
    }
}

/// What the executor reports to the scheduler: the engine's own inputs
/// (`Started`, `SpawnFailed`, `Exited`, `Output`), each with the time it
/// happened on the engine's clock (`time::steady_ms`) as the executor saw
/// it: an exit carries the time its leader was reaped, not the time the
/// scheduler got to it.
#[derive(Debug)]
pub struct ExecEvent {
    pub at: ax_engine::Millis,
    pub input: Input,
}

impl ExecEvent {
    /// An input that happens now.
    pub fn now(input: Input) -> ExecEvent {
        ExecEvent {
            at: crate::runtime::time::steady_ms(),
            input,
        }
    }
}

/// What the socket server needs to talk to the scheduler.
#[derive(Clone)]
pub(crate) struct Handle {
    pub tx: Sender<Msg>,
    pub notify: broadcast::Sender<Arc<str>>,
    pub log_dir: PathBuf,
    /// Wakes `logs` follows when the attempt they follow writes or ends.
    pub follows: crate::logs::follow::LogWatch,
    /// The connection counts the socket server keeps.
    pub metrics: crate::metrics::Shared,
    /// In a cluster: where the logs of attempts that ran on other nodes
    /// are read.
    pub remote_logs: Option<RemoteLogs>,
}

/// The store's shipped logs, and this node's id (its own attempts' logs
/// are its files).
#[derive(Clone)]
pub(crate) struct RemoteLogs {
    pub logs: crate::store::postgres::PgLogs,
    pub node: Arc<str>,
}

fn shutting_down() -> RpcError {
    RpcError::new(codes::SHUTTING_DOWN, "axd is shutting down")
}

impl Handle {
    /// One request, answered as the scheduler gives it (typed; lists
    /// encoded, `Answer::List`).
    pub(crate) async fn call(&self, peer: &Peer, request: Request) -> Result<Answer, RpcError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Msg::Request {
                peer: peer.clone(),
                request,
                reply,
            })
            .map_err(|_| shutting_down())?;
        rx.await.map_err(|_| shutting_down())?
    }

    /// The run whose running attempt has process group `pgid`.
    pub(crate) async fn attempt_of(&self, pgid: u32) -> Option<u64> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Msg::AttemptOf { pgid, reply }).ok()?;
        rx.await.ok().flatten()
    }

    /// The DAG names of `runs` and `dag_runs`.
    pub(crate) async fn dag_names(&self, runs: Vec<u64>, dag_runs: Vec<u64>) -> DagNames {
        let (reply, rx) = oneshot::channel();
        let asked = Msg::DagNames {
            runs,
            dag_runs,
            reply,
        };
        if self.tx.send(asked).is_err() {
            return DagNames::default();
        }
        rx.await.unwrap_or_default()
    }

    /// One typed request, for the daemon's own use (`logs`, the systemd
    /// status loop, metrics). Lists (`Answer::List`) cannot be asked so:
    /// their answer types are not `TryFrom<Answer>`.
    pub(crate) async fn ask<M>(&self, peer: &Peer, params: M) -> Result<M::Answer, RpcError>
    where
        M: Method,
        M::Answer: TryFrom<Answer, Error = Answer>,
    {
        self.call(peer, params.into()).await?.typed()
    }
}

/// Where an answer goes.
pub(crate) type ReplyTo = oneshot::Sender<Result<Answer, RpcError>>;

/// One scheduler step, handed whole to the writer: its changes (owned:
/// the engine goes on changing) and what waits for them to be durable.
#[derive(Default)]
pub struct Step {
    pub changes: crate::store::Changes,
    /// Runs whose progress changed (notified, not stored).
    pub progress: Vec<u64>,
    /// Answers to send once written.
    pub replies: Vec<(ReplyTo, Result<Answer, RpcError>)>,
    /// The status to notify with, when anyone is subscribed.
    pub status: Option<StatusView>,
    /// Called once the step is durable (before its answers are sent).
    pub on_commit: Option<Box<dyn FnOnce() + Send>>,
    /// Unique keys this step's submissions hold in the store, released
    /// (dropped with the step) once it is durable.
    pub holds: Option<crate::store::Hold>,
}

impl Step {
    pub(crate) fn has_definitions(&self) -> bool {
        let c = &self.changes;
        !c.dag_defs.is_empty() || !c.removed_defs.is_empty() || c.defs_complete
    }
}
