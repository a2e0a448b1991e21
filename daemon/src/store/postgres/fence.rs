//! Fencing: each registered node's writes are checked against the epoch
//! it registered with, which another node raises when it declares this
//! one dead (docs/operations.md, "Cluster").

use crate::store::StoreError;

/// This node as registered: its id, number (the offset of its ids) and
/// the epoch its writes are checked against.
#[derive(Clone, Debug)]
pub struct Me {
    pub id: String,
    pub no: u64,
    pub epoch: i64,
}

/// Reads (and share-locks) a node's stored epoch.
pub(super) const EPOCH: &str = "SELECT epoch FROM node_numbers WHERE id = $1 FOR SHARE";

/// Fails with `Fenced` unless `me`'s epoch is still the stored one. The
/// row is share-locked to the end of the caller's transaction, so a node
/// declaring `me` dead (which raises the epoch) waits for that
/// transaction, and everything `me` wrote before is handed back with the
/// rest.
pub(super) async fn check_epoch(
    tx: &deadpool_postgres::Transaction<'_>,
    me: &Me,
) -> Result<(), StoreError> {
    let statement = tx.prepare_cached(EPOCH).await?;
    let rows = tx.query(&statement, &[&me.id]).await?;
    epoch_is(&rows, me)
}

/// `check_epoch` on the rows `EPOCH` returned.
pub(super) fn epoch_is(rows: &[tokio_postgres::Row], me: &Me) -> Result<(), StoreError> {
    match rows.first().map(|r| r.try_get::<_, i64>(0)).transpose()? {
        Some(epoch) if epoch == me.epoch => Ok(()),
        _ => Err(StoreError::Fenced(me.id.clone())),
    }
}
