//! Preparing an attempt before its keeper starts it: whom it runs as, its
//! environment (docs/users.md, "What a job gets"), its command, its output
//! pipe and log, and the secret values its output must not show.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ax_engine::SpawnOrder;
use ax_shared::Exec;

use super::ExecConfig;
use super::output::{JobLog, LazyLog};
use crate::accounts::{Account, group_gid};
use crate::execution::spawn::Credentials;
use crate::logs::paths::log_path;

/// A job's umask when it sets none (as cron).
const DEFAULT_UMASK: u32 = 0o022;

/// PATH for jobs when `pass_env` does not keep axd's (as cron's), with
/// axd's own folder appended so `ax heartbeat` works inside jobs.
const DEFAULT_JOB_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What every job starts from (docs/users.md, "What a job gets"), built
/// at start and at each config reload, shared by every spawn: the
/// variables converted once, and axd's own account read once (a job that
/// names no `user` runs as it).
pub struct JobEnv {
    /// PATH, the `pass_env` variables, then `[job_env]`.
    base: Arc<crate::execution::spawn::BaseEnv>,
    /// `shell` of axd.toml.
    shell: PathBuf,
    /// axd's own user; `None` when its uid has no password entry.
    own: Option<Account>,
}

/// Without the variables' values: `[job_env]` may hold secrets.
impl std::fmt::Debug for JobEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobEnv")
            .field("shell", &self.shell)
            .field("own", &self.own.as_ref().map(|a| &a.name))
            .finish_non_exhaustive()
    }
}

impl JobEnv {
    pub fn from_config(cfg: &crate::config::Config) -> JobEnv {
        let mut vars: Vec<(std::ffi::OsString, std::ffi::OsString)> = Vec::new();
        let mut parts: Vec<PathBuf> = std::env::split_paths(DEFAULT_JOB_PATH).collect();
        if let Ok(exe) = std::env::current_exe()
            && let Some(dir) = exe.parent()
            && !parts.iter().any(|p| p == dir)
        {
            parts.push(dir.to_path_buf());
        }
        if let Ok(joined) = std::env::join_paths(parts) {
            vars.push(("PATH".into(), joined));
        }
        for name in &cfg.pass_env {
            if let Some(value) = std::env::var_os(name) {
                vars.push((name.into(), value));
            }
        }
        for (name, value) in &cfg.job_env {
            vars.push((name.into(), value.into()));
        }
        JobEnv {
            base: Arc::new(crate::execution::spawn::BaseEnv::new(vars)),
            shell: cfg.shell.clone(),
            own: Account::by_uid(nix::unistd::geteuid().as_raw()).ok(),
        }
    }
}

/// Who an attempt runs as: its account (as the password database has it
/// now), and the credentials to switch to (`None`: axd's own, unchanged).
/// With `member_only` (a user's own DAG) a `group` must still be one the
/// user is in, as it had to be when the DAG was applied.
fn run_as(
    job: &ax_shared::JobSpec,
    own: Option<&Account>,
    member_only: bool,
) -> Result<(Option<Account>, Option<Credentials>), String> {
    let me = nix::unistd::geteuid().as_raw();
    let account = match &job.user {
        // Resolved at each start: a removed user fails the attempt, it
        // never runs as axd instead.
        Some(name) => Some(Account::by_name(name).map_err(|e| {
            format!("cannot run as user {name:?}: {e} (the user was removed or renamed)")
        })?),
        None => own.cloned(),
    };
    if job.user.is_none() && job.group.is_none() {
        return Ok((account, None));
    }
    let (name, uid, primary) = match &account {
        Some(a) => (a.name.clone(), a.uid, a.gid),
        None => (format!("uid {me}"), me, nix::unistd::getegid().as_raw()),
    };
    let gid = match &job.group {
        Some(g) => group_gid(g)
            .map_err(|e| format!("cannot run as user {name:?} with group {g:?}: {e}"))?,
        None => primary,
    };
    if me != 0 && uid == me && gid == nix::unistd::getegid().as_raw() {
        // A daemon that is not root running its own jobs changes nothing.
        return Ok((account, None));
    }
    let groups = match &account {
        Some(a) => a
            .groups_with(gid)
            .map_err(|e| format!("cannot run as user {name:?}: {e}"))?,
        None => vec![gid],
    };
    if member_only
        && gid != primary
        && let Some(a) = &account
        && !a.groups_with(primary).is_ok_and(|g| g.contains(&gid))
    {
        return Err(format!(
            "cannot run as user {name:?} with group {:?}: {name} is no longer a member of it",
            job.group.as_deref().unwrap_or_default()
        ));
    }
    let credentials = Credentials {
        user: name,
        uid,
        gid,
        groups,
    };
    Ok((account, Some(credentials)))
}

