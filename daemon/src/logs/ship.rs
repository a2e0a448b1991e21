//! Log shipping in a cluster (docs/operations.md, "Cluster": a log reads
//! the same through any node). The node that runs an attempt writes its
//! log file as a single axd does; this thread copies each file's new
//! bytes to the store (`log_chunks`) and, once the attempt has ended and
//! all of it is there, marks the log complete (`log_done`). Another node's
//! `logs` request reads the store (`crate::logs::read`).
//!
//! What it ships is the file, so the `logs.max_bytes` cap, its marker
//! lines and secret redaction hold in the store exactly as in the file.
//!
//! Wake-ups: the executor's output reader sends `Wrote` at most once per
//! `SHIP_INTERVAL` for an attempt, and `Ended` once the attempt's output
//! is final. An attempt stays *hot* (its file is read every
//! `SHIP_INTERVAL`) while a read finds new bytes or it was notified within
//! the last interval, so bytes written after a notice the reader held
//! back are read by a later round; an idle node's thread sleeps in
//! `recv`. So output reaches the store within about one interval (plus
//! the commit) while the job writes, and the completion mark within one
//! interval of the attempt's end.
//!
//! A node that restarts ships the rest of the logs of the attempts its
//! earlier life was running (those of the DAG runs it loads back),
//! continuing after what the store already has.
//!
//! Never blocks the scheduler (a thread of its own, fed by a channel);
//! a store error is logged once per outage and the same bytes are shipped
//! again after a pause (writes are idempotent), never a panic.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use crate::logs::paths::log_path;
use crate::store::StoreError;
use crate::store::postgres::{CHUNK_BYTES, PgLogs, ShippedChunk, ShippedDone};
use ax_engine::RunId;

/// How often a hot attempt's file is read and shipped.
pub const SHIP_INTERVAL: Duration = Duration::from_millis(250);

/// Bytes shipped in one transaction at most; the rest goes next round.
const BATCH_BYTES: usize = 8 * CHUNK_BYTES;

/// The longest pause after a store error before trying again.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How long a stopping axd keeps trying to ship what is left.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// What the executor tells the shipper.
#[derive(Debug)]
enum Notice {
    /// The attempt's log file grew.
    Wrote(RunId, u32),
    /// The attempt ended: its log file is final (or absent: it was silent).
    Ended(RunId, u32),
    /// The attempt ended with an earlier life of this axd: its file is
    /// final, and the store has some of it already.
    Resumed(RunId, u32),
    /// axd is stopping: ship what is left, then end.
    Stop,
}

/// The executor's end of the shipper's channel.
#[derive(Clone, Debug)]
pub struct Notices(Sender<Notice>);

impl Notices {
    pub fn wrote(&self, run: RunId, attempt: u32) {
        let _ = self.0.send(Notice::Wrote(run, attempt));
    }

    pub fn ended(&self, run: RunId, attempt: u32) {
        let _ = self.0.send(Notice::Ended(run, attempt));
    }

    pub fn resumed(&self, run: RunId, attempt: u32) {
        let _ = self.0.send(Notice::Resumed(run, attempt));
    }

    /// Ends the shipper once it has shipped what it can (within
    /// `STOP_GRACE`).
    pub fn stop(&self) {
        let _ = self.0.send(Notice::Stop);
    }
}

/// The shipper's receiving end, for `run`.
pub struct Inbox(Receiver<Notice>);

pub fn channel() -> (Notices, Inbox) {
    let (tx, rx) = std::sync::mpsc::channel();
    (Notices(tx), Inbox(rx))
}

/// An attempt whose log is not wholly shipped yet.
#[derive(Debug)]
struct Tracked {
    /// Bytes of the file committed to the store; `None` until read from
    /// the store (an attempt of an earlier life).
    shipped: Option<u64>,
    /// When the last `Wrote` arrived.
    notified: Instant,
    /// Read every round; a cold attempt keeps its place (what is
    /// shipped) until a notice makes it hot again.
    hot: bool,
    ended: bool,
}

impl Tracked {
    /// Its file is read in the next round.
    fn due(&self) -> bool {
        self.hot || self.ended
    }
}

