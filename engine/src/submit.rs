//! Creating a DAG run from a submission.

use super::*;

impl Engine {
    pub(super) fn submit(&mut self, now: Millis, s: Submit) -> Result<Reply, EngineError> {
        self.create(now, s, false, None)
    }

    /// A new DAG run. `by_trigger`: created by a cron slot, an `after`
    /// trigger or a hook, so its runs wait for the step's commit before
    /// they may start (see `Effect::Triggered`). `not_before` (wall time,
    /// in the future): its root jobs wait until then, holding no slot
    /// (a schedule's `jitter`).
    pub(super) fn create(
        &mut self,
        now: Millis,
        s: Submit,
        by_trigger: bool,
        not_before: Option<Millis>,
    ) -> Result<Reply, EngineError> {
        let spec = s.dag;
        // The graph (ids, deps, cycles) follows the job-file rules; the
        // pools and priorities are checked here because the engine's config
        // and programmatic specs are not seen by the file check.
        let order = ax_shared::jobfile::job_order(&spec)
            .map_err(|e| EngineError::Invalid(e.to_string()))?;
        for job in &spec.jobs {
            ax_shared::rules::check_pool(&job.pool, self.pools.keys().map(String::as_str))
                .and(ax_shared::rules::check_priority(i64::from(job.priority)))
                .map_err(|e| EngineError::Invalid(format!("job {:?}: {e}", job.id)))?;
        }
        let index: HashMap<&str, usize> = spec
            .jobs
            .iter()
            .enumerate()
            .map(|(i, job)| (job.id.as_str(), i))
            .collect();
        for a in &s.after {
            if !self.runs.contains_key(a) && !self.external.contains_key(a) {
                return Err(EngineError::NotFound(format!("run {a}")));
            }
        }
        if let Some(u) = &s.unique
            && let Some(existing) = self.unique_holder(now, u)
        {
            return Ok(Reply::Submitted {
                dag_run: existing.dag_run,
                runs: existing.runs,
                deduplicated: true,
            });
        }

        // A triggered DAG run of a DAG with `overlap = "replace"` stays
        // here, where a later trigger can cancel it; under the other
        // policies it is offered and, once forgotten, watched
        // (`elsewhere`) so that those policies still count it.
        let offer = (!by_trigger || spec.overlap != ax_shared::Overlap::Replace)
            && self.may_offer(&s.after);
        let dag_run = DagRunId(self.ids.id(self.next_dag_run));
        self.next_dag_run += 1;
        let dag: Arc<str> = Arc::from(spec.name.as_str());
        let ids: Vec<RunId> = (0..spec.jobs.len())
            .map(|i| RunId(self.ids.id(self.next_run + i as u64)))
            .collect();
        self.next_run += spec.jobs.len() as u64;
        for (i, job) in spec.jobs.iter().enumerate() {
            let mut upstream: Vec<RunId> =
                job.deps.iter().map(|d| ids[index[d.as_str()]]).collect();
            if job.deps.is_empty() {
                upstream.extend(s.after.iter().copied());
            }
            let mut run = Run::waiting(
                ids[i],
                dag_run,
                dag.clone(),
                spec.clone(),
                i as u32,
                self.wall(now),
                upstream,
            );
            run.reason = format!("created by {}", s.trigger);
            // An offered run is never queued here: the node that claims
            // its DAG run queues it.
            run.awaits_commit = by_trigger || offer;
            self.counts[state_index(RunState::Waiting)] += 1;
            self.runs.insert(run.id, run);
            self.active_by_dag
                .entry(dag.clone())
                .or_default()
                .insert(ids[i]);
        }
        self.link_downstream(&ids);
        self.dag_runs.insert(
            dag_run,
            DagRun {
                id: dag_run,
                dag: dag.clone(),
                spec: spec.clone(),
                runs: ids.clone(),
                state: DagRunState::Active,
                created_at: self.wall(now),
                finished_at: None,
                trigger: s.trigger.clone(),
                unique_key: s.unique.as_ref().map(|u| u.key.clone()),
                hook_of: None,
                unfinished: ids.len(),
                offered: offer,
            },
        );
        if let Some(u) = &s.unique {
            self.unique.insert(u.key.clone(), dag_run);
        }
        self.active_dag_runs
            .entry(spec.name.clone())
            .or_default()
            .insert(dag_run);
        self.dag_event(
            now,
            dag_run,
            format!("DAG run created by {}", s.trigger),
            &s.actor,
        );
        for &id in &ids {
            let reason = self.runs[&id].reason.clone();
            self.event(
                now,
                Some(id),
                dag_run,
                None,
                Some(RunState::Waiting),
                reason,
                &s.actor,
            );
        }
        // Evaluate in topological order so cancellations cascade correctly.
        for i in order {
            let id = ids[i];
            if let Some(at) = not_before
                && self.runs[&id].upstream.is_empty()
            {
                self.delay_start(now, id, at, &s.actor);
                continue;
            }
            self.recount_upstream(id);
            self.evaluate_waiting(now, id, &s.actor);
        }
        // An offered one starts on the node that claims it, which can only
        // once it is stored.
        if by_trigger && !offer {
            self.effects.push(Effect::Triggered { dag_run });
        }
        if offer {
            if self.dag_runs[&dag_run].state == DagRunState::Active {
                self.offered.push(dag_run);
                if by_trigger {
                    self.offered_by_trigger.insert(dag_run);
                }
            } else if let Some(dr) = self.dag_runs.get_mut(&dag_run) {
                // Ended at once (an `--after` run had failed): nothing to
                // offer, it is stored as this node's.
                dr.offered = false;
            }
        }
        Ok(Reply::Submitted {
            dag_run,
            runs: ids,
            deduplicated: false,
        })
    }

