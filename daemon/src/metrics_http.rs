//! `GET /metrics` over HTTP/1 (hyper), for Prometheus to scrape. The text
//! comes from the scheduler thread through `ask`, which answers from state
//! it already holds.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// Whether `addr` may be served without `metrics_public = true`.
pub fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

/// Serves until `shutdown` resolves. `ask` returns the exposition text, or
/// `None` when the daemon is stopping.
pub async fn serve<F, Fut>(listener: TcpListener, ask: F, shutdown: impl Future<Output = ()>)
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Option<String>> + Send + 'static,
{
    let ask = Arc::new(ask);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!("metrics listener: {e}");
                    continue;
                }
            },
        };
        let ask = ask.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let ask = ask.clone();
                async move { Ok::<_, Infallible>(respond(&req, ask.as_ref()).await) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
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
