//! The client side of the socket, used by `ax` and `ax-tui`.

use std::path::{Path, PathBuf};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::UnixStream;
use tokio_util::codec::{Framed, LinesCodec};

use crate::api::HelloAnswer;
use crate::request::{Hello, ListDags};
use crate::{MAX_FRAME, Message, Method, Notification, PROTOCOL_VERSION, RpcError};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach axd at {path}: {source}")]
    Unreachable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {}", .0.kind(), .0.message)]
    Rpc(RpcError),
    /// The per-user socket's folder could be someone else's: not used.
    #[error("{0}")]
    UnsafeSocket(crate::socket_dir::UnsafeFolder),
    #[error("protocol error: {0}")]
    Protocol(String),
    #[error("connection closed by axd")]
    Closed,
}

impl ClientError {
    /// The daemon's stable error code, if the daemon answered with an error.
    pub fn kind(&self) -> Option<&str> {
        match self {
            ClientError::Rpc(e) => Some(e.kind()),
            _ => None,
        }
    }
}

/// The system service's socket, tried when the per-user one is absent.
pub const SYSTEM_SOCKET: &str = "/run/ax/axd.sock";

/// Where the socket is when `--socket` is not given: `$AX_SOCKET` (set for
/// jobs), then the per-user socket if it exists (`$XDG_RUNTIME_DIR/ax/
/// axd.sock`, else `$TMPDIR/ax-<uid>/ax/axd.sock`: where a user-mode axd
/// binds, `socket_dir::user_socket`), then `/run/ax/axd.sock` (the system
/// service).
pub fn default_socket() -> SocketChoice {
    resolve_socket(
        std::env::var_os("AX_SOCKET").map(PathBuf::from),
        crate::socket_dir::this_user_socket(),
        nix::unistd::getuid().as_raw(),
        &|p: &Path| p.exists(),
    )
}

/// The socket to connect to, and every place considered on the way (for
/// the error when none answers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SocketChoice {
    pub path: PathBuf,
    pub tried: Vec<PathBuf>,
    /// The per-user socket was chosen: its folders must be this uid's
    /// (`socket_dir::check`), else the connection is refused.
    pub private_to: Option<u32>,
}

impl SocketChoice {
    /// A socket named on purpose (`--socket`): the only place tried.
    pub fn given(path: PathBuf) -> SocketChoice {
        SocketChoice {
            tried: vec![path.clone()],
            path,
            private_to: None,
        }
    }
}

/// `default_socket` with the environment and the file system injected.
/// `$AX_SOCKET` wins outright; the per-user socket is chosen only when it
/// exists, else the system one, with both named in `tried`.
pub fn resolve_socket(
    ax_socket: Option<PathBuf>,
    user_socket: PathBuf,
    uid: u32,
    exists: &dyn Fn(&Path) -> bool,
) -> SocketChoice {
    if let Some(p) = ax_socket {
        return SocketChoice::given(p);
    }
    let system = PathBuf::from(SYSTEM_SOCKET);
    if exists(&user_socket) {
        return SocketChoice {
            private_to: Some(uid),
            ..SocketChoice::given(user_socket)
        };
    }
    SocketChoice {
        path: system.clone(),
        tried: vec![user_socket, system],
        private_to: None,
    }
}

impl std::fmt::Display for SocketChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<String> = self.tried.iter().map(|p| p.display().to_string()).collect();
        f.write_str(&names.join(" or "))
    }
}

pub struct Client {
    framed: Framed<UnixStream, LinesCodec>,
    next_id: u64,
    /// Notifications that arrived while waiting for a response.
    pending: std::collections::VecDeque<Message>,
    /// What the daemon said to `hello`.
    pub server: HelloAnswer,
    /// The `truncated` marker of the last answer: the list was cut to fit
    /// in a frame, and its `next` params continue it.
    pub truncated: Option<Value>,
}

impl Client {
    /// Connects and says `hello`.
    pub async fn connect(path: &Path, client_name: &str) -> Result<Client, ClientError> {
        let stream =
            UnixStream::connect(path)
                .await
                .map_err(|source| ClientError::Unreachable {
                    path: path.to_path_buf(),
                    source,
                })?;
        let mut framed = Framed::new(stream, LinesCodec::new_with_max_length(64 * MAX_FRAME));
        let hello = Hello {
            protocol: Some(u64::from(PROTOCOL_VERSION)),
            client: Some(client_name.to_string()),
        };
        let line = request_line(1, Hello::NAME, to_params(&hello)?);
        framed
            .send(line)
            .await
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        let mut client = Client {
            framed,
            next_id: 2,
            pending: Default::default(),
            server: HelloAnswer {
                protocol: PROTOCOL_VERSION,
                server: String::new(),
                version: String::new(),
                role: crate::api::Role::Viewer,
            },
            truncated: None,
        };
        client.server = decode_answer(client.answer(1).await?)?;
        Ok(client)
    }

