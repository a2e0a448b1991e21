//! `logs` for an attempt that another node of the cluster ran: read from
//! the store, where that node ships its log (`crate::logship`), with the
//! same `offset`, `tail`, `max`, `follow` and `eof` as a local log file.

use ax_protocol::api::LogChunk;
use ax_protocol::request::Logs;
use ax_protocol::{RpcError, codes};

use crate::server::{FOLLOW_PAUSE, log_chunk, read_limits};
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
            .is_some_and(|t| crate::time::now_ms() - t > UNSHIPPED_GRACE_MS);
        let eof = got.data.is_empty() && (got.done || given_up);
        if !got.data.is_empty() || eof || !follow || tokio::time::Instant::now() >= deadline {
            return Ok(log_chunk(run, attempt, got.next, &got.data, eof));
        }
        tokio::time::sleep(FOLLOW_PAUSE).await;
    }
}
