//! What the engine does differently as one node of a cluster
//! (docs/operations.md, "Cluster"): cluster-unique ids, DAG runs offered to
//! every node instead of queued here, DAG runs adopted from the store once
//! claimed, and cron switched on only on the leader. A DAG run is owned whole
//! by one node, whose engine applies every rule to it exactly as on a single
//! node.

use super::*;

/// How the engine numbers runs and DAG runs: the k-th id it hands out
/// is `k * stride + offset`. One node alone: stride 1, offset 0 (ids
/// 1, 2, 3…); in a cluster every node has its own offset (its node
/// number) below the common stride, so ids are unique across nodes
/// without asking the database inside a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdScheme {
    pub stride: u64,
    pub offset: u64,
}

impl Default for IdScheme {
    fn default() -> Self {
        IdScheme {
            stride: 1,
            offset: 0,
        }
    }
}

impl IdScheme {
    pub(super) fn id(self, k: u64) -> u64 {
        k * self.stride + self.offset
    }

    /// The smallest counter whose id is at least `id` (and at least 1, so
    /// that no id is ever the offset alone: DAG run 0 means "none").
    pub(super) fn counter_from(self, id: u64) -> u64 {
        id.saturating_sub(self.offset).div_ceil(self.stride).max(1)
    }
}

/// A pool of this node as seen by the claimer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PoolLease {
    pub pool: String,
    pub slots: u32,
    /// Ready runs waiting for a slot.
    pub queued: u32,
    /// Slots running attempts hold.
    pub held: BTreeSet<u32>,
    /// Slots this node may use.
    pub leased: BTreeSet<u32>,
}

impl Engine {
    /// Numbers new ids by `ids` from now on, after every id already
    /// handed out (call before `restore`, which moves past stored ids).
    pub fn set_ids(&mut self, ids: IdScheme) {
        let next_run = self.ids.id(self.next_run);
        let next_dag_run = self.ids.id(self.next_dag_run);
        self.ids = ids;
        self.next_run = ids.counter_from(next_run);
        self.next_dag_run = ids.counter_from(next_dag_run);
    }

    /// With `offering`, a submitted DAG run is offered to the cluster
    /// rather than run here: it is written with its runs in their initial
    /// states, never queued, and forgotten (`forget_offered`) once its step
    /// has been handed to the store. A DAG run created by a trigger (cron,
    /// `after`, a hook, `ax trigger`) is offered only when its DAG has
    /// `overlap = "allow"`; under any other policy it stays with the node
    /// that created it, whose engine judges the DAG's next triggers by the
    /// DAG runs it holds.
    pub fn set_offering(&mut self, offering: bool) {
        self.offering = offering;
    }

    /// From now on this node may use only the pool slots leased to it
    /// (`Input::Leases`), none at first: pool sizes hold across the
    /// cluster.
    pub fn set_leasing(&mut self) {
        self.leasing = true;
        for pool in self.pools.values_mut() {
            pool.set_leased(BTreeSet::new());
        }
    }

    /// Each pool as the claimer leases for it.
    pub fn pool_leases(&self) -> Vec<PoolLease> {
        self.pools
            .iter()
            .map(|(name, p)| PoolLease {
                pool: name.clone(),
                slots: p.slots,
                queued: p.queue.len() as u32,
                held: p.held.iter().copied().collect(),
                leased: p.leased.iter().flatten().copied().collect(),
            })
            .collect()
    }

    /// This node's id, recorded on each attempt it starts.
    pub fn set_node(&mut self, id: &str) {
        self.node = Some(id.to_string());
    }

    /// Numbers new ids after `run` and `dag_run` (ids other nodes have
    /// stored), so that ids follow creation order across the cluster to
    /// within a heartbeat, and `newest first` by id stays true.
    pub fn skip_ids_past(&mut self, run: u64, dag_run: u64) {
        self.next_run = self.next_run.max(self.ids.counter_from(run + 1));
        self.next_dag_run = self.next_dag_run.max(self.ids.counter_from(dag_run + 1));
    }

