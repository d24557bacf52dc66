//! What kshim counts while it works, and the Prometheus text the admin API serves
//! at `/metrics`.
//!
//! The counters on the request path are plain atomics in fixed tables indexed by
//! API key, version and outcome: recording a request costs a few relaxed atomic
//! adds and takes no lock. Gauges that describe state kept elsewhere (the upstream
//! brokers, the finalized features) are not stored here; `render` takes them as a
//! `Snapshot` read at scrape time.

mod render;

pub use render::{ClusterSnapshot, Snapshot, UpstreamSnapshot};

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Kafka API keys below this are counted one by one; others share the last slot.
const API_KEYS: usize = 128;
/// Versions below this are counted one by one; higher ones share the last slot.
const VERSIONS: usize = 32;

/// What happened to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// kshim answered it itself.
    Answered,
    /// It went to the upstream (possibly narrowed by a policy).
    Forwarded,
    /// kshim refused it: authorization, a policy refusing every item, or a
    /// request it closed the connection on.
    Rejected,
}

impl Outcome {
    const ALL: [Outcome; 3] = [Outcome::Answered, Outcome::Forwarded, Outcome::Rejected];

    fn index(self) -> usize {
        self as usize
    }

    fn label(self) -> &'static str {
        match self {
            Outcome::Answered => "answered",
            Outcome::Forwarded => "forwarded",
            Outcome::Rejected => "rejected",
        }
    }
}

/// Why a connection was turned away before its first request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionRefusal {
    /// `max_connections` reached (or the descriptor budget below it).
    ConnectionLimit,
    /// `max_connections_per_ip` (or its override) reached for the client's address.
    AddressLimit,
    /// The process had no file descriptor left to accept with.
    Descriptors,
    /// The TLS handshake failed or timed out.
    TlsHandshake,
    /// A client certificate that no principal mapping rule maps.
    NoPrincipal,
    /// With `proxy_protocol`: a connection from outside
    /// `proxy_protocol_trusted`, or without a valid header in time.
    ProxyProtocol,
    /// With `upstream.listeners.sni_host`: a TLS server name that is neither
    /// the bootstrap's nor a broker's, or none.
    ServerName,
    /// The TLS handshake queue (`max_pending_handshakes`), or the client
    /// address's share of it (`max_pending_handshakes_per_ip`), was full.
    HandshakeQueue,
    /// kshim was shedding load: its heap neared `max_memory_bytes`.
    Memory,
}

/// What a client connection is for: the bootstrap (any broker will do), or
/// one broker (its own port, or its TLS server name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerRoute {
    Bootstrap,
    Broker,
}

impl ListenerRoute {
    const ALL: [ListenerRoute; 2] = [ListenerRoute::Bootstrap, ListenerRoute::Broker];

    fn label(self) -> &'static str {
        match self {
            ListenerRoute::Bootstrap => "bootstrap",
            ListenerRoute::Broker => "broker",
        }
    }
}

impl ConnectionRefusal {
    const ALL: [ConnectionRefusal; 9] = [
        ConnectionRefusal::ConnectionLimit,
        ConnectionRefusal::AddressLimit,
        ConnectionRefusal::Descriptors,
        ConnectionRefusal::TlsHandshake,
        ConnectionRefusal::NoPrincipal,
        ConnectionRefusal::ProxyProtocol,
        ConnectionRefusal::ServerName,
        ConnectionRefusal::HandshakeQueue,
        ConnectionRefusal::Memory,
    ];

    fn label(self) -> &'static str {
        match self {
            ConnectionRefusal::ConnectionLimit => "connection_limit",
            ConnectionRefusal::AddressLimit => "address_limit",
            ConnectionRefusal::Descriptors => "descriptors",
            ConnectionRefusal::TlsHandshake => "tls_handshake",
            ConnectionRefusal::NoPrincipal => "no_principal",
            ConnectionRefusal::ProxyProtocol => "proxy_protocol",
            ConnectionRefusal::ServerName => "server_name",
            ConnectionRefusal::HandshakeQueue => "handshake_queue",
            ConnectionRefusal::Memory => "memory",
        }
    }
}

/// Why kshim closed a client connection that had been let in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closure {
    /// No request for `connections_max_idle_ms`.
    Idle,
    /// A frame started and did not arrive whole within `frame_read_timeout_ms`.
    FrameTimeout,
    /// A forwarded request was not answered within `upstream.request_timeout_ms`.
    UpstreamTimeout,
    /// Answers waited and the client took none of them for
    /// `connections_max_idle_ms`.
    WriteStalled,
}

impl Closure {
    const ALL: [Closure; 4] = [
        Closure::Idle,
        Closure::FrameTimeout,
        Closure::UpstreamTimeout,
        Closure::WriteStalled,
    ];

    fn label(self) -> &'static str {
        match self {
            Closure::Idle => "idle",
            Closure::FrameTimeout => "frame_timeout",
            Closure::UpstreamTimeout => "upstream_timeout",
            Closure::WriteStalled => "write_stalled",
        }
    }
}

