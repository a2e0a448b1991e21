//! `logs`: a range of an attempt's log, read from its file, or, for an
//! attempt that another node of the cluster ran, from the store, where that
//! node ships its log (`crate::logs::ship`), with the same `offset`, `tail`,
//! `max`, `follow` and `eof` as a local log file.

use std::path::Path;
use std::time::Duration;

use ax_protocol::api::LogChunk;
use ax_protocol::request::{LogInfo, Logs};
use ax_protocol::{MAX_FRAME, RpcError, codes};

use crate::bus::{Handle, Peer};
use crate::logs::follow::Following;
use crate::logs::paths::log_path;
use ax_engine::RunId;

use crate::store::StoreError;
use crate::store::postgres::PgLogs;

/// How long after an attempt ended (its row's `finished_at`, on the clock
/// of the node that wrote it) a log without its completion mark reads as
/// complete: the node that ran it died, or lost the store, before it
/// shipped the rest. Far above the shipper's delay (a quarter second plus
/// a commit), so a live node's last lines are never cut off, and short
/// enough that a follow of a dead node's attempt ends.
const UNSHIPPED_GRACE_MS: i64 = 15_000;

pub async fn from_store(
    logs: &PgLogs,
    run: u64,
    attempt: u32,
    p: &Logs,
) -> Result<LogChunk, RpcError> {
    let failed = |e: StoreError| {
        RpcError::new(
            codes::INTERNAL,
            format!("reading the log from the store: {e}"),
        )
    };
    let mut offset = p.offset.unwrap_or(0);
    if let Some(tail) = p.tail {
        offset = logs
            .len(run, attempt)
            .await
            .map_err(failed)?
            .saturating_sub(tail);
    }
    let (max, follow, deadline) = read_limits(p);
    loop {
        let got = logs.read(run, attempt, offset, max).await.map_err(failed)?;
        let given_up = got
            .finished_at
            .is_some_and(|t| crate::runtime::time::now_ms() - t > UNSHIPPED_GRACE_MS);
        let eof = got.data.is_empty() && (got.done || given_up);
        if !got.data.is_empty() || eof || !follow || tokio::time::Instant::now() >= deadline {
            return Ok(log_chunk(run, attempt, got.next, &got.data, eof));
        }
        tokio::time::sleep(STORE_FOLLOW_PAUSE).await;
    }
}

/// How long a follow of another node's attempt that found no new output
/// waits before reading the store again: that node's output arrives by
/// shipping (`crate::logs::ship`), and no notice of it reaches this node.
const STORE_FOLLOW_PAUSE: Duration = Duration::from_millis(100);

/// `logs`: a range of an attempt's log. With `follow`, waits (up to
/// `wait_ms`, default 10 s) for new output before answering, so a client
/// follows a log by calling again with the returned offset.
pub(crate) async fn logs(handle: &Handle, peer: &Peer, p: Logs) -> Result<LogChunk, RpcError> {
    let run = p.run;
    let info = handle
        .ask(
            peer,
            LogInfo {
                run,
                attempt: p.attempt,
            },
        )
        .await?;
    let attempts = info.attempts;
    let attempt = match p.attempt {
        Some(a) if a == 0 || a > u64::from(u32::MAX) => {
            return Err(RpcError::new(
                codes::INVALID_PARAMS,
                format!("logs: `attempt` must be 1-{} (got {a})", u32::MAX),
            ));
        }
        Some(a) if a > u64::from(attempts) => {
            return Err(RpcError::new(
                codes::NOT_FOUND,
                format!("run {run} has {attempts} attempt(s); no attempt {a}"),
            ));
        }
        Some(a) => a as u32,
        None if attempts == 0 => return Ok(log_chunk(run, 0, 0, b"", true)),
        None => attempts,
    };
    // An attempt another node of the cluster ran: its log is in the store.
    if let Some(remote) = &handle.remote_logs
        && let Some(node) = &info.node
        && **node != *remote.node
    {
        return crate::logs::read::from_store(&remote.logs, run, attempt, &p).await;
    }
    let mut offset = p.offset.unwrap_or(0);
    // `tail: N`: the last N bytes (the console's log tail).
    if let Some(tail) = p.tail {
        let len = std::fs::metadata(log_path(&handle.log_dir, RunId(run), attempt))
            .map(|m| m.len())
            .unwrap_or(0);
        offset = len.saturating_sub(tail);
    }
    let (max, follow, deadline) = read_limits(&p);
    let following = follow.then(|| handle.follows.follow(RunId(run), attempt));
    loop {
        // Enabled before the log is read: a notice of a write (or of the
        // end) that comes after the read wakes the wait below.
        let notice = following.as_ref().map(Following::notified);
        tokio::pin!(notice);
        if let Some(n) = notice.as_mut().as_pin_mut() {
            n.enable();
        }
        let running_now = attempt == attempts
            && handle
                .ask(peer, LogInfo { run, attempt: None })
                .await?
                .running;
        let (data, next) = read_log(&handle.log_dir, run, attempt, offset, max)
            .map_err(|e| RpcError::new(codes::INTERNAL, format!("reading the log: {e}")))?;
        let eof = data.is_empty() && !running_now;
        let now = tokio::time::Instant::now();
        if !data.is_empty() || eof || !follow || now >= deadline {
            return Ok(log_chunk(run, attempt, next, &data, eof));
        }
        let fallback = deadline.min(now + UNNOTICED_END);
        if let Some(n) = notice.as_pin_mut() {
            let _ = tokio::time::timeout_at(fallback, n).await;
        }
    }
}

/// The longest a local follow waits without a notice before it reads
/// again. Whether the attempt runs is the scheduler's word, and notices
/// come only from this axd's executor: a run the engine ends without it
/// (an attempt an earlier life of axd started, or any end the engine
/// decides by itself) sends none, and this bounds how late such a follow
/// sees the end.
const UNNOTICED_END: Duration = Duration::from_secs(1);

/// What a `logs` request asks at most: bytes per answer, whether it
/// follows, and until when a follow waits for output.
pub(crate) fn read_limits(p: &Logs) -> (usize, bool, tokio::time::Instant) {
    let max = p.max.unwrap_or(256 * 1024).min(MAX_FRAME as u64 / 2) as usize;
    let follow = p.follow.unwrap_or(false);
    let wait = Duration::from_millis(p.wait_ms.unwrap_or(10_000).min(60_000));
    (max, follow, tokio::time::Instant::now() + wait)
}

/// Reads a range of an attempt's log: the bytes and the offset after them.
/// A log not written yet reads as empty.
pub fn read_log(
    log_dir: &Path,
    run: u64,
    attempt: u32,
    offset: u64,
    max: usize,
) -> std::io::Result<(Vec<u8>, u64)> {
    use std::io::{Read, Seek, SeekFrom};
    let path = log_path(log_dir, RunId(run), attempt);
    let mut f = match std::fs::File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), offset)),
        Err(e) => return Err(e),
    };
    f.seek(SeekFrom::Start(offset))?;
    let mut buf = Vec::new();
    f.take(max as u64).read_to_end(&mut buf)?;
    let next = offset + buf.len() as u64;
    Ok((buf, next))
}

/// `offset` is where the next read starts.
pub(crate) fn log_chunk(run: u64, attempt: u32, offset: u64, data: &[u8], eof: bool) -> LogChunk {
    LogChunk {
        run,
        attempt,
        offset,
        data: String::from_utf8_lossy(data).into_owned(),
        eof,
    }
}