/// Where a job runs without `cwd`: its user's home, else `/` (as cron).
fn default_cwd(account: Option<&Account>) -> PathBuf {
    account
        .map(|a| a.home.clone())
        .filter(|home| home.is_dir())
        .unwrap_or_else(|| PathBuf::from("/"))
}

/// Why an attempt's command could not be built.
pub(super) enum Prepared {
    /// For lack of descriptors (or memory): it may work later.
    Short(String),
    Failed(String),
}

/// Builds the command for one attempt and opens its log.
pub(super) fn prepare(
    cfg: &ExecConfig,
    order: &SpawnOrder,
) -> Result<(crate::execution::spawn::Plan, OwnedFd, JobLog, Vec<String>), Prepared> {
    let job = order.job();
    let job_env = cfg
        .job_env
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let user_dag = ax_shared::users::user_dag_owner(&order.dag).is_some();
    let (account, credentials) =
        run_as(job, job_env.own.as_ref(), user_dag).map_err(Prepared::Failed)?;
    let (program, args): (PathBuf, Vec<std::ffi::OsString>) = match &job.exec {
        Exec::Shell(s) => (
            job.shell.clone().unwrap_or_else(|| job_env.shell.clone()),
            vec!["-c".into(), s.into()],
        ),
        Exec::Argv(argv) => (
            argv[0].clone().into(),
            argv[1..].iter().map(Into::into).collect(),
        ),
    };
    // Read at each start, not at load: a rotated secret needs no reload.
    let file_env = match &job.env_file {
        Some(path) => {
            let run_as_uid = credentials
                .as_ref()
                .map_or_else(|| nix::unistd::geteuid().as_raw(), |c| c.uid);
            crate::execution::secrets::read_env_file(path, run_as_uid, !user_dag)
                .map_err(|e| Prepared::Failed(e.to_string()))?
        }
        None => Vec::new(),
    };
    let secrets = secret_values(job, &file_env, &job_env.base);
    let redactor =
        crate::execution::secrets::OutputRedactor::new(secrets.iter().map(String::as_str));
    // The user's HOME, USER, LOGNAME and SHELL (under everything else),
    // the base (PATH, `pass_env`, `[job_env]`), then the AX_* variables
    // (which the base cannot set: axd.toml may not name them), then the
    // env file's, then the job's `env`, then the cookie; a later value of
    // a name replaces an earlier one (`spawn` keeps the last).
    let defaults: Vec<(std::ffi::OsString, std::ffi::OsString)> = match &account {
        Some(a) => vec![
            ("HOME".into(), a.home.clone().into()),
            ("USER".into(), a.name.clone().into()),
            ("LOGNAME".into(), a.name.clone().into()),
            ("SHELL".into(), a.shell.clone().into()),
        ],
        None => Vec::new(),
    };
    let mut env: Vec<(std::ffi::OsString, std::ffi::OsString)> =
        Vec::with_capacity(7 + file_env.len() + job.env.len());
    let mut set = |k: std::ffi::OsString, v: std::ffi::OsString| env.push((k, v));
    for (k, v) in [
        ("AX_RUN_ID", order.run.0.to_string()),
        ("AX_DAG", order.dag.to_string()),
        ("AX_JOB", job.id.clone()),
        ("AX_ATTEMPT", order.attempt.to_string()),
        ("AX_SOCKET", cfg.socket.display().to_string()),
        ("AX_SLOT", order.slot.to_string()),
    ] {
        set(k.into(), v.into());
    }
    // The job's own env comes after: it may set AX_* itself (hooks pass
    // the finished DAG's name as AX_DAG this way), and what its file says
    // replaces what the shared env file says.
    for (k, v) in file_env.iter().map(|(k, v)| (k, v)).chain(&job.env) {
        set(k.into(), v.into());
    }
    // Last, so the job cannot replace it: how a kill finds the attempt's
    // processes that left its process group (`reaper`).
    set(
        crate::execution::reaper::COOKIE_VAR.into(),
        crate::execution::reaper::cookie(order.run.0, order.attempt).into(),
    );
    let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| {
        let why = format!("pipe: {e}");
        match e {
            nix::errno::Errno::EMFILE | nix::errno::Errno::ENFILE => Prepared::Short(why),
            _ => Prepared::Failed(why),
        }
    })?;
    // Non-blocking for every reader of the read end (axd's, and the
    // keeper's copy, which shares the open file): a read never blocks a
    // thread that serves other jobs. The write end, the job's, stays
    // blocking.
    if let Err(e) = nix::fcntl::fcntl(
        &read_end,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    ) {
        return Err(Prepared::Failed(format!("pipe: {e}")));
    }
    let plan = crate::execution::spawn::Plan {
        program,
        args,
        defaults,
        base_env: job_env.base.clone(),
        env,
        cwd: Some(
            job.cwd
                .clone()
                .unwrap_or_else(|| default_cwd(account.as_ref())),
        ),
        credentials,
        umask: job.umask.unwrap_or(DEFAULT_UMASK) as libc::mode_t,
        output: write_end,
        close_fds: crate::execution::spawn::CloseFds::Range,
    };
    let path = log_path(&cfg.log_dir, order.run, order.attempt);
    set_aside_stale_log(&path);
    let log = JobLog {
        file: LazyLog {
            path,
            file: None,
            resumed: false,
        },
        redactor,
    };
    Ok((plan, read_end, log, secrets))
}

