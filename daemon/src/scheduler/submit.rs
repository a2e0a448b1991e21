//! `submit`: an ad-hoc job or a job file's DAG, checked whole before the
//! engine sees it.

use std::sync::Arc;
use std::time::Duration;

use ax_protocol::api::SubmitResult;
use ax_protocol::request::Submit as SubmitParams;
use ax_protocol::{RpcError, codes};
use ax_shared::jobfile::{FileError, ValidateOptions, parse_dag};
use ax_shared::rules::{self, RuleError};
use ax_shared::{DagSpec, Exec, JobSpec, Timeout};

use super::Scheduler;
use super::handlers::{bad, store_err};
use crate::bus::Peer;
use ax_engine::{Effect, Millis, RunId, Submit, Unique};

fn duration(key: &str, text: Option<&str>) -> Result<Option<Duration>, RpcError> {
    text.map(|s| ax_shared::duration::parse_duration(s).map_err(|e| bad(format!("{key}: {e}"))))
        .transpose()
}

impl Scheduler {
    pub(super) fn submit(
        &mut self,
        now: Millis,
        peer: &Peer,
        p: SubmitParams,
        effects: &mut Vec<Effect>,
    ) -> Result<SubmitResult, RpcError> {
        // The same rules as for a job file's name: a name reaches logs,
        // listings and metrics.
        if let Some(name) = &p.name {
            ax_shared::jobfile::check_dag_name(name)
                .map_err(|e| bad(format!("submit: `name`: {e}")))?;
        }
        let after: Vec<RunId> = p.after.iter().flatten().map(|a| RunId(*a)).collect();
        for a in &after {
            if self.engine.run(*a).is_none() {
                match self.store.run_state(a.0).map_err(store_err)? {
                    // In a cluster only this node would see a run it does
                    // not hold end: the new DAG run would wait for ever.
                    Some(s) if !s.is_terminal() && self.claimer.is_some() => {
                        return Err(RpcError::new(
                            codes::INVALID_STATE,
                            format!(
                                "--after: run {a} is {s} on another node (or waits to be claimed): submit through the node that runs it"
                            ),
                        ));
                    }
                    Some(s) => self.engine.note_external(*a, s),
                    None => {
                        return Err(RpcError::new(
                            codes::NOT_FOUND,
                            format!("--after: run {a} not found"),
                        ));
                    }
                }
            }
        }
        let unique = match &p.unique {
            None => None,
            Some(key) => {
                let within = duration("unique_for", p.unique_for.as_deref())?
                    .map(|d| d.as_millis() as Millis);
                if let Some(existing) = self.unfinished_elsewhere(key)? {
                    return Ok(existing);
                }
                // The engine holds every unfinished DAG run with a key; a
                // finished one it let go of is found in the store.
                let stored = match within {
                    Some(_) if !self.engine.holds_unique_key(key) => {
                        self.store.newest_with_unique_key(key).map_err(store_err)?
                    }
                    _ => None,
                };
                Some(Unique {
                    key: key.clone(),
                    within,
                    stored,
                })
            }
        };
        let runs_as = runs_as(peer, p.user.as_deref())?;
        let name = dag_name(
            peer,
            p.name.as_deref().unwrap_or("adhoc"),
            runs_as.as_deref(),
        )?;
        let name = name.as_str();
        let mut spec = match &p.toml {
            Some(text) => {
                let file = p.file.as_deref().unwrap_or(name);
                let opts = ValidateOptions {
                    pools: Some(self.pool_names()),
                };
                let checked =
                    parse_dag(name, file, text, &opts).and_then(crate::accounts::accounts_known);
                match checked {
                    Ok(d) => d.spec,
                    Err(errors) => {
                        let list: Vec<String> = errors.iter().map(FileError::to_string).collect();
                        let mut e = RpcError::new(
                            codes::INVALID_PARAMS,
                            format!("invalid job file:\n{}", list.join("\n")),
                        );
                        e.data = Some(
                            serde_json::json!({"code": codes::INVALID_PARAMS, "errors": errors}),
                        );
                        return Err(e);
                    }
                }
            }
            None => DagSpec::adhoc(name, vec![self.adhoc_job(&p)?]),
        };
        if let Some(user) = &runs_as {
            for job in &mut spec.jobs {
                may_run_as(peer, user, job)?;
                job.user = Some(user.clone());
            }
        }
        if peer.uid != 0 {
            for job in &spec.jobs {
                env_file_of_caller(peer, job)?;
            }
        }
        for job in &spec.jobs {
            if let Some(name) = job
                .env
                .keys()
                .find(|k| !ax_shared::envfile::valid_env_name(k))
            {
                return Err(bad(format!(
                    "env: bad environment variable name {name:?} (empty, or with `=` or NUL)"
                )));
            }
        }
        if p.secret_env.as_ref().is_some_and(|s| !s.is_empty()) && p.toml.is_some() {
            return Err(bad(
                "secret_env: for an ad-hoc job only; a job file names its secrets itself (secret_env, env_file)",
            ));
        }
        // Held in memory, out of the spec that is stored.
        let held = take_held_secrets(&mut spec);
        let submit = Submit {
            dag: Arc::new(spec),
            trigger: format!("submit by {}", peer.actor),
            actor: peer.actor.clone(),
            unique,
            after,
        };
        let answer = self.create(now, submit, effects)?;
        if !held.is_empty() && !answer.deduplicated {
            self.held_secrets
                .insert(ax_engine::DagRunId(answer.dag_run), held);
        }
        Ok(answer)
    }

