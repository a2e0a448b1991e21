//! `GET /metrics` over HTTP/1 (hyper), for Prometheus to scrape. The text
//! comes from the scheduler thread through `ask`, which answers from state
//! it already holds.
//!
//! Bounded whatever the peers do (docs/operations.md, "Hostile or broken
//! clients"): at most `limits.metrics_connections` connections at once
//! (one more is closed as soon as it is accepted); a request's headers must
//! arrive whole within `limits.frame_timeout` of the connection starting to
//! read them, an idle kept-alive connection included; a failing `accept`
//! (no descriptors left) is retried after a pause that doubles up to 1 s,
//! and every such condition is logged at most once per 10 s.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::runtime::ratelog::{RateLog, held_back};

/// Whether `addr` may be served without `metrics_public = true`.
pub fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

/// The first pause after a failed `accept`, and the longest.
const ACCEPT_PAUSE: Duration = Duration::from_millis(10);
const ACCEPT_PAUSE_MAX: Duration = Duration::from_secs(1);

/// What the metrics listener allows (from `[limits]`).
#[derive(Clone, Copy, Debug)]
pub struct HttpLimits {
    pub connections: usize,
    pub header_timeout: Duration,
}

/// Counts a connection while it lives.
struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serves until `shutdown` resolves. `ask` returns the exposition text, or
/// `None` when the daemon is stopping.
pub async fn serve<F, Fut>(
    listener: TcpListener,
    ask: F,
    limits: HttpLimits,
    shutdown: impl Future<Output = ()>,
) where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Option<String>> + Send + 'static,
{
    let ask = Arc::new(ask);
    let open = Arc::new(AtomicUsize::new(0));
    let mut pause = ACCEPT_PAUSE;
    let (mut accept_log, mut full_log) = (RateLog::default(), RateLog::default());
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // EMFILE and the like: nothing is taken off the
                    // queue, so retrying at once would spin.
                    if let Some(n) = accept_log.allow(Instant::now()) {
                        tracing::warn!(
                            "metrics listener: accept failed: {e}; retrying in up to {ACCEPT_PAUSE_MAX:?}{}",
                            held_back(n)
                        );
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(ACCEPT_PAUSE_MAX);
                    continue;
                }
            },
        };
        pause = ACCEPT_PAUSE;
        if open.load(Ordering::Relaxed) >= limits.connections {
            if let Some(n) = full_log.allow(Instant::now()) {
                tracing::warn!(
                    "metrics listener: {} connections open (limits.metrics_connections): closed a new one from {peer}{}",
                    limits.connections,
                    held_back(n)
                );
            }
            drop(stream);
            continue;
        }
        open.fetch_add(1, Ordering::Relaxed);
        let guard = Open(open.clone());
        let ask = ask.clone();
        tokio::spawn(async move {
            let _guard = guard;
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let ask = ask.clone();
                async move { Ok::<_, Infallible>(respond(&req, ask.as_ref()).await) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.header_timeout)
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!("metrics connection: {e}");
            }
        });
    }
}

async fn respond<F, Fut>(req: &Request<Incoming>, ask: &F) -> Response<Full<Bytes>>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Option<String>>,
{
    let reply = |status: StatusCode, body: String| {
        Response::builder()
            .status(status)
            .header(
                "content-type",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )
            .body(Full::new(Bytes::from(body)))
            .expect("a static response is valid")
    };
    if req.uri().path() != "/metrics" {
        return reply(StatusCode::NOT_FOUND, "only /metrics is served\n".into());
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(StatusCode::METHOD_NOT_ALLOWED, "use GET\n".into());
    }
    match ask().await {
        Some(text) => reply(StatusCode::OK, text),
        None => reply(StatusCode::SERVICE_UNAVAILABLE, "axd is stopping\n".into()),
    }
}
