//! `axd`: the ax daemon.

use std::path::PathBuf;
use std::process::ExitCode;

use ax_daemon::config::Config;
use ax_shared::visible::visible;
use clap::Parser;

#[derive(Parser, Debug)]
#[command(name = "axd", version, about = "The ax job scheduler daemon")]
struct Args {
    /// Path of axd.toml (default: XDG places for a user-mode daemon).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Run as the keeper of the jobs (started by axd itself, never by
    /// hand): serves the keepers' folder DIR.
    #[arg(long, value_name = "DIR", hide = true)]
    keeper: Option<PathBuf>,
}

fn main() -> ExitCode {
    // Before any thread exists, so that all inherit it (see the function).
    ax_daemon::execution::reaper::block_sigchld();
    // SAFETY: no other thread exists yet. What systemd told axd stays
    // axd's: no job inherits it (docs/users.md, "What a job gets").
    unsafe { ax_daemon::runtime::systemd::take_from_env() };
    // Not dumpable: a job running as axd's own user cannot attach to axd
    // or read its memory or /proc/<pid>/environ (a job's process is
    // dumpable again after its execve).
    // SAFETY: prctl with integer arguments only.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    let args = Args::parse();
    if let Some(dir) = args.keeper {
        init_tracing();
        return ax_daemon::keeper::serve::main(dir);
    }
    init_tracing();
    let cfg = match &args.config {
        Some(path) => match Config::load(path) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("axd: {}", visible(&e.to_string()));
                return ExitCode::from(2);
            }
        },
        None => Config::defaults(),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("axd: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Start-up that blocks (the store, the restore) runs before the
    // runtime does, so no store call of it waits inside the runtime.
    let ended = ax_daemon::runtime::startup::prepare(cfg, args.config)
        .and_then(|prepared| runtime.block_on(ax_daemon::runtime::daemon::run(prepared)));
    // A thread that a bounded shutdown left behind (a store call that
    // hangs) must not hold the exit: dropping the runtime would wait for it.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    match ended {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("axd: {}", visible(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}

/// axd's log lines on stderr.
fn init_tracing() {
    // Plain lines (no colour) under systemd/journald or when not a terminal.
    let plain = std::env::var_os("JOURNAL_STREAM").is_some()
        || !std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_ansi(!plain)
        .fmt_fields(ax_daemon::logs::format::fields())
        .with_writer(std::io::stderr)
        .init();
}
