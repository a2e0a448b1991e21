//! The stores as a library, without axd: one suite against SQLite and
//! PostgreSQL alike, and triggers across a restart of the SQLite store.
//! One test binary, a module per concern.

mod engine_durable_triggers;
mod store_conformance;
mod store_schema;
