//! The mail about one DAG run (docs/job-files.md, "Mail"): its headers
//! and its plain-text body, with the tail of each failed job's log.
//!
//! Invariants: job output goes only in the body; every header value has
//! its CR and LF removed (the DAG name is one axd validated, the addresses
//! were checked by `check_mail_address`, and this holds even so), and the
//! only line breaks in a header are the folds between the encoded words
//! of a subject beyond ASCII, each followed by a space; a job's
//! log tail is at most `TAIL_LINES` lines and `TAIL_BYTES` bytes, and the
//! whole message at most `MAX_MESSAGE` bytes, each cut saying how many
//! bytes it left out.

use std::fmt::Write as _;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use ax_engine::DagRunState;
use ax_shared::RunState;

use super::{DagRunReport, JobReport};
use crate::logs::paths::log_path;

/// Lines of a job's log the mail shows at most (its last ones).
pub(crate) const TAIL_LINES: usize = 50;
/// Bytes of a job's log the mail shows at most (its last ones).
pub(crate) const TAIL_BYTES: u64 = 8 * 1024;
/// The whole message at most, headers included.
pub(crate) const MAX_MESSAGE: usize = 64 * 1024;

/// What the DAG run's state reads as in the subject and body.
pub(crate) fn state_word(state: DagRunState) -> &'static str {
    match state {
        DagRunState::Success => "succeeded",
        DagRunState::Failed => "failed",
        DagRunState::Cancelled => "cancelled",
        DagRunState::Active => "active",
    }
}

/// A header value with CR and LF taken out, so it cannot start another
/// header.
fn header_safe(value: &str) -> String {
    value
        .chars()
        .filter(|c| !matches!(c, '\r' | '\n'))
        .collect()
}

/// UTF-8 bytes of one encoded word at most: 56 characters of base64, 68
/// with its frame (RFC 2047 allows 75), so even the first line,
/// `Subject: ` and a word, stays within 78.
const WORD_BYTES: usize = 42;

