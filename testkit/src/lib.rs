//! What the tests and ax-bench share:
//!
//! * [`Daemon`]: a real `axd` in a temp dir, started, stopped (SIGTERM or
//!   SIGKILL) and restarted on the same state;
//! * [`Conn`]: a raw connection to its socket (NDJSON, JSON values);
//! * [`foreign_hello`]: a client of another uid;
//! * [`jobfiles`]: job files of a given size;
//! * [`pg::TestDb`]: a PostgreSQL database of its own for one test;
//! * [`Tmpfs`]: a small tmpfs for a real full disk;
//! * [`clock::SteppedClock`], [`clock::Stopped`]: a wall clock the test
//!   steps, and an axd paused with SIGSTOP;
//! * [`proxy::Proxy`]: a TCP fault proxy (pass, cut, stall, delay, heal)
//!   between axd and PostgreSQL;
//! * [`users`]: throwaway users and groups (root only).

pub mod clock;
pub mod conn;
pub mod daemon;
pub mod foreign;
pub mod jobfiles;
pub mod pg;
pub mod proxy;
pub mod tmpfs;
pub mod users;

pub use conn::{Conn, ConnError, run_ids};
pub use daemon::{Daemon, HarnessError, axd_beside};
pub use foreign::foreign_hello;
pub use proxy::{Mode, Proxy};
pub use tmpfs::{Filler, Tmpfs};

/// A tokio runtime of two worker threads (the machines ax is measured on
/// have two cores), for blocking code that drives async clients or spawns
/// processes with tokio.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}
