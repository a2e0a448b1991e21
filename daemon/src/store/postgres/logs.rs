//! Attempt logs in the shared store (docs/operations.md, "Cluster": `ax` and `ax-tui` connected
//! to any node see the whole cluster, logs included). The node that runs
//! an attempt writes its log file as a single node does and ships the
//! file's bytes to `log_chunks` (`crate::logship`); when the attempt has
//! ended and everything is shipped, a row of `log_done` says how long the
//! log is. Another node reads a range from the chunks.
//!
//! Invariants: the chunks of one attempt are contiguous from offset 0
//! (the shipper writes the bytes after the last chunk it committed, and
//! rewrites of a chunk whose commit was lost are ignored, `ON CONFLICT DO
//! NOTHING`, the file being append-only); `log_done` is written in the
//! same transaction as the last chunk or after it.

use std::sync::Arc;

use super::{PgStore, Shared, StoreError, int, on_client};

/// Bytes shipped to one row of `log_chunks` at most, so that a range
/// read touches few rows and no row approaches PostgreSQL's limits.
pub const CHUNK_BYTES: usize = 256 * 1024;

/// The length of an attempt's shipped log: where its last chunk ends.
const LEN: &str = r#"SELECT COALESCE(MAX("offset" + length(data)), 0)::int8 FROM log_chunks
                     WHERE run = $1 AND attempt = $2"#;

/// Bytes of an attempt's log, from `offset` on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShippedChunk {
    pub run: u64,
    pub attempt: u32,
    pub offset: u64,
    pub data: Vec<u8>,
}

/// An attempt whose log is wholly shipped, and its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShippedDone {
    pub run: u64,
    pub attempt: u32,
    pub bytes: u64,
}

/// A range read from the store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoredRange {
    pub data: Vec<u8>,
    /// The offset after `data`.
    pub next: u64,
    /// The log is complete (`log_done`) and `next` is at its end.
    pub done: bool,
    /// When the attempt ended, as its `attempts` row says (ms); `None`
    /// while it runs.
    pub finished_at: Option<i64>,
}

/// The shipped logs of a cluster's store, usable from any thread: blocking
/// calls for the shipper thread, async ones (run on the store's runtime)
/// for the socket server.
#[derive(Clone)]
pub struct PgLogs {
    shared: Arc<Shared>,
}

impl PgStore {
    /// A handle on the shipped logs, sharing this store's connections.
    pub fn logs(&self) -> PgLogs {
        PgLogs {
            shared: self.shared.clone(),
        }
    }
}

impl PgLogs {
    /// Writes `chunks` and then the `done` marks in one transaction.
    /// Idempotent: a batch whose commit was lost may be shipped again.
    pub fn ship(&self, chunks: Vec<ShippedChunk>, done: &[ShippedDone]) -> Result<(), StoreError> {
        let (mut runs, mut attempts, mut offsets, mut data) = (vec![], vec![], vec![], vec![]);
        for c in chunks {
            runs.push(c.run as i64);
            attempts.push(i64::from(c.attempt));
            offsets.push(c.offset as i64);
            data.push(c.data);
        }
        let (mut done_runs, mut done_attempts, mut done_bytes) = (vec![], vec![], vec![]);
        for d in done {
            done_runs.push(d.run as i64);
            done_attempts.push(i64::from(d.attempt));
            done_bytes.push(d.bytes as i64);
        }
        on_client!(self, |client| async {
            let tx = client.transaction().await?;
            if !runs.is_empty() {
                tx.execute(
                    r#"INSERT INTO log_chunks (run, attempt, "offset", data)
                       SELECT * FROM UNNEST($1::int8[], $2::int8[], $3::int8[], $4::bytea[])
                       ON CONFLICT DO NOTHING"#,
                    &[&runs, &attempts, &offsets, &data],
                )
                .await?;
            }
            if !done_runs.is_empty() {
                tx.execute(
                    "INSERT INTO log_done (run, attempt, bytes)
                       SELECT * FROM UNNEST($1::int8[], $2::int8[], $3::int8[])
                       ON CONFLICT DO NOTHING",
                    &[&done_runs, &done_attempts, &done_bytes],
                )
                .await?;
            }
            tx.commit().await?;
            Ok(())
        })
    }

