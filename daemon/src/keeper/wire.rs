//! The keeper's socket protocol: frames of JSON with descriptors beside
//! them (SCM_RIGHTS), over a Unix stream socket.
//!
//! A frame is a 4-byte little-endian length, one byte counting the
//! descriptors that belong to it, then that many bytes of JSON. The
//! descriptors travel with the frame's first `sendmsg`; the receiver keeps
//! every descriptor it is given in arrival order and hands a frame the
//! number its header names, so descriptors never pass their frame.
//!
//! A message is a JSON object with one key, its kind (`{"take": {"run":
//! 3, "attempt": 1}}`); a kind without fields is a string (`"list"`).
//!
//! The protocol is versioned ([`PROTOCOL`]): an axd of a later version
//! speaks to a keeper started by an earlier one to take its attempts over
//! (docs/operations.md, "Upgrade"); a field added later is optional
//! (`#[serde(default)]`), and a change that an earlier keeper could not
//! understand takes a new protocol number.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
use serde::{Deserialize, Serialize};
use tokio::io::Interest;
use tokio::net::UnixStream;

/// The protocol this build speaks.
pub(crate) const PROTOCOL: u32 = 1;

/// A frame larger than this is refused: a job's command and environment
/// are bounded by the kernel's `ARG_MAX` (2 MiB by default).
const MAX_FRAME: usize = 8 << 20;

/// Descriptors a frame may carry.
const MAX_FDS: usize = 4;

/// Bytes that are text when they are UTF-8 (paths, arguments and
/// variables are bytes on Linux): a JSON string, else an array of numbers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub(crate) enum Bytes {
    Text(String),
    Raw(Vec<u8>),
}

/// By hand rather than `untagged`, which buffers each value before trying
/// its variants (measured on the spawn path, where every argument and
/// variable is one).
impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Bytes;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or an array of bytes")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Bytes, E> {
                Ok(Bytes::Text(v.to_owned()))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Bytes, E> {
                Ok(Bytes::Text(v))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Bytes, A::Error> {
                let mut raw = Vec::new();
                while let Some(b) = seq.next_element::<u8>()? {
                    raw.push(b);
                }
                Ok(Bytes::Raw(raw))
            }
        }
        d.deserialize_any(Visit)
    }
}

impl Bytes {
    pub(crate) fn of(b: &[u8]) -> Bytes {
        match std::str::from_utf8(b) {
            Ok(s) => Bytes::Text(s.to_owned()),
            Err(_) => Bytes::Raw(b.to_vec()),
        }
    }

    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            Bytes::Text(s) => s.as_bytes(),
            Bytes::Raw(b) => b,
        }
    }

    pub(crate) fn to_os(&self) -> std::ffi::OsString {
        use std::os::unix::ffi::OsStrExt;
        std::ffi::OsStr::from_bytes(self.as_bytes()).to_owned()
    }
}

impl From<&std::ffi::OsStr> for Bytes {
    fn from(s: &std::ffi::OsStr) -> Bytes {
        use std::os::unix::ffi::OsStrExt;
        Bytes::of(s.as_bytes())
    }
}

/// What axd asks of a keeper. Every request gets one [`Reply`], in order.
#[derive(Debug, Serialize, Deserialize)]
// Externally tagged (`{"spawn": {...}}`): decoded in one pass, where an
// internally tagged enum buffers every field first (measured on the spawn
// path).
#[serde(rename_all = "snake_case")]
pub(crate) enum Request {
    /// The first request of a connection. `orphan_kill_ms`: in a cluster,
    /// how long the keeper keeps attempts with no axd connected before it
    /// kills them (the node's lease would end and others take the runs).
    Hello {
        protocol: u32,
        #[serde(default)]
        orphan_kill_ms: Option<u64>,
    },
    /// Start an attempt; descriptors: the output pipe's write end, then a
    /// copy of its read end (the keeper drains it while no axd does).
    /// Answered by `Spawned` or `NotSpawned` for the attempt, which may
    /// come after the answers to later requests.
    Spawn(Box<SpawnRequest>),
    /// Every attempt the keeper holds.
    List,
    /// This connection supervises the attempt from now on: the keeper stops
    /// draining its output, and its exit is told here.
    Take { run: u64, attempt: u32 },
    /// axd has recorded the ends of these attempts (run, attempt): the
    /// keeper drops them. Not answered.
    Forget { attempts: Vec<(u64, u32)> },
    /// No attempt will be spawned here any more: exit once holding none,
    /// whoever is connected.
    Retire,
}

