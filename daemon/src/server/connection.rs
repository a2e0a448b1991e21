//! One client's connection: frames in, answers and notifications out,
//! within the connection's budget and timeouts.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use ax_protocol::api::Role;
use ax_protocol::request::Hello;
use ax_protocol::{
    Lagged, MAX_FRAME, Message, Method, Notification, Request, RequestFrame, RpcError, codes,
    decode_request,
};
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesOrdered;
use futures_util::{FutureExt, SinkExt, StreamExt};
use serde_json::Value;
use tokio::net::UnixStream;
use tokio::sync::broadcast;
use tokio_util::bytes::BytesMut;
use tokio_util::codec::{Decoder, Encoder, Framed, LinesCodec, LinesCodecError};

use super::access::{Access, Identity, decode_hello};
use crate::bus::answer::Answer;
use crate::bus::{DagNames, Handle, Peer};
use crate::config::Limits;
use crate::logs::read::logs;
use crate::scheduler::access::{for_role, owns};

/// Requests of one connection in flight at once.
const MAX_INFLIGHT: usize = 4096;

/// How long one write to a client may block. A client that reads neither
/// its answers nor its notifications for this long is disconnected, so it
/// holds no task, buffer or slot of the broadcast ring for ever.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Bytes of answers one connection may have coming at once: a request
/// that may answer up to a whole frame (`bus::encoded::answers_big`) counts
/// as `MAX_FRAME`, any other as `SMALL_ANSWER`. Past it, axd reads no more
/// of the connection's requests until answers have been written, so a
/// client that pipelines big reads and never reads its answers holds at
/// most this much (and its few requests wait their turn at the scheduler).
const CONN_BUDGET: usize = 4 * MAX_FRAME;
const SMALL_ANSWER: usize = 1024;

fn answer_cost(request: &Request) -> usize {
    if crate::bus::encoded::answers_big(request) {
        MAX_FRAME
    } else {
        SMALL_ANSWER
    }
}

/// Queues every line and flushes once.
async fn send_all(framed: &mut Framed<UnixStream, Frames>, lines: Vec<String>) -> bool {
    let write = async {
        for line in lines {
            framed.feed(line).await?;
        }
        SinkExt::<String>::flush(framed).await
    };
    match tokio::time::timeout(WRITE_TIMEOUT, write).await {
        Ok(r) => r.is_ok(),
        Err(_) => {
            tracing::info!("client not reading for {WRITE_TIMEOUT:?}: disconnected");
            false
        }
    }
}

async fn send_line(framed: &mut Framed<UnixStream, Frames>, line: String) -> bool {
    send_all(framed, vec![line]).await
}

async fn send(framed: &mut Framed<UnixStream, Frames>, msg: &Message) -> bool {
    send_line(framed, serde_json::to_string(msg).unwrap_or_default()).await
}

/// The line that answers request `id`: the typed answer is encoded here,
/// at the socket edge (a list the scheduler encoded itself is written out
/// as it is, `bus::encoded::Encoded`). An answer longer than a frame
/// becomes an `answer_too_large` error.
fn answer_line(id: Value, answer: Result<Answer, RpcError>) -> String {
    let line = match answer.and_then(|a| a.line(&id)) {
        Ok(line) => line,
        Err(e) => serde_json::to_string(&Message::error(Some(id.clone()), e)).unwrap_or_default(),
    };
    if line.len() <= MAX_FRAME {
        return line;
    }
    let err = RpcError::new(
        codes::ANSWER_TOO_LARGE,
        format!(
            "the answer would be {} bytes, more than a frame ({MAX_FRAME}); ask for less (a smaller `limit`, `max`, or one item)",
            line.len()
        ),
    );
    serde_json::to_string(&Message::error(Some(id), err)).unwrap_or_default()
}

/// Counts a connection in `clients_connected` while it lives.
struct Connected(prometheus_client::metrics::gauge::Gauge);

impl Drop for Connected {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// NDJSON frames, remembering since when a frame has been partly read: a
/// whole frame must arrive within `limits.frame_timeout` of its first
/// byte, so a client sending a byte a second is cut off.
struct Frames {
    lines: LinesCodec,
    partial_since: Option<tokio::time::Instant>,
}

impl Frames {
    fn new() -> Frames {
        Frames {
            lines: LinesCodec::new_with_max_length(MAX_FRAME),
            partial_since: None,
        }
    }
}

impl Decoder for Frames {
    type Item = String;
    type Error = LinesCodecError;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<String>, LinesCodecError> {
        let frame = self.lines.decode(buf)?;
        if frame.is_some() || buf.is_empty() {
            self.partial_since = None;
        } else if self.partial_since.is_none() {
            self.partial_since = Some(tokio::time::Instant::now());
        }
        Ok(frame)
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<String>, LinesCodecError> {
        self.lines.decode_eof(buf)
    }
}

impl Encoder<String> for Frames {
    type Error = LinesCodecError;

