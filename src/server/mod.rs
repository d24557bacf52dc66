//! Listeners and connections: accepting, framing, keeping responses in request
//! order, capping connections, and shutting down gracefully. No Kafka semantics:
//! every frame goes to `handlers::dispatch`.

pub mod admission;
pub mod budget;
pub mod ceiling;
mod connection;
mod handshake;
pub mod memory;
pub mod proxy_protocol;

use crate::handlers::{Context, Peer, ANONYMOUS};
use crate::metrics::ConnectionRefusal;
use crate::upstream::{NameRoute, Route};
use admission::Admission;
use budget::FrameBudget;
use ceiling::MemoryCeiling;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::task::TaskTracker;

/// The default bound on the answers one client has not taken: in the order of
/// a Kafka broker's socket buffers, and Envoy's default per-connection buffer.
pub const DEFAULT_MAX_UNSENT_RESPONSE_BYTES: usize = 1 << 20;

/// Requests one connection reads ahead of their responses.
pub const DEFAULT_MAX_IN_FLIGHT: usize = 64;

/// How long a client has to finish its TLS handshake, from the moment its
/// connection was accepted, unless `tls_handshake_timeout_ms` says otherwise.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A fatal TLS alert, unrecognized_name (112), as a plaintext record: the answer
/// to a ClientHello whose server name is neither the bootstrap's nor a broker's.
const UNRECOGNIZED_NAME: [u8; 7] = [21, 3, 3, 0, 2, 2, 112];

/// What a TLS server name asks for.
pub type RouteByName = Arc<dyn Fn(Option<&str>) -> NameRoute + Send + Sync>;

/// How long a handshake waits for the refresh that a server name of an unseen
/// broker asks for (within the handshake's own deadline).
const UNSEEN_BROKER_REFRESH: Duration = Duration::from_secs(5);

/// Which upstream broker the connections of a listener are for.
#[derive(Clone)]
pub enum Routing {
    /// The listener's own: the bootstrap, or one broker's port.
    Fixed(Route),
    /// Each TLS connection by the server name in its ClientHello
    /// (`upstream.listeners.sni_host`).
    ByServerName(RouteByName),
}

/// Limits that protect kshim from its peers.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_frame_bytes: usize,
    /// Where the upstream requires SASL: the largest frame of a client that
    /// has not authenticated yet (Kafka's `sasl.server.max.receive.size`).
    pub max_unauthenticated_frame_bytes: Option<usize>,
    /// Client connections across every listener, within the descriptor budget.
    pub max_connections: usize,
    pub max_connections_per_ip: usize,
    /// Shared by every connection, never copied per connection.
    pub max_connections_per_ip_overrides: Arc<HashMap<IpAddr, usize>>,
    /// A connection with no request in flight and none arriving for this long
    /// is closed.
    pub idle_timeout: Duration,
    /// A frame that has started must arrive whole within this long.
    pub frame_timeout: Duration,
    /// Requests read ahead of their responses on one connection.
    pub max_in_flight: usize,
    /// Bytes of answers a client has not taken above which its connection
    /// reads no further request.
    pub max_unsent_response_bytes: usize,
    /// How long shutdown waits for connections to finish their requests.
    pub shutdown_grace: Duration,
    /// A forwarded request unanswered for this long closes its connection.
    pub request_timeout: Duration,
    /// Bytes of request frames held at once, across every listener.
    pub budget: Arc<FrameBudget>,
    /// The heap's ceiling, across every listener: shedding load near it.
    pub memory: Arc<MemoryCeiling>,
    /// PROXY protocol headers from trusted load balancers.
    pub proxy_protocol: ProxyProtocol,
    /// TLS handshakes waiting or running at once, in all and per address.
    pub handshakes: admission::HandshakeLimits,
    /// How long a TLS handshake may take from the accept.
    pub handshake_timeout: Duration,
}

/// Which PROXY protocol headers client connections begin with, and who may
/// send them.
#[derive(Debug, Clone, Default)]
pub struct ProxyProtocol {
    pub mode: proxy_protocol::Mode,
    /// The load balancers' addresses: a connection from anywhere else is closed.
    pub trusted: Arc<Vec<proxy_protocol::Cidr>>,
}

/// How long a trusted balancer has to send the whole header.
const PROXY_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

impl ProxyProtocol {
    fn trusts(&self, ip: IpAddr) -> bool {
        self.trusted.iter().any(|range| range.contains(ip))
    }

