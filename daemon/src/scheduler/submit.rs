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
        let name = p.name.as_deref().unwrap_or("adhoc");
        let spec = match &p.toml {
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
        let submit = Submit {
            dag: Arc::new(spec),
            trigger: format!("submit by {}", peer.actor),
            actor: peer.actor.clone(),
            unique,
            after,
        };
        self.create(now, submit, effects)
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
        Ok(job)
    }
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
