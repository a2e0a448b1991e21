//! The PostgreSQL store (`store = "postgres://…"` in axd.toml;
//! docs/operations.md, "PostgreSQL"): the same tables, the same semantics
//! for every `Store` method as the SQLite store, and the same group commit
//! (one scheduler step, or a group of them, is one transaction whose rows
//! go in one multi-row statement per table).
//!
//! Why a runtime of its own: the `Store` trait is synchronous. The writer
//! thread, the scheduler thread (reads), the pruner and the cluster's
//! threads (heartbeat, claimer, feed, log shipper) each call it from a
//! plain OS thread and wait for the answer, as with SQLite, while
//! tokio-postgres is async. So the store owns a runtime with one worker
//! thread, on which the pool's connection tasks run, and each call blocks
//! its caller with `Handle::block_on`. One worker rather than a
//! current-thread runtime: a current-thread runtime only makes progress
//! inside its single `block_on`, so the connections of several threads'
//! handles could not share it; and not axd's main runtime, whose socket
//! and signal work must never wait behind store I/O (and tests and tools
//! use the store without one).
//!
//! Why a pool (deadpool-postgres) when each handle is used by one thread
//! at a time: a connection that breaks (server restart, network) is
//! dropped and replaced on the next call, so the writer's retry loop
//! recovers once the server is back; and the handles of one axd share a
//! bounded set of connections.

mod cluster;
mod commit;
mod feed;
mod fence;
mod load;
mod logs;
mod nodes;
mod prune;
mod queries;
mod schema;
mod unique;
mod wants;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;

pub use cluster::{ClaimAging, Claimed, DONE_CHANNEL, Leading, STRIDE};
pub use feed::{EVENTS_CHANNEL, EventSeqs, parse_payload};
pub use fence::Me;
pub use logs::{CHUNK_BYTES, PgLogs, ShippedChunk, ShippedDone, StoredRange};
pub use nodes::{Beat, DagVersionRow, NodeInfo, NodeRow};
pub use wants::Stake;

use super::specs::SpecHashes;
use super::{StoreError, error_chain};

/// The server's clock in ms: the clock every node's lease and age is
/// read on, so they do not depend on how well the machines' clocks agree.
const SERVER_NOW: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// Connections one axd holds at most (scheduler reads, writer, pruner and
/// the node heartbeat use one each; the rest is slack).
pub(crate) const POOL_SIZE: usize = 8;

/// Unique keys held at once by one axd (each until its commit).
const HOLDS_POOL_SIZE: usize = 4;

/// How long a call waits for a connection, or for a new one to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A `postgres://` URL as given in axd.toml, checked. Shown (`Debug`
/// too) only through [`redact`].
#[derive(Clone)]
pub struct PgUrl {
    text: String,
    config: tokio_postgres::Config,
}

impl std::fmt::Debug for PgUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PgUrl({:?})", self.redacted())
    }
}

impl PartialEq for PgUrl {
    fn eq(&self, other: &PgUrl) -> bool {
        self.text == other.text
    }
}

impl PgUrl {
    pub fn parse(text: &str) -> Result<PgUrl, String> {
        if !(text.starts_with("postgres://") || text.starts_with("postgresql://")) {
            return Err(format!(
                "store {:?}: write a postgres:// URL (e.g. \"postgres://ax@db.example/ax\"), or leave `store` out for SQLite in state_dir",
                redact(text)
            ));
        }
        let config: tokio_postgres::Config = text
            .parse()
            .map_err(|e| format!("store {:?}: {}", redact(text), error_chain(&e)))?;
        if config.get_hosts().is_empty() {
            return Err(format!("store {:?}: no host", redact(text)));
        }
        Ok(PgUrl {
            text: text.to_string(),
            config,
        })
    }

