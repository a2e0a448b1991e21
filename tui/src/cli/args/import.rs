//! The flags of `ax import` and its converters.

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// `ax import`: its subcommand.
#[derive(Args, Debug, Clone)]
pub struct ImportArgs {
    #[command(subcommand)]
    pub command: ImportCommand,
}

// The converters of other schedulers' files.
#[derive(Subcommand, Debug, Clone)]
pub enum ImportCommand {
    /// Convert crontabs into job files, one per entry (docs/operations.md, "Migrating from cron").
    ///
    /// Each FILE (`-`, or none: stdin) is read as a system crontab (a user
    /// column: files named `crontab` or in a `cron.d` folder, or when every
    /// line's sixth field names a user and one of them exists here) or as a
    /// user's (`crontab -l`); --system and --user-format decide instead.
    /// The job files go to stdout, each after a `# file: NAME.toml` line, or
    /// into --out DIR. Stderr gets the summary: the entries converted, each
    /// caveat and each entry that could not be converted, as FILE:LINE: why.
    /// Exit 0 when every entry was converted, 1 when one could not be.
    Cron(ImportCronArgs),
}

/// The flags of `ax import cron`.
#[derive(Args, Debug, Clone)]
pub struct ImportCronArgs {
    /// Crontab files; `-` (or none) reads stdin.
    #[arg(value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Whose crontab a user-format file is (`crontab -l -u NAME`): its jobs get `user = "NAME"`.
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// Write one NAME.toml per entry into DIR (created if missing; an existing file is not overwritten).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Read every FILE as a system crontab (a user column after the schedule).
    #[arg(long, conflicts_with = "user_format")]
    pub system: bool,
    /// Read every FILE as a user's crontab (no user column).
    #[arg(long)]
    pub user_format: bool,
}