    /// The client's address: the socket's, or with PROXY protocol on, the one
    /// the balancer's header names (`None`: the connection is refused, and
    /// counted and logged here).
    async fn client_address(
        &self,
        stream: &mut tokio::net::TcpStream,
        socket: SocketAddr,
        metrics: &crate::metrics::Metrics,
    ) -> Option<SocketAddr> {
        if self.mode == proxy_protocol::Mode::Off {
            return Some(socket);
        }
        let refused = |why: String| {
            metrics.connection_refused(ConnectionRefusal::ProxyProtocol);
            // At debug: whoever can reach the port could flood the log otherwise.
            tracing::debug!(peer = %socket, "connection refused: {why}");
            None
        };
        if !self.trusts(socket.ip()) {
            return refused("not from an address in proxy_protocol_trusted".into());
        }
        match tokio::time::timeout(
            PROXY_HEADER_TIMEOUT,
            proxy_protocol::read_header(stream, self.mode),
        )
        .await
        {
            Ok(Ok(source)) => Some(source.unwrap_or(socket)),
            Ok(Err(e)) => refused(e.to_string()),
            Err(_) => refused(format!(
                "no whole PROXY protocol header within {PROXY_HEADER_TIMEOUT:?}"
            )),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        let limit = memory::memory_limit();
        Limits {
            max_frame_bytes: crate::protocol::DEFAULT_MAX_FRAME_BYTES,
            max_unauthenticated_frame_bytes: None,
            max_connections: 10_000,
            proxy_protocol: ProxyProtocol::default(),
            max_connections_per_ip: usize::MAX,
            max_connections_per_ip_overrides: Arc::default(),
            idle_timeout: Duration::from_secs(600),
            frame_timeout: Duration::from_secs(60),
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            max_unsent_response_bytes: DEFAULT_MAX_UNSENT_RESPONSE_BYTES,
            shutdown_grace: Duration::from_secs(30),
            request_timeout: Duration::from_secs(30),
            handshakes: admission::HandshakeLimits::for_this_machine(),
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            budget: FrameBudget::new(memory::default_frame_budget(
                crate::protocol::DEFAULT_MAX_FRAME_BYTES,
                &limit,
            )),
            memory: MemoryCeiling::of_heap(memory::default_ceiling(&limit)),
        }
    }
}

impl Limits {
    /// The largest frame a client may send, before or after it authenticated.
    fn frame_limit(&self, authenticated: bool) -> usize {
        match self.max_unauthenticated_frame_bytes {
            Some(cap) if !authenticated => cap.min(self.max_frame_bytes),
            _ => self.max_frame_bytes,
        }
    }

    /// Why a connection closed at one of its deadlines, naming the setting.
    fn closed_by(&self, why: crate::metrics::Closure) -> String {
        use crate::metrics::Closure;
        match why {
            Closure::FrameTimeout => format!(
                "a frame did not arrive whole within {:?} (frame_read_timeout_ms)",
                self.frame_timeout
            ),
            Closure::UpstreamTimeout => format!(
                "the upstream did not answer a forwarded request within {:?} (upstream.request_timeout_ms)",
                self.request_timeout
            ),
            Closure::Idle => format!(
                "idle for {:?} (connections_max_idle_ms)",
                self.idle_timeout
            ),
            Closure::WriteStalled => format!(
                "the client took none of its answers for {:?} (connections_max_idle_ms)",
                self.idle_timeout
            ),
        }
    }

