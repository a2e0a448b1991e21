//! Helpers the CLI tests share: running `ax` without a daemon, waiting on
//! a child `ax` with a limit and reading its output as text.

use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

/// Waits for a child with a limit, so a follower that never ends fails
/// the test instead of hanging it.
pub(crate) fn wait_output(mut child: Child, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!("still running after {limit:?}: {out:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// `ax args` with `env` set, for the commands that need no daemon: its
/// exit code (-1 when a signal ended it), stdout and stderr.
pub(crate) fn ax_offline(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ax"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    parts(&out)
}

/// A finished `ax`'s exit code (-1 when a signal ended it), stdout and
/// stderr.
pub(crate) fn parts(out: &Output) -> (i32, String, String) {
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}
