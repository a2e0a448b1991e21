//! A raw, blocking connection to axd's socket: NDJSON lines in and out,
//! requests and answers as `serde_json::Value`. Raw on purpose: hostile
//! and fuzz-like checks send frames no typed client would produce, and
//! read every line axd writes back, notifications included.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use ax_protocol::PROTOCOL_VERSION;
use serde_json::{Value, json};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ConnError {
    #[error("socket: {0}")]
    Io(#[from] io::Error),
    #[error("axd closed the connection")]
    Closed,
    #[error("not a JSON frame from axd: {line:?}: {source}")]
    NotJson {
        line: String,
        source: serde_json::Error,
    },
    /// An answer carrying `error`.
    #[error("{method}: {error}")]
    Rpc { method: String, error: Value },
    /// One of many requests sent ahead of their answers failed.
    #[error("a request sent ahead failed: {line}")]
    AheadFailed { line: String },
    #[error("answers left unread before streaming")]
    UnreadAnswers,
    #[error("waited {waited:?} for {count} runs {state}")]
    Timeout {
        waited: Duration,
        count: u64,
        state: String,
    },
}

/// One connection. Request ids count up from 1 per connection; frames
/// written through [`Write`] or [`Conn::send_line`] do not take an id.
pub struct Conn {
    writer: UnixStream,
    reader: BufReader<UnixStream>,
    last_id: u64,
}

/// The run ids in an answer of `submit` or `trigger` (`{"runs": [..]}`).
pub fn run_ids(answer: &Value) -> Vec<u64> {
    answer["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_u64)
        .collect()
}

impl Conn {
    /// Connects without `hello`: axd answers everything but `hello` with
    /// `hello_required` until one is sent.
    pub fn connect(socket: &Path) -> io::Result<Conn> {
        let writer = UnixStream::connect(socket)?;
        Ok(Conn {
            reader: BufReader::new(writer.try_clone()?),
            writer,
            last_id: 0,
        })
    }

    /// Connects and says `hello` as `client` (the name axd puts in the
    /// actor of what this connection does).
    pub fn open(socket: &Path, client: &str) -> Result<Conn, ConnError> {
        let mut conn = Conn::connect(socket)?;
        conn.hello(client)?;
        Ok(conn)
    }

    pub fn hello(&mut self, client: &str) -> Result<Value, ConnError> {
        self.call(
            "hello",
            json!({"protocol": PROTOCOL_VERSION, "client": client}),
        )
    }

    /// How long a read may block; `None` blocks for ever.
    pub fn set_read_timeout(&self, limit: Option<Duration>) -> io::Result<()> {
        self.writer.set_read_timeout(limit)
    }

    /// The next request as a frame (no newline), taking the next id.
    fn request(&mut self, method: &str, params: &Value) -> String {
        self.last_id += 1;
        json!({"jsonrpc": "2.0", "id": self.last_id, "method": method, "params": params})
            .to_string()
    }

    /// Writes one request without reading its answer.
    pub fn send(&mut self, method: &str, params: Value) -> io::Result<()> {
        let frame = self.request(method, &params);
        self.send_line(&frame)
    }

    /// Writes `frame` and a newline in one write.
    pub fn send_line(&mut self, frame: &str) -> io::Result<()> {
        let mut line = String::with_capacity(frame.len() + 1);
        line.push_str(frame);
        line.push('\n');
        self.writer.write_all(line.as_bytes())
    }

    /// The next line axd wrote, newline included; `None` once it closed.
    pub fn read_line(&mut self) -> io::Result<Option<String>> {
        let mut line = String::new();
        match self.reader.read_line(&mut line)? {
            0 => Ok(None),
            _ => Ok(Some(line)),
        }
    }

    /// The next line axd wrote, as JSON.
    pub fn read_frame(&mut self) -> Result<Value, ConnError> {
        let line = self.read_line()?.ok_or(ConnError::Closed)?;
        serde_json::from_str(&line).map_err(|source| ConnError::NotJson { line, source })
    }

    /// Sends a request and returns its `result`, passing over the
    /// notifications that arrive before its answer.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, ConnError> {
        self.send(method, params)?;
        loop {
            let mut frame = self.read_frame()?;
            if frame.get("id").is_some() {
                if let Some(error) = frame.get_mut("error") {
                    return Err(ConnError::Rpc {
                        method: method.into(),
                        error: error.take(),
                    });
                }
                return Ok(frame["result"].take());
            }
        }
    }

    /// The next notification (a frame without an id): its method and
    /// params. Answers read on the way are passed over.
    pub fn next_notification(&mut self) -> Result<(String, Value), ConnError> {
        loop {
            let mut frame = self.read_frame()?;
            if frame.get("id").is_none() {
                let method = frame["method"].as_str().unwrap_or_default().to_string();
                return Ok((method, frame["params"].take()));
            }
        }
    }

    /// Sends `n` requests made by `make`, `batch` at a time, each batch in
    /// one write before any of its answers is read.
    pub fn pipeline(
        &mut self,
        n: usize,
        batch: usize,
        make: &dyn Fn(usize) -> (String, Value),
    ) -> Result<(), ConnError> {
        let mut sent = 0;
        while sent < n {
            let k = batch.min(n - sent);
            let mut buf = String::new();
            for i in sent..sent + k {
                let (method, params) = make(i);
                buf.push_str(&self.request(&method, &params));
                buf.push('\n');
            }
            self.writer.write_all(buf.as_bytes())?;
            for _ in 0..k {
                let line = self.read_line()?.ok_or(ConnError::Closed)?;
                if line.contains("\"error\"") {
                    return Err(ConnError::AheadFailed { line });
                }
            }
            sent += k;
        }
        Ok(())
    }

    /// Sends `n` requests as fast as axd takes them while another thread
    /// reads the answers, as an async client would: axd's per-connection
    /// cap on requests in flight is the only window.
    pub fn stream(
        &mut self,
        n: usize,
        make: &dyn Fn(usize) -> (String, Value),
    ) -> Result<(), ConnError> {
        if !self.reader.buffer().is_empty() {
            return Err(ConnError::UnreadAnswers);
        }
        let mut answers = BufReader::new(self.writer.try_clone()?);
        let reader = std::thread::spawn(move || -> Result<(), ConnError> {
            let mut line = String::new();
            for _ in 0..n {
                line.clear();
                if answers.read_line(&mut line)? == 0 {
                    return Err(ConnError::Closed);
                }
                if line.contains("\"error\"") {
                    return Err(ConnError::AheadFailed { line });
                }
            }
            Ok(())
        });
        let mut buf = String::new();
        for i in 0..n {
            let (method, params) = make(i);
            buf.push_str(&self.request(&method, &params));
            buf.push('\n');
            if buf.len() > 64 * 1024 {
                self.writer.write_all(buf.as_bytes())?;
                buf.clear();
            }
        }
        self.writer.write_all(buf.as_bytes())?;
        reader
            .join()
            .map_err(|_| io::Error::other("the answer reader panicked"))?
    }

    /// How many runs are in `state`, from `status`.
    pub fn count(&mut self, state: &str) -> Result<u64, ConnError> {
        Ok(self.call("status", json!({}))?["runs"][state]
            .as_u64()
            .unwrap_or(0))
    }

    /// Polls `status` until at least `n` runs are in `state`.
    pub fn wait_count(&mut self, state: &str, n: u64, limit: Duration) -> Result<(), ConnError> {
        let started = Instant::now();
        while self.count(state)? < n {
            if started.elapsed() > limit {
                return Err(ConnError::Timeout {
                    waited: limit,
                    count: n,
                    state: state.into(),
                });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }
}

/// Raw bytes, as they are: no newline is added and no id taken.
impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.writer.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.writer.flush()
    }
}