    /// Starts or stops firing cron slots without an input (before the
    /// first step: a node of a cluster starts as a follower).
    pub fn set_cron_leader(&mut self, leader: bool) {
        self.cron_leader = leader;
    }

    /// Whether a new DAG run with these `--after` runs may be offered:
    /// not when one of them is an unfinished run held here, whose end
    /// only this engine will see.
    pub(super) fn may_offer(&self, after: &[RunId]) -> bool {
        self.offering
            && after
                .iter()
                .all(|a| self.runs.get(a).is_none_or(|r| r.state.is_terminal()))
    }

    /// Forgets the DAG runs offered since the last call: their step is
    /// with the writer, which stores them unowned for any node to claim.
    /// One that has already finished (an `--after` run had failed) stays,
    /// like any finished DAG run. Returns how many went.
    pub fn forget_offered(&mut self) -> usize {
        let mut forgotten = 0;
        let by_trigger = std::mem::take(&mut self.offered_by_trigger);
        for id in std::mem::take(&mut self.offered) {
            let Some(dr) = self.dag_runs.get(&id) else {
                continue;
            };
            if dr.state != DagRunState::Active {
                continue;
            }
            let dr = self.dag_runs.remove(&id).expect("checked");
            for r in &dr.runs {
                for kind in [TimerKind::Wake, TimerKind::Timeout, TimerKind::Heartbeat] {
                    self.set_timer(*r, kind, None);
                }
                let Some(run) = self.runs.remove(r) else {
                    continue;
                };
                for u in &run.upstream {
                    if let Some(up) = self.runs.get_mut(u) {
                        up.downstream.retain(|d| d != r);
                    }
                }
                self.counts[state_index(run.state)] -= 1;
                if let Some(s) = self.active_by_dag.get_mut(&run.dag) {
                    s.remove(r);
                    if s.is_empty() {
                        self.active_by_dag.remove(&run.dag);
                    }
                }
            }
            if let Some(set) = self.active_dag_runs.get_mut(&*dr.dag) {
                set.remove(&id);
                if set.is_empty() {
                    self.active_dag_runs.remove(&*dr.dag);
                }
            }
            if let Some(k) = &dr.unique_key
                && self.unique.get(k) == Some(&id)
            {
                self.unique.remove(k);
            }
            if by_trigger.contains(&id) && self.counts_overlap(&dr.dag) {
                self.elsewhere
                    .entry(dr.dag.to_string())
                    .or_default()
                    .insert(id);
            }
            forgotten += 1;
        }
        forgotten
    }

    /// Whether the DAG's overlap policy looks at its active DAG runs.
    fn counts_overlap(&self, dag: &str) -> bool {
        self.dags
            .get(dag)
            .is_some_and(|d| d.spec.overlap != ax_shared::Overlap::Allow)
    }

    /// The DAG runs other nodes hold (or may claim) that the overlap
    /// policies here count as active, until `Input::EndedElsewhere`.
    pub fn watched_elsewhere(&self) -> Vec<DagRunId> {
        self.elsewhere.values().flatten().copied().collect()
    }