/// Which way kshim's own time was spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leg {
    /// From a request read whole from its client to its last byte handed to
    /// the upstream's socket, or to kshim's own answer being ready.
    Request = 0,
    /// From a response read whole from the upstream (or kshim's answer ready
    /// in its turn) to its last byte handed to the client's socket.
    Response = 1,
}

impl Leg {
    const ALL: [Leg; 2] = [Leg::Request, Leg::Response];

    fn label(self) -> &'static str {
        match self {
            Leg::Request => "request",
            Leg::Response => "response",
        }
    }
}

/// Where a configuration change came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadSource {
    Admin,
    Sighup,
}

impl ReloadSource {
    const ALL: [ReloadSource; 2] = [ReloadSource::Admin, ReloadSource::Sighup];

    fn label(self) -> &'static str {
        match self {
            ReloadSource::Admin => "admin",
            ReloadSource::Sighup => "sighup",
        }
    }
}

/// Upper bounds of the latency buckets, in microseconds (100 µs to 10 s).
const BUCKETS_MICROS: [u64; 16] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// Upper bounds of the buckets of kshim's own time, in microseconds (5 µs to
/// 1 s): a request that costs kshim microseconds must not vanish into the
/// first bucket of the end-to-end histogram.
const OWN_BUCKETS_MICROS: [u64; 15] = [
    5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 100_000, 250_000, 1_000_000,
];

/// A latency histogram: cumulative only when rendered, so that an observation
/// is one add to its own bucket, one to the sum and one to the count.
struct Histogram {
    bounds: &'static [u64],
    buckets: Box<[AtomicU64]>,
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    fn new(bounds: &'static [u64]) -> Histogram {
        Histogram {
            bounds,
            buckets: bounds.iter().map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    fn observe(&self, elapsed: Duration) {
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        if let Some(i) = self.bounds.iter().position(|&le| micros <= le) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }
}

/// The global request-frame budget as /metrics shows it, read when rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameBudgetSnapshot {
    /// Bytes of request frames held now.
    pub held: usize,
    /// Bytes of upstream responses held now for their clients.
    pub answers: usize,
    /// The budget (`max_queued_request_bytes`).
    pub total: usize,
    /// Frames whose reading waited for the budget.
    pub waits: u64,
}

/// Something that can say how much of the frame budget is held: the
/// listeners' budget (`crate::server::budget`), which sits above this module.
pub trait FrameBudgetGauge: Send + Sync {
    fn snapshot(&self) -> FrameBudgetSnapshot;
}

/// The memory ceiling as /metrics and /readyz show it, read when asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryCeilingSnapshot {
    /// `max_memory_bytes`.
    pub ceiling: u64,
    /// The heap and the blocks kept, at the last reading.
    pub held: u64,
    /// Whether kshim is shedding load now.
    pub shedding: bool,
    /// Times shedding began.
    pub episodes: u64,
}

/// Something that can say where the heap stands against its ceiling: the
/// listeners' ceiling (`crate::server::ceiling`), which sits above this module.
pub trait MemoryCeilingGauge: Send + Sync {
    fn snapshot(&self) -> MemoryCeilingSnapshot;
}

/// Every counter kshim keeps. One per process, shared by every listener.
pub struct Metrics {
    /// Indexed by `(api_key * VERSIONS + version) * 3 + outcome`.
    requests: Box<[AtomicU64]>,
    /// Indexed by `api_key * 3 + outcome`.
    latency: Box<[Histogram]>,
    /// kshim's own time, indexed by `api_key * 2 + leg`.
    own_time: Box<[Histogram]>,
    bytes_received: AtomicU64,
    bytes_sent: AtomicU64,
    connections_open: [AtomicI64; ListenerRoute::ALL.len()],
    connections_accepted: [AtomicU64; ListenerRoute::ALL.len()],
    connections_refused: [AtomicU64; ConnectionRefusal::ALL.len()],
    connections_closed: [AtomicU64; Closure::ALL.len()],
    /// Times a connection stopped reading requests for answers its client had not taken.
    connections_muted: AtomicU64,
    /// Times a connection stopped reading requests while kshim shed load.
    connections_shed: AtomicU64,
    /// TLS handshakes waiting or running now.
    handshakes_pending: AtomicI64,
    sasl_authentications: AtomicU64,
    reloads_applied: [AtomicU64; 2],
    reloads_refused: [AtomicU64; 2],
    /// The global frame budget, once the listeners have one.
    frame_budget: std::sync::OnceLock<Arc<dyn FrameBudgetGauge>>,
    /// The memory ceiling, once the listeners have one.
    memory_ceiling: std::sync::OnceLock<Arc<dyn MemoryCeilingGauge>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics { .. }")
    }
}

