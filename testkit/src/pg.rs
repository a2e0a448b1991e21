//! A PostgreSQL database of its own for one test: created with a unique
//! name on the server at `AX_TEST_PG` (default
//! `postgres://postgres@127.0.0.1:5432/test`, the database connected to
//! for creating and dropping), dropped when the value is dropped.
//!
//! Without a server, [`TestDb::create`] prints one line (`skipped: no
//! PostgreSQL at …`, once per test binary) and returns `None`, so the test
//! passes having checked nothing; with `AX_REQUIRE_PG=1` (CI) it panics
//! instead, so a missing server cannot pass unseen.

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use ax_daemon::store::error_chain;
use tokio_postgres::{NoTls, SimpleQueryMessage};

pub const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The admin URL: `AX_TEST_PG`, else [`DEFAULT_URL`].
pub fn admin_url() -> String {
    std::env::var("AX_TEST_PG").unwrap_or_else(|_| DEFAULT_URL.to_string())
}

/// `AX_REQUIRE_PG=1`: the PostgreSQL tests must run.
pub fn required() -> bool {
    std::env::var("AX_REQUIRE_PG").is_ok_and(|v| v == "1")
}

pub struct TestDb {
    /// `postgres://…/NAME`: what axd.toml's `store` or `PgUrl::parse` takes.
    pub url: String,
    pub name: String,
    admin: String,
}

static SKIP_SAID: AtomicBool = AtomicBool::new(false);
static COUNTER: AtomicU32 = AtomicU32::new(0);

/// `url` with its database replaced by `db` (query parameters kept).
pub fn with_database(url: &str, db: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let query = tail.find('?').map(|i| &tail[i..]).unwrap_or("");
    format!("{scheme}://{authority}/{db}{query}")
}

/// Runs `sql` (one or more statements, simple protocol) on `url`; returns
/// the rows, every column as text (NULL: empty). On a thread of its own,
/// so that async tests may call it too.
fn simple(url: &str, sql: &str) -> Result<Vec<Vec<String>>, String> {
    std::thread::scope(|s| {
        s.spawn(|| simple_here(url, sql))
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

fn simple_here(url: &str, sql: &str) -> Result<Vec<Vec<String>>, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    rt.block_on(async {
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| error_chain(&e))?;
        config.connect_timeout(Duration::from_secs(3));
        let (client, conn) = config.connect(NoTls).await.map_err(|e| error_chain(&e))?;
        let conn = tokio::spawn(conn);
        let done = client.simple_query(sql).await.map_err(|e| error_chain(&e));
        drop(client);
        let _ = conn.await;
        Ok(done?
            .iter()
            .filter_map(|m| match m {
                SimpleQueryMessage::Row(r) => Some(
                    (0..r.len())
                        .map(|i| r.get(i).unwrap_or("").to_string())
                        .collect(),
                ),
                _ => None,
            })
            .collect())
    })
}

fn admin(url: &str, sql: &str) -> Result<(), String> {
    simple(url, sql).map(drop)
}

impl TestDb {
    /// A fresh database named after `hint` (the test's name); `None`, after
    /// saying so, when no server answers and PostgreSQL is not required.
    pub fn create(hint: &str) -> Option<TestDb> {
        let admin_url = admin_url();
        let clean: String = hint
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .take(30)
            .collect();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!(
            "ax_{clean}_{}_{}_{nanos}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        if let Err(e) = admin(&admin_url, &format!("CREATE DATABASE {name}")) {
            if required() {
                panic!("no PostgreSQL at {admin_url} ({e}) and AX_REQUIRE_PG=1");
            }
            if !SKIP_SAID.swap(true, Ordering::Relaxed) {
                // Straight to stderr: the test harness hides what print!
                // writes for passing tests.
                // One write: the line stays whole beside the harness's.
                let line = format!(
                    "skipped: no PostgreSQL at {admin_url} ({e}); set AX_TEST_PG to a server's URL, or AX_REQUIRE_PG=1 to fail instead\n"
                );
                let _ = std::io::stderr().write_all(line.as_bytes());
            }
            return None;
        }
        Some(TestDb {
            url: with_database(&admin_url, &name),
            name,
            admin: admin_url,
        })
    }

    /// Runs `sql` on this database (setting up what a test needs).
    pub fn execute(&self, sql: &str) -> Result<(), String> {
        admin(&self.url, sql)
    }

    /// The rows `sql` returns from this database, columns as text.
    pub fn query(&self, sql: &str) -> Result<Vec<Vec<String>>, String> {
        simple(&self.url, sql)
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        // FORCE: connections left by a killed axd do not keep it alive.
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        if let Err(e) = admin(&self.admin, &sql) {
            let _ = writeln!(
                std::io::stderr(),
                "cannot drop test database {}: {e}",
                self.name
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_database_is_replaced_in_the_url() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/test", "x"),
            "postgres://postgres@127.0.0.1:5432/x"
        );
        assert_eq!(
            with_database("postgres://u:p@h/test?sslmode=disable", "x"),
            "postgres://u:p@h/x?sslmode=disable"
        );
        assert_eq!(with_database("postgres://h", "x"), "postgres://h/x");
    }
}
