//! The requests of users' own DAGs (docs/users.md, "User DAGs"):
//! `apply_dags`, `export_dag`, `remove_dag`. A user acts on their own
//! DAGs; owners and admins on anyone's (`user`); viewers and jobs on none.
//! An apply checks every file before it stores any: all are stored and
//! loaded, or none.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use ax_protocol::api::{ApplyAnswer, DagText, Done, Role};
use ax_protocol::request::{ApplyDags, ExportDag, RemoveDag};
use ax_protocol::{RpcError, codes};
use ax_shared::jobfile::{DagFile, FileError, ValidateOptions};
use ax_shared::users::{user_dag_name, user_dag_owner};

use super::Scheduler;
use super::handlers::{bad, dag_event};
use crate::bus::Peer;
use crate::jobs_folder::scan::{DagEntry, after_only};
use crate::user_dags::files::{UserFiles, valid_short_name};
use crate::user_dags::{after_errors, check, entry_of, load_stored};
use ax_engine::{Effect, Millis};

fn forbidden(message: String) -> RpcError {
    RpcError::new(codes::FORBIDDEN, message)
}

/// The largest file of a user's DAG (a DAG of a few hundred jobs).
pub(crate) const MAX_USER_DAG_BYTES: usize = 64 << 10;
/// The most DAGs one user keeps.
pub(crate) const MAX_USER_DAGS: usize = 100;

/// Whose DAGs a request acts on: the caller's, or with `user` another's
/// (owners and admins only).
fn whose(peer: &Peer, user: Option<&str>, method: &str) -> Result<String, RpcError> {
    // The name becomes a folder under `state_dir/users/`: only an account
    // name (no `/`, no `..`) may.
    if let Some(user) = user
        && (!ax_shared::jobfile::valid_account_name(user) || user.starts_with('.'))
    {
        return Err(bad(format!("{method}: {user:?} is not a user name")));
    }
    match (peer.role, user) {
        (Role::Owner | Role::Admin, Some(user)) => Ok(user.to_string()),
        (Role::Owner | Role::Admin | Role::User, None) => Ok(peer.user.to_string()),
        (Role::User, Some(user)) if user == &*peer.user => Ok(user.to_string()),
        (Role::User, Some(user)) => Err(forbidden(format!(
            "{method}: {} may only act on their own DAGs, not {user}'s",
            peer.user
        ))),
        (Role::Viewer | Role::Job, _) => Err(forbidden(format!(
            "{method}: only users allowed by [users], admins and owners keep user DAGs"
        ))),
    }
}

/// A DAG named by its short name (`standup`) or its full name
/// (`@alice/standup`), as `(user, short name)`.
fn named(
    peer: &Peer,
    name: &str,
    user: Option<&str>,
    method: &str,
) -> Result<(String, String), RpcError> {
    let (user, short) = match user_dag_owner(name) {
        Some(owner) => {
            if user.is_some_and(|u| u != owner) {
                return Err(bad(format!(
                    "{method}: {name:?} is a DAG of {owner}, not of {}",
                    user.unwrap_or_default()
                )));
            }
            let short = &name[owner.len() + 2..];
            (whose(peer, Some(owner), method)?, short.to_string())
        }
        None if name.starts_with('@') => {
            return Err(bad(format!("{method}: {name:?} is not a user DAG's name")));
        }
        None => (whose(peer, user, method)?, name.to_string()),
    };
    valid_short_name(&short).map_err(|e| bad(format!("{method}: {e}")))?;
    Ok((user, short))
}

fn cannot_store(e: std::io::Error) -> RpcError {
    RpcError::new(
        codes::STORE_ERROR,
        format!("cannot store the user DAGs under the state dir: {e}"),
    )
}

impl Scheduler {
    fn user_files(&self) -> UserFiles {
        UserFiles::new(&self.cfg.state_dir)
    }

    fn validate_options(&self) -> ValidateOptions {
        ValidateOptions {
            pools: Some(self.pool_names()),
        }
    }

    /// Every stored user DAG, read and checked again. A cluster keeps
    /// none (`apply_dags` refuses them there): files left from a single
    /// node's life are not loaded on one node of many.
    pub(super) fn read_user_dags(&self) -> BTreeMap<String, DagEntry> {
        if self.nodes.is_some() {
            return BTreeMap::new();
        }
        let (dags, errors) = load_stored(
            &self.user_files(),
            &self.cfg.users_allow,
            &self.validate_options(),
        );
        for e in errors {
            tracing::warn!("{e}");
        }
        dags
    }

    /// A reload reads the users' DAGs again with the jobs folder.
    pub(super) fn reload_user_dags(&mut self, now: Millis, actor: &Arc<str>) -> Vec<Effect> {
        let users = self.read_user_dags();
        self.registry
            .reload_users(&mut self.engine, &self.cfg, now, actor, users)
    }

    /// A user's DAGs are validated on the scheduler thread and kept on
    /// axd's disk: [`MAX_USER_DAG_BYTES`] per file and [`MAX_USER_DAGS`]
    /// per user keep one user from holding up everyone's scheduling.
    fn within_user_limits(&self, user: &str, p: &ApplyDags) -> Result<(), RpcError> {
        if let Some(f) = p.files.iter().find(|f| f.text.len() > MAX_USER_DAG_BYTES) {
            return Err(bad(format!(
                "apply_dags: {} is {} bytes; a user's DAG file is at most {MAX_USER_DAG_BYTES} bytes",
                f.file,
                f.text.len()
            )));
        }
        let stored: HashSet<String> = self
            .user_files()
            .list()
            .map_err(cannot_store)?
            .into_iter()
            .filter(|s| s.user == user)
            .map(|s| s.name)
            .collect();
        let new = p.files.iter().filter(|f| !stored.contains(&f.name)).count();
        if stored.len() + new > MAX_USER_DAGS {
            return Err(bad(format!(
                "apply_dags: {user} keeps {} DAGs and would keep {}; a user keeps at most {MAX_USER_DAGS}",
                stored.len(),
                stored.len() + new
            )));
        }
        Ok(())
    }

