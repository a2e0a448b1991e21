//! The ax daemon: the scheduling engine and (later) the runtime around it.

pub mod engine;
