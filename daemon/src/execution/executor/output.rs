//! An attempt's output: copied into its log (redacted, capped) and
//! reported as heartbeats.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::time::Duration;

use tokio::io::AsyncReadExt;

use crate::bus::ExecEvent;
use crate::logs::follow::LogWatch;
use crate::logs::ship::{Notices, SHIP_INTERVAL};
use ax_engine::{Input, RunId};

/// Output as heartbeats (every read counts as a beat: docs/job-files.md,
/// "Job fields", `heartbeat`).
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
/// output as heartbeats (`OutputBeats`). Returns how many bytes of output
/// could not be written to the log (`CappedLog`).
pub(super) async fn read_output(
    read_end: Option<OwnedFd>,
    log: JobLog,
    max_bytes: u64,
    mut beats: Option<OutputBeats>,
    mut shipping: Option<Shipping>,
    (follows, run, attempt): (&LogWatch, RunId, u32),
    events: impl Fn(ExecEvent) + Send + Sync + Clone + 'static,
) -> u64 {
    let file_resumed = log.file.resumed;
    let Some(read_end) = read_end else {
        return 0;
    };
    let Ok(mut pipe) = tokio::net::unix::pipe::Receiver::from_owned_fd(read_end) else {
        return 0;
    };
    let JobLog { file, mut redactor } = log;
    let mut log = CappedLog::new(file, max_bytes);
    if file_resumed {
        // Output an earlier life (or the keeper) wrote counts against the cap.
        log.written = std::fs::metadata(&log.file.path).map_or(0, |m| m.len());
    }
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
        follows.notice(run, attempt);
    }
    if let Some(r) = redactor.as_mut() {
        redacted.clear();
        r.finish(&mut redacted);
        log.write(&redacted);
    }
    log.close()
}

/// Tells the log shipper (in a cluster) that the attempt's log grew, at
/// most once per `SHIP_INTERVAL`: the shipper keeps reading the file for
/// an interval after each notice, so the writes in between are not lost
/// (`crate::logs::ship`).
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
///
/// Output that cannot be written (a full disk, a deleted log folder) is
/// counted, not retried; the first write that succeeds afterwards is
/// preceded by a marker line `[ax: N bytes of output lost: <error>]`, and
/// `close` returns the count, which the attempt's record keeps. `written`
/// counts only bytes the file took (the cap applies to those).
struct CappedLog<W: Write> {
    file: W,
    max_bytes: u64,
    written: u64,
    dropped: u64,
    /// Bytes lost to write errors, in all.
    lost: u64,
    /// Bytes lost since the last marker, and the error that lost them.
    unmarked: Option<(u64, String)>,
    /// The last byte written ends a line (or nothing was written).
    at_line_start: bool,
}

impl<W: Write> CappedLog<W> {
    fn new(file: W, max_bytes: u64) -> CappedLog<W> {
        CappedLog {
            file,
            max_bytes,
            written: 0,
            dropped: 0,
            lost: 0,
            unmarked: None,
            at_line_start: true,
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        let n = bytes.len();
        let room = self.max_bytes.saturating_sub(self.written);
        let keep = (n as u64).min(room) as usize;
        if keep > 0 && self.mark_lost() {
            let put = self.put(&bytes[..keep]);
            self.written += put as u64;
        } else if keep > 0 {
            self.lose(keep as u64, None);
        }
        if keep < n {
            if self.dropped == 0 {
                let line = format!(
                    "\n[ax] log reached logs.max_bytes ({} bytes); further output is discarded\n",
                    self.max_bytes
                );
                self.put_ax_line(line.as_bytes());
            }
            self.dropped += (n - keep) as u64;
        }
    }

    /// Writes what it can of `bytes`; what it cannot is counted as lost.
    /// Returns the bytes written.
    fn put(&mut self, bytes: &[u8]) -> usize {
        let mut done = 0;
        while done < bytes.len() {
            match self.file.write(&bytes[done..]) {
                Ok(0) => {
                    self.lose((bytes.len() - done) as u64, Some("wrote nothing".into()));
                    break;
                }
                Ok(k) => done += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.lose((bytes.len() - done) as u64, Some(describe(&e)));
                    break;
                }
            }
        }
        if done > 0 {
            self.at_line_start = bytes[done - 1] == b'\n';
        }
        done
    }

    fn lose(&mut self, bytes: u64, error: Option<String>) {
        self.lost += bytes;
        let (n, why) = self.unmarked.get_or_insert_with(|| (0, String::new()));
        *n += bytes;
        if let Some(e) = error {
            *why = e;
        }
    }

    /// Writes the marker of output lost since the last one, if any; `true`
    /// when the log may take output again (nothing unmarked is left).
    fn mark_lost(&mut self) -> bool {
        let Some((n, why)) = self.unmarked.take() else {
            return true;
        };
        let sep = if self.at_line_start { "" } else { "\n" };
        let line = format!("{sep}[ax: {n} bytes of output lost: {why}]\n");
        // One write: a marker either fits or is tried again whole later.
        match self.file.write(line.as_bytes()) {
            Ok(k) if k == line.len() => {
                self.at_line_start = true;
                true
            }
            _ => {
                self.unmarked = Some((n, why));
                false
            }
        }
    }

