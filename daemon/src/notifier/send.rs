//! Running `mail_command` once: the message on its stdin, its exit and
//! stderr read back, killed (its whole process group) when it runs past
//! the limit.
//!
//! axd is its jobs' child subreaper and its orphan reaper takes the exit
//! status of any child that is not a registered leader: the mail command
//! is registered as one from before it can exit (the reaper's gate is held
//! across the spawn) until it is reaped here.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::FailureKind;
use crate::execution::reaper;

/// Bytes of the command's stderr kept for the event that says it failed.
const STDERR_KEPT: usize = 300;

/// Why a send failed, in words for the DAG run's events.
#[derive(Debug)]
pub(crate) struct SendError {
    pub kind: FailureKind,
    pub message: String,
}

/// Runs `argv` with `message` on its stdin; `Ok` once it exited 0 within
/// `limit`.
pub(crate) async fn send(
    argv: &[String],
    message: &[u8],
    limit: Duration,
) -> Result<(), SendError> {
    let program = &argv[0];
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(&argv[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        // Its own group: a sendmail that forks is killed with its children.
        .process_group(0)
        .kill_on_drop(true);
    for (name, _) in std::env::vars_os() {
        if crate::config::is_daemon_only_var(&name.to_string_lossy()) {
            cmd.env_remove(name);
        }
    }
    let mut child = {
        let _gate = reaper::spawn_gate();
        let child = cmd.spawn().map_err(|e| SendError {
            kind: FailureKind::Start,
            message: format!("cannot start {program}: {e}"),
        })?;
        if let Some(pid) = child.id() {
            reaper::register_leader(pid as i32);
        }
        child
    };
    let pid = child.id().unwrap_or(0) as i32;
    let stdin = child.stdin.take();
    let stderr = child.stderr.take();
    let run = async {
        let mut err = Vec::new();
        let status = exchange(&mut child, stdin, stderr, message, &mut err).await;
        (err, status)
    };
    let outcome = tokio::time::timeout(limit, run).await;
    let result = match outcome {
        Err(_) => {
            // SAFETY: a plain kill(2) of the process group our child led.
            // The kernel reuses no pid while a live process is in the group
            // it names, so while the command or a child it left (holding
            // the pipe) runs, the group is ours; once all are gone the call
            // finds none (ESRCH), unless the pid was given to a new group
            // leader meanwhile, a window this accepts.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            let _ = child.wait().await;
            Err(SendError {
                kind: FailureKind::Timeout,
                message: format!(
                    "{program} did not finish within {} and was killed",
                    ax_shared::duration::format_duration(limit)
                ),
            })
        }
        Ok((_, Err(e))) => Err(SendError {
            kind: FailureKind::Exit,
            message: format!("waiting for {program}: {e}"),
        }),
        Ok((err, Ok(status))) if !status.success() => {
            use std::os::unix::process::ExitStatusExt;
            let how = match (status.code(), status.signal()) {
                (Some(code), _) => format!("exited with code {code}"),
                (None, Some(sig)) => format!("was killed by signal {sig}"),
                (None, None) => "failed".to_string(),
            };
            Err(SendError {
                kind: FailureKind::Exit,
                message: format!("{program} {how}{}", stderr_note(&err)),
            })
        }
        Ok(_) => Ok(()),
    };
    reaper::forget_leader(pid);
    result
}

/// How long stderr is still read once the command exited: a child it
/// left behind may hold the pipe open.
const STDERR_AFTER_EXIT: Duration = Duration::from_millis(200);

/// Writes `message` to the command's stdin and reads its stderr into
/// `err` until it exits; its exit status.
async fn exchange(
    child: &mut tokio::process::Child,
    stdin: Option<tokio::process::ChildStdin>,
    stderr: Option<tokio::process::ChildStderr>,
    message: &[u8],
    err: &mut Vec<u8>,
) -> std::io::Result<std::process::ExitStatus> {
    let write = async {
        if let Some(mut s) = stdin {
            // A command that exits without reading closes the pipe: its
            // exit status says what went wrong.
            let _ = s.write_all(message).await;
        }
    };
    let read = async {
        if let Some(s) = stderr {
            let _ = s.take(64 * 1024).read_to_end(err).await;
        }
    };
    tokio::pin!(read);
    let done = async { tokio::join!(write, child.wait()).1 };
    tokio::pin!(done);
    let mut read_done = false;
    let status = loop {
        tokio::select! {
            _ = &mut read, if !read_done => read_done = true,
            status = &mut done => break status,
        }
    };
    if !read_done {
        let _ = tokio::time::timeout(STDERR_AFTER_EXIT, &mut read).await;
    }
    status
}

/// `: <its stderr>`, on one line and cut to `STDERR_KEPT` bytes; nothing
/// when it wrote none.
fn stderr_note(err: &[u8]) -> String {
    let text = String::from_utf8_lossy(err);
    let one_line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.is_empty() {
        return String::new();
    }
    let mut end = one_line.len().min(STDERR_KEPT);
    while !one_line.is_char_boundary(end) {
        end -= 1;
    }
    let more = if end < one_line.len() { " …" } else { "" };
    format!(": {}{more}", &one_line[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(words: &[&str]) -> Vec<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[tokio::test]
    async fn the_message_reaches_stdin_and_failures_say_why() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("got");
        let script = format!("cat > {}", out.display());
        send(
            &argv(&["/bin/sh", "-c", &script]),
            b"To: a@b\r\n\r\nhi\n",
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"To: a@b\r\n\r\nhi\n");

        let e = send(
            &argv(&["/bin/sh", "-c", "echo 'no  route\nto host' >&2; exit 75"]),
            b"x",
            Duration::from_secs(10),
        )
        .await
        .unwrap_err();
        assert!(matches!(e.kind, FailureKind::Exit));
        assert_eq!(e.message, "/bin/sh exited with code 75: no route to host");

        let e = send(
            &argv(&["/nonexistent/sendmail"]),
            b"x",
            Duration::from_secs(10),
        )
        .await
        .unwrap_err();
        assert!(matches!(e.kind, FailureKind::Start), "{e:?}");
        assert!(
            e.message
                .starts_with("cannot start /nonexistent/sendmail: "),
            "{e:?}"
        );
    }

    #[tokio::test]
    async fn a_hung_command_is_killed_with_its_children() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("child");
        let script = format!("sleep 30 & echo $! > {}; sleep 30", pid_file.display());
        let began = std::time::Instant::now();
        let e = send(
            &argv(&["/bin/sh", "-c", &script]),
            b"x",
            Duration::from_millis(500),
        )
        .await
        .unwrap_err();
        assert!(matches!(e.kind, FailureKind::Timeout), "{e:?}");
        assert_eq!(
            e.message,
            "/bin/sh did not finish within 500ms and was killed"
        );
        assert!(began.elapsed() < Duration::from_secs(10));
        // The background child went with it (dead, or a zombie left to
        // whoever reaps orphans).
        let child = std::fs::read_to_string(&pid_file).unwrap();
        let stat = format!("/proc/{}/stat", child.trim());
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let gone = std::fs::read_to_string(&stat)
                .map_or(true, |s| s[s.rfind(')').unwrap() + 2..].starts_with('Z'));
            if gone {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{child} still runs");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
