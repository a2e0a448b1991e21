//! An attempt's output: copied into its log (redacted, capped) and
//! reported as heartbeats.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::time::Duration;

use tokio::io::AsyncReadExt;

use super::{ExecEvent, JobLog, LazyLog, sleep_until_opt};
use crate::engine::{Input, RunId};
use crate::logship::{Notices, SHIP_INTERVAL};

/// Output as heartbeats (SPEC §4.5: every read counts as a beat).
///
/// A chatty job can make thousands of reads a second, and one message per
/// read would flood the scheduler; a plain "at most one beat per second"
/// drops reads and lets a job that prints every 0.9 s with `heartbeat =
/// "1s"` be killed as stalled. So output is reported on both edges of a
/// short window:
///
/// * a read when no beat went out within the window sends one at once;
/// * reads inside the window are owed one beat, sent when the window ends.
///
/// Every read is thus reported at most `window` late, and the engine's stall
/// deadline (the last beat it saw plus `heartbeat`) is never earlier than
/// the last read plus `heartbeat`: a silent job is killed at most `window`
/// after its silence exceeds `heartbeat`, a talking one never. The window
/// is an eighth of the heartbeat, so the owed beat always lands well before
/// the deadline, and at most one second, so a chatty job costs the
/// scheduler at most eight messages per heartbeat period. Jobs without a
/// `heartbeat` send none (the engine has no deadline to move).
pub(super) struct OutputBeats {
    run: RunId,
    window: Duration,
    last_sent: Option<tokio::time::Instant>,
    /// A read arrived inside the window after `last_sent`.
    owed: bool,
}

impl OutputBeats {
    const MAX_WINDOW: Duration = Duration::from_secs(1);

    pub(super) fn new(run: RunId, heartbeat: Option<Duration>) -> Option<OutputBeats> {
        Some(OutputBeats {
            run,
            window: (heartbeat? / 8).min(Self::MAX_WINDOW),
            last_sent: None,
            owed: false,
        })
    }

    /// The job wrote something, just now.
    fn output(&mut self, now: tokio::time::Instant, events: &impl Fn(ExecEvent)) {
        match self.last_sent {
            Some(sent) if now < sent + self.window => self.owed = true,
            _ => self.send(now, events),
        }
    }

    /// When the owed beat is due, if one is.
    fn owed_at(&self) -> Option<tokio::time::Instant> {
        self.owed
            .then(|| self.last_sent.map(|sent| sent + self.window))
            .flatten()
    }

    fn send(&mut self, now: tokio::time::Instant, events: &impl Fn(ExecEvent)) {
        self.last_sent = Some(now);
        self.owed = false;
        events(ExecEvent::now(Input::Output { run: self.run }));
    }
}