    fn encode(&mut self, line: String, buf: &mut BytesMut) -> Result<(), LinesCodecError> {
        self.lines.encode(line, buf)
    }
}

/// Why a connection's deadline closes it, if it has passed.
fn overdue(
    framed: &Framed<UnixStream, Frames>,
    hello_by: Option<tokio::time::Instant>,
    limits: &Limits,
) -> Option<String> {
    let now = tokio::time::Instant::now();
    if hello_by.is_some_and(|t| now >= t) {
        return Some(format!(
            "no hello within {:?} (limits.hello_timeout); closing the connection",
            limits.hello_timeout
        ));
    }
    match framed.codec().partial_since {
        Some(t) if now >= t + limits.frame_timeout => Some(format!(
            "a request frame took longer than {:?} to arrive (limits.frame_timeout); closing the connection",
            limits.frame_timeout
        )),
        _ => None,
    }
}

pub(super) async fn connection(
    stream: UnixStream,
    handle: Handle,
    role: Option<Role>,
    who: Identity,
    access: Access,
    limits: &Limits,
) {
    handle.metrics.clients_connected.inc();
    let _connected = Connected(handle.metrics.clients_connected.clone());
    // Deadlines are looked at on this tick: a partial frame starts its
    // clock inside the codec, where no timer can be set.
    let every = (limits.hello_timeout.min(limits.frame_timeout) / 5)
        .clamp(Duration::from_millis(50), Duration::from_secs(2));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut conn = Conn {
        framed: Framed::new(stream, Frames::new()),
        handle,
        role,
        who,
        access,
        limits,
        peer: None,
        hello_by: Some(tokio::time::Instant::now() + limits.hello_timeout),
        subscription: None,
        inflight: FuturesOrdered::new(),
        costs: VecDeque::new(),
        reserved: 0,
        owned: Owned::default(),
    };
    loop {
        let reading = conn.reading();
        let open = tokio::select! {
            frame = conn.framed.next(), if reading => conn.on_frame(frame).await,
            Some(done) = conn.inflight.next(), if !conn.inflight.is_empty() => {
                conn.on_answered(done, reading).await
            }
            note = recv_opt(&mut conn.subscription) => conn.on_notification(note).await,
            _ = tick.tick() => conn.on_tick(reading).await,
        };
        if !open {
            return;
        }
    }
}

/// One connection's state. Every `on_…` method handles one kind of event
/// and returns whether the connection stays open.
struct Conn<'a> {
    framed: Framed<UnixStream, Frames>,
    handle: Handle,
    /// The role the socket's access rules give this uid (`None`: none).
    role: Option<Role>,
    who: Identity,
    /// Who may use the socket (named in a refusal).
    access: Access,
    limits: &'a Limits,
    /// Who is asking, once `hello` was answered.
    peer: Option<Peer>,
    /// When `hello` must have come by; `None` once it has.
    hello_by: Option<tokio::time::Instant>,
    subscription: Option<broadcast::Receiver<Arc<str>>>,
    /// Requests of one connection are pipelined: they go to the scheduler
    /// without waiting for each other (so one client's batch shares one
    /// commit), and their answers are written back in request order.
    inflight: FuturesOrdered<BoxFuture<'static, Option<String>>>,
    /// Each in-flight request's share of `CONN_BUDGET`, in the same order.
    costs: VecDeque<usize>,
    /// The sum of `costs`.
    reserved: usize,
    /// For a user's connection: which runs and DAG runs are theirs.
    owned: Owned,
}

/// Whether runs and DAG runs are the connection's user's, as the
/// scheduler said: at most `OWNED_CAP` of each are kept.
#[derive(Default)]
struct Owned {
    runs: HashMap<u64, bool>,
    dag_runs: HashMap<u64, bool>,
}

const OWNED_CAP: usize = 100_000;

impl Owned {
    fn learn(&mut self, user: &str, names: DagNames) {
        if self.runs.len() > OWNED_CAP {
            self.runs.clear();
        }
        if self.dag_runs.len() > OWNED_CAP {
            self.dag_runs.clear();
        }
        let mine = |dag: Option<String>| dag.is_some_and(|d| owns(user, &d));
        for (id, dag) in names.runs {
            self.runs.insert(id, mine(dag));
        }
        for (id, dag) in names.dag_runs {
            self.dag_runs.insert(id, mine(dag));
        }
    }
}

impl Conn<'_> {
    fn reading(&self) -> bool {
        self.inflight.len() < MAX_INFLIGHT && self.reserved < CONN_BUDGET
    }