    /// The caps on admitting connections, shared by every listener.
    pub fn admission(&self) -> Arc<Admission> {
        Admission::new(
            self.max_connections,
            self.max_connections_per_ip,
            (*self.max_connections_per_ip_overrides).clone(),
            self.handshakes,
        )
    }
}

fn listener_route(route: Route) -> crate::metrics::ListenerRoute {
    match route {
        Route::Bootstrap => crate::metrics::ListenerRoute::Bootstrap,
        Route::Node(_) => crate::metrics::ListenerRoute::Broker,
    }
}

/// The TLS handshake of a new connection, with the route its server name asks
/// for under `Routing::ByServerName`; `None` when it failed, ran out of time or
/// named no route (each counted and logged here).
async fn accept_tls(
    stream: tokio::net::TcpStream,
    routing: Routing,
    config: Arc<rustls::ServerConfig>,
    ctx: Arc<Context>,
    addr: SocketAddr,
    deadline: tokio::time::Instant,
) -> Option<(crate::tls::stream::ServerTls, Option<Route>)> {
    let hello = tokio::time::timeout_at(deadline, crate::tls::hello::read_client_hello(stream));
    let start = match hello.await {
        Ok(Ok(start)) => start,
        Ok(Err(e)) => return handshake_refused(&ctx, addr, Some(e)),
        Err(_) => return handshake_refused(&ctx, addr, None),
    };
    let mut route = None;
    if let Routing::ByServerName(route_of) = &routing {
        let name = start.server_name().map(str::to_owned);
        let mut found = route_of(name.as_deref());
        if let (NameRoute::NotYetSeen(_), Some(upstream)) = (found, &ctx.upstream) {
            // A broker that just joined, or that another replica has seen already:
            // one refresh of the view before the name is refused.
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            upstream
                .refresh_for_unseen_broker(left.min(UNSEEN_BROKER_REFRESH))
                .await;
            found = route_of(name.as_deref());
        }
        match found {
            NameRoute::Found(r) => route = Some(r),
            NameRoute::NotYetSeen(node) => {
                refuse_server_name(start.into_tcp(), name, Some(node), addr, &ctx).await;
                return None;
            }
            NameRoute::Unrecognized => {
                refuse_server_name(start.into_tcp(), name, None, addr, &ctx).await;
                return None;
            }
        }
    }
    match tokio::time::timeout_at(deadline, start.accept(config)).await {
        Ok(Ok(stream)) => Some((stream, route)),
        Ok(Err(e)) => handshake_refused(&ctx, addr, Some(e)),
        Err(_) => handshake_refused(&ctx, addr, None),
    }
}

/// A TLS handshake that failed (`error`) or ran out of time: the client's
/// doing, so counted and logged at debug only.
fn handshake_refused<T>(
    ctx: &Context,
    peer: SocketAddr,
    error: Option<std::io::Error>,
) -> Option<T> {
    ctx.metrics
        .connection_refused(ConnectionRefusal::TlsHandshake);
    match error {
        Some(e) => tracing::debug!(%peer, "TLS handshake failed: {e}"),
        None => tracing::debug!(%peer, "TLS handshake timed out"),
    }
    None
}

/// Answers a ClientHello whose server name routes nowhere with the
/// unrecognized_name alert, counts it, and logs the name (once per name).
/// `unseen`: the name is broker N's, and N was not found even after a refresh.
async fn refuse_server_name(
    mut stream: tokio::net::TcpStream,
    name: Option<String>,
    unseen: Option<i32>,
    peer: SocketAddr,
    ctx: &Context,
) {
    use tokio::io::AsyncWriteExt;
    static LOGGED: crate::log_limit::OncePerCause = crate::log_limit::OncePerCause::new(1024);
    ctx.metrics
        .connection_refused(ConnectionRefusal::ServerName);
    let shown = name.as_deref().map_or_else(
        || "no server name".to_owned(),
        |n| format!("server name \"{n}\""),
    );
    if LOGGED.first(&shown) {
        match unseen {
            Some(node) => tracing::info!(
                %peer,
                "TLS connection refused (unrecognized_name): {shown} is broker {node}'s, and the \
                 cluster does not list broker {node}, even after a refresh; logged once per name"
            ),
            None => tracing::info!(
                %peer,
                "TLS connection refused (unrecognized_name): {shown} is neither the bootstrap's nor a \
                 broker's (upstream.listeners.sni_host); logged once per name"
            ),
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let _ = stream.write_all(&UNRECOGNIZED_NAME).await;
        let _ = stream.shutdown().await;
    })
    .await;
}

fn is_out_of_descriptors(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

/// Resolves once `shutdown` turns true. A dropped sender means nobody will ask
/// for a stop any more.
pub(crate) async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    loop {
        if *shutdown.borrow_and_update() {
            return;
        }
        if shutdown.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Accepts connections until `shutdown` turns true, then lets open connections
/// finish the requests they have read (up to the grace period) and returns.
/// `routing` says which upstream broker, if any, each connection is for.
/// `admission` caps connections across every listener that shares it. With `tls`,
/// every connection starts with a handshake using the material in force at that
/// moment.
pub async fn serve(
    listener: TcpListener,
    routing: Routing,
    ctx: Arc<Context>,
    limits: Limits,
    admission: Arc<Admission>,
    tls: Option<Arc<crate::tls::TlsCell>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let tracker = TaskTracker::new();
    // One copy for every connection of this listener.
    let limits = Arc::new(limits);
    loop {
        tokio::select! {
            _ = stopped(&mut shutdown) => break,
            accepted = listener.accept() => {
                let (stream, socket) = match accepted {
                    Ok(pair) => pair,
                    Err(e) if is_out_of_descriptors(&e) => {
                        // The client waiting in the backlog is refused, not left hanging.
                        if admission.shed(&listener).await {
                            ctx.metrics.connection_refused(ConnectionRefusal::Descriptors);
                        }
                        tracing::warn!("connection refused: {e}; raise the open-file limit or lower max_connections");
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if limits.memory.shedding() {
                    // Closed at once: a client that is refused retries elsewhere or later, and
                    // nothing is spent on it (no task, no handshake).
                    ctx.metrics.connection_refused(ConnectionRefusal::Memory);
                    tracing::debug!(peer = %socket, "connection refused: kshim is shedding load (its heap is near max_memory_bytes)");
                    drop(stream);
                    continue;
                }
                let accepted_at = tokio::time::Instant::now();
                let _ = stream.set_nodelay(true);
                crate::client::keepalive(&stream);
                let ctx = Arc::clone(&ctx);
                let limits = Arc::clone(&limits);
                let shutdown = shutdown.clone();
                let admission = Arc::clone(&admission);
                let tls = tls.as_ref().map(|cell| cell.current());
                let routing = routing.clone();
                // What this task keeps while its connection is idle is the memory an idle
                // connection costs: every stage with a large state (the PROXY header, the TLS
                // handshake, the connection itself) is boxed, so that the task holds only
                // what the stage it is in needs (an idle connection: 3.6 KiB of heap, from 9.7).
                tracker.spawn(async move {
                    let mut stream = stream;
                    let Some(addr) = Box::pin(limits.proxy_protocol.client_address(&mut stream, socket, &ctx.metrics)).await else {
                        return;
                    };
                    let permit = match admission.admit(addr.ip()) {
                        Ok(permit) => permit,
                        Err(why) => {
                            ctx.metrics.connection_refused(why);
                            // At debug: a flood of refusals must not flood the log too.
                            tracing::debug!(peer = %addr, "connection refused: {}", match why {
                                ConnectionRefusal::AddressLimit => format!("{} connections from this address already (max_connections_per_ip)", admission.limit_for(addr.ip())),
                                _ => format!("{} connections already (max_connections)", limits.max_connections),
                            });
                            return;
                        }
                    };
                    let fixed = match &routing {
                        Routing::Fixed(route) => *route,
                        // The config check requires [tls] for routing by name.
                        Routing::ByServerName(_) => Route::Bootstrap,
                    };
                    let mut peer = Peer { addr, principal: ANONYMOUS.to_owned(), route: fixed, tls: false };
                    match tls {
                        None => {
                            let _open = ctx.metrics.connection_opened(listener_route(peer.route));
                            Box::pin(connection::run(stream, peer, ctx, &limits, shutdown)).await;
                        }
                        Some(material) => {
                            // The handshake runs on the handshake threads (handshake.rs). Its
                            // outcome lives in this block only, so the task does not keep room
                            // for a moved-from TLS stream for the connection's lifetime: what
                            // comes out is the connection, boxed, which owns the TLS stream.
                            let (_open, serve) = {
                                // A bounded queue: past it, refused at once rather than left
                                // to time out after its signature was spent.
                                let queued = match admission.begin_handshake(addr.ip()) {
                                    Ok(place) => (place, ctx.metrics.handshake_pending()),
                                    Err(why) => {
                                        ctx.metrics.connection_refused(why);
                                        tracing::debug!(peer = %addr, "connection refused: the TLS handshake queue (max_pending_handshakes, max_pending_handshakes_per_ip) is full");
                                        return;
                                    }
                                };
                                let accepted = handshake::run(accept_tls(
                                    stream,
                                    routing,
                                    Arc::clone(&material.config),
                                    Arc::clone(&ctx),
                                    addr,
                                    accepted_at + limits.handshake_timeout,
                                ))
                                .await
                                .flatten();
                                drop(queued);
                                let Some((stream, route)) = accepted else {
                                    return;
                                };
                                if let Some(route) = route {
                                    peer.route = route;
                                }
                                peer.tls = true;
                                let leaf = stream.peer_certificates().and_then(|c| c.first());
                                if let Some(leaf) = leaf {
                                    match material.principal(leaf) {
                                        Ok(p) => peer.principal = p,
                                        Err(e) => {
                                            ctx.metrics.connection_refused(ConnectionRefusal::NoPrincipal);
                                            tracing::info!(peer = %addr, "connection refused: {e}");
                                            drop(permit);
                                            return;
                                        }
                                    }
                                }
                                tracing::debug!(peer = %addr, principal = %peer.principal, route = ?peer.route, "TLS connection");
                                let open = ctx.metrics.connection_opened(listener_route(peer.route));
                                (open, Box::pin(connection::run(stream, peer, ctx, &limits, shutdown)))
                            };
                            serve.await;
                        }
                    }
                    drop(permit);
                });
            }
        }
    }
    tracker.close();
    if tokio::time::timeout(limits.shutdown_grace, tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!("shutdown grace period over; closing the remaining connections");
    }
}
