//! The DAG registry: every DAG of the jobs folder (its last good version
//! and its file's current error) as the last scan left them, and the
//! definition changes the store has not yet been given. Scans are made on
//! the scanner thread (`watcher`); this side only puts their result in
//! force.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use ax_shared::DagSpec;
use ax_shared::jobfile::FileError;

use crate::config::Config;
use crate::jobs_folder::scan::{DagEntry, Scan};
use ax_engine::{Effect, Engine, Input, Millis};

/// Which DAGs a scan hands to the engine.
pub(crate) enum Define<'a> {
    /// Only those whose file changed (reload, watcher).
    Changed,
    /// Every DAG (start-up), with the cron watermarks the store kept.
    All {
        watermarks: &'a HashMap<String, i64>,
    },
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
        let before = std::mem::replace(&mut self.dags, scan.dags);
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
            let watermark = match define {
                Define::All { watermarks } => watermarks.get(&spec.name).copied(),
                Define::Changed => None,
            };
            let input = Input::DefineDag {
                spec,
                zone,
                watermark,
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
            let input = Input::RemoveDag {
                dag: name.clone(),
                actor: actor.clone(),
            };
            effects.extend(engine.handle(now, input).effects);
            self.pending.removed.push(name);
        }
        effects
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
