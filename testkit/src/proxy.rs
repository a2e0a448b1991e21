//! A TCP fault proxy: listens on `127.0.0.1:0` and forwards every
//! connection to a target (PostgreSQL in the cluster tests), and can be
//! switched at run time between
//!
//! * [`Mode::Pass`]: bytes go through as they come;
//! * [`Mode::Cut`]: every open connection is closed, and new ones are
//!   closed as soon as they are accepted, until healed (a server or
//!   network that refuses);
//! * [`Mode::Stall`]: nothing is forwarded in either direction, closes
//!   included, while every socket stays open, and new connections are
//!   accepted and stalled too (a black hole: the peer's kernel still
//!   acknowledges, so only a timeout of the client's own notices);
//! * [`Mode::Delay`]: each chunk waits the given time before it is
//!   forwarded, each way (added latency);
//!
//! and healed back to `Pass` ([`Proxy::heal`]); what a stall held is then
//! forwarded.
//!
//! Plain std threads, two per connection (one each way) and one that
//! accepts: a test's handful of connections needs no runtime, and the
//! proxy works the same under a sync or an async test. Each pump reads a
//! chunk, then waits while the mode says stall, sleeps the delay, and
//! writes it; a cut shuts both sockets down, which ends the pumps' reads.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

/// What the proxy does to the bytes it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Pass,
    Cut,
    Stall,
    Delay(Duration),
}

struct State {
    mode: Mode,
    /// Both sockets of every open connection, to be shut down by a cut.
    open: Vec<(u64, TcpStream, TcpStream)>,
    next_id: u64,
}

struct Inner {
    state: Mutex<State>,
    changed: Condvar,
    stopped: AtomicBool,
    target: SocketAddr,
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn shut_all(state: &mut State) {
        for (_, a, b) in state.open.drain(..) {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
        }
    }
}

/// A running proxy; stopped (every connection closed) when dropped.
pub struct Proxy {
    inner: Arc<Inner>,
    addr: SocketAddr,
}

impl Proxy {
    /// A proxy in `Pass` mode to `target`, listening on a free port of
    /// 127.0.0.1.
    pub fn start(target: SocketAddr) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                mode: Mode::Pass,
                open: Vec::new(),
                next_id: 0,
            }),
            changed: Condvar::new(),
            stopped: AtomicBool::new(false),
            target,
        });
        let accepting = inner.clone();
        std::thread::Builder::new()
            .name("proxy-accept".into())
            .spawn(move || accept(listener, accepting))?;
        Ok(Proxy { inner, addr })
    }

    /// A proxy to the PostgreSQL server of `url` (its first host and
    /// port, 5432 by default).
    pub fn to_postgres(url: &str) -> std::io::Result<Proxy> {
        let (host, port) = pg_host_port(url).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("no host in {url}"),
            )
        })?;
        let target = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))?
            .next()
            .ok_or_else(|| std::io::Error::other(format!("{host} has no address")))?;
        Proxy::start(target)
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `url` (a `postgres://` URL) with its host and port replaced by
    /// this proxy's.
    pub fn url_for(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        let user = authority
            .rsplit_once('@')
            .map(|(u, _)| format!("{u}@"))
            .unwrap_or_default();
        format!("{scheme}://{user}{}{tail}", self.addr)
    }

    pub fn mode(&self) -> Mode {
        self.inner.lock().mode
    }

    /// Switches to `mode` (a cut closes every open connection at once).
    pub fn set(&self, mode: Mode) {
        let mut state = self.inner.lock();
        state.mode = mode;
        if mode == Mode::Cut {
            Inner::shut_all(&mut state);
        }
        self.inner.changed.notify_all();
    }

    pub fn cut(&self) {
        self.set(Mode::Cut);
    }

    pub fn stall(&self) {
        self.set(Mode::Stall);
    }

    pub fn delay(&self, d: Duration) {
        self.set(Mode::Delay(d));
    }

    pub fn heal(&self) {
        self.set(Mode::Pass);
    }

    /// Connections open now.
    pub fn connections(&self) -> usize {
        self.inner.lock().open.len()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.inner.stopped.store(true, Ordering::SeqCst);
        {
            let mut state = self.inner.lock();
            state.mode = Mode::Cut;
            Inner::shut_all(&mut state);
        }
        self.inner.changed.notify_all();
        // Wakes the accept loop, which then sees `stopped`.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

/// `(host, port)` of a `postgres://user@host:port/db` URL.
fn pg_host_port(url: &str) -> Option<(String, u16)> {
    let rest = url.split_once("://")?.1;
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    match host_port.rsplit_once(':') {
        Some((h, p)) => Some((h.to_string(), p.parse().ok()?)),
        None if !host_port.is_empty() => Some((host_port.to_string(), 5432)),
        None => None,
    }
}

fn accept(listener: TcpListener, inner: Arc<Inner>) {
    for client in listener.incoming() {
        if inner.stopped.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else {
            // EMFILE and the like: do not spin.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        if inner.lock().mode == Mode::Cut {
            drop(client);
            continue;
        }
        let _ = client.set_nodelay(true);
        let Ok(server) = TcpStream::connect_timeout(&inner.target, Duration::from_secs(5)) else {
            continue;
        };
        let _ = server.set_nodelay(true);
        let (Ok(c2), Ok(s2), Ok(c3), Ok(s3)) = (
            client.try_clone(),
            server.try_clone(),
            client.try_clone(),
            server.try_clone(),
        ) else {
            continue;
        };
        let id = {
            let mut state = inner.lock();
            // A cut may have come while connecting.
            if state.mode == Mode::Cut {
                continue;
            }
            let id = state.next_id;
            state.next_id += 1;
            state.open.push((id, c3, s3));
            id
        };
        for (from, to, name) in [(client, s2, "proxy-up"), (server, c2, "proxy-down")] {
            let inner = inner.clone();
            let _ = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || pump(from, to, &inner, id));
        }
    }
}