    /// In a cluster, an unfinished DAG run with the key that this engine
    /// does not hold (offered, or run by another node) deduplicates too:
    /// the store is asked. One node alone holds every unfinished one.
    fn unfinished_elsewhere(&mut self, key: &str) -> Result<Option<SubmitResult>, RpcError> {
        if self.claimer.is_none() || self.engine.holds_active_unique_key(key) {
            return Ok(None);
        }
        // Held from before the look-up until this step is durable: another
        // node's submit with the key waits, then finds what this one makes.
        self.store.hold_unique_key(key).map_err(store_err)?;
        let Some(holder) = self.store.newest_with_unique_key(key).map_err(store_err)? else {
            return Ok(None);
        };
        for r in &holder.runs {
            let state = self.store.run_state(r.0).map_err(store_err)?;
            if state.is_some_and(|s| !s.is_terminal()) {
                return Ok(Some(SubmitResult {
                    dag_run: holder.dag_run.0,
                    runs: holder.runs.iter().map(|r| r.0).collect(),
                    deduplicated: true,
                    trigger: None,
                }));
            }
        }
        Ok(None)
    }

    /// One job from `ax submit` options.
    fn adhoc_job(&self, p: &SubmitParams) -> Result<JobSpec, RpcError> {
        let exec = match (&p.command, &p.argv) {
            (Some(s), None) if !s.trim().is_empty() => Exec::Shell(s.clone()),
            (None, Some(a)) if !a.is_empty() => Exec::Argv(a.clone()),
            _ => {
                return Err(bad(
                    "give exactly one of `command` (a shell string) or `argv` (a non-empty list)",
                ));
            }
        };
        let name = p.name.as_deref().unwrap_or("adhoc");
        let id = name.rsplit('/').next().unwrap_or(name);
        if !ax_shared::jobfile::valid_id(id) {
            return Err(bad(format!("name {name:?}: use 1-64 of A-Z a-z 0-9 _ . -")));
        }
        let mut job = JobSpec::new(id, exec);
        if let Some(priority) = p.priority {
            job.priority = rules::check_priority(rule_value(priority)).map_err(refused)?;
        }
        if let Some(pool) = &p.pool {
            rules::check_pool(pool, self.cfg.pools.keys().map(String::as_str))
                .map_err(|e| bad(format!("pool: {e}")))?;
            job.pool = pool.clone();
        }
        match p.timeout.as_deref() {
            Some("none") => job.timeout = Timeout::Never,
            other => {
                if let Some(t) = duration("timeout", other)? {
                    job.timeout = Timeout::After(t);
                }
            }
        }
        job.heartbeat = duration("heartbeat", p.heartbeat.as_deref())?;
        if let Some(grace) = duration("kill_grace", p.kill_grace.as_deref())? {
            job.kill_grace = grace;
        }
        if let Some(retries) = p.retries {
            job.retries = rules::check_retries(rule_value(retries)).map_err(refused)?;
        }
        if let Some(cwd) = &p.cwd {
            job.cwd = Some(rules::check_absolute("cwd", cwd).map_err(refused)?);
        }
        job.env.extend(p.env.clone().unwrap_or_default());
        for name in p.secret_env.iter().flatten() {
            if !job.env.contains_key(name) {
                return Err(bad(format!(
                    "secret_env: {name:?} is not in `env` (give it with --env {name}=VALUE)"
                )));
            }
            if !job.held_secrets.contains(name) {
                job.held_secrets.push(name.clone());
                job.secret_env.push(name.clone());
            }
        }
        Ok(job)
    }
}

/// The values of `spec`'s held secrets, taken out of its jobs' `env`.
fn take_held_secrets(spec: &mut DagSpec) -> HeldSecrets {
    let mut held = HeldSecrets::new();
    for job in &mut spec.jobs {
        for name in &job.held_secrets {
            if let Some(value) = job.env.remove(name) {
                held.insert((job.id.clone(), name.clone()), value);
            }
        }
    }
    held
}

