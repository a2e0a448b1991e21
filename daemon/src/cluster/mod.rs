//! A cluster of axd nodes on one PostgreSQL store (docs/operations.md,
//! "Cluster"): the node registry, its lease and heartbeat (`nodes`), the
//! claimer of offered DAG runs (`claimer`), and the feed of other nodes'
//! events (`feed`).

pub(crate) mod claimer;
pub(crate) mod feed;
pub(crate) mod nodes;