/// Copies `from` to `to` chunk by chunk under the proxy's mode until
/// either side ends; then ends both (the connection is gone).
fn pump(mut from: TcpStream, mut to: TcpStream, inner: &Inner, id: u64) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = from.read(&mut buf).unwrap_or(0);
        // Held while stalled: the end of the stream too.
        let delay = {
            let mut state = inner.lock();
            while state.mode == Mode::Stall {
                state = inner.changed.wait(state).unwrap_or_else(|e| e.into_inner());
            }
            match state.mode {
                Mode::Cut => break,
                Mode::Delay(d) => Some(d),
                _ => None,
            }
        };
        if n == 0 {
            break;
        }
        if let Some(d) = delay {
            std::thread::sleep(d);
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
    inner.lock().open.retain(|(i, _, _)| *i != id);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// An echo server on a free port; returns its address.
    fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in l.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut r = s.try_clone().unwrap();
                    let mut w = s;
                    let _ = std::io::copy(&mut r, &mut w);
                });
            }
        });
        addr
    }

    fn round_trip(s: &mut TcpStream, msg: &[u8]) -> std::io::Result<Vec<u8>> {
        s.write_all(msg)?;
        let mut back = vec![0u8; msg.len()];
        s.read_exact(&mut back)?;
        Ok(back)
    }

    #[test]
    fn passes_stalls_delays_cuts_and_heals() {
        let proxy = Proxy::start(echo()).unwrap();
        let mut s = TcpStream::connect(proxy.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        assert_eq!(round_trip(&mut s, b"hello").unwrap(), b"hello");

        // Stalled: the socket stays open, nothing comes back; on heal what
        // was held arrives.
        proxy.stall();
        s.write_all(b"held").unwrap();
        let mut buf = [0u8; 4];
        let err = s.read(&mut buf).unwrap_err();
        assert!(
            matches!(
                err.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "{err}"
        );
        // A new connection is accepted and stalled too.
        let mut late = TcpStream::connect(proxy.addr()).unwrap();
        late.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        late.write_all(b"late").unwrap();
        assert!(late.read(&mut buf).is_err());
        proxy.heal();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        late.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"held");
        late.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"late");

        // Delayed: each way.
        proxy.delay(Duration::from_millis(100));
        let t = Instant::now();
        assert_eq!(round_trip(&mut s, b"slow").unwrap(), b"slow");
        assert!(
            t.elapsed() >= Duration::from_millis(200),
            "{:?}",
            t.elapsed()
        );
        proxy.heal();

        // Cut: open connections end, new ones are closed at once.
        assert_eq!(proxy.connections(), 2);
        proxy.cut();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(s.read(&mut buf).unwrap_or(0), 0, "closed");
        let mut refused = TcpStream::connect(proxy.addr()).unwrap();
        refused
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        assert!(round_trip(&mut refused, b"x").is_err());
        proxy.heal();
        let mut again = TcpStream::connect(proxy.addr()).unwrap();
        assert_eq!(round_trip(&mut again, b"back").unwrap(), b"back");
    }

    #[test]
    fn postgres_urls_go_through_the_proxy() {
        assert_eq!(
            pg_host_port("postgres://postgres@127.0.0.1:5432/test"),
            Some(("127.0.0.1".into(), 5432))
        );
        assert_eq!(
            pg_host_port("postgres://h/x?sslmode=disable"),
            Some(("h".into(), 5432))
        );
        let proxy = Proxy::start(echo()).unwrap();
        let url = proxy.url_for("postgres://postgres@127.0.0.1:5432/db?x=1");
        assert_eq!(url, format!("postgres://postgres@{}/db?x=1", proxy.addr()));
    }
}
