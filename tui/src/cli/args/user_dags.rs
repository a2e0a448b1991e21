//! The flags of a user's own DAGs: `ax apply`, `ax edit`, `ax export`,
//! `ax remove` (docs/users.md, "User DAGs").

use std::path::PathBuf;

use clap::Args;

/// The flags of `ax apply`.
#[derive(Args, Debug, Clone)]
pub struct ApplyArgs {
    /// Job files; each is the DAG `@USER/<file stem>`.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Act on this user's DAGs (root and admins only).
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
}

/// The flags of `ax edit`, `ax export` and `ax remove`.
#[derive(Args, Debug, Clone)]
pub struct UserDagArgs {
    /// The DAG: its short name (`standup`) or its full name (`@alice/standup`).
    pub name: String,
    /// Act on this user's DAGs (root and admins only).
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
}