    pub(super) fn apply_dags(
        &mut self,
        now: Millis,
        peer: &Peer,
        p: ApplyDags,
        effects: &mut Vec<Effect>,
    ) -> Result<ApplyAnswer, RpcError> {
        if self.nodes.is_some() {
            return Err(RpcError::new(
                codes::INVALID_STATE,
                "apply_dags: user DAGs are kept by one axd in its state dir, which a cluster does not share; in a cluster, put the DAG in the jobs folder of the nodes with `user = \"NAME\"` (docs/users.md, \"User DAGs\")",
            ));
        }
        let user = whose(peer, p.user.as_deref(), "apply_dags")?;
        if p.files.is_empty() {
            return Err(bad("apply_dags: give at least one file"));
        }
        self.within_user_limits(&user, &p)?;
        let opts = self.validate_options();
        let mut errors: Vec<FileError> = Vec::new();
        let mut parsed: Vec<(String, DagFile, &str)> = Vec::new();
        let mut seen = HashSet::new();
        for f in &p.files {
            let whole = |message: String| FileError {
                file: f.file.clone(),
                line: None,
                column: None,
                message,
            };
            if let Err(e) = valid_short_name(&f.name) {
                errors.push(whole(e));
                continue;
            }
            if !seen.insert(f.name.as_str()) {
                errors.push(whole(format!("{:?} is given twice", f.name)));
                continue;
            }
            match check(
                &user,
                &f.name,
                &f.file,
                &f.text,
                &self.cfg.users_allow,
                &opts,
            ) {
                Ok(d) => parsed.push((f.name.clone(), d, f.text.as_str())),
                Err(e) => errors.extend(e),
            }
        }
        // `after` over the user's DAGs as they will be: those in force
        // that this apply does not replace, and the new ones.
        let new_names: HashSet<String> =
            parsed.iter().map(|(_, d, _)| d.spec.name.clone()).collect();
        let kept: Vec<DagFile> = self
            .registry
            .users_of(&user)
            .filter(|(n, _)| !new_names.contains(*n))
            .filter_map(|(_, e)| e.spec.as_deref().map(after_only))
            .collect();
        let all: Vec<&DagFile> = parsed.iter().map(|(_, d, _)| d).chain(&kept).collect();
        for (name, e) in after_errors(&all) {
            if new_names.contains(&name) {
                errors.push(e);
            }
        }
        if !errors.is_empty() {
            return Ok(ApplyAnswer {
                applied: Vec::new(),
                errors,
            });
        }
        let files = self.user_files();
        let writes: Vec<(&str, &str, &str)> = parsed
            .iter()
            .map(|(short, _, text)| (user.as_str(), short.as_str(), *text))
            .collect();
        files.write_all(&writes).map_err(cannot_store)?;
        let verb = if p.edit { "edited" } else { "applied" };
        let mut applied = Vec::new();
        for (short, d, _) in parsed {
            let mut spec = d.spec;
            spec.file = files.path(&user, &short).display().to_string();
            let name = spec.name.clone();
            effects.extend(self.registry.put_user(
                &mut self.engine,
                &self.cfg,
                now,
                entry_of(spec),
            ));
            effects.push(dag_event(
                now,
                format!("DAG {name} {verb} by {}", peer.actor),
                &peer.actor,
            ));
            applied.push(name);
        }
        Ok(ApplyAnswer {
            applied,
            errors: Vec::new(),
        })
    }

    pub(super) fn export_dag(&mut self, peer: &Peer, p: ExportDag) -> Result<DagText, RpcError> {
        let (user, short) = named(peer, &p.name, p.user.as_deref(), "export_dag")?;
        let name = user_dag_name(&user, &short);
        let text = self
            .user_files()
            .read(&user, &short)
            .map_err(|e| RpcError::new(codes::INTERNAL, format!("cannot read {name}: {e}")))?
            .ok_or_else(|| RpcError::new(codes::NOT_FOUND, format!("DAG {name:?} not found")))?;
        Ok(DagText { name, text })
    }

    pub(super) fn remove_dag(
        &mut self,
        now: Millis,
        peer: &Peer,
        p: RemoveDag,
        effects: &mut Vec<Effect>,
    ) -> Result<Done, RpcError> {
        let (user, short) = named(peer, &p.name, p.user.as_deref(), "remove_dag")?;
        let name = user_dag_name(&user, &short);
        if !self
            .user_files()
            .remove(&user, &short)
            .map_err(cannot_store)?
        {
            return Err(RpcError::new(
                codes::NOT_FOUND,
                format!("DAG {name:?} not found"),
            ));
        }
        let actor = &peer.actor;
        effects.extend(
            self.registry
                .remove_user(&mut self.engine, now, actor, &name),
        );
        effects.push(dag_event(
            now,
            format!("DAG {name} removed by {actor}"),
            actor,
        ));
        Ok(Done::OK)
    }
}
