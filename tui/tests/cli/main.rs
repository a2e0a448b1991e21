//! The `ax` CLI as a user runs it, the real binary against a real axd (and,
//! for `cluster_follow`, a real PostgreSQL): one test binary, a module per
//! concern; `support` holds the helpers several of them use.

mod cluster_follow;
mod exit_codes;
mod follow;
mod hostile_output;
mod import;
mod import_runs;
mod local_users;
mod offline;
mod readings;
mod reference;
mod reload;
mod shutdown;
mod socket_roles;
mod support;
mod trusted_files;
mod user_dags;