    /// One of ax's own lines (not output: neither capped nor counted).
    fn put_ax_line(&mut self, line: &[u8]) {
        if self.mark_lost() && self.file.write_all(line).is_ok() {
            self.at_line_start = true;
        }
    }

    /// Flushes, with the last marker if output was lost; returns the bytes
    /// lost in all.
    fn close(mut self) -> u64 {
        if self.dropped > 0 {
            let line = format!("[ax] {} bytes of output were discarded\n", self.dropped);
            self.put_ax_line(line.as_bytes());
        }
        self.mark_lost();
        let _ = self.file.flush();
        self.lost
    }
}

/// An I/O error as the C library says it ("No space left on device"),
/// without Rust's "(os error 28)".
fn describe(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => nix::errno::Errno::from_raw(code).desc().to_string(),
        None => e.to_string(),
    }
}

/// Where an attempt's output goes: its log file, through the redactor when
/// the attempt has secrets.
pub(super) struct JobLog {
    pub(super) file: LazyLog,
    pub(super) redactor: Option<crate::execution::secrets::OutputRedactor>,
}

/// An attempt's log file, created at the first byte of output: creating a
/// file per attempt costs more than spawning a no-op job on ext4, and a
/// silent job's log is simply absent (read as empty).
pub(super) struct LazyLog {
    pub(super) path: PathBuf,
    pub(super) file: Option<std::fs::File>,
    /// The attempt was started by an earlier life of axd: its log is
    /// extended, never replaced.
    pub(super) resumed: bool,
}

impl Write for LazyLog {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.file.is_none() {
            // Appending, created if absent: an attempt started by an
            // earlier axd, or whose keeper copied output while axd could not
            // (a lost connection, a restart), has its log already, and no
            // writer may write over another. A stale file of another store
            // was set aside before the attempt started
            // (`set_aside_stale_log`).
            let file = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .mode(crate::runtime::private::FILE_MODE)
                .custom_flags(libc::O_NOFOLLOW)
                .open(&self.path)?;
            self.file = Some(file);
        }
        self.file.as_mut().expect("just created").write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.file {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

/// Sleeps until `deadline`; for ever when there is none.
pub(super) async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
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
        // happened a second before (a limit of one beat per second would
        // lose it).
        beats.output(at(825), &events);
        assert_eq!(*sent.lock().unwrap(), vec![run; 3]);
    }

    /// A file on a disk with `room` bytes left: a write takes what fits,
    /// then fails with ENOSPC.
    struct Disk {
        data: Vec<u8>,
        room: usize,
    }

    impl Write for Disk {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.room == 0 {
                return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
            }
            let k = buf.len().min(self.room);
            self.room -= k;
            self.data.extend_from_slice(&buf[..k]);
            Ok(k)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn output_lost_to_a_full_disk_is_counted_and_marked_once_space_returns() {
        let mut log = CappedLog::new(
            Disk {
                data: Vec::new(),
                room: 10,
            },
            1 << 20,
        );
        log.write(b"0123456");
        log.write(b"789abcdef");
        log.write(b"ghij");
        // 10 bytes fit, 10 did not; only written bytes count.
        assert_eq!((log.written, log.lost), (10, 10));
        // Still full: the marker waits, the output is lost too.
        log.write(b"kl");
        assert_eq!(log.lost, 12);
        log.file.room = 1000;
        log.write(b"after\n");
        assert_eq!(
            String::from_utf8(log.file.data.clone()).unwrap(),
            "0123456789\n[ax: 12 bytes of output lost: No space left on device]\nafter\n"
        );
        assert_eq!(log.written, 16);
        assert_eq!(log.close(), 12);
    }

    #[test]
    fn a_loss_at_the_end_is_marked_at_close_if_space_returned() {
        let mut disk = Disk {
            data: Vec::new(),
            room: 4,
        };
        let mut log = CappedLog::new(&mut disk, 1 << 20);
        log.write(b"ok\nlost");
        log.file.room = 1000;
        assert_eq!(log.close(), 3);
        assert_eq!(
            String::from_utf8(disk.data).unwrap(),
            "ok\nl\n[ax: 3 bytes of output lost: No space left on device]\n"
        );
    }

    #[test]
    fn the_cap_counts_written_bytes_only() {
        let mut log = CappedLog::new(
            Disk {
                data: Vec::new(),
                room: 3,
            },
            5,
        );
        log.write(b"abcd");
        log.file.room = 1000;
        // 3 written, 1 lost: 2 more fit under the cap of 5.
        log.write(b"efgh");
        let text = String::from_utf8(log.file.data.clone()).unwrap();
        assert!(
            text.starts_with(
                "abc\n[ax: 1 bytes of output lost: No space left on device]\nef\n[ax] log reached"
            ),
            "{text}"
        );
        assert_eq!(log.written, 5);
    }

    #[test]
    fn the_window_is_capped_at_a_second_and_silent_without_a_heartbeat() {
        assert!(OutputBeats::new(RunId(1), None).is_none());
        let long = OutputBeats::new(RunId(1), Some(Duration::from_secs(3600))).unwrap();
        assert_eq!(long.window, Duration::from_secs(1));
    }
}