/// What a keeper answers, and tells unasked (`Exited`).
#[derive(Debug, Serialize, Deserialize)]
// Externally tagged (`{"spawn": {...}}`): decoded in one pass, where an
// internally tagged enum buffers every field first (measured on the spawn
// path).
#[serde(rename_all = "snake_case")]
pub(crate) enum Reply {
    Hello {
        protocol: u32,
        pid: u32,
        /// The kernel's boot id when the keeper started.
        boot_id: Option<String>,
    },
    /// The answer to `Spawn`, told by attempt rather than in request
    /// order: it waits up to a few milliseconds for the job's exit, so a
    /// short job costs axd one message, not two (`exit`).
    Spawned {
        run: u64,
        attempt: u32,
        pid: u32,
        pid_start: Option<u64>,
        /// `CLOCK_MONOTONIC` at the spawn, in ms.
        spawned_mono_ms: i64,
        /// Its end, when it came within the wait; otherwise `Exited`
        /// follows.
        #[serde(default)]
        exit: Option<Exit>,
    },
    /// The answer to a `Spawn` that started nothing (or a process that
    /// could not be supervised and was killed), told by attempt.
    NotSpawned {
        run: u64,
        attempt: u32,
        error: String,
        /// For lack of a resource that running jobs may give back.
        shortage: bool,
        /// The process ran but could not be supervised and was killed.
        killed_pid: Option<u32>,
    },
    Held {
        attempts: Vec<HeldAttempt>,
    },
    /// The answer to `Take`; with a descriptor (the output's read end)
    /// while the output is open. `None`: the keeper holds no such attempt.
    Taken {
        attempt: Option<HeldAttempt>,
        output: bool,
        /// Values its output must not show (docs/job-files.md, "Secrets").
        #[serde(default)]
        secrets: Vec<String>,
    },
    Retiring,
    /// An attempt this connection supervises has exited (sent unasked).
    Exited {
        run: u64,
        attempt: u32,
        exit: Exit,
    },
    Error {
        message: String,
    },
}

/// An attempt as the keeper holds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct HeldAttempt {
    pub run: u64,
    pub attempt: u32,
    pub pid: u32,
    pub pid_start: Option<u64>,
    pub slot: u32,
    /// `CLOCK_MONOTONIC` at the spawn, in ms.
    pub spawned_mono_ms: i64,
    /// When the keeper last drained output of it (`CLOCK_MONOTONIC`, ms).
    #[serde(default)]
    pub last_output_mono_ms: Option<i64>,
    /// Its end, when it has ended.
    #[serde(default)]
    pub exit: Option<Exit>,
}

/// How an attempt's leader ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// `CLOCK_MONOTONIC` when it was reaped, in ms.
    pub at_mono_ms: i64,
}

/// One attempt to start, with everything its process gets.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct SpawnRequest {
    pub run: u64,
    pub attempt: u32,
    pub slot: u32,
    pub program: Bytes,
    pub args: Vec<Bytes>,
    pub defaults: Vec<(Bytes, Bytes)>,
    /// `NAME=value` entries, one per name.
    pub base_env: Vec<Bytes>,
    pub env: Vec<(Bytes, Bytes)>,
    pub cwd: Option<Bytes>,
    pub credentials: Option<WireCredentials>,
    pub umask: u32,
    pub log: LogSpec,
    /// Ended attempts the keeper may drop, as `Request::Forget` (carried
    /// here so that telling them costs no message of its own).
    #[serde(default)]
    pub forget: Vec<(u64, u32)>,
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct WireCredentials {
    pub user: String,
    pub uid: u32,
    pub gid: u32,
    pub groups: Vec<u32>,
}

/// Where the keeper writes an attempt's output while no axd reads it.
#[derive(Serialize, Deserialize)]
pub(crate) struct LogSpec {
    pub path: Bytes,
    pub max_bytes: u64,
    /// Values to redact (docs/job-files.md, "Secrets").
    pub secrets: Vec<String>,
}