    /// Active DAG runs of `dag` on other nodes, as far as this node knows.
    pub(super) fn active_elsewhere(&self, dag: &str) -> impl Iterator<Item = DagRunId> + '_ {
        self.elsewhere.get(dag).into_iter().flatten().copied()
    }

    /// The slots of `pool` this node may use, leased from the cluster.
    pub(super) fn set_leases(&mut self, pool: &str, slots: Vec<u32>) {
        if let Some(p) = self.pools.get_mut(pool) {
            p.set_leased(slots.into_iter().collect());
        }
    }

    /// Watched DAG runs ended on other nodes: a DAG left with none active
    /// starts its queued triggers (its hooks and `after` triggers ran
    /// where it ended).
    pub(super) fn ended_elsewhere(&mut self, now: Millis, dag_runs: &[DagRunId]) {
        let mut freed = Vec::new();
        for (dag, set) in self.elsewhere.iter_mut() {
            // Every ended one out (not `any`, which stops at the first).
            let hit = dag_runs.iter().fold(false, |hit, d| set.remove(d) | hit);
            if hit && set.is_empty() {
                freed.push(dag.clone());
            }
        }
        self.elsewhere.retain(|_, set| !set.is_empty());
        for dag in freed {
            self.start_queued(now, &dag);
        }
    }

    /// DAG runs this node claimed from the store: taken in as at start-up
    /// (`restore`), a run found `running` getting an `interrupted`
    /// attempt. One already held is left alone.
    pub(super) fn adopt(
        &mut self,
        now: Millis,
        dag_runs: Vec<RestoredDagRun>,
        external: Vec<(RunId, RunState)>,
    ) -> Result<Reply, EngineError> {
        for (id, state) in external {
            self.note_external(id, state);
        }
        let fresh: Vec<RestoredDagRun> = dag_runs
            .into_iter()
            .filter(|d| !self.dag_runs.contains_key(&d.id))
            .collect();
        // A watched DAG run claimed back is counted where it now lives.
        for set in self.elsewhere.values_mut() {
            for d in &fresh {
                set.remove(&d.id);
            }
        }
        self.elsewhere.retain(|_, set| !set.is_empty());
        self.take_in(now, fresh);
        Ok(Reply::Done)
    }

    /// This node became the cron leader (`marks`: every DAG's last fired
    /// slot as the store now says, written by the leader before;
    /// `active`: unfinished DAG runs of defined DAGs, wherever they run)
    /// or stopped being it. A new leader counts the active DAG runs it
    /// does not hold for the overlap policies, then catches up each DAG by
    /// its `catchup` policy and arms its next slot; a former one disarms.
    pub(super) fn lead(
        &mut self,
        now: Millis,
        leader: bool,
        marks: TriggerMarks,
        active: Vec<(String, DagRunId)>,
    ) {
        self.cron_leader = leader;
        for (dag, id) in active {
            if !self.dag_runs.contains_key(&id) && self.counts_overlap(&dag) {
                self.elsewhere.entry(dag).or_default().insert(id);
            }
        }
        let names: Vec<String> = self.dags.keys().cloned().collect();
        for name in names {
            if leader {
                if let Some(def) = self.dags.get_mut(&name) {
                    if let Some(&mark) = marks.slots.get(&name) {
                        def.watermark = def.watermark.max(mark);
                    }
                    // The boot the DAG last fired in, on whichever node.
                    for boot in marks.boots.get(&name).into_iter().flatten() {
                        if !def.boots_seen.contains(boot) {
                            def.boots_seen.push(boot.clone());
                        }
                    }
                }
                self.catch_up(now, &name);
            } else if let Some(def) = self.dags.get_mut(&name) {
                def.next_fire = None;
                if let Some(old) = self.dag_timers.remove(&def.key) {
                    self.timers.remove(&(old, Timer::Cron(def.key)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::IdScheme;

    #[test]
    fn ids_of_one_node_are_unchanged_and_of_a_cluster_are_disjoint() {
        let one = IdScheme::default();
        assert_eq!((one.id(1), one.id(2)), (1, 2));
        assert_eq!(one.counter_from(17), 17);
        assert_eq!(one.counter_from(0), 1);
        let a = IdScheme {
            stride: 1024,
            offset: 3,
        };
        assert_eq!(a.id(a.counter_from(5000)), 5123);
        assert!(a.id(a.counter_from(5123)) >= 5123);
        assert_eq!(a.counter_from(0), 1, "never the bare offset");
        let b = IdScheme {
            stride: 1024,
            offset: 4,
        };
        for k in 1..2000 {
            assert_ne!(a.id(k) % 1024, b.id(k) % 1024);
        }
    }
}