    /// A root run of a DAG run with a planned start (`at`, wall time)
    /// waits for it as `delayed`, holding no slot.
    fn delay_start(&mut self, now: Millis, id: RunId, at: Millis, actor: &Arc<str>) {
        let reason = format!("jitter: planned start {}", clock(at));
        self.transition(now, id, RunState::Delayed, reason, actor);
        let r = self.runs.get_mut(&id).expect("exists");
        r.next_at = Some(at);
        r.delay = Some(Delay::Jitter);
        let due = self.engine_time(at);
        self.set_timer(id, TimerKind::Wake, Some(due));
    }

    /// The DAG run a submission with `u` is deduplicated against: an
    /// unfinished one with the key, or with `within`, the newest one created
    /// that recently. The engine's own map holds every unfinished DAG run
    /// with a key (and finished ones until eviction); `u.stored` answers for
    /// the ones only the store holds.
    fn unique_holder(&self, now: Millis, u: &Unique) -> Option<UniqueHolder> {
        let (holder, active) = match self.unique.get(&u.key).and_then(|id| self.dag_runs.get(id)) {
            Some(dr) => (
                UniqueHolder {
                    dag_run: dr.id,
                    created_at: dr.created_at,
                    runs: dr.runs.clone(),
                },
                dr.state == DagRunState::Active,
            ),
            None => (u.stored.clone()?, false),
        };
        let recent = u
            .within
            .is_some_and(|w| self.wall(now) - holder.created_at <= w);
        (active || recent).then_some(holder)
    }

    /// Adds `ids` to the reverse-dependency index of their upstream runs,
    /// in and across DAG runs. An upstream known only by its final state
    /// (evicted or from the store) needs no link: it will not change again.
    pub(super) fn link_downstream(&mut self, ids: &[RunId]) {
        for &id in ids {
            let ups = self.runs[&id].upstream.clone();
            for u in ups {
                if let Some(up) = self.runs.get_mut(&u) {
                    up.downstream.push(id);
                    up.depended_on = true;
                }
            }
        }
    }
}