    /// This URL with every connection's liveness bounded by the node's
    /// `heartbeat` and `lease` (docs/operations.md, "A partitioned
    /// node"): TCP keepalives every heartbeat (at least a second; a silent
    /// peer is given up after about four), a TCP user timeout of `lease − 2 × heartbeat`
    /// (data left unacknowledged that long closes the connection, so the
    /// next renewal, a heartbeat later, still lands within the lease on a
    /// fresh one), and on the server's side a statement timeout of two
    /// leases (at least a minute: loads and prunes of big stores) and an
    /// idle-in-transaction timeout of `lease − heartbeat`, so a node cut
    /// off mid-transaction releases its locks by the time its lease ends
    /// for the others. Options of the URL's own come first and keep
    /// their place; these are appended after them.
    pub fn with_liveness(&self, heartbeat: Duration, lease: Duration) -> PgUrl {
        let mut config = self.config.clone();
        // The kernel counts keepalive times in whole seconds, at least one.
        let keepalive = heartbeat.max(Duration::from_secs(1));
        config
            .keepalives(true)
            .keepalives_idle(keepalive)
            .keepalives_interval(keepalive)
            .keepalives_retries(3)
            .tcp_user_timeout(lease.saturating_sub(heartbeat * 2).max(heartbeat));
        let statement = (lease * 2).max(Duration::from_secs(60));
        let idle = lease.saturating_sub(heartbeat).max(heartbeat);
        let ours = format!(
            "-c statement_timeout={} -c idle_in_transaction_session_timeout={}",
            statement.as_millis(),
            idle.as_millis()
        );
        let options = match config.get_options() {
            Some(theirs) if !theirs.is_empty() => format!("{theirs} {ours}"),
            _ => ours,
        };
        config.options(options);
        PgUrl {
            text: self.text.clone(),
            config,
        }
    }

    /// The URL without its password, for logs and `ax status`.
    pub fn redacted(&self) -> String {
        redact(&self.text)
    }
}

/// The store's connection text with every password libpq would read
/// replaced by `***`: a URL's userinfo (`postgres://user:secret@host`), a
/// URL's `password=` query parameter, and a key/value conninfo string's
/// `password=` (`host=db password='se cret'`). The one function by which
/// axd shows the store anywhere (logs, errors, `ax status`).
pub fn redact(text: &str) -> String {
    match text.split_once("://") {
        Some((scheme, rest)) => redact_url(scheme, rest),
        None => redact_keywords(text),
    }
}

fn redact_url(scheme: &str, rest: &str) -> String {
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => format!("{userinfo}@{host}"),
        },
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let params: Vec<String> = query
                .split('&')
                .map(|param| match param.split_once('=') {
                    Some((key, _)) if is_password_key(key) => format!("{key}=***"),
                    _ => param.to_string(),
                })
                .collect();
            format!("{path}?{}", params.join("&"))
        }
        None => tail.to_string(),
    };
    format!("{scheme}://{authority}{tail}")
}

/// `password` however a URL spells it (`Password`, `%70assword`).
fn is_password_key(key: &str) -> bool {
    let mut decoded = String::new();
    let mut bytes = key.bytes();
    while let Some(b) = bytes.next() {
        if b == b'%' {
            let hex: Vec<u8> = bytes.by_ref().take(2).collect();
            match std::str::from_utf8(&hex)
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                Some(c) => decoded.push(c as char),
                None => return true, // unreadable: hide the value
            }
        } else {
            decoded.push(b as char);
        }
    }
    decoded.trim().eq_ignore_ascii_case("password")
}