/// A header value as it may travel: as it is when ASCII, else as RFC 2047
/// encoded words (`=?UTF-8?B?…?=`, a DAG name may be any script's), each
/// whole characters, on folded lines.
fn encoded(value: &str) -> String {
    if value.is_ascii() {
        return value.to_string();
    }
    let mut words = Vec::new();
    let mut start = 0;
    while start < value.len() {
        let mut end = (start + WORD_BYTES).min(value.len());
        while !value.is_char_boundary(end) {
            end -= 1;
        }
        words.push(format!(
            "=?UTF-8?B?{}?=",
            base64(&value.as_bytes()[start..end])
        ));
        start = end;
    }
    words.join("\n ")
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Whether the job wrote any output: some attempt's log is not empty.
pub(crate) fn wrote_output(log_dir: &Path, job: &JobReport) -> bool {
    (1..=job.attempts)
        .any(|a| std::fs::metadata(log_path(log_dir, job.run, a)).is_ok_and(|m| m.len() > 0))
}

/// The message for `sendmail -t`: headers, a blank line, the body, its
/// lines ending in LF as sendmail reads them (it writes CRLF on the wire).
/// `with_output`: the mail is sent for the jobs' output, so the tails of
/// the jobs that wrote some are shown as well as the failed jobs'.
pub(crate) fn compose(
    report: &DagRunReport,
    to: &[String],
    log_dir: &Path,
    with_output: bool,
) -> Vec<u8> {
    let state = state_word(report.state);
    let to: Vec<String> = to.iter().map(|a| header_safe(a)).collect();
    let mut text = String::new();
    let _ = write!(
        text,
        "To: {}\nSubject: {}\nMIME-Version: 1.0\nContent-Type: text/plain; charset=utf-8\n\
         Content-Transfer-Encoding: 8bit\nAuto-Submitted: auto-generated\n\n",
        to.join(", "),
        encoded(&header_safe(&format!(
            "ax: {} DAG run {} {state}",
            report.dag, report.dag_run.0
        ))),
    );
    let _ = write!(
        text,
        "DAG:     {}\nDAG run: {}\nState:   {state}\n\n",
        report.dag, report.dag_run.0
    );
    // The jobs the mail is about: those that did not succeed, and with
    // `with_output` those that wrote output; the others are counted.
    let shown: Vec<&JobReport> = report
        .jobs
        .iter()
        .filter(|j| j.state != RunState::Success || with_output && wrote_output(log_dir, j))
        .collect();
    for job in &shown {
        let _ = writeln!(text, "{}", summary(job));
        if text.len() > MAX_MESSAGE {
            break;
        }
    }
    let others = report.jobs.len() - shown.len();
    if others > 0 {
        let _ = writeln!(text, "{others} other job(s) succeeded");
    }
    for job in shown.iter().filter(|j| j.attempts > 0) {
        if text.len() > MAX_MESSAGE {
            break;
        }
        let path = log_path(log_dir, job.run, job.attempts);
        let _ = write!(
            text,
            "\n--- job {} (run {}), {}:\n",
            job.job,
            job.run.0,
            path.display()
        );
        text.push_str(&tail(&path, job));
    }
    cap(text).into_bytes()
}

/// A job's line: run id, job id, state, exit code or signal, duration.
fn summary(job: &JobReport) -> String {
    let mut line = format!("run {} job {}: {}", job.run.0, job.job, job.state.as_str());
    match (job.exit_code, job.signal) {
        (Some(code), _) => {
            let _ = write!(line, ", exit code {code}");
        }
        (None, Some(sig)) => {
            let name = nix::sys::signal::Signal::try_from(sig)
                .map(|s| s.as_str().to_string())
                .unwrap_or_else(|_| format!("signal {sig}"));
            let _ = write!(line, ", killed by {name}");
        }
        (None, None) => {}
    }
    if let Some(ms) = job.ran_ms {
        let _ = write!(line, ", ran {}", duration(ms));
    }
    if let Some(e) = &job.error {
        let _ = write!(line, " ({e})");
    } else if job.attempts == 0 && !job.reason.is_empty() {
        let _ = write!(line, " ({})", job.reason);
    }
    line
}

/// `850ms`, `1.5s`, then as durations are written (`2m5s`).
fn duration(ms: ax_engine::Millis) -> String {
    match ms.max(0) {
        ms if ms < 1000 => format!("{ms}ms"),
        ms if ms < 60_000 => format!("{:.1}s", ms as f64 / 1000.0),
        ms => ax_shared::duration::format_duration(std::time::Duration::from_millis(ms as u64)),
    }
}

/// The last `TAIL_LINES` lines and `TAIL_BYTES` bytes of a log, with a
/// line saying how much was cut before them; a note when it cannot be read.
fn tail(path: &Path, job: &JobReport) -> String {
    let read = || -> std::io::Result<(Vec<u8>, u64)> {
        let mut f = std::fs::File::open(path)?;
        let len = f.metadata()?.len();
        let from = len.saturating_sub(TAIL_BYTES);
        f.seek(SeekFrom::Start(from))?;
        let mut buf = Vec::new();
        f.take(TAIL_BYTES).read_to_end(&mut buf)?;
        Ok((buf, len))
    };
    let (buf, len) = match read() {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return match &job.node {
                // In a cluster, another node's log is in the store.
                Some(node) => format!(
                    "(the attempt ran on node {node}: `ax logs {}` reads its log)\n",
                    job.run.0
                ),
                None => "(no output)\n".into(),
            };
        }
        Err(e) => return format!("(the log cannot be read: {e})\n"),
    };
    if len == 0 {
        return "(no output)\n".into();
    }
    // The last TAIL_LINES lines: a final newline ends the last line rather
    // than starting another.
    let body = buf.strip_suffix(b"\n").unwrap_or(&buf);
    let start = body
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, b)| **b == b'\n')
        .nth(TAIL_LINES - 1)
        .map_or(0, |(i, _)| i + 1);
    let kept = &buf[start..];
    let cut = len - kept.len() as u64;
    let mut out = String::new();
    if cut > 0 {
        let _ = writeln!(out, "(… {cut} bytes cut)");
    }
    out.push_str(&String::from_utf8_lossy(kept));
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out
}