    /// Up to `max` bytes of an attempt's log from `offset`, whether the
    /// log is complete, and when the attempt ended.
    pub async fn read(
        &self,
        run: u64,
        attempt: u32,
        offset: u64,
        max: usize,
    ) -> Result<StoredRange, StoreError> {
        self.on_runtime(move |client| async move {
            // One statement, so one snapshot: a log read as complete has
            // all its chunks in the same read (the mark is committed with
            // or after the last chunk).
            let statement = client
                .prepare_cached(
                    r#"SELECT (SELECT bytes FROM log_done WHERE run = $1 AND attempt = $2),
                              (SELECT finished_at FROM attempts WHERE run = $1 AND n = $2),
                              c."offset", c.data
                       FROM (SELECT 1) AS one
                       LEFT JOIN LATERAL (
                         SELECT "offset", data FROM log_chunks
                         WHERE run = $1 AND attempt = $2
                           AND "offset" + length(data) > $3 AND "offset" < $3 + $4) AS c ON true
                       ORDER BY c."offset""#,
                )
                .await?;
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] = [
                &(run as i64),
                &i64::from(attempt),
                &(offset as i64),
                &(max as i64),
            ];
            let rows = client.query(&statement, &params).await?;
            let mut range = StoredRange {
                next: offset,
                ..StoredRange::default()
            };
            let mut data = Vec::new();
            let mut complete_at: Option<i64> = None;
            for row in &rows {
                complete_at = row.try_get(0)?;
                range.finished_at = row.try_get(1)?;
                let (Some(at), Some(bytes)) = (
                    row.try_get::<_, Option<i64>>(2)?,
                    row.try_get::<_, Option<&[u8]>>(3)?,
                ) else {
                    continue;
                };
                let at: u64 = int(at, "log offset")?;
                // Contiguous chunks: stop at a gap rather than skip it.
                let want = offset + data.len() as u64;
                if at > want || data.len() >= max {
                    break;
                }
                let from = (want - at) as usize;
                if from >= bytes.len() {
                    continue;
                }
                let take = (max - data.len()).min(bytes.len() - from);
                data.extend_from_slice(&bytes[from..from + take]);
            }
            range.next = offset + data.len() as u64;
            range.done = complete_at.is_some_and(|len| range.next as i64 >= len);
            range.data = data;
            Ok(range)
        })
        .await
    }

    /// How many bytes of an attempt's log the store holds, waiting for
    /// the answer (for the shipper's thread).
    pub fn stored_len(&self, run: u64, attempt: u32) -> Result<u64, StoreError> {
        on_client!(self, |client| async {
            let row = client
                .query_one(LEN, &[&(run as i64), &i64::from(attempt)])
                .await?;
            int(row.try_get(0)?, "log length")
        })
    }

    /// How many bytes of an attempt's log the store holds.
    pub async fn len(&self, run: u64, attempt: u32) -> Result<u64, StoreError> {
        self.on_runtime(move |client| async move {
            let row = client
                .query_one(LEN, &[&(run as i64), &i64::from(attempt)])
                .await?;
            int(row.try_get(0)?, "log length")
        })
        .await
    }

    /// Runs `body` on a pooled connection on the store's runtime (never on
    /// the caller's: the socket server's runtime must not wait on store
    /// I/O). A read that fails runs once more: the pool drops a connection
    /// found closed when it comes back, so the second try gets a fresh one.
    async fn on_runtime<T, F, Fut>(&self, body: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: Fn(deadpool_postgres::Object) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = Result<T, StoreError>> + Send,
    {
        let shared = self.shared.clone();
        let Some(rt) = shared.rt.0.as_ref() else {
            return Err(StoreError::Corrupt("the store's runtime is gone".into()));
        };
        let task = rt.spawn({
            let shared = shared.clone();
            async move {
                let mut retried = false;
                loop {
                    let client = shared.client().await?;
                    match body(client).await {
                        Err(_) if !retried => retried = true,
                        result => break result,
                    }
                }
            }
        });
        task.await
            .map_err(|e| StoreError::Corrupt(format!("log read task: {e}")))?
    }
}
