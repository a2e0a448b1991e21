//! Reading the store back at start-up (and one DAG run for a retry):
//! DAG runs with their runs and attempts, and what else a restart needs.

use super::*;

impl SqliteStore {
    /// DAG runs matching `filter` (SQL over `dag_runs d`) with their runs
    /// and attempts, plus what start-up needs besides.
    pub(super) fn load_where(&mut self, filter: &str) -> Result<Loaded, StoreError> {
        let next_run: i64 =
            self.conn
                .query_row("SELECT COALESCE(MAX(id), 0) + 1 FROM runs", [], |r| {
                    r.get(0)
                })?;
        let next_dag_run: i64 =
            self.conn
                .query_row("SELECT COALESCE(MAX(id), 0) + 1 FROM dag_runs", [], |r| {
                    r.get(0)
                })?;
        let mut specs: HashMap<String, Arc<DagSpec>> = HashMap::new();
        let mut dag_runs: Vec<RestoredDagRun> = Vec::new();
        let mut index: IdMap<u64, usize> = IdMap::default();
        {
            let mut stmt = self.conn.prepare(&format!(
                "SELECT d.id, d.spec_hash, s.spec, d.state, d.created_at, d.trigger, d.unique_key
                 FROM dag_runs d JOIN specs s ON s.hash = d.spec_hash WHERE {filter} ORDER BY d.id",
            ))?;
            let mut rows = stmt.query([])?;
            while let Some(r) = rows.next()? {
                // Borrow the hash: one allocation per distinct spec, not per row.
                let hash = r
                    .get_ref(1)?
                    .as_str()
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?;
                let spec = match specs.get(hash) {
                    Some(s) => s.clone(),
                    None => {
                        let hash = hash.to_string();
                        let text: String = r.get(2)?;
                        let spec: DagSpec = serde_json::from_str(&text)
                            .map_err(|e| StoreError::Corrupt(format!("spec {hash}: {e}")))?;
                        let spec = Arc::new(spec);
                        specs.insert(hash, spec.clone());
                        spec
                    }
                };
                let id = r.get::<_, i64>(0)? as u64;
                index.insert(id, dag_runs.len());
                dag_runs.push(RestoredDagRun {
                    id: DagRunId(id),
                    dag: Arc::from(spec.name.as_str()),
                    spec,
                    state: crate::store::parse_dag_run_state(&r.get::<_, String>(3)?),
                    created_at: r.get(4)?,
                    trigger: r.get(5)?,
                    unique_key: r.get(6)?,
                    runs: Vec::new(),
                });
            }
        }
        let mut attempts: IdMap<u64, Vec<Attempt>> = IdMap::default();
        let mut orphans = Vec::new();
        {
            let mut stmt = self.conn.prepare(&format!(
                "SELECT a.run, a.n, a.started_at, a.finished_at, a.outcome, a.exit_code, a.signal, a.pid, a.pid_start, a.slot, a.error, a.log_lost
                 FROM attempts a JOIN runs r ON r.id = a.run JOIN dag_runs d ON d.id = r.dag_run
                 WHERE {filter} ORDER BY a.run, a.n",
            ))?;
            let mut rows = stmt.query([])?;
            while let Some(r) = rows.next()? {
                let a = Attempt {
                    node: None,
                    n: r.get::<_, i64>(1)? as u32,
                    started_at: r.get(2)?,
                    finished_at: r.get(3)?,
                    outcome: r
                        .get::<_, Option<String>>(4)?
                        .as_deref()
                        .and_then(parse_outcome),
                    exit_code: r.get(5)?,
                    signal: r.get(6)?,
                    pid: r.get::<_, Option<i64>>(7)?.map(|p| p as u32),
                    pid_start: r.get::<_, Option<i64>>(8)?.map(|p| p as u64),
                    slot: r.get::<_, i64>(9)? as u32,
                    error: r.get(10)?,
                    log_lost: r.get::<_, i64>(11)? as u64,
                };
                if a.outcome.is_none()
                    && let Some(pid) = a.pid
                {
                    orphans.push((pid, a.pid_start));
                }
                attempts
                    .entry(r.get::<_, i64>(0)? as u64)
                    .or_default()
                    .push(a);
            }
        }
        let mut upstream_ids: Vec<u64> = Vec::new();
        {
            let mut stmt = self.conn.prepare(&format!(
                "SELECT r.id, r.dag_run, r.job_index, r.state, r.counted_failures, r.created_at, r.ready_at, r.started_at,
                        r.finished_at, r.next_at, r.delay, r.reason, r.message, r.progress, r.upstream
                 FROM runs r JOIN dag_runs d ON d.id = r.dag_run WHERE {filter} ORDER BY r.id",
            ))?;
            let mut rows = stmt.query([])?;
            while let Some(r) = rows.next()? {
                let id = r.get::<_, i64>(0)? as u64;
                let dag_run = r.get::<_, i64>(1)? as u64;
                // Most runs have no upstream: skip the JSON parser for "[]".
                let text = r
                    .get_ref(14)?
                    .as_str()
                    .map_err(|e| StoreError::Corrupt(e.to_string()))?;
                let upstream: Vec<RunId> = if text == "[]" {
                    Vec::new()
                } else {
                    serde_json::from_str(text)
                        .map_err(|e| StoreError::Corrupt(format!("run {id} upstream: {e}")))?
                };
                upstream_ids.extend(upstream.iter().map(|u| u.0));
                let Some(&i) = index.get(&dag_run) else {
                    continue;
                };
                let owner = &dag_runs[i];
                let mut run = Run::waiting(
                    RunId(id),
                    owner.id,
                    owner.dag.clone(),
                    owner.spec.clone(),
                    r.get::<_, i64>(2)? as u32,
                    r.get(5)?,
                    upstream,
                );
                run.state = parse_state(&r.get::<_, String>(3)?)?;
                run.attempts = attempts.remove(&id).unwrap_or_default();
                run.counted_failures = r.get::<_, i64>(4)? as u32;
                run.ready_at = r.get(6)?;
                run.started_at = r.get(7)?;
                run.finished_at = r.get(8)?;
                run.next_at = r.get(9)?;
                run.delay = crate::store::parse_delay(r.get::<_, Option<String>>(10)?.as_deref());
                run.reason = r.get(11)?;
                run.message = r.get(12)?;
                run.progress = r.get(13)?;
                dag_runs[i].runs.push(run);
            }
        }
        // Upstream runs outside the loaded DAG runs (`--after` links).
        let loaded: std::collections::HashSet<u64> = dag_runs
            .iter()
            .flat_map(|d| d.runs.iter().map(|r| r.id.0))
            .collect();
        let mut external = Vec::new();
        for u in upstream_ids {
            if !loaded.contains(&u)
                && let Some(s) = self.run_state(u)?
            {
                external.push((RunId(u), s));
            }
        }
        let paused: Vec<String> = {
            let mut stmt = self.conn.prepare("SELECT dag FROM paused")?;
            stmt.query_map([], |r| r.get(0))?
                .collect::<Result<_, _>>()?
        };
        let cron_marks: HashMap<String, i64> = {
            let mut stmt = self.conn.prepare("SELECT dag, last_slot FROM cron_marks")?;
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()?
        };
        let mut trigger_queues: HashMap<String, Vec<Trigger>> = HashMap::new();
        {
            let mut stmt = self.conn.prepare("SELECT dag, queue FROM trigger_queues")?;
            let rows =
                stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
            for row in rows {
                let (dag, json) = row?;
                let queue = crate::store::parse_trigger_queue(&dag, &json)?;
                trigger_queues.insert(dag, queue);
            }
        }
        Ok(Loaded {
            dag_runs,
            external,
            next_run: next_run as u64,
            next_dag_run: next_dag_run as u64,
            paused,
            cron_marks,
            trigger_queues,
            orphans,
        })
    }
}