/// Copies the job's output into its log (redacted, capped) and reports
/// output as heartbeats (`OutputBeats`).
pub(super) async fn read_output(
    read_end: OwnedFd,
    log: JobLog,
    max_bytes: u64,
    mut beats: Option<OutputBeats>,
    mut shipping: Option<Shipping>,
    events: impl Fn(ExecEvent) + Send + Sync + Clone + 'static,
) {
    let Ok(mut pipe) = tokio::net::unix::pipe::Receiver::from_owned_fd(read_end) else {
        return;
    };
    let JobLog { file, mut redactor } = log;
    let mut log = CappedLog {
        file,
        max_bytes,
        written: 0,
        dropped: 0,
    };
    let mut buf = vec![0u8; 64 * 1024];
    // What the redactor releases of each read; unused without secrets.
    let mut redacted = Vec::new();
    loop {
        let owed_at = beats.as_ref().and_then(OutputBeats::owed_at);
        // `read` on a pipe is cancel-safe: a read that loses the race to
        // the owed beat has taken no bytes.
        let read = tokio::select! {
            read = pipe.read(&mut buf) => read,
            _ = sleep_until_opt(owed_at) => {
                if let Some(b) = beats.as_mut() {
                    b.send(tokio::time::Instant::now(), &events);
                }
                continue;
            }
        };
        let n = match read {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(b) = beats.as_mut() {
            b.output(tokio::time::Instant::now(), &events);
        }
        match redactor.as_mut() {
            None => log.write(&buf[..n]),
            Some(r) => {
                redacted.clear();
                r.feed(&buf[..n], &mut redacted);
                log.write(&redacted);
            }
        }
        if let Some(s) = shipping.as_mut() {
            s.wrote(tokio::time::Instant::now());
        }
    }
    if let Some(r) = redactor.as_mut() {
        redacted.clear();
        r.finish(&mut redacted);
        log.write(&redacted);
    }
    log.close();
}

/// Tells the log shipper (in a cluster) that the attempt's log grew, at
/// most once per `SHIP_INTERVAL`: the shipper keeps reading the file for
/// an interval after each notice, so the writes in between are not lost
/// (`crate::logship`).
pub(super) struct Shipping {
    notices: Notices,
    run: RunId,
    attempt: u32,
    last: Option<tokio::time::Instant>,
}

impl Shipping {
    pub(super) fn new(notices: Notices, run: RunId, attempt: u32) -> Shipping {
        Shipping {
            notices,
            run,
            attempt,
            last: None,
        }
    }

    /// Called after each write to the log.
    fn wrote(&mut self, now: tokio::time::Instant) {
        if self
            .last
            .is_none_or(|t| now.duration_since(t) >= SHIP_INTERVAL)
        {
            self.last = Some(now);
            self.notices.wrote(self.run, self.attempt);
        }
    }
}

/// An attempt's log capped at `logs.max_bytes`, with a marker line where
/// output starts being discarded and a count of what was.
struct CappedLog {
    file: LazyLog,
    max_bytes: u64,
    written: u64,
    dropped: u64,
}

impl CappedLog {
    fn write(&mut self, bytes: &[u8]) {
        let n = bytes.len();
        let room = self.max_bytes.saturating_sub(self.written);
        let keep = (n as u64).min(room) as usize;
        if keep > 0 {
            let _ = self.file.write_all(&bytes[..keep]);
            self.written += keep as u64;
        }
        if keep < n {
            if self.dropped == 0 {
                let _ = write!(
                    self.file,
                    "\n[ax] log reached logs.max_bytes ({} bytes); further output is discarded\n",
                    self.max_bytes
                );
            }
            self.dropped += (n - keep) as u64;
        }
    }

    fn close(mut self) {
        if self.dropped > 0 {
            let _ = writeln!(
                self.file,
                "[ax] {} bytes of output were discarded",
                self.dropped
            );
        }
        let _ = self.file.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runs of the `Output` events sent through the returned sink.
    fn beat_log() -> (
        std::sync::Arc<std::sync::Mutex<Vec<RunId>>>,
        impl Fn(ExecEvent),
    ) {
        let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = sent.clone();
        (sent, move |ev| {
            if let Input::Output { run } = ev.input {
                sink.lock().unwrap().push(run);
            }
        })
    }

    #[test]
    fn every_read_is_reported_within_an_eighth_of_the_heartbeat() {
        let (sent, events) = beat_log();
        let run = RunId(7);
        let mut beats = OutputBeats::new(run, Some(Duration::from_secs(1))).unwrap();
        let t0 = tokio::time::Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // The first read goes out at once; reads inside the window are
        // owed one beat at the window's end, not one each.
        beats.output(at(0), &events);
        assert_eq!(sent.lock().unwrap().len(), 1);
        assert_eq!(beats.owed_at(), None);
        beats.output(at(50), &events);
        beats.output(at(100), &events);
        assert_eq!(sent.lock().unwrap().len(), 1);
        assert_eq!(beats.owed_at(), Some(at(125)));
        beats.send(at(125), &events);
        assert_eq!(sent.lock().unwrap().len(), 2);
        assert_eq!(beats.owed_at(), None, "nothing owed after the flush");
        // A read 0.7 s after the last beat is reported at once, whatever
        // happened a second before (the old one-per-second limit lost it).
        beats.output(at(825), &events);
        assert_eq!(*sent.lock().unwrap(), vec![run; 3]);
    }

    #[test]
    fn the_window_is_capped_at_a_second_and_silent_without_a_heartbeat() {
        assert!(OutputBeats::new(RunId(1), None).is_none());
        let long = OutputBeats::new(RunId(1), Some(Duration::from_secs(3600))).unwrap();
        assert_eq!(long.window, Duration::from_secs(1));
    }
}
