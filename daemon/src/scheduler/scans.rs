//! The jobs folder's scans, as the scheduler puts them in force. The scan
//! at start is made before this thread runs; later ones are read, parsed
//! and validated on the scanner thread (`watcher::spawn_scanner`), started
//! by the watch or ordered by a reload, and arrive as one `Msg::Scanned`
//! each: this thread only swaps the DAG set and defines what changed.

use ax_engine::TriggerMarks;
use std::sync::Arc;

use ax_protocol::RpcError;
use ax_protocol::api::ReloadAnswer;

use super::{Answers, Scheduler, WaitingReload};
use crate::bus::ReplyTo;
use crate::bus::answer::Answer;
use crate::jobs_folder::registry::Define;
use crate::jobs_folder::scan::{JobsFolder, Scan};
use ax_engine::{Effect, Millis};

impl Scheduler {
    /// Loads the jobs folder at start-up, on the caller's thread: every
    /// DAG is given to the engine with the cron watermark the store kept
    /// for it. A file that is broken now (or below a folder that cannot
    /// be read) keeps the last good version the store holds.
    pub fn load_jobs(
        &mut self,
        now: Millis,
        actor: &Arc<str>,
        marks: &TriggerMarks,
        folder: &mut JobsFolder,
    ) -> Vec<Effect> {
        match self.store.load_dag_defs() {
            // In a cluster `dag_defs` is the last version any node loaded:
            // only one from a file of this node's own folder is its own.
            Ok(mut defs) => {
                defs.retain(|d| std::path::Path::new(&d.file).starts_with(&self.cfg.jobs_dir));
                folder.restore_last_good(defs)
            }
            Err(e) => tracing::warn!("cannot read the last good DAG versions: {e}"),
        }
        let scan = crate::jobs_folder::watcher::scan_measured(folder, &self.metrics.shared);
        self.metrics.scan_applied(!scan.folder_errors.is_empty());
        let users = self.read_user_dags();
        self.registry.set_users(users);
        let define = Define::All { marks };
        self.registry
            .apply(&mut self.engine, &self.cfg, now, actor, scan, define)
    }

    /// Orders a scan for a reload by `actor` (checked against the pools in
    /// force now); it is put in force when it arrives.
    pub(super) fn order_scan(&mut self, actor: &Arc<str>, define_all: bool) {
        let ticket = self.scans.reload(self.pool_names());
        self.reloads.push(WaitingReload {
            ticket,
            actor: actor.clone(),
            define_all,
            reply: None,
        });
    }

    /// Holds the answer to a `reload` request until the scan it ordered is
    /// in force (so its counts are the new folder's). An answer that
    /// cannot be held is given back, to be sent now.
    pub(super) fn hold_reload_answer(
        &mut self,
        reply: ReplyTo,
        answer: Answer,
    ) -> Option<(ReplyTo, Result<Answer, RpcError>)> {
        match (self.reloads.last_mut(), ReloadAnswer::try_from(answer)) {
            (Some(waiting), Ok(answer)) if waiting.reply.is_none() => {
                waiting.reply = Some((reply, answer));
                None
            }
            (_, Ok(answer)) => Some((reply, Ok(answer.into()))),
            (_, Err(other)) => Some((reply, Ok(other))),
        }
    }

    /// Puts a scan in force: changed DAGs are defined, removed ones
    /// removed. The reloads whose ticket it answers end: their answers
    /// join the step's durable ones, with the DAGs and errors now in force.
    pub(super) fn scanned(
        &mut self,
        now: Millis,
        scan: Scan,
        ticket: Option<u64>,
        effects: &mut Vec<Effect>,
        durable: &mut Answers,
    ) {
        let (done, waiting): (Vec<WaitingReload>, Vec<WaitingReload>) =
            std::mem::take(&mut self.reloads)
                .into_iter()
                .partition(|r| ticket.is_some_and(|t| r.ticket <= t));
        self.reloads = waiting;
        let actor = match done.last() {
            Some(r) => r.actor.clone(),
            None => Arc::from("watcher"),
        };
        let kept = TriggerMarks::default();
        let define = if done.iter().any(|r| r.define_all) {
            Define::All { marks: &kept }
        } else {
            Define::Changed
        };
        self.metrics.scan_applied(!scan.folder_errors.is_empty());
        // A reload reads the users' DAGs again too (their users may be
        // gone); the watcher's scans are of the jobs folder only.
        if !done.is_empty() {
            effects.extend(self.reload_user_dags(now, &actor));
        }
        effects.extend(
            self.registry
                .apply(&mut self.engine, &self.cfg, now, &actor, scan, define),
        );
        let (dags, errors) = (self.registry.len(), self.registry.errors().len());
        for r in done {
            // The audit trail: who reloaded, and what the scan found.
            let mut reason = format!("reloaded: {dags} DAGs, {errors} with errors");
            if let Some((_, answer)) = &r.reply
                && !answer.not_applied.is_empty()
            {
                reason += &format!(
                    "; not applied until restart: {}",
                    answer.not_applied.join(", ")
                );
            }
            effects.push(super::handlers::dag_event(now, reason, &r.actor));
            if let Some((reply, mut answer)) = r.reply {
                answer.dags = dags;
                answer.errors = errors;
                durable.push((reply, Ok(answer.into())));
            }
        }
    }
}