/// The shipper thread's body: ends after `Notices::stop`, or when every
/// sender is gone.
pub fn run(logs: PgLogs, log_dir: PathBuf, inbox: Inbox) {
    let mut shipper = Shipper {
        logs,
        log_dir,
        tracked: HashMap::new(),
        failures: 0,
    };
    let mut next_round = Instant::now();
    let mut stopping: Option<Instant> = None;
    loop {
        let idle = !shipper.tracked.values().any(Tracked::due);
        let notice = if idle && stopping.is_none() {
            inbox.0.recv().map_err(|_| RecvTimeoutError::Disconnected)
        } else {
            inbox
                .0
                .recv_timeout(next_round.saturating_duration_since(Instant::now()))
        };
        match notice {
            Ok(n) => {
                if shipper.note(n) {
                    stopping.get_or_insert_with(Instant::now);
                }
                // Take whatever else is queued before shipping.
                while let Ok(n) = inbox.0.try_recv() {
                    if shipper.note(n) {
                        stopping.get_or_insert_with(Instant::now);
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => {
                // No notice can come any more: wait for the round rather
                // than spin on the closed channel.
                stopping.get_or_insert_with(Instant::now);
                std::thread::sleep(next_round.saturating_duration_since(Instant::now()));
            }
        }
        let now = Instant::now();
        if now >= next_round {
            let pause = shipper.round(now, stopping.is_some());
            next_round = Instant::now() + pause;
        }
        if let Some(since) = stopping {
            let left = shipper.tracked.values().any(|t| t.ended);
            if !left || since.elapsed() >= STOP_GRACE {
                if left {
                    tracing::warn!(
                        "stopping with {} attempt log(s) not wholly shipped to the store",
                        shipper.tracked.values().filter(|t| t.ended).count()
                    );
                }
                return;
            }
        }
    }
}

struct Shipper {
    logs: PgLogs,
    log_dir: PathBuf,
    tracked: HashMap<(RunId, u32), Tracked>,
    /// Rounds in a row that the store refused.
    failures: u32,
}

impl Shipper {
    /// Takes a notice in; true for `Stop`.
    fn note(&mut self, notice: Notice) -> bool {
        let now = Instant::now();
        let (key, ended, shipped) = match notice {
            Notice::Wrote(run, attempt) => ((run, attempt), false, Some(0)),
            Notice::Ended(run, attempt) => ((run, attempt), true, Some(0)),
            Notice::Resumed(run, attempt) => ((run, attempt), true, None),
            Notice::Stop => return true,
        };
        let t = self.tracked.entry(key).or_insert(Tracked {
            shipped,
            notified: now,
            hot: true,
            ended: false,
        });
        if ended {
            t.ended = true;
        } else {
            t.notified = now;
            t.hot = true;
        }
        false
    }

    /// Ships what the hot attempts' files have beyond what is shipped, and
    /// the marks of ended attempts shipped to their end. Returns the pause
    /// before the next round. `all`: also attempts gone cold (stopping).
    fn round(&mut self, now: Instant, all: bool) -> Duration {
        if let Err(e) = self.resolve() {
            return self.failed(&e);
        }
        let mut chunks = Vec::new();
        let mut done = Vec::new();
        let mut budget = BATCH_BYTES;
        // (key, bytes read this round, read to the end of the file)
        let mut read = Vec::new();
        for (&key, t) in self.tracked.iter().filter(|(_, t)| t.due()) {
            if budget == 0 {
                break;
            }
            let Some(shipped) = t.shipped else {
                continue; // resolved above
            };
            let (new, at_end) = match read_from(&self.log_dir, key, shipped, budget) {
                Ok(r) => r,
                Err(e) => {
                    // The file cannot be read (removed, disk error): what
                    // is shipped is all the store gets.
                    tracing::warn!(
                        "cannot read the log of run {} attempt {}: {e}",
                        key.0.0,
                        key.1
                    );
                    (Vec::new(), true)
                }
            };
            budget -= new.len();
            let len = new.len() as u64;
            let mut offset = shipped;
            for piece in new.chunks(CHUNK_BYTES) {
                chunks.push(ShippedChunk {
                    run: key.0.0,
                    attempt: key.1,
                    offset,
                    data: piece.to_vec(),
                });
                offset += piece.len() as u64;
            }
            if t.ended && at_end {
                done.push(ShippedDone {
                    run: key.0.0,
                    attempt: key.1,
                    bytes: shipped + len,
                });
            }
            read.push((key, len, at_end));
        }
        if !chunks.is_empty() || !done.is_empty() {
            if let Err(e) = self.logs.ship(chunks, &done) {
                return self.failed(&e);
            }
            if self.failures > 0 {
                tracing::info!("job logs ship to the store again");
                self.failures = 0;
            }
        }
        for (key, len, at_end) in read {
            let Some(t) = self.tracked.get_mut(&key) else {
                continue;
            };
            t.shipped = t.shipped.map(|s| s + len);
            // Cold: nothing new, and no notice within the last interval (a
            // write the reader did not announce came less than one
            // interval after its last notice, so this read saw it). A
            // stopping axd ships a running attempt's file as it is.
            let cold = len == 0 && now.duration_since(t.notified) > SHIP_INTERVAL;
            if t.ended && at_end {
                self.tracked.remove(&key);
            } else if at_end && (cold || all) {
                t.hot = false;
            }
        }
        SHIP_INTERVAL
    }

    /// Reads from the store how much it has of each attempt of an earlier
    /// life, so that shipping goes on after it (chunks start where the
    /// last one ended).
    fn resolve(&mut self) -> Result<(), StoreError> {
        for (&(run, attempt), t) in self.tracked.iter_mut() {
            if t.shipped.is_none() {
                t.shipped = Some(self.logs.stored_len(run.0, attempt)?);
            }
        }
        Ok(())
    }

    /// Notes a round the store refused; returns the pause before the next
    /// try (doubling, at most `MAX_BACKOFF`). The round may have been
    /// committed all the same (its answer lost): what the store holds is
    /// read again before the next one (`resolve`), so that it neither
    /// leaves a gap nor sends a chunk that would clash with one stored.
    fn failed(&mut self, e: &StoreError) -> Duration {
        for t in self.tracked.values_mut() {
            t.shipped = None;
        }
        self.failures += 1;
        if self.failures == 1 {
            tracing::warn!("cannot ship job logs to the store (will retry): {e}");
        }
        (SHIP_INTERVAL * 2u32.saturating_pow(self.failures.min(5))).min(MAX_BACKOFF)
    }
}

/// Up to `max` bytes of an attempt's log file from `offset`, and whether
/// they reach its end. A file not created yet reads as empty.
fn read_from(
    log_dir: &Path,
    (run, attempt): (RunId, u32),
    offset: u64,
    max: usize,
) -> std::io::Result<(Vec<u8>, bool)> {
    let mut f = match std::fs::File::open(log_path(log_dir, run, attempt)) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), true)),
        Err(e) => return Err(e),
    };
    f.seek(SeekFrom::Start(offset))?;
    let mut buf = Vec::new();
    // One byte more than asked tells whether the end was reached.
    f.take(max as u64 + 1).read_to_end(&mut buf)?;
    let at_end = buf.len() <= max;
    buf.truncate(max);
    Ok((buf, at_end))
}