/// A log file already at a new attempt's path belongs to no attempt of
/// this store (logs kept beside a store that was replaced): it is renamed
/// to `<run>.<attempt>.log.stale-<ms>`, so the new attempt neither shows
/// nor extends it, and nothing of it is lost.
fn set_aside_stale_log(path: &Path) {
    if std::fs::symlink_metadata(path).is_err() {
        return;
    }
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let aside = path.with_extension(format!("log.stale-{ms}"));
    match std::fs::rename(path, &aside) {
        Ok(()) => tracing::warn!(
            "{} existed before its attempt started; moved to {}",
            path.display(),
            aside.display()
        ),
        Err(e) => tracing::error!(
            "{} existed before its attempt started and cannot be moved aside: {e}",
            path.display()
        ),
    }
}

/// The values this attempt must not show: every value of its env file,
/// and the value each `secret_env` name takes in the job's environment
/// (the job's `env`, the env file, else the base: `pass_env` and
/// `[job_env]`).
fn secret_values(
    job: &ax_shared::JobSpec,
    file_env: &[(String, String)],
    base: &crate::execution::spawn::BaseEnv,
) -> Vec<String> {
    if job.secret_env.is_empty() && file_env.is_empty() {
        return Vec::new();
    }
    let named = job.secret_env.iter().filter_map(|name| {
        job.env
            .get(name)
            .or_else(|| {
                file_env
                    .iter()
                    .rev()
                    .find(|(k, _)| k == name)
                    .map(|(_, v)| v)
            })
            .cloned()
            .or_else(|| base.get(name))
    });
    file_env
        .iter()
        .map(|(_, v)| v.clone())
        .chain(named)
        .collect()
}