/// The message cut to `MAX_MESSAGE` bytes (at a character boundary), with
/// the line saying so.
fn cap(mut text: String) -> String {
    if text.len() <= MAX_MESSAGE {
        return text;
    }
    let note_room = 64;
    let mut end = MAX_MESSAGE - note_room;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = text.len() - end;
    text.truncate(end);
    let _ = write!(text, "\n(… {cut} bytes cut: the mail's limit)\n");
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use ax_engine::{DagRunId, RunId};

    fn job(run: u64, state: RunState, attempts: u32) -> JobReport {
        JobReport {
            run: RunId(run),
            job: format!("job{run}"),
            state,
            attempts,
            exit_code: Some(3),
            signal: None,
            error: None,
            reason: String::new(),
            ran_ms: Some(1500),
            node: None,
        }
    }

    fn report(dag: &str, jobs: Vec<JobReport>) -> DagRunReport {
        DagRunReport {
            dag: dag.into(),
            dag_run: DagRunId(7),
            state: DagRunState::Failed,
            notify: None,
            jobs,
        }
    }

    fn headers(message: &[u8]) -> String {
        let text = String::from_utf8_lossy(message);
        text.split("\n\n").next().unwrap().to_string()
    }

    #[test]
    fn headers_never_take_a_line_break_from_a_value() {
        let dir = tempfile::tempdir().unwrap();
        let m = compose(
            &report("nightly\r\nBcc: evil@example.com", vec![]),
            &["ops@example.com\rBcc: x@y\n".into(), "root".into()],
            dir.path(),
            false,
        );
        let h = headers(&m);
        assert_eq!(h.lines().count(), 6, "{h}");
        assert!(!h.contains('\r'), "{h:?}");
        assert!(!h.lines().any(|l| l.starts_with("Bcc")), "{h}");
        assert!(h.starts_with("To: ops@example.comBcc: x@y, root\n"), "{h}");
        assert!(h.contains("\nAuto-Submitted: auto-generated"), "{h}");
        assert!(!h.contains("From:"), "{h}");
    }

    #[test]
    fn a_subject_beyond_ascii_is_encoded_words_of_whole_characters() {
        assert_eq!(base64(b"ax"), "YXg=");
        assert_eq!(base64(b"axd"), "YXhk");
        assert_eq!(base64(b"a"), "YQ==");
        assert_eq!(encoded("ax: nightly"), "ax: nightly");
        assert_eq!(encoded("é"), "=?UTF-8?B?w6k=?=");
        let dir = tempfile::tempdir().unwrap();
        let name = "報告/".repeat(20);
        let h = headers(&compose(
            &report(&name, vec![]),
            &["a@b".into()],
            dir.path(),
            false,
        ));
        let subject: Vec<&str> = h
            .lines()
            .skip_while(|l| !l.starts_with("Subject: "))
            .take_while(|l| l.starts_with("Subject: ") || l.starts_with(' '))
            .collect();
        assert!(subject.len() > 1, "folded: {h}");
        for line in &subject {
            assert!(line.is_ascii() && line.len() <= 78, "{line}");
        }
        let decoded: String = subject
            .iter()
            .map(|l| {
                let word = l.trim_start_matches("Subject: ").trim();
                let b64 = word
                    .strip_prefix("=?UTF-8?B?")
                    .unwrap()
                    .strip_suffix("?=")
                    .unwrap();
                String::from_utf8(unbase64(b64)).expect("whole characters in each word")
            })
            .collect();
        assert_eq!(decoded, format!("ax: {name} DAG run 7 failed"));
    }

    fn unbase64(text: &str) -> Vec<u8> {
        let value = |c: u8| match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            _ => 63,
        };
        let mut out = Vec::new();
        for chunk in text.as_bytes().chunks(4) {
            let n = chunk
                .iter()
                .take_while(|c| **c != b'=')
                .enumerate()
                .fold(0u32, |n, (i, c)| n | u32::from(value(*c)) << (18 - 6 * i));
            let len = chunk.iter().filter(|c| **c != b'=').count() - 1;
            out.extend((0..len).map(|i| (n >> (16 - 8 * i)) as u8));
        }
        out
    }

    #[test]
    fn a_failed_job_shows_its_last_lines_and_what_was_cut() {
        let dir = tempfile::tempdir().unwrap();
        let lines: String = (1..=200).map(|i| format!("line {i}\n")).collect();
        std::fs::write(log_path(dir.path(), RunId(5), 2), &lines).unwrap();
        let m = compose(
            &report(
                "d",
                vec![job(5, RunState::Failed, 2), job(6, RunState::Success, 1)],
            ),
            &["a@b".into()],
            dir.path(),
            false,
        );
        let text = String::from_utf8(m).unwrap();
        assert!(
            text.contains("run 5 job job5: failed, exit code 3, ran 1.5s"),
            "{text}"
        );
        assert!(
            text.contains("line 151\n") && text.contains("line 200\n"),
            "{text}"
        );
        assert!(!text.contains("line 150\n"), "{text}");
        let kept: usize = (151..=200).map(|i| format!("line {i}\n").len()).sum();
        assert!(
            text.contains(&format!("(… {} bytes cut)", lines.len() - kept)),
            "{text}"
        );
        assert!(
            !text.contains("--- job job6"),
            "a job that succeeded shows no log"
        );
    }

    #[test]
    fn a_log_another_node_holds_is_named_not_missed() {
        let dir = tempfile::tempdir().unwrap();
        let mut elsewhere = job(8, RunState::Failed, 1);
        elsewhere.node = Some("db-2".into());
        let text = String::from_utf8(compose(
            &report("d", vec![elsewhere, job(9, RunState::Failed, 1)]),
            &["a@b".into()],
            dir.path(),
            false,
        ))
        .unwrap();
        assert!(
            text.contains("(the attempt ran on node db-2: `ax logs 8` reads its log)"),
            "{text}"
        );
        assert!(
            text.contains("(run 9), ") && text.ends_with("(no output)\n"),
            "{text}"
        );
    }

    #[test]
    fn long_lines_are_cut_by_bytes_and_the_whole_mail_by_its_limit() {
        let dir = tempfile::tempdir().unwrap();
        let mut jobs = Vec::new();
        for run in 1..=20 {
            std::fs::write(log_path(dir.path(), RunId(run), 1), "é".repeat(20_000)).unwrap();
            jobs.push(job(run, RunState::Failed, 1));
        }
        let m = compose(&report("d", jobs), &["a@b".into()], dir.path(), false);
        assert!(m.len() <= MAX_MESSAGE, "{}", m.len());
        let text = String::from_utf8(m).expect("cut at a character boundary");
        assert!(
            text.contains("(… 31808 bytes cut)"),
            "40000 bytes, 8 KiB kept"
        );
        assert!(
            text.contains("bytes cut: the mail's limit)"),
            "{}",
            &text[text.len() - 200..]
        );
    }
}
