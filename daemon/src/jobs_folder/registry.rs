//! The DAG registry: every DAG of the jobs folder (its last good version
//! and its file's current error) as the last scan left them, and the
//! definition changes the store has not yet been given. Scans are made on
//! the scanner thread (`watcher`); this side only puts their result in
//! force.

use std::collections::BTreeMap;
use std::sync::Arc;

use ax_shared::DagSpec;
use ax_shared::jobfile::FileError;

use crate::config::Config;
use crate::jobs_folder::scan::{DagEntry, Scan};
use ax_engine::{Effect, Engine, Input, Millis, TriggerMarks};

/// Which DAGs a scan hands to the engine.
pub(crate) enum Define<'a> {
    /// Only those whose file changed (reload, watcher).
    Changed,
    /// Every DAG (start-up), with the cron watermarks and boot marks the
    /// store kept.
    All { marks: &'a TriggerMarks },
}

/// Definition changes to write with the next step.
#[derive(Default)]
pub(crate) struct PendingDefs {
    pub dag_defs: Vec<Arc<DagSpec>>,
    pub removed: Vec<String>,
    pub paused: Vec<(String, bool)>,
    /// `dag_defs` is every DAG this node defines (a scan defining all):
    /// in a cluster, the node's record of loaded versions is replaced
    /// by it rather than updated.
    pub complete: bool,
}

impl PendingDefs {
    pub(crate) fn is_empty(&self) -> bool {
        self.dag_defs.is_empty()
            && self.removed.is_empty()
            && self.paused.is_empty()
            && !self.complete
    }
}

#[derive(Default)]
pub(crate) struct DagRegistry {
    dags: BTreeMap<String, DagEntry>,
    /// Users' own DAGs (`user_dags`), part of `dags` too: a scan of the
    /// jobs folder replaces the folder's DAGs and keeps these.
    users: BTreeMap<String, DagEntry>,
    /// Folders the last scan could not read.
    folder_errors: Vec<FileError>,
    /// Files and folders the last scan refused for their `@` name.
    reserved: Vec<FileError>,
    pending: PendingDefs,
}

impl DagRegistry {
    /// Puts a scan in force: changed DAGs (or all, per `define`) are
    /// defined in the engine; those whose file is deleted, or no longer
    /// trusted (a DAG without a version), are removed from it.
    pub(crate) fn apply(
        &mut self,
        engine: &mut Engine,
        cfg: &Config,
        now: Millis,
        actor: &Arc<str>,
        scan: Scan,
        define: Define<'_>,
    ) -> Vec<Effect> {
        let mut dags = scan.dags;
        dags.extend(self.users.clone());
        let before = std::mem::replace(&mut self.dags, dags);
        self.folder_errors = scan.folder_errors;
        self.reserved = scan.reserved;
        for e in &self.reserved {
            tracing::warn!("job file error: {e}");
        }
        let removed: Vec<String> = before
            .iter()
            .filter(|(n, e)| e.spec.is_some() && self.dags.get(*n).is_none_or(|d| d.spec.is_none()))
            .map(|(n, _)| n.clone())
            .collect();
        let before: BTreeMap<String, String> =
            before.into_iter().map(|(k, v)| (k, v.hash)).collect();
        let mut to_define: Vec<Arc<DagSpec>> = Vec::new();
        for (name, entry) in &self.dags {
            if let Some(e) = &entry.error {
                tracing::warn!(dag = %name, "job file error: {e}");
            }
            let changed = before.get(name) != Some(&entry.hash);
            let all = matches!(define, Define::All { .. });
            if changed && entry.spec.is_some() {
                tracing::info!(dag = %name, file = %entry.file.display(), "DAG loaded");
            }
            // Defining all writes all: a node's record of what it loaded
            // (a cluster) is then whole, a broken file's last good
            // version included.
            if (changed || all)
                && let Some(spec) = &entry.spec
            {
                self.pending.dag_defs.push(spec.clone());
            }
            if changed || all {
                to_define.extend(entry.spec.clone());
            }
        }
        if matches!(define, Define::All { .. }) {
            self.pending.complete = true;
        }
        let mut effects = Vec::new();
        for spec in to_define {
            let tz = spec.timezone.as_deref().unwrap_or(&cfg.timezone);
            let zone = ax_shared::cron::parse_zone(tz).unwrap_or(chrono_tz::UTC);
            let (watermark, boots_seen) = match define {
                Define::All { marks } => (
                    marks.slots.get(&spec.name).copied(),
                    marks.boots.get(&spec.name).cloned().unwrap_or_default(),
                ),
                Define::Changed => (None, Vec::new()),
            };
            let input = Input::DefineDag {
                spec,
                zone,
                watermark,
                boots_seen,
            };
            effects.extend(engine.handle(now, input).effects);
        }
        for name in removed {
            match self.dags.get(&name).and_then(|d| d.error.as_ref()) {
                Some(e) => {
                    tracing::info!(dag = %name, "DAG removed (file not loaded: {})", e.message)
                }
                None => tracing::info!(dag = %name, "DAG removed (file deleted)"),
            }
            effects.extend(remove_from_engine(engine, now, actor, &name));
            self.pending.removed.push(name);
        }
        effects
    }