fn slot(value: i16, slots: usize) -> usize {
    usize::try_from(value).map_or(slots - 1, |v| v.min(slots - 1))
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics {
            requests: (0..API_KEYS * VERSIONS * 3)
                .map(|_| AtomicU64::new(0))
                .collect(),
            latency: (0..API_KEYS * 3)
                .map(|_| Histogram::new(&BUCKETS_MICROS))
                .collect(),
            own_time: (0..API_KEYS * 2)
                .map(|_| Histogram::new(&OWN_BUCKETS_MICROS))
                .collect(),
            bytes_received: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            connections_open: std::array::from_fn(|_| AtomicI64::new(0)),
            connections_accepted: std::array::from_fn(|_| AtomicU64::new(0)),
            connections_refused: std::array::from_fn(|_| AtomicU64::new(0)),
            connections_closed: std::array::from_fn(|_| AtomicU64::new(0)),
            connections_muted: AtomicU64::new(0),
            connections_shed: AtomicU64::new(0),
            handshakes_pending: AtomicI64::new(0),
            sasl_authentications: AtomicU64::new(0),
            reloads_applied: std::array::from_fn(|_| AtomicU64::new(0)),
            reloads_refused: std::array::from_fn(|_| AtomicU64::new(0)),
            frame_budget: std::sync::OnceLock::new(),
            memory_ceiling: std::sync::OnceLock::new(),
        }
    }

    /// Reports on `ceiling` from now on.
    pub fn watch_memory_ceiling(&self, ceiling: Arc<dyn MemoryCeilingGauge>) {
        let _ = self.memory_ceiling.set(ceiling);
    }

    /// Where the heap stands against its ceiling, once the listeners have one.
    pub fn memory_ceiling(&self) -> Option<MemoryCeilingSnapshot> {
        self.memory_ceiling.get().map(|c| c.snapshot())
    }

    /// Reports on `budget` from now on.
    pub fn watch_frame_budget(&self, budget: Arc<dyn FrameBudgetGauge>) {
        let _ = self.frame_budget.set(budget);
    }

    /// One request, from the moment it was read to the moment its response was
    /// ready to write.
    pub fn request(&self, api_key: i16, version: i16, outcome: Outcome, elapsed: Duration) {
        let key = slot(api_key, API_KEYS);
        let index = (key * VERSIONS + slot(version, VERSIONS)) * 3 + outcome.index();
        self.requests[index].fetch_add(1, Ordering::Relaxed);
        self.latency[key * 3 + outcome.index()].observe(elapsed);
    }

    /// Time a request or a response spent inside kshim (see [`Leg`]).
    pub fn own_time(&self, api_key: i16, leg: Leg, elapsed: Duration) {
        self.own_time[slot(api_key, API_KEYS) * 2 + leg as usize].observe(elapsed);
    }

    pub fn received(&self, bytes: usize) {
        self.bytes_received
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub fn sent(&self, bytes: usize) {
        self.bytes_sent.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// A client connection was accepted (and, with TLS, its handshake done),
    /// for the bootstrap or for a broker. The returned guard counts it as open
    /// until dropped.
    pub fn connection_opened(self: &Arc<Self>, route: ListenerRoute) -> OpenConnection {
        self.connections_accepted[route as usize].fetch_add(1, Ordering::Relaxed);
        self.connections_open[route as usize].fetch_add(1, Ordering::Relaxed);
        OpenConnection(Arc::clone(self), route)
    }

    /// A TLS handshake took a place in the queue; the guard counts it as
    /// pending until dropped.
    pub fn handshake_pending(self: &Arc<Self>) -> PendingHandshakeGauge {
        self.handshakes_pending.fetch_add(1, Ordering::Relaxed);
        PendingHandshakeGauge(Arc::clone(self))
    }

    pub fn connection_refused(&self, why: ConnectionRefusal) {
        self.connections_refused[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn connection_closed(&self, why: Closure) {
        self.connections_closed[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// A connection stopped reading requests: its client has not taken answers
    /// worth `max_unsent_response_bytes`.
    pub fn connection_muted(&self) {
        self.connections_muted.fetch_add(1, Ordering::Relaxed);
    }

    /// A connection stopped reading requests while kshim shed load: its
    /// client had answers it had not taken.
    pub fn connection_shed(&self) {
        self.connections_shed.fetch_add(1, Ordering::Relaxed);
    }

    /// A client's SASL authentication that the upstream accepted.
    pub fn sasl_authenticated(&self) {
        self.sasl_authentications.fetch_add(1, Ordering::Relaxed);
    }

    /// A configuration change through the admin API or SIGHUP, applied or refused.
    pub fn reload(&self, source: ReloadSource, applied: bool) {
        let table = if applied {
            &self.reloads_applied
        } else {
            &self.reloads_refused
        };
        table[source as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The requests counted so far for one API key and outcome, over all versions.
    pub fn requests_of(&self, api_key: i16, outcome: Outcome) -> u64 {
        let key = slot(api_key, API_KEYS);
        (0..VERSIONS)
            .map(|v| {
                self.requests[(key * VERSIONS + v) * 3 + outcome.index()].load(Ordering::Relaxed)
            })
            .sum()
    }
}

pub struct OpenConnection(Arc<Metrics>, ListenerRoute);

/// A TLS handshake in the queue, counted until dropped.
pub struct PendingHandshakeGauge(Arc<Metrics>);

impl Drop for PendingHandshakeGauge {
    fn drop(&mut self) {
        self.0.handshakes_pending.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.connections_open[self.1 as usize].fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;
