//! The admin listener: accepts connections, with TLS when `[admin.tls]` is set
//! (each handshake uses the material in force at that moment), learns the
//! principal of a verified client certificate, and serves the router over
//! HTTP/1.1.

use super::Caller;
use crate::tls::TlsCell;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::ServiceExt;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request may take to arrive, so that an idle or slow peer cannot
/// hold a connection open for ever.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// Admin connections are few; more than this at once are turned away.
const MAX_CONNECTIONS: usize = 64;

/// Binds the admin listener.
pub async fn bind(listen: &str) -> Result<(TcpListener, SocketAddr), std::io::Error> {
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    if !addr.ip().is_loopback() {
        tracing::warn!(
            "the admin API listens on {addr}, which is not a loopback address; keep admin.token secret and prefer [admin.tls]"
        );
    }
    Ok((listener, addr))
}

/// Serves `router` on `listener` until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<Arc<TlsCell>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        tokio::select! {
            _ = crate::server::stopped(&mut shutdown) => return,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(pair) => pair,
                    Err(e) => {
                        tracing::warn!("admin: accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
                    tracing::warn!(%peer, "admin: connection refused: {MAX_CONNECTIONS} already open");
                    continue;
                };
                let router = router.clone();
                let material = tls.as_ref().map(|cell| cell.current());
                tokio::spawn(async move {
                    match material {
                        None => {
                            let caller = Caller { peer, principal: None };
                            serve_connection(TokioIo::new(stream), router, caller).await;
                        }
                        Some(material) => {
                            let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(&material.config));
                            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                                Ok(Ok(s)) => s,
                                Ok(Err(e)) => {
                                    tracing::debug!(%peer, "admin: TLS handshake failed: {e}");
                                    return;
                                }
                                Err(_) => {
                                    tracing::debug!(%peer, "admin: TLS handshake timed out");
                                    return;
                                }
                            };
                            let leaf = stream.get_ref().1.peer_certificates().and_then(|c| c.first());
                            let principal = match leaf.map(|l| material.principal(l)) {
                                None => None,
                                Some(Ok(p)) => Some(p),
                                Some(Err(e)) => {
                                    tracing::info!(%peer, "admin: connection refused: {e}");
                                    return;
                                }
                            };
                            let caller = Caller { peer, principal };
                            serve_connection(TokioIo::new(stream), router, caller).await;
                        }
                    }
                    drop(permit);
                });
            }
        }
    }
}

async fn serve_connection<S>(io: TokioIo<S>, router: Router, caller: Caller)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service =
        hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(caller.clone());
            router.clone().oneshot(request.map(axum::body::Body::new))
        });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(64 * 1024);
    let builder = builder.http1_only();
    if let Err(e) = builder.serve_connection(io, service).await {
        tracing::debug!("admin: connection ended: {e}");
    }
}