    /// An in-flight answer is ready: it goes out with every other one
    /// ready together, in one write (a pipelining client gets a step's
    /// answers at once).
    async fn on_answered(&mut self, done: Option<String>, reading: bool) -> bool {
        let mut batch: Vec<String> = done.into_iter().collect();
        let mut answered = 1;
        while answered < 1024 {
            match self.inflight.next().now_or_never() {
                Some(Some(more)) => {
                    batch.extend(more);
                    answered += 1;
                }
                _ => break,
            }
        }
        for _ in 0..answered {
            self.reserved -= self.costs.pop_front().unwrap_or(0);
        }
        if !send_all(&mut self.framed, batch).await {
            return false;
        }
        if !reading && self.framed.codec().partial_since.is_some() {
            // The frame's clock stood still while axd was not reading.
            self.framed.codec_mut().partial_since = Some(tokio::time::Instant::now());
        }
        true
    }

    async fn on_notification(
        &mut self,
        note: Result<Arc<str>, broadcast::error::RecvError>,
    ) -> bool {
        match note {
            Ok(line) => match self.peer.as_ref().filter(|p| p.role == Role::User) {
                None => send_line(&mut self.framed, line.to_string()).await,
                Some(p) => {
                    let user = p.user.clone();
                    match self.own_part(&user, &line).await {
                        Some(own) => send_line(&mut self.framed, own).await,
                        None => true,
                    }
                }
            },
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                self.subscription = None;
                self.handle.metrics.subscribers_lagged.inc();
                let note = Notification::Lagged(Lagged {
                    missed,
                    message: "too slow: notifications were dropped; subscribe again".into(),
                });
                send_line(&mut self.framed, note.to_line()).await
            }
            Err(broadcast::error::RecvError::Closed) => false,
        }
    }

    /// What of a notification a user's connection may see: the events of
    /// their own DAG runs, the progress of their own runs, a status
    /// without others' counts (docs/users.md); `None` when nothing of it
    /// is theirs. A DAG run's DAG never changes, so what the scheduler
    /// said of an id is kept (a bounded cache).
    async fn own_part(&mut self, user: &str, line: &str) -> Option<String> {
        let Ok(Notification::Changed(mut changed)) = serde_json::from_str::<Notification>(line)
        else {
            return None;
        };
        let unknown_dag_runs: Vec<u64> = changed
            .events
            .iter()
            .map(|e| e.dag_run)
            .filter(|d| !self.owned.dag_runs.contains_key(d))
            .collect();
        let unknown_runs: Vec<u64> = changed
            .progress
            .iter()
            .copied()
            .filter(|r| !self.owned.runs.contains_key(r))
            .collect();
        if !unknown_dag_runs.is_empty() || !unknown_runs.is_empty() {
            let names = self.handle.dag_names(unknown_runs, unknown_dag_runs).await;
            self.owned.learn(user, names);
        }
        let owned = &self.owned;
        changed
            .events
            .retain(|e| owned.dag_runs.get(&e.dag_run) == Some(&true));
        changed
            .progress
            .retain(|r| owned.runs.get(r) == Some(&true));
        if changed.events.is_empty() && changed.progress.is_empty() {
            return None;
        }
        changed.status = Box::new(for_role(*changed.status, Role::User));
        Some(Notification::Changed(changed).to_line())
    }

    async fn on_tick(&mut self, reading: bool) -> bool {
        let Some(why) = overdue(&self.framed, self.hello_by, self.limits).filter(|_| reading)
        else {
            return true;
        };
        tracing::info!("uid {}: {why}", self.who.uid);
        let _ = send(
            &mut self.framed,
            &Message::error(None, RpcError::new(codes::TIMEOUT, why)),
        )
        .await;
        false
    }

    async fn on_frame(&mut self, frame: Option<Result<String, LinesCodecError>>) -> bool {
        let line = match frame {
            None => return false,
            Some(Ok(line)) => line,
            Some(Err(LinesCodecError::MaxLineLengthExceeded)) => {
                let err = RpcError::new(
                    codes::FRAME_TOO_LARGE,
                    format!("frame larger than {MAX_FRAME} bytes; closing the connection"),
                );
                let _ = send(&mut self.framed, &Message::error(None, err)).await;
                return false;
            }
            Some(Err(LinesCodecError::Io(_))) => return false,
        };
        if line.trim().is_empty() {
            return true;
        }
        match decode_request(&line) {
            Ok(frame) => self.on_request(frame).await,
            Err((id, err)) => send(&mut self.framed, &Message::error(id, err)).await,
        }
    }

    async fn on_request(&mut self, frame: RequestFrame) -> bool {
        let id = frame.id.clone().unwrap_or(Value::Null);
        let wants_answer = frame.id.is_some();
        let decoded = match &self.peer {
            Some(_) if frame.method != Hello::NAME => {
                Some(Request::decode(&frame.method, frame.params.clone()))
            }
            _ => None,
        };
        if let (Some(p), Some(Ok(request))) = (&self.peer, &decoded)
            && !matches!(request, Request::Subscribe(_) | Request::Logs(_))
        {
            // Pipelined: answered in order once the scheduler has.
            let (handle, p, request) = (self.handle.clone(), p.clone(), request.clone());
            let cost = answer_cost(&request);
            self.reserved += cost;
            self.costs.push_back(cost);
            self.inflight.push_back(Box::pin(async move {
                let answer = handle.call(&p, request).await;
                wants_answer.then(|| answer_line(id, answer))
            }));
            return true;
        }
        // Everything else is answered in order after what is in flight.
        while let Some(done) = self.inflight.next().await {
            self.reserved -= self.costs.pop_front().unwrap_or(0);
            if let Some(line) = done
                && !send_line(&mut self.framed, line).await
            {
                return false;
            }
        }
        let answer = self.answer_in_order(frame, decoded).await;
        if !wants_answer {
            return true; // a notification from the client: no answer
        }
        send_line(&mut self.framed, answer_line(id, answer)).await
    }

    /// The requests that are not pipelined: `hello`, anything before it,
    /// undecodable params, `subscribe` and `logs`.
    async fn answer_in_order(
        &mut self,
        frame: RequestFrame,
        decoded: Option<Result<Request, RpcError>>,
    ) -> Result<Answer, RpcError> {
        match (&self.peer, decoded) {
            (_, None) if frame.method == Hello::NAME => {
                // A peer with no role may still be part of a running
                // attempt: the scheduler, which holds the attempts, says.
                // The same for a user or a viewer, whose role alone may
                // not reach the run its job is part of (a system DAG's job
                // running as alice).
                let job_run = match (self.role, self.who.pgid) {
                    (None, Some(pgid)) => attempt_of_group(&self.handle, pgid).await,
                    (Some(Role::User | Role::Viewer), Some(pgid)) => {
                        self.handle.attempt_of(pgid).await
                    }
                    _ => None,
                };
                decode_hello(frame.params, self.role, job_run, &self.who, &self.access).map(
                    |(p, v)| {
                        self.peer = Some(p);
                        self.hello_by = None;
                        v
                    },
                )
            }
            (None, _) | (_, None) => Err(RpcError::new(
                codes::HELLO_REQUIRED,
                "say hello first: {\"method\": \"hello\", \"params\": {\"protocol\": 1, \"client\": \"name\"}}",
            )),
            (Some(_), Some(Err(e))) => Err(e),
            (Some(p), Some(Ok(Request::Subscribe(s)))) => {
                // Subscribe before the snapshot so nothing falls between.
                let rx = self.handle.notify.subscribe();
                let snapshot = self.handle.call(p, Request::Subscribe(s)).await;
                if snapshot.is_ok() {
                    self.subscription = Some(rx);
                }
                snapshot
            }
            (Some(p), Some(Ok(Request::Logs(params)))) => {
                logs(&self.handle, p, *params).await.map(Answer::from)
            }
            (Some(_), Some(Ok(_))) => unreachable!("pipelined in on_request"),
        }
    }
}

async fn recv_opt(
    sub: &mut Option<broadcast::Receiver<Arc<str>>>,
) -> Result<Arc<str>, broadcast::error::RecvError> {
    match sub {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// How long `hello` of a peer with no role waits for its process group to
/// be known as a running attempt's.
const JOB_ROLE_WAIT: Duration = Duration::from_secs(2);

/// The run whose running attempt has process group `pgid`, waiting up to
/// [`JOB_ROLE_WAIT`] while the group exists: a job may connect as soon as
/// it starts, before the scheduler has recorded the attempt's start (the
/// executor reports it after the process is already running). A peer in
/// no attempt is refused that much later, which also slows anyone
/// probing the socket.
async fn attempt_of_group(handle: &Handle, pgid: u32) -> Option<u64> {
    let deadline = tokio::time::Instant::now() + JOB_ROLE_WAIT;
    loop {
        if let Some(run) = handle.attempt_of(pgid).await {
            return Some(run);
        }
        let group = nix::unistd::Pid::from_raw(-(pgid as i32));
        let alive = nix::sys::signal::kill(group, None).is_ok();
        if !alive || tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
