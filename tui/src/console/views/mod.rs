//! The views: the five lists (runs, DAGs, pools, events, nodes) and the
//! two full-body sub-screens (the DAG drawing, the followed log). Each
//! view module owns its state (selection, filter, data), what its actions
//! do to it and its render; `list` and `context` hold
//! what they share.

pub(crate) mod context;
pub(crate) mod dags;
pub(crate) mod events;
pub(crate) mod graph;
pub(crate) mod list;
pub(crate) mod log;
pub(crate) mod nodes;
pub(crate) mod pools;
pub mod readings;
pub mod runs;