    /// Replaces the users' DAGs, before the start-up load defines every
    /// DAG (no engine yet holds any of them).
    pub(crate) fn set_users(&mut self, users: BTreeMap<String, DagEntry>) {
        self.users = users;
    }

    /// Puts the users' DAGs read again (a reload) in force: new and
    /// changed valid ones are defined; those gone, or no longer valid
    /// (their user removed or no longer allowed), are removed from the
    /// engine, so they do not run.
    pub(crate) fn reload_users(
        &mut self,
        engine: &mut Engine,
        cfg: &Config,
        now: Millis,
        actor: &Arc<str>,
        users: BTreeMap<String, DagEntry>,
    ) -> Vec<Effect> {
        let mut effects = Vec::new();
        let gone: Vec<String> = self
            .users
            .keys()
            .filter(|n| !users.contains_key(*n))
            .cloned()
            .collect();
        for name in gone {
            effects.extend(self.remove_user(engine, now, actor, &name));
        }
        for (name, entry) in users {
            let before = self.users.get(&name);
            let had_spec = before.is_some_and(|b| b.spec.is_some());
            if entry.spec.is_none() {
                if had_spec {
                    tracing::warn!(dag = %name, "user DAG no longer valid: removed from the schedule");
                    effects.extend(remove_from_engine(engine, now, actor, &name));
                    self.pending.removed.push(name.clone());
                }
                self.dags.insert(name.clone(), entry.clone());
                self.users.insert(name, entry);
            } else if before.map(|b| &b.hash) != Some(&entry.hash) {
                effects.extend(self.put_user(engine, cfg, now, entry));
            }
        }
        effects
    }

    /// Stores a user's DAG that meets every rule and defines it (a new
    /// version replaces the old one; DAG runs already started keep theirs).
    pub(crate) fn put_user(
        &mut self,
        engine: &mut Engine,
        cfg: &Config,
        now: Millis,
        entry: DagEntry,
    ) -> Vec<Effect> {
        let Some(spec) = entry.spec.clone() else {
            return Vec::new();
        };
        let name = spec.name.clone();
        tracing::info!(dag = %name, file = %entry.file.display(), "DAG loaded");
        self.users.insert(name.clone(), entry.clone());
        self.dags.insert(name, entry);
        self.pending.dag_defs.push(spec.clone());
        let tz = spec.timezone.as_deref().unwrap_or(&cfg.timezone);
        let zone = ax_shared::cron::parse_zone(tz).unwrap_or(chrono_tz::UTC);
        let input = Input::DefineDag {
            spec,
            zone,
            watermark: None,
            boots_seen: Vec::new(),
        };
        engine.handle(now, input).effects
    }

    /// Removes a user's DAG as a deleted job file removes its DAG: no new
    /// triggers, waiting and ready runs cancelled, running ones finish.
    pub(crate) fn remove_user(
        &mut self,
        engine: &mut Engine,
        now: Millis,
        actor: &Arc<str>,
        name: &str,
    ) -> Vec<Effect> {
        let had_spec = self.users.remove(name).is_some_and(|e| e.spec.is_some());
        self.dags.remove(name);
        if !had_spec {
            return Vec::new();
        }
        tracing::info!(dag = %name, "DAG removed");
        self.pending.removed.push(name.to_string());
        remove_from_engine(engine, now, actor, name)
    }

    /// `user`'s DAGs as they are in force.
    pub(crate) fn users_of<'a>(
        &'a self,
        user: &'a str,
    ) -> impl Iterator<Item = (&'a String, &'a DagEntry)> + 'a {
        self.users
            .iter()
            .filter(move |(n, _)| ax_shared::users::user_dag_owner(n) == Some(user))
    }

    pub(crate) fn get(&self, name: &str) -> Option<&DagEntry> {
        self.dags.get(name)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&String, &DagEntry)> {
        self.dags.iter()
    }

    pub(crate) fn names(&self) -> Vec<String> {
        self.dags.keys().cloned().collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.dags.len()
    }

    /// Every job file's error, then every `@` name refused, then every
    /// folder the last scan could not read.
    pub(crate) fn errors(&self) -> Vec<FileError> {
        self.dags
            .values()
            .filter_map(|d| d.error.clone())
            .chain(self.reserved.iter().cloned())
            .chain(self.folder_errors.iter().cloned())
            .collect()
    }

    /// Job files (and `@` names) that fail to load.
    pub(crate) fn file_errors(&self) -> usize {
        self.dags.values().filter(|d| d.error.is_some()).count() + self.reserved.len()
    }

    /// Folders the last scan could not read.
    pub(crate) fn folder_errors(&self) -> usize {
        self.folder_errors.len()
    }

    /// A pause or resume to write with the next step.
    pub(crate) fn note_paused(&mut self, dag: &str, paused: bool) {
        self.pending.paused.push((dag.to_string(), paused));
    }

    pub(crate) fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    pub(crate) fn take_pending(&mut self) -> PendingDefs {
        std::mem::take(&mut self.pending)
    }
}

fn remove_from_engine(
    engine: &mut Engine,
    now: Millis,
    actor: &Arc<str>,
    name: &str,
) -> Vec<Effect> {
    let input = Input::RemoveDag {
        dag: name.to_string(),
        actor: actor.clone(),
    };
    engine.handle(now, input).effects
}