/// Without the secrets.
impl std::fmt::Debug for LogSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogSpec")
            .field("path", &self.path)
            .field("max_bytes", &self.max_bytes)
            .finish_non_exhaustive()
    }
}

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WireError {
    #[error("the keeper's socket closed")]
    Closed,
    #[error("keeper socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("keeper frame: {0}")]
    Frame(String),
}

/// Writes one frame with its descriptors.
pub(crate) async fn send<T: Serialize>(
    stream: &UnixStream,
    msg: &T,
    fds: &[RawFd],
) -> Result<(), WireError> {
    let body = serde_json::to_vec(msg).map_err(|e| WireError::Frame(e.to_string()))?;
    if body.len() > MAX_FRAME || fds.len() > MAX_FDS {
        return Err(WireError::Frame(format!(
            "a frame of {} bytes and {} descriptors is over the limit",
            body.len(),
            fds.len()
        )));
    }
    let mut frame = Vec::with_capacity(5 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.push(fds.len() as u8);
    frame.extend_from_slice(&body);
    let mut sent = 0;
    while sent < frame.len() {
        let rights = [ControlMessage::ScmRights(fds)];
        let cmsgs: &[ControlMessage] = if sent == 0 && !fds.is_empty() {
            &rights
        } else {
            &[]
        };
        let n = stream
            .async_io(Interest::WRITABLE, || {
                sendmsg::<()>(
                    stream.as_raw_fd(),
                    &[IoSlice::new(&frame[sent..])],
                    cmsgs,
                    MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
                    None,
                )
                .map_err(std::io::Error::from)
            })
            .await?;
        sent += n;
    }
    Ok(())
}

/// Writes one frame without descriptors on a blocking socket (at exit,
/// with no runtime).
pub(crate) fn send_blocking<T: Serialize>(
    stream: &mut std::os::unix::net::UnixStream,
    msg: &T,
) -> Result<(), WireError> {
    use std::io::Write;
    let body = serde_json::to_vec(msg).map_err(|e| WireError::Frame(e.to_string()))?;
    let mut frame = Vec::with_capacity(5 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.push(0);
    frame.extend_from_slice(&body);
    stream.write_all(&frame)?;
    Ok(())
}

/// The reading half of a connection: bytes and descriptors received and
/// not yet handed out in a frame.
pub(crate) struct Inbox {
    bytes: Vec<u8>,
    fds: VecDeque<OwnedFd>,
    /// What each read lands in, made once (not zeroed again per read).
    buf: Vec<u8>,
}

impl Default for Inbox {
    fn default() -> Inbox {
        Inbox {
            bytes: Vec::new(),
            fds: VecDeque::new(),
            buf: vec![0u8; 64 * 1024],
        }
    }
}

impl Inbox {
    /// The next frame and its descriptors.
    pub(crate) async fn recv<T: for<'de> Deserialize<'de>>(
        &mut self,
        stream: &UnixStream,
    ) -> Result<(T, Vec<OwnedFd>), WireError> {
        loop {
            if let Some(frame) = self.frame()? {
                return Ok(frame);
            }
            self.fill(stream).await?;
        }
    }

    fn frame<T: for<'de> Deserialize<'de>>(
        &mut self,
    ) -> Result<Option<(T, Vec<OwnedFd>)>, WireError> {
        if self.bytes.len() < 5 {
            return Ok(None);
        }
        let len = u32::from_le_bytes(self.bytes[..4].try_into().expect("4 bytes")) as usize;
        let nfds = self.bytes[4] as usize;
        if len > MAX_FRAME || nfds > MAX_FDS {
            return Err(WireError::Frame(format!(
                "a frame of {len} bytes and {nfds} descriptors is over the limit"
            )));
        }
        if self.bytes.len() < 5 + len {
            return Ok(None);
        }
        // Fewer than named: this process was out of descriptors when they
        // came, and the kernel dropped the rest (MSG_CTRUNC). The frame goes
        // on with those it has, and its handler says what is missing: a
        // shortage must not end the connection (every attempt supervised
        // through it would lose its exit). Only one frame's descriptors are
        // ever waiting here: a read stops at the next frame that has some.
        let nfds = nfds.min(self.fds.len());
        let msg = serde_json::from_slice(&self.bytes[5..5 + len])
            .map_err(|e| WireError::Frame(e.to_string()));
        self.bytes.drain(..5 + len);
        let fds = self.fds.drain(..nfds).collect();
        Ok(Some((msg?, fds)))
    }

    async fn fill(&mut self, stream: &UnixStream) -> Result<(), WireError> {
        let buf = &mut self.buf;
        let (n, fds) = stream
            .async_io(Interest::READABLE, || {
                recv_with_fds(stream.as_raw_fd(), buf)
            })
            .await?;
        self.fds.extend(fds);
        if n == 0 {
            return Err(WireError::Closed);
        }
        self.bytes.extend_from_slice(&self.buf[..n]);
        Ok(())
    }
}

/// One `recvmsg`: the bytes read and the descriptors that came with them.
/// Written on libc rather than nix, whose control-message iterator refuses
/// a truncated buffer (MSG_CTRUNC): that is what a receiver out of
/// descriptors gets, with those the kernel could install still to be
/// taken (and closed when not wanted), not leaked.
fn recv_with_fds(fd: RawFd, buf: &mut [u8]) -> std::io::Result<(usize, Vec<OwnedFd>)> {
    const SPACE: usize = 256;
    let mut control = [0u64; SPACE / 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: msghdr is a plain C struct; all zeros is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = SPACE as _;
    // SAFETY: recvmsg writes into `buf` (through `iov`) and `control`, both
    // live locals of the lengths given.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_CMSG_CLOEXEC | libc::MSG_DONTWAIT) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: the CMSG macros walk the control buffer recvmsg filled, within
    // `msg_controllen`; each SCM_RIGHTS payload holds whole descriptors the
    // kernel installed for this process, which nothing else owns yet.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                let len = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..len / std::mem::size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((n as usize, fds))
}

/// `CLOCK_MONOTONIC` in milliseconds: the same clock in every process of
/// the machine (the keeper's times are read by the next axd).
pub(crate) fn monotonic_ms() -> i64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the local timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1000 + ts.tv_nsec / 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_keep_their_descriptors_and_order() {
        let (a, b) = UnixStream::pair().unwrap();
        let (r, w) = nix::unistd::pipe().unwrap();
        send(&a, &Request::List, &[]).await.unwrap();
        send(
            &a,
            &Request::Take { run: 7, attempt: 2 },
            &[r.as_raw_fd(), w.as_raw_fd()],
        )
        .await
        .unwrap();
        let mut inbox = Inbox::default();
        let (first, fds): (Request, _) = inbox.recv(&b).await.unwrap();
        assert!(matches!(first, Request::List) && fds.is_empty());
        let (second, fds): (Request, _) = inbox.recv(&b).await.unwrap();
        assert!(matches!(second, Request::Take { run: 7, attempt: 2 }));
        assert_eq!(fds.len(), 2);
        drop(a);
        assert!(matches!(
            inbox.recv::<Request>(&b).await,
            Err(WireError::Closed)
        ));
    }

    /// The next version's axd speaks to this version's keeper and the
    /// other way round: fields one side does not know are ignored, and
    /// optional ones may be absent.
    #[test]
    fn frames_of_another_version_decode() {
        let take: Request =
            serde_json::from_str(r#"{"take":{"run":3,"attempt":1,"added_later":true}}"#).unwrap();
        assert!(matches!(take, Request::Take { run: 3, attempt: 1 }));
        let hello: Request = serde_json::from_str(r#"{"hello":{"protocol":1}}"#).unwrap();
        assert!(matches!(
            hello,
            Request::Hello {
                protocol: 1,
                orphan_kill_ms: None
            }
        ));
        let held: HeldAttempt = serde_json::from_str(
            r#"{"run":3,"attempt":1,"pid":42,"pid_start":7,"slot":0,"spawned_mono_ms":5,"rusage":{}}"#,
        )
        .unwrap();
        assert_eq!((held.exit, held.last_output_mono_ms), (None, None));
    }

    #[test]
    fn bytes_are_text_when_they_can_be() {
        assert_eq!(
            serde_json::to_string(&Bytes::of(b"a=b")).unwrap(),
            "\"a=b\""
        );
        let raw = Bytes::of(b"\xff");
        let back: Bytes = serde_json::from_str(&serde_json::to_string(&raw).unwrap()).unwrap();
        assert_eq!(back.as_bytes(), b"\xff");
    }
}