/// A key/value conninfo string (`host=db password=secret`, values maybe
/// single-quoted with `\'` and `\\` escapes): each `password` value becomes
/// `***`.
fn redact_keywords(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        // A keyword starts the text or follows white space.
        let at_word = i == 0 || chars[i - 1].is_whitespace();
        let word: String = chars[i..].iter().take(8).collect();
        if at_word && word.eq_ignore_ascii_case("password") {
            let mut j = i + 8;
            while j < chars.len() && chars[j].is_whitespace() {
                j += 1;
            }
            if j < chars.len() && chars[j] == '=' {
                out.push_str(&word);
                out.push_str("=***");
                j += 1;
                while j < chars.len() && chars[j].is_whitespace() {
                    j += 1;
                }
                i = skip_value(&chars, j);
                continue;
            }
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

/// Where the conninfo value starting at `i` ends.
fn skip_value(chars: &[char], mut i: usize) -> usize {
    if chars.get(i) == Some(&'\'') {
        i += 1;
        while i < chars.len() {
            match chars[i] {
                '\\' => i += 2,
                '\'' => return i + 1,
                _ => i += 1,
            }
        }
        return chars.len();
    }
    while i < chars.len() && !chars[i].is_whitespace() {
        i += if chars[i] == '\\' { 2 } else { 1 };
    }
    i.min(chars.len())
}

#[cfg(test)]
mod redact_tests {
    use super::redact;

    #[test]
    fn no_password_form_libpq_reads_is_shown() {
        for (text, shown) in [
            ("postgres://ax:secret@db/ax", "postgres://ax:***@db/ax"),
            (
                "postgresql://ax:se%40cret@db:5432/ax?sslmode=require",
                "postgresql://ax:***@db:5432/ax?sslmode=require",
            ),
            (
                "postgres://ax@db/ax?password=secret",
                "postgres://ax@db/ax?password=***",
            ),
            (
                "postgres://db/ax?sslmode=disable&Password=secret&x=1",
                "postgres://db/ax?sslmode=disable&Password=***&x=1",
            ),
            (
                "postgres://db/ax?%70assword=secret",
                "postgres://db/ax?%70assword=***",
            ),
            (
                "postgres://ax:pw@db?password=secret",
                "postgres://ax:***@db?password=***",
            ),
            (
                "host=db password=secret dbname=ax",
                "host=db password=*** dbname=ax",
            ),
            (
                "host=db password = 'se cret \\' x' dbname=ax",
                "host=db password=*** dbname=ax",
            ),
            ("PASSWORD=secret", "PASSWORD=***"),
            ("host=db\tpassword=secret", "host=db\tpassword=***"),
            ("postgres://ax@db/ax", "postgres://ax@db/ax"),
            ("host=db user=passwordless", "host=db user=passwordless"),
        ] {
            let got = redact(text);
            assert_eq!(got, shown, "{text:?}");
            assert!(!got.contains("secret") && !got.contains("se cret"), "{got}");
        }
    }
}

/// Shuts the runtime down without waiting, so that dropping the last
/// handle is allowed anywhere (inside another runtime too).
struct PgRuntime(Option<tokio::runtime::Runtime>);

impl Drop for PgRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// What the handles of one store share.
struct Shared {
    pool: Pool,
    /// Connections that hold unique keys across a commit (`unique`): apart
    /// from `pool`, so that holds waiting for another node can never take
    /// the connection this node's writer needs to end its own holds.
    holds: Pool,
    rt: PgRuntime,
    target: String,
    /// For connections of their own (LISTEN, the cron leader's lock).
    config: tokio_postgres::Config,
    /// This node, once registered (`PgStore::register`): every handle's
    /// commits are then checked against its epoch and own what they create.
    node: std::sync::OnceLock<Me>,
}

impl Shared {
    /// Runs `fut` on the store's runtime and waits for it. Every caller
    /// is a thread of its own (the scheduler, the writer, the pruner, the
    /// heartbeat, the claimer, the shipper, a blocking task of axd's
    /// runtime), never an async task: waiting inside one would panic.
    fn block_on<F>(&self, fut: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        self.rt
            .0
            .as_ref()
            .expect("the runtime lives as long as the store")
            .handle()
            .block_on(fut)
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        Ok(self.pool.get().await?)
    }
}

/// One handle on a PostgreSQL store, for one thread; [`PgStore::another`]
/// makes more that share its connections.
pub struct PgStore {
    shared: Arc<Shared>,
    spec_hashes: SpecHashes,
    /// Unique keys this handle holds for the step being decided.
    holds: Option<unique::UniqueHolds>,
}

impl PgStore {
    /// Connects, and migrates the schema (under an advisory lock, so that
    /// nodes starting together migrate once).
    pub fn open(url: &PgUrl) -> Result<PgStore, StoreError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("ax-postgres")
            .enable_all()
            .build()?;
        let mut config = url.config.clone();
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        config.application_name("axd");
        let pool = build_pool(&config, POOL_SIZE)?;
        let holds = build_pool(&config, HOLDS_POOL_SIZE)?;
        let shared = Arc::new(Shared {
            pool,
            holds,
            rt: PgRuntime(Some(rt)),
            target: url.redacted(),
            config,
            node: std::sync::OnceLock::new(),
        });
        shared.block_on(async {
            let mut client = shared.client().await?;
            schema::migrate(&mut client).await
        })?;
        Ok(PgStore {
            shared,
            spec_hashes: SpecHashes::default(),
            holds: None,
        })
    }

    /// Another handle on the same database and connections, for another
    /// thread (its own spec cache: each writer knows what it wrote).
    pub fn another(&self) -> PgStore {
        PgStore {
            shared: self.shared.clone(),
            spec_hashes: SpecHashes::default(),
            holds: None,
        }
    }

    /// The URL without its password.
    pub fn target(&self) -> &str {
        &self.shared.target
    }
}

/// A pool of at most `size` connections to `config`.
fn build_pool(config: &tokio_postgres::Config, size: usize) -> Result<Pool, StoreError> {
    let manager = Manager::from_config(
        config.clone(),
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size)
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .wait_timeout(Some(CONNECT_TIMEOUT))
        .create_timeout(Some(CONNECT_TIMEOUT))
        .build()
        .map_err(|e| StoreError::Corrupt(format!("connection pool: {e}")))
}

/// Runs `$body` (a future using `$client`, a pooled connection) on the
/// store's runtime and waits for it. A call that fails because its
/// connection was closed under it (the server restarted or cut it) runs
/// again on another connection: the pool only notices a closed
/// connection when it is handed out again, and the error can arrive
/// before the client has seen the connection close.
macro_rules! on_client {
    ($store:expr, |$client:ident| $body:expr) => {{
        let shared = &*$store.shared;
        shared.block_on(async {
            // Every idle connection of the pool may have been cut at
            // once: one more try per connection the pool can hold.
            let mut tries_left = $crate::store::postgres::POOL_SIZE + 1;
            loop {
                tries_left -= 1;
                #[allow(unused_mut)]
                let mut $client = shared.client().await?;
                let result = $body.await;
                match result {
                    // Not back into the pool: the next `get` could hand
                    // it out again before its closing is noticed.
                    Err(StoreError::ConnectionLost(_)) if tries_left > 0 => {
                        drop(deadpool_postgres::Object::take($client));
                    }
                    Err(_) if tries_left > 0 && $client.is_closed() => {}
                    result => break result,
                }
            }
        })
    }};
}
use on_client;

/// Integers are BIGINT in PostgreSQL; a value that does not fit its Rust
/// type is a corrupt row, not a panic (`rows::fit`).
fn int<T: TryFrom<i64>>(v: i64, column: &'static str) -> Result<T, StoreError> {
    super::rows::fit(column, v)
}

/// PostgreSQL text cannot hold NUL; SQLite's can. A NUL in text from a
/// job or a client becomes U+FFFD rather than a commit that fails forever.
fn text(s: &str) -> String {
    if s.contains('\0') {
        s.replace('\0', "\u{fffd}")
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_and_redacted() {
        let u = PgUrl::parse("postgres://ax:secret@db.example:5433/ax?sslmode=disable").unwrap();
        assert_eq!(
            u.redacted(),
            "postgres://ax:***@db.example:5433/ax?sslmode=disable"
        );
        assert_eq!(
            PgUrl::parse("postgresql://postgres@127.0.0.1/test")
                .unwrap()
                .redacted(),
            "postgresql://postgres@127.0.0.1/test"
        );
        let err = PgUrl::parse("mysql://root:pw@db/x").unwrap_err();
        assert!(err.contains("postgres://") && !err.contains("pw"), "{err}");
        let err = PgUrl::parse("postgres://db.example:notaport/x").unwrap_err();
        assert!(err.contains("store"), "{err}");
        assert_eq!(text("a\0b"), "a\u{fffd}b");
    }

    #[test]
    fn connections_get_timeouts_from_the_heartbeat() {
        let u = PgUrl::parse("postgres://h/db?options=-c%20search_path%3Dax").unwrap();
        let c = u
            .with_liveness(Duration::from_secs(5), Duration::from_secs(30))
            .config;
        assert!(c.get_keepalives());
        assert_eq!(c.get_keepalives_idle(), Duration::from_secs(5));
        assert_eq!(c.get_tcp_user_timeout(), Some(&Duration::from_secs(20)));
        assert_eq!(
            c.get_options(),
            Some(
                "-c search_path=ax -c statement_timeout=60000 -c idle_in_transaction_session_timeout=25000"
            )
        );
    }
}