    /// Connects to the chosen socket; when it is unreachable, the error
    /// names every place tried.
    pub async fn connect_to(
        socket: &SocketChoice,
        client_name: &str,
    ) -> Result<Client, ClientError> {
        if let Some(uid) = socket.private_to {
            crate::socket_dir::check(&socket.path, uid).map_err(ClientError::UnsafeSocket)?;
        }
        match Client::connect(&socket.path, client_name).await {
            Err(ClientError::Unreachable { source, .. }) => Err(ClientError::Unreachable {
                path: socket.to_string().into(),
                source,
            }),
            other => other,
        }
    }

    /// One typed request: `client.request(GetRun { id }).await` is a
    /// `RunView`.
    pub async fn request<M: Method>(&mut self, params: M) -> Result<M::Answer, ClientError> {
        let params = to_params(&params)?;
        decode_answer(self.call(M::NAME, params).await?)
    }

    /// Every DAG, over as many `list_dags` as it takes (an answer is cut
    /// to fit in a frame; its `truncated` marker says where to go on).
    pub async fn all_dags(&mut self) -> Result<Vec<crate::api::DagView>, ClientError> {
        let mut dags = Vec::new();
        let mut after = None;
        loop {
            dags.extend(self.request(ListDags { after }).await?);
            let next = self
                .truncated
                .as_ref()
                .and_then(|t| t["next"]["after"].as_str());
            match next {
                Some(name) => after = Some(name.to_string()),
                None => return Ok(dags),
            }
        }
    }

    /// One request by name with raw params (for tests that speak the
    /// protocol as a foreign client would), waiting for its response.
    /// Notifications that arrive in between are kept for
    /// `next_notification`.
    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        self.framed
            .send(request_line(id, method, params))
            .await
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        self.answer(id).await
    }

    async fn answer(&mut self, id: u64) -> Result<Value, ClientError> {
        loop {
            let msg = self.read().await?;
            if msg.is_notification() {
                self.pending.push_back(msg);
                continue;
            }
            if msg.id.as_ref().and_then(Value::as_u64) != Some(id) && msg.id != Some(Value::Null) {
                continue;
            }
            self.truncated = msg.truncated;
            if let Some(e) = msg.error {
                return Err(ClientError::Rpc(e));
            }
            return Ok(msg.result.unwrap_or(Value::Null));
        }
    }

    /// The next notification, e.g. after `subscribe`.
    pub async fn next_notification(&mut self) -> Result<Notification, ClientError> {
        loop {
            let msg = match self.pending.pop_front() {
                Some(m) => m,
                None => self.read().await?,
            };
            if let Some(method) = msg.method {
                return Notification::decode(&method, msg.params.unwrap_or(Value::Null)).map_err(
                    |e| ClientError::Protocol(format!("bad {method:?} notification: {e}")),
                );
            }
            if let Some(e) = msg.error {
                return Err(ClientError::Rpc(e));
            }
        }
    }

    async fn read(&mut self) -> Result<Message, ClientError> {
        match self.framed.next().await {
            None => Err(ClientError::Closed),
            Some(Err(e)) => Err(ClientError::Protocol(e.to_string())),
            Some(Ok(line)) => serde_json::from_str(&line)
                .map_err(|e| ClientError::Protocol(format!("bad frame from axd: {e}"))),
        }
    }
}

/// A request line exactly as ax clients write it (keys sorted).
pub fn request_line(id: u64, method: &str, params: Value) -> String {
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }).to_string()
}

fn to_params<P: serde::Serialize>(params: &P) -> Result<Value, ClientError> {
    serde_json::to_value(params).map_err(|e| ClientError::Protocol(e.to_string()))
}

fn decode_answer<A: serde::de::DeserializeOwned>(v: Value) -> Result<A, ClientError> {
    serde_json::from_value(v).map_err(|e| ClientError::Protocol(format!("unexpected answer: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user_socket() -> PathBuf {
        PathBuf::from("/run/user/1000/ax/axd.sock")
    }

    #[test]
    fn ax_socket_wins_over_everything() {
        let c = resolve_socket(Some("/tmp/x.sock".into()), user_socket(), 1000, &|_| true);
        assert_eq!(c, SocketChoice::given("/tmp/x.sock".into()));
    }

    #[test]
    fn existing_user_socket_is_chosen_and_must_be_private() {
        let c = resolve_socket(None, user_socket(), 1000, &|p| {
            p == Path::new("/run/user/1000/ax/axd.sock")
        });
        assert_eq!(c.path, Path::new("/run/user/1000/ax/axd.sock"));
        assert_eq!(c.tried.len(), 1);
        assert_eq!(c.private_to, Some(1000));
    }

    #[test]
    fn missing_user_socket_falls_back_to_system_and_names_both() {
        let c = resolve_socket(None, user_socket(), 1000, &|_| false);
        assert_eq!(c.path, Path::new(SYSTEM_SOCKET));
        assert_eq!(c.private_to, None);
        assert_eq!(
            c.to_string(),
            "/run/user/1000/ax/axd.sock or /run/ax/axd.sock"
        );
    }
}
