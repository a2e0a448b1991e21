//! Retention on PostgreSQL: the same candidates and the same checks as
//! the SQLite store's `Prune`, each batch deleted in one transaction that
//! checks every candidate again (and locks it, so nothing changes it
//! between the check and the delete).

use super::{PgStore, on_client};
use crate::store::StoreError;
use crate::store::prune::{BeyondNewest, Prune, Pruned, delete_statements};
use crate::store::rows::Columns;

/// The candidates still deletable: finished, finished before `$2`, and not
/// the DAG run of a run that a run of an active DAG run waits on.
const PICK: &str =
    "SELECT id FROM dag_runs WHERE id = ANY($1) AND state <> 'active' AND finished_at < $2
       AND id NOT IN (
         SELECT u.dag_run FROM dag_runs a JOIN runs r ON r.dag_run = a.id
           CROSS JOIN LATERAL jsonb_array_elements_text(r.upstream::jsonb) AS j(v)
           JOIN runs u ON u.id = j.v::bigint
         WHERE a.state = 'active' AND r.upstream <> '[]')
     ORDER BY id FOR UPDATE";

impl Prune for PgStore {
    fn finished_before(
        &mut self,
        before: i64,
        after: u64,
        limit: usize,
    ) -> Result<Vec<u64>, StoreError> {
        on_client!(self, |client| async {
            let statement = client
                .prepare_cached(
                    "SELECT id FROM dag_runs WHERE id > $1 AND state <> 'active' AND finished_at < $2 ORDER BY id LIMIT $3",
                )
                .await?;
            client
                .query(&statement, &[&(after as i64), &before, &(limit as i64)])
                .await?
                .iter()
                .map(|r| r.int(0, "dag_runs.id"))
                .collect()
        })
    }

    fn beyond_newest(&mut self, q: &BeyondNewest<'_>) -> Result<Vec<u64>, StoreError> {
        on_client!(self, |client| async {
            let statement = client
                .prepare_cached(
                    "SELECT id FROM dag_runs WHERE dag = $1 AND state <> 'active' AND finished_at < $3
                       AND id < (SELECT id FROM dag_runs WHERE dag = $1 ORDER BY id DESC LIMIT 1 OFFSET $2::int8 - 1)
                     ORDER BY id LIMIT $4",
                )
                .await?;
            client
                .query(
                    &statement,
                    &[&q.dag, &i64::from(q.keep), &q.before, &(q.limit as i64)],
                )
                .await?
                .iter()
                .map(|r| r.int(0, "dag_runs.id"))
                .collect()
        })
    }

    fn delete_dag_runs(&mut self, ids: &[u64], before: i64) -> Result<Pruned, StoreError> {
        let ids: Vec<i64> = ids.iter().map(|&id| id as i64).collect();
        on_client!(self, |client| async {
            let tx = client.transaction().await?;
            let picked: Vec<i64> = tx
                .query(PICK, &[&ids, &before])
                .await?
                .iter()
                .map(|r| r.try_get(0))
                .collect::<Result<_, _>>()?;
            let mut pruned = Pruned {
                dag_runs: picked.len() as u64,
                ..Pruned::default()
            };
            if picked.is_empty() {
                tx.commit().await?;
                return Ok(pruned);
            }
            for r in tx
                .query(
                    "SELECT state, COUNT(*) FROM runs WHERE dag_run = ANY($1) GROUP BY state",
                    &[&picked],
                )
                .await?
            {
                pruned
                    .runs
                    .insert(r.code(0, "runs.state")?, r.int(1, "count")?);
            }
            pruned.attempts = tx
                .query(
                    "SELECT a.run, a.n FROM attempts a JOIN runs r ON r.id = a.run WHERE r.dag_run = ANY($1)",
                    &[&picked],
                )
                .await?
                .iter()
                .map(|r| Ok((r.int(0, "attempts.run")?, r.int(1, "attempts.n")?)))
                .collect::<Result<_, StoreError>>()?;
            for sql in delete_statements(true, |column| format!("{column} = ANY($1)")) {
                tx.execute(&sql, &[&picked]).await?;
            }
            tx.commit().await?;
            Ok(pruned)
        })
    }

    fn delete_unused_specs(&mut self) -> Result<u64, StoreError> {
        on_client!(self, |client| async {
            Ok(client
                .execute(
                    "DELETE FROM specs s WHERE NOT EXISTS (SELECT 1 FROM dag_runs d WHERE d.spec_hash = s.hash)
                       AND NOT EXISTS (SELECT 1 FROM dag_defs f WHERE f.hash = s.hash)",
                    &[],
                )
                .await?)
        })
    }

    /// The database's size on the server.
    fn store_bytes(&mut self) -> Option<u64> {
        let size: Result<i64, StoreError> = on_client!(self, |client| async {
            Ok(client
                .query_one("SELECT pg_database_size(current_database())", &[])
                .await?
                .try_get(0)?)
        });
        size.ok().and_then(|b| u64::try_from(b).ok())
    }
}
