//! The admin listener: accepts connections, with TLS when `[admin.tls]` is set
//! (each handshake uses the material in force at that moment), learns the
//! principal of a verified client certificate, and serves the router over
//! HTTP/1.1.
//!
//! Health and readiness must stay answerable whatever other callers do. So a
//! newcomer is not turned away while some connection sits idle: when every
//! place is taken, the oldest connection between requests (and past a short
//! grace period, so that a newcomer has time to send its request) is closed to
//! make room. Every request has a deadline for its header and another for the
//! whole exchange, body included. A caller holding connections open, idle or
//! trickling a header, loses them to the next probe, however fast it reopens
//! them.

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
/// How long a request's header may take to arrive.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one request may take from its header to its answer, body included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Admin connections are few; past this many, an idle one makes room.
const MAX_CONNECTIONS: usize = 64;
/// Past this many, newcomers are turned away.
const HARD_MAX_CONNECTIONS: usize = 1024;
/// A new connection has this long to send its request before it may be closed
/// to make room for another.
const EVICTION_GRACE: Duration = Duration::from_millis(500);

/// One open admin connection.
struct Entry {
    opened: std::time::Instant,
    /// A request is being answered on it.
    busy: Arc<std::sync::atomic::AtomicBool>,
    close: tokio::sync::oneshot::Sender<()>,
}

/// The open admin connections, oldest first.
#[derive(Default)]
struct Open {
    next: u64,
    connections: std::collections::BTreeMap<u64, Entry>,
}

impl Open {
    /// Registers a connection. When every place is taken, the oldest connection
    /// that is between requests and has had its grace period is closed to make
    /// room; a connection is turned away only past the hard cap with none such.
    fn admit(&mut self) -> Option<Place> {
        use std::sync::atomic::Ordering;
        if self.connections.len() >= MAX_CONNECTIONS {
            let now = std::time::Instant::now();
            let idle = |e: &Entry| !e.busy.load(Ordering::Relaxed);
            let full = self.connections.len() >= HARD_MAX_CONNECTIONS;
            let victim = self
                .connections
                .iter()
                .find(|(_, e)| idle(e) && now.duration_since(e.opened) >= EVICTION_GRACE)
                .or_else(|| self.connections.iter().find(|(_, e)| full && idle(e)))
                .map(|(id, _)| *id);
            match victim {
                Some(id) => {
                    if let Some(e) = self.connections.remove(&id) {
                        let _ = e.close.send(());
                    }
                }
                None if full => return None,
                None => {}
            }
        }
        let (close, closed) = tokio::sync::oneshot::channel();
        let busy = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let id = self.next;
        self.next += 1;
        self.connections.insert(
            id,
            Entry {
                opened: std::time::Instant::now(),
                busy: Arc::clone(&busy),
                close,
            },
        );
        Some(Place {
            id,
            busy,
            evicted: closed,
        })
    }
}

/// An admitted connection's place among the open ones.
struct Place {
    id: u64,
    /// Set while a request is being answered.
    busy: Arc<std::sync::atomic::AtomicBool>,
    /// Resolves when the connection must close to make room.
    evicted: tokio::sync::oneshot::Receiver<()>,
}

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
    let open = Arc::new(std::sync::Mutex::new(Open::default()));
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
                let Some(Place { id, busy, evicted }) = open_lock(&open).admit() else {
                    tracing::warn!(%peer, "admin: connection refused: {HARD_MAX_CONNECTIONS} open, none idle");
                    continue;
                };
                let open = Arc::clone(&open);
                let router = router.clone();
                let material = tls.as_ref().map(|cell| cell.current());
                tokio::spawn(async move {
                    let served = async move { match material {
                        None => {
                            let caller = Caller { peer, principal: None };
                            serve_connection(TokioIo::new(stream), router, caller, busy).await;
                        }
                        Some(material) => {
                            let accepting = crate::tls::hello::accept(Arc::clone(&material.config), stream);
                            let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, accepting).await {
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
                            let leaf = stream.peer_certificates().and_then(|c| c.first());
                            let principal = match leaf.map(|l| material.principal(l)) {
                                None => None,
                                Some(Ok(p)) => Some(p),
                                Some(Err(e)) => {
                                    tracing::info!(%peer, "admin: connection refused: {e}");
                                    return;
                                }
                            };
                            let caller = Caller { peer, principal };
                            serve_connection(TokioIo::new(stream), router, caller, busy).await;
                        }
                    } };
                    tokio::select! {
                        () = served => {}
                        _ = evicted => tracing::debug!(%peer, "admin: connection closed to make room for a newer one"),
                    }
                    open_lock(&open).connections.remove(&id);
                });
            }
        }
    }
}

/// 408, for a request that took longer than `REQUEST_TIMEOUT`.
fn timed_out() -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        axum::http::StatusCode::REQUEST_TIMEOUT,
        [(axum::http::header::CONNECTION, "close")],
        axum::Json(serde_json::json!({
            "error": format!("the request took longer than {} s", REQUEST_TIMEOUT.as_secs())
        })),
    )
        .into_response()
}

fn open_lock(open: &std::sync::Mutex<Open>) -> std::sync::MutexGuard<'_, Open> {
    // Every update is one insert or removal, so a panicked holder leaves it whole.
    open.lock().unwrap_or_else(|e| e.into_inner())
}

async fn serve_connection<S>(
    io: TokioIo<S>,
    router: Router,
    caller: Caller,
    busy: Arc<std::sync::atomic::AtomicBool>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service =
        hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(caller.clone());
            let answer = router.clone().oneshot(request.map(axum::body::Body::new));
            let busy = Arc::clone(&busy);
            busy.store(true, std::sync::atomic::Ordering::Relaxed);
            async move {
                let answered = match tokio::time::timeout(REQUEST_TIMEOUT, answer).await {
                    Ok(answered) => answered,
                    Err(_) => Ok(timed_out()),
                };
                busy.store(false, std::sync::atomic::Ordering::Relaxed);
                answered
            }
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