/// A submission of anyone but root may read only the caller's own
/// `env_file`: axd reads it as root, and a file of root's (or another
/// user's) would hand the caller what they cannot read themselves. Its
/// owner is checked again at each attempt (`execution::secrets`).
fn env_file_of_caller(peer: &Peer, job: &JobSpec) -> Result<(), RpcError> {
    use std::os::unix::fs::MetadataExt;
    let Some(path) = &job.env_file else {
        return Ok(());
    };
    let owner = std::fs::symlink_metadata(path)
        .map(|m| m.uid())
        .map_err(|e| bad(format!("env_file {}: {e}", path.display())))?;
    if owner != peer.uid {
        return Err(RpcError::new(
            codes::FORBIDDEN,
            format!(
                "env_file {}: owned by {}; a job submitted by {} may only read {}'s own env_file",
                path.display(),
                crate::accounts::user_name(owner),
                peer.user,
                peer.user
            ),
        ));
    }
    Ok(())
}

/// An ad-hoc DAG run's secret values, by (job id, variable name).
pub(super) type HeldSecrets = std::collections::BTreeMap<(String, String), String>;

/// Whom a submission's jobs run as: root's `--user` (an existing user);
/// for any other peer, the peer's own user, or `None` (axd's user) when
/// the peer is axd's own user or root without `--user`
/// (docs/users.md, "Who may do what on the socket").
fn runs_as(peer: &Peer, asked: Option<&str>) -> Result<Option<String>, RpcError> {
    if let Some(user) = asked {
        if peer.uid != 0 {
            return Err(RpcError::new(
                codes::FORBIDDEN,
                format!(
                    "submit --user: only root may run jobs as another user; {} is not root",
                    peer.user
                ),
            ));
        }
        crate::accounts::Account::by_name(user).map_err(|e| bad(format!("submit --user: {e}")))?;
        return Ok(Some(user.to_string()));
    }
    if peer.uid == 0 || peer.uid == nix::unistd::getuid().as_raw() {
        return Ok(None);
    }
    match crate::accounts::Account::by_uid(peer.uid) {
        Ok(account) => Ok(Some(account.name)),
        Err(e) => Err(RpcError::new(
            codes::FORBIDDEN,
            format!("submit: {e}: a job cannot run as it"),
        )),
    }
}

/// The DAG name of a submission: a user's goes in their namespace
/// (`@alice/NAME`); a name in a user's namespace is refused from anyone
/// else but root (who may name the namespace of the `--user` the jobs
/// run as).
fn dag_name(peer: &Peer, name: &str, runs_as: Option<&str>) -> Result<String, RpcError> {
    let owner = ax_shared::users::user_dag_owner(name);
    if peer.role == ax_protocol::api::Role::User {
        return match owner {
            Some(o) if o == &*peer.user => Ok(name.to_string()),
            None if !ax_shared::users::is_user_namespace(name) => {
                Ok(ax_shared::users::user_dag_name(&peer.user, name))
            }
            _ => Err(RpcError::new(
                codes::FORBIDDEN,
                format!(
                    "submit: `name` {name:?}: {} may only name DAGs @{}/…",
                    peer.user, peer.user
                ),
            )),
        };
    }
    if ax_shared::users::is_user_namespace(name)
        && (peer.uid != 0 || owner.is_none_or(|o| Some(o) != runs_as))
    {
        return Err(RpcError::new(
            codes::FORBIDDEN,
            format!(
                "submit: `name` {name:?}: names starting with @ are users' own; only root may use one, with --user naming that user"
            ),
        ));
    }
    Ok(name.to_string())
}

/// A job file's `user` and `group` must be what the caller may use: its
/// own user (or root's `--user`) and that user's groups.
fn may_run_as(peer: &Peer, user: &str, job: &JobSpec) -> Result<(), RpcError> {
    let refuse = |what: String| RpcError::new(codes::FORBIDDEN, format!("job {}: {what}", job.id));
    if let Some(named) = &job.user
        && named != user
    {
        return Err(refuse(format!(
            "user = {named:?}: {} may only run jobs as {user}",
            peer.user
        )));
    }
    if let Some(group) = &job.group {
        let gid = crate::accounts::group_gid(group).map_err(|e| refuse(e.to_string()))?;
        let account = crate::accounts::Account::by_name(user).map_err(|e| refuse(e.to_string()))?;
        let groups = account
            .groups_with(account.gid)
            .map_err(|e| refuse(e.to_string()))?;
        if !groups.contains(&gid) {
            return Err(refuse(format!(
                "group = {group:?}: {user} is not in group {group}"
            )));
        }
    }
    Ok(())
}

/// A number from the socket as the rules take it: any past `i64::MAX` is
/// past every rule's bound, so it is checked (and named) as `i64::MAX`.
fn rule_value(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A job field the shared rules refuse, as the `invalid_params` answer.
fn refused(e: RuleError) -> RpcError {
    bad(e.to_string())
}
