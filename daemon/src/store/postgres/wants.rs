//! Each node's unmet demand for pool slots (table `pool_wants`), so that
//! nodes holding a pool's slot leases can share them fairly with the
//! nodes that want some (docs/operations.md, "Cluster"; the rule is `claimer::share`).

use std::collections::HashMap;

use super::{PgStore, int, on_client};
use crate::store::StoreError;

/// Sets this node's unmet demand for `$1` to `$2` slots; a row new to
/// the table wakes every claimer, so that the nodes holding the pool's
/// slots look at the shares at once (`xmax = 0`: inserted, not updated).
const SET_WANT: &str = "WITH up AS (
       INSERT INTO pool_wants (pool, want, node) VALUES ($1, $2, $3)
       ON CONFLICT (pool, node) DO UPDATE SET want = EXCLUDED.want
       RETURNING (xmax = 0) AS inserted)
     SELECT pg_notify('ax_work', '') FROM up WHERE inserted";
/// This node no longer wants slots of `$1`.
const CLEAR_WANT: &str = "DELETE FROM pool_wants WHERE pool = $1 AND node = $2";
/// For each pool some other registered, not dead node wants slots of:
/// every other such node holding or wanting slots of it, with how many
/// it has leased and how many more it wants.
const CONTENDERS: &str = "WITH alive AS (SELECT id FROM nodes WHERE NOT released AND id <> $1),
     wanted AS (SELECT DISTINCT pool FROM pool_wants WHERE node IN (SELECT id FROM alive))
     SELECT pool, node, sum(leased)::int8, sum(want)::int8 FROM (
         SELECT pool, node, count(*) AS leased, 0::int8 AS want FROM pool_slots
         WHERE node IN (SELECT id FROM alive) AND pool IN (SELECT pool FROM wanted)
         GROUP BY pool, node
       UNION ALL
         SELECT pool, node, 0, want FROM pool_wants
         WHERE node IN (SELECT id FROM alive) AND pool IN (SELECT pool FROM wanted)) x
     GROUP BY pool, node ORDER BY pool, node";

/// Another node's stake in a pool: the slots it has leased, and how many
/// more it wants (0: it has what it can use).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stake {
    pub node: String,
    pub leased: u32,
    pub want: u32,
}

impl PgStore {
    /// Records that this node could use `want` more slots of `pool` than
    /// it has leased (0: none, the row goes).
    pub fn set_want(&mut self, pool: &str, want: u32) -> Result<(), StoreError> {
        if want == 0 {
            self.as_node(CLEAR_WANT, &[&pool])?;
        } else {
            self.as_node(SET_WANT, &[&pool, &i64::from(want)])?;
        }
        Ok(())
    }

    /// The other nodes' stakes in each pool that one of them wants more
    /// slots of (pools no other node wants are absent). Empty before
    /// this node registered.
    pub fn contenders(&mut self) -> Result<HashMap<String, Vec<Stake>>, StoreError> {
        let Some(me) = self.me().cloned() else {
            return Ok(HashMap::new());
        };
        let rows = on_client!(self, |client| async {
            let statement = client.prepare_cached(CONTENDERS).await?;
            Ok::<_, StoreError>(client.query(&statement, &[&me.id]).await?)
        })?;
        let mut by_pool: HashMap<String, Vec<Stake>> = HashMap::new();
        for r in rows {
            let pool: String = r.try_get(0)?;
            by_pool.entry(pool).or_default().push(Stake {
                node: r.try_get(1)?,
                leased: int(r.try_get(2)?, "leased slots")?,
                want: int(r.try_get(3)?, "wanted slots")?,
            });
        }
        Ok(by_pool)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::postgres::{NodeInfo, PgUrl};
    use ax_testkit::pg::TestDb;

    /// A store registered and beating as node `id`.
    fn node(db: &TestDb, id: &str) -> PgStore {
        let mut store = PgStore::open(&PgUrl::parse(&db.url).unwrap()).unwrap();
        store.register(id).unwrap();
        let info = NodeInfo {
            id: id.to_string(),
            host: "h".to_string(),
            version: "v".to_string(),
            slots: 8,
            heartbeat_ms: 60_000,
            lease_ms: 360_000,
        };
        store.beat(&info, true).unwrap();
        store
    }

    #[test]
    fn wants_are_seen_by_the_other_nodes_and_go_with_a_departed_node() {
        let Some(db) = TestDb::create("pg_wants") else {
            return;
        };
        let (mut a, mut b) = (node(&db, "a"), node(&db, "b"));
        a.ensure_pool_slots(&[("io".to_string(), 3)]).unwrap();
        assert_eq!(a.lease("io", 3, 2).unwrap(), vec![0, 1]);
        assert_eq!(b.lease("io", 3, 5).unwrap(), vec![2]);
        // Nobody wants more: no pool to share.
        assert!(a.contenders().unwrap().is_empty());
        b.set_want("io", 4).unwrap();
        let b_stake = Stake {
            node: "b".to_string(),
            leased: 1,
            want: 4,
        };
        assert_eq!(a.contenders().unwrap()["io"], vec![b_stake.clone()]);
        // B sees A's leases only once A wants too; never its own row.
        assert!(b.contenders().unwrap().is_empty());
        a.set_want("io", 1).unwrap();
        b.set_want("io", 2).unwrap();
        let a_stake = Stake {
            node: "a".to_string(),
            leased: 2,
            want: 1,
        };
        assert_eq!(b.contenders().unwrap()["io"], vec![a_stake]);
        assert_eq!(a.contenders().unwrap()["io"][0].want, 2);
        a.set_want("io", 0).unwrap();
        assert!(b.contenders().unwrap().is_empty());
        // A node that leaves takes its leases and its demand with it.
        b.leave("b").unwrap();
        assert!(a.contenders().unwrap().is_empty());
        assert_eq!(
            db.query("SELECT count(*) FROM pool_wants").unwrap()[0][0],
            "0"
        );
        assert_eq!(a.lease("io", 3, 5).unwrap(), vec![2]);
    }
}
