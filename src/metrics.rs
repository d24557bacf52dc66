//! What kshim counts while it works, and the Prometheus text the admin API serves
//! at `/metrics`.
//!
//! The counters on the request path are plain atomics in fixed tables indexed by
//! API key, version and outcome: recording a request costs a few relaxed atomic
//! adds and takes no lock. Gauges that describe state kept elsewhere (the upstream
//! brokers, the finalized features) are not stored here; `render` takes them as a
//! `Snapshot` read at scrape time.

use std::fmt::Write as _;
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
pub enum Refusal {
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
}

impl Refusal {
    const ALL: [Refusal; 5] = [
        Refusal::ConnectionLimit,
        Refusal::AddressLimit,
        Refusal::Descriptors,
        Refusal::TlsHandshake,
        Refusal::NoPrincipal,
    ];

    fn label(self) -> &'static str {
        match self {
            Refusal::ConnectionLimit => "connection_limit",
            Refusal::AddressLimit => "address_limit",
            Refusal::Descriptors => "descriptors",
            Refusal::TlsHandshake => "tls_handshake",
            Refusal::NoPrincipal => "no_principal",
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
}

impl Closure {
    const ALL: [Closure; 3] = [
        Closure::Idle,
        Closure::FrameTimeout,
        Closure::UpstreamTimeout,
    ];

    fn label(self) -> &'static str {
        match self {
            Closure::Idle => "idle",
            Closure::FrameTimeout => "frame_timeout",
            Closure::UpstreamTimeout => "upstream_timeout",
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

/// A latency histogram: cumulative only when rendered, so that an observation
/// is one add to its own bucket, one to the sum and one to the count.
struct Histogram {
    buckets: [AtomicU64; BUCKETS_MICROS.len()],
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    fn new() -> Histogram {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_micros: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    fn observe(&self, elapsed: Duration) {
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        if let Some(i) = BUCKETS_MICROS.iter().position(|&le| micros <= le) {
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

/// Every counter kshim keeps. One per process, shared by every listener.
pub struct Metrics {
    /// Indexed by `(api_key * VERSIONS + version) * 3 + outcome`.
    requests: Box<[AtomicU64]>,
    /// Indexed by `api_key * 3 + outcome`.
    latency: Box<[Histogram]>,
    bytes_received: AtomicU64,
    bytes_sent: AtomicU64,
    connections_open: AtomicI64,
    connections_accepted: AtomicU64,
    connections_refused: [AtomicU64; Refusal::ALL.len()],
    connections_closed: [AtomicU64; Closure::ALL.len()],
    sasl_authentications: AtomicU64,
    reloads_applied: [AtomicU64; 2],
    reloads_refused: [AtomicU64; 2],
    /// The global frame budget, once the listeners have one.
    frame_budget: std::sync::OnceLock<Arc<dyn FrameBudgetGauge>>,
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
            latency: (0..API_KEYS * 3).map(|_| Histogram::new()).collect(),
            bytes_received: AtomicU64::new(0),
            bytes_sent: AtomicU64::new(0),
            connections_open: AtomicI64::new(0),
            connections_accepted: AtomicU64::new(0),
            connections_refused: std::array::from_fn(|_| AtomicU64::new(0)),
            connections_closed: std::array::from_fn(|_| AtomicU64::new(0)),
            sasl_authentications: AtomicU64::new(0),
            reloads_applied: std::array::from_fn(|_| AtomicU64::new(0)),
            reloads_refused: std::array::from_fn(|_| AtomicU64::new(0)),
            frame_budget: std::sync::OnceLock::new(),
        }
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

    pub fn received(&self, bytes: usize) {
        self.bytes_received
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub fn sent(&self, bytes: usize) {
        self.bytes_sent.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// A client connection was accepted (and, with TLS, its handshake done).
    /// The returned guard counts it as open until dropped.
    pub fn connection_opened(self: &Arc<Self>) -> OpenConnection {
        self.connections_accepted.fetch_add(1, Ordering::Relaxed);
        self.connections_open.fetch_add(1, Ordering::Relaxed);
        OpenConnection(Arc::clone(self))
    }

    pub fn connection_refused(&self, why: Refusal) {
        self.connections_refused[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn connection_closed(&self, why: Closure) {
        self.connections_closed[why as usize].fetch_add(1, Ordering::Relaxed);
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

    /// The Prometheus text exposition (version 0.0.4) of every counter, and of
    /// the gauges in `state`.
    pub fn render(&self, state: &Snapshot) -> String {
        let mut out = String::with_capacity(16 * 1024);
        let o = &mut out;
        header(
            o,
            "kshim_build_info",
            "gauge",
            "The running kshim version (always 1).",
        );
        let mode = if state.upstream.is_some() {
            "proxy"
        } else {
            "standalone"
        };
        let _ = writeln!(
            o,
            "kshim_build_info{{version=\"{}\",mode=\"{mode}\"}} 1",
            env!("CARGO_PKG_VERSION")
        );

        header(
            o,
            "kshim_requests_total",
            "counter",
            "Requests read from clients, by API, version and what kshim did with them.",
        );
        for key in 0..API_KEYS {
            for version in 0..VERSIONS {
                for outcome in Outcome::ALL {
                    let n = self.requests[(key * VERSIONS + version) * 3 + outcome.index()]
                        .load(Ordering::Relaxed);
                    if n > 0 {
                        let _ = writeln!(
                            o,
                            "kshim_requests_total{{api=\"{}\",api_key=\"{key}\",version=\"{version}\",outcome=\"{}\"}} {n}",
                            api_name(key),
                            outcome.label()
                        );
                    }
                }
            }
        }

        header(
            o,
            "kshim_request_duration_seconds",
            "histogram",
            "Time from reading a request to having its response ready, by API and outcome.",
        );
        for key in 0..API_KEYS {
            for outcome in Outcome::ALL {
                let h = &self.latency[key * 3 + outcome.index()];
                let count = h.count.load(Ordering::Relaxed);
                if count > 0 {
                    let labels =
                        format!("api=\"{}\",outcome=\"{}\"", api_name(key), outcome.label());
                    h.render_into(o, "kshim_request_duration_seconds", &labels, count);
                }
            }
        }

        for (name, help, value) in [
            (
                "kshim_received_bytes_total",
                "Bytes of request frames read from clients, size prefixes included.",
                &self.bytes_received,
            ),
            (
                "kshim_sent_bytes_total",
                "Bytes of response frames written to clients, size prefixes included.",
                &self.bytes_sent,
            ),
            (
                "kshim_connections_accepted_total",
                "Client connections accepted (after the TLS handshake, with TLS).",
                &self.connections_accepted,
            ),
            (
                "kshim_sasl_authentications_total",
                "Client SASL authentications through kshim that the upstream accepted.",
                &self.sasl_authentications,
            ),
        ] {
            header(o, name, "counter", help);
            let _ = writeln!(o, "{name} {}", value.load(Ordering::Relaxed));
        }
        header(
            o,
            "kshim_connections_open",
            "gauge",
            "Client connections open now.",
        );
        let _ = writeln!(
            o,
            "kshim_connections_open {}",
            self.connections_open.load(Ordering::Relaxed).max(0)
        );
        header(
            o,
            "kshim_connections_refused_total",
            "counter",
            "Client connections turned away before their first request, by reason.",
        );
        for why in Refusal::ALL {
            let _ = writeln!(
                o,
                "kshim_connections_refused_total{{reason=\"{}\"}} {}",
                why.label(),
                self.connections_refused[why as usize].load(Ordering::Relaxed)
            );
        }
        header(
            o,
            "kshim_connections_closed_total",
            "counter",
            "Client connections kshim closed for holding resources without using them, or for an upstream that did not answer, by reason.",
        );
        for why in Closure::ALL {
            let _ = writeln!(
                o,
                "kshim_connections_closed_total{{reason=\"{}\"}} {}",
                why.label(),
                self.connections_closed[why as usize].load(Ordering::Relaxed)
            );
        }
        if let Some(budget) = self.frame_budget.get().map(|b| b.snapshot()) {
            header(
                o,
                "kshim_queued_request_bytes",
                "gauge",
                "Bytes of request frames held now: being read, or queued for an upstream broker.",
            );
            let _ = writeln!(o, "kshim_queued_request_bytes {}", budget.held);
            header(
                o,
                "kshim_queued_request_bytes_max",
                "gauge",
                "The global budget for request frame bytes (max_queued_request_bytes).",
            );
            let _ = writeln!(o, "kshim_queued_request_bytes_max {}", budget.total);
            header(
                o,
                "kshim_frame_budget_waits_total",
                "counter",
                "Frames whose reading waited for the global budget.",
            );
            let _ = writeln!(o, "kshim_frame_budget_waits_total {}", budget.waits);
        }
        header(
            o,
            "kshim_config_reloads_total",
            "counter",
            "Configuration changes (admin API, SIGHUP), applied or refused.",
        );
        for source in ReloadSource::ALL {
            for (result, table) in [
                ("applied", &self.reloads_applied),
                ("refused", &self.reloads_refused),
            ] {
                let _ = writeln!(
                    o,
                    "kshim_config_reloads_total{{source=\"{}\",result=\"{result}\"}} {}",
                    source.label(),
                    table[source as usize].load(Ordering::Relaxed)
                );
            }
        }
        state.render_into(o);
        out
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

impl Histogram {
    fn render_into(&self, out: &mut String, name: &str, labels: &str, count: u64) {
        let mut cumulative = 0;
        for (i, le) in BUCKETS_MICROS.iter().enumerate() {
            cumulative += self.buckets[i].load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels},le=\"{}\"}} {cumulative}",
                seconds(*le)
            );
        }
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {count}");
        let _ = writeln!(
            out,
            "{name}_sum{{{labels}}} {}",
            seconds(self.sum_micros.load(Ordering::Relaxed))
        );
        let _ = writeln!(out, "{name}_count{{{labels}}} {count}");
    }
}

/// Counts a connection as open until dropped.
pub struct OpenConnection(Arc<Metrics>);

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.connections_open.fetch_sub(1, Ordering::Relaxed);
    }
}

fn api_name(key: usize) -> String {
    crate::protocol::api_name(i16::try_from(key).unwrap_or(i16::MAX))
}

fn seconds(micros: u64) -> String {
    format!("{}", micros as f64 / 1_000_000.0)
}

/// State read at scrape time, for the gauges.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    pub epoch: i64,
    /// Finalized levels of every feature (kshim's and mirrored).
    pub levels: Vec<(String, i16)>,
    /// Active dynamic config overrides.
    pub overrides: usize,
    /// Certificate expiry per TLS role ("client", "upstream", "admin"), as Unix
    /// seconds.
    pub certificate_not_after: Vec<(&'static str, i64)>,
    /// (feature, supporter) of every finalized kshim-owned level that part of
    /// the cluster cannot run or whose validators a broker's configs break.
    pub conflicts: Vec<(String, String)>,
    /// `None` for a standalone kshim.
    pub upstream: Option<UpstreamSnapshot>,
    /// `None` without `[cluster]`.
    pub cluster: Option<ClusterSnapshot>,
}

/// A kshim cluster member's view of the shared state.
#[derive(Debug, Clone, Default)]
pub struct ClusterSnapshot {
    pub caught_up: bool,
    pub reachable: bool,
    /// The next state-topic offset this instance will apply.
    pub applied_offset: i64,
    /// Instances counted live (this one included).
    pub live_instances: usize,
    /// Whether the last config commit could not be applied here.
    pub config_apply_failed: bool,
}

#[derive(Debug, Clone, Default)]
pub struct UpstreamSnapshot {
    /// Whether the last refresh reached the upstream.
    pub reachable: bool,
    /// Node id and whether it answered the last refresh, for every known broker.
    pub brokers: Vec<(i32, bool)>,
    pub refreshes_ok: u64,
    pub refreshes_failed: u64,
    /// Upstream feature views ignored as older than the accepted one.
    pub stale_views: u64,
}

impl Snapshot {
    fn render_into(&self, o: &mut String) {
        header(
            o,
            "kshim_finalized_features_epoch",
            "gauge",
            "The epoch of the finalized features clients see.",
        );
        let _ = writeln!(o, "kshim_finalized_features_epoch {}", self.epoch);
        header(
            o,
            "kshim_finalized_feature_level",
            "gauge",
            "The finalized level of each feature (disabled features are not listed).",
        );
        for (name, level) in &self.levels {
            let _ = writeln!(
                o,
                "kshim_finalized_feature_level{{feature=\"{}\"}} {level}",
                escape(name)
            );
        }
        header(
            o,
            "kshim_feature_incompatibilities",
            "gauge",
            "Finalized kshim-owned levels that a supporter cannot run, or that a broker's configs break.",
        );
        let _ = writeln!(
            o,
            "kshim_feature_incompatibilities {}",
            self.conflicts.len()
        );
        if !self.conflicts.is_empty() {
            header(
                o,
                "kshim_feature_incompatible",
                "gauge",
                "1 for each feature and supporter in conflict.",
            );
            for (feature, supporter) in &self.conflicts {
                let _ = writeln!(
                    o,
                    "kshim_feature_incompatible{{feature=\"{}\",supporter=\"{}\"}} 1",
                    escape(feature),
                    escape(supporter)
                );
            }
        }
        header(
            o,
            "kshim_config_overrides",
            "gauge",
            "Dynamic configuration overrides in force.",
        );
        let _ = writeln!(o, "kshim_config_overrides {}", self.overrides);
        header(
            o,
            "kshim_tls_certificate_expiry_timestamp_seconds",
            "gauge",
            "When the certificate in force expires (Unix time), by TLS role.",
        );
        for (role, not_after) in &self.certificate_not_after {
            let _ = writeln!(
                o,
                "kshim_tls_certificate_expiry_timestamp_seconds{{role=\"{role}\"}} {not_after}"
            );
        }
        if let Some(c) = &self.cluster {
            for (name, help, value) in [
                ("kshim_cluster_caught_up", "1 once this instance has applied the shared state up to its end as of startup.", i64::from(c.caught_up)),
                ("kshim_cluster_state_reachable", "1 while this instance's last read of the state topic succeeded.", i64::from(c.reachable)),
                ("kshim_cluster_applied_offset", "The next state-topic offset this instance will apply.", c.applied_offset),
                ("kshim_cluster_live_instances", "kshim instances counted live (registration renewed within the session timeout), this one included.", c.live_instances as i64),
                ("kshim_cluster_config_apply_failed", "1 when the last config change of the kshim cluster could not be applied here.", i64::from(c.config_apply_failed)),
            ] {
                header(o, name, "gauge", help);
                let _ = writeln!(o, "{name} {value}");
            }
        }
        let Some(u) = &self.upstream else {
            return;
        };
        header(
            o,
            "kshim_upstream_reachable",
            "gauge",
            "Whether the last refresh reached the upstream cluster.",
        );
        let _ = writeln!(o, "kshim_upstream_reachable {}", u8::from(u.reachable));
        header(
            o,
            "kshim_upstream_broker_up",
            "gauge",
            "Whether each known upstream broker answered the last refresh.",
        );
        for (node, up) in &u.brokers {
            let _ = writeln!(
                o,
                "kshim_upstream_broker_up{{node=\"{node}\"}} {}",
                u8::from(*up)
            );
        }
        header(
            o,
            "kshim_upstream_refreshes_total",
            "counter",
            "Refreshes of the upstream cluster view, by result.",
        );
        let _ = writeln!(
            o,
            "kshim_upstream_refreshes_total{{result=\"ok\"}} {}",
            u.refreshes_ok
        );
        let _ = writeln!(
            o,
            "kshim_upstream_refreshes_total{{result=\"failed\"}} {}",
            u.refreshes_failed
        );
        header(
            o,
            "kshim_upstream_feature_views_ignored_total",
            "counter",
            "Upstream feature views ignored because their epoch is older than the accepted one (a lagging broker answered).",
        );
        let _ = writeln!(
            o,
            "kshim_upstream_feature_views_ignored_total {}",
            u.stale_views
        );
    }
}

/// A label value as the text format wants it.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_counted_by_key_version_and_outcome() {
        let m = Metrics::new();
        m.request(18, 4, Outcome::Answered, Duration::from_micros(40));
        m.request(18, 4, Outcome::Answered, Duration::from_millis(3));
        m.request(0, 11, Outcome::Forwarded, Duration::from_millis(1));
        m.request(57, 1, Outcome::Rejected, Duration::from_secs(60));
        // Out-of-range keys and versions share the last slot rather than panic.
        m.request(i16::MAX, -1, Outcome::Rejected, Duration::ZERO);
        let text = m.render(&Snapshot::default());
        assert!(text.contains(
            "kshim_requests_total{api=\"ApiVersions\",api_key=\"18\",version=\"4\",outcome=\"answered\"} 2"
        ));
        assert!(text.contains(
            "kshim_requests_total{api=\"Produce\",api_key=\"0\",version=\"11\",outcome=\"forwarded\"} 1"
        ));
        assert!(text.contains(
            "kshim_request_duration_seconds_bucket{api=\"ApiVersions\",outcome=\"answered\",le=\"0.0001\"} 1"
        ));
        assert!(text.contains(
            "kshim_request_duration_seconds_bucket{api=\"ApiVersions\",outcome=\"answered\",le=\"0.005\"} 2"
        ));
        assert!(text.contains(
            "kshim_request_duration_seconds_bucket{api=\"UpdateFeatures\",outcome=\"rejected\",le=\"10\"} 0"
        ));
        assert!(text.contains(
            "kshim_request_duration_seconds_bucket{api=\"UpdateFeatures\",outcome=\"rejected\",le=\"+Inf\"} 1"
        ));
        assert_eq!(m.requests_of(18, Outcome::Answered), 2);
    }

    #[test]
    fn open_connections_follow_their_guards() {
        let m = Arc::new(Metrics::new());
        let a = m.connection_opened();
        let b = m.connection_opened();
        drop(a);
        let text = m.render(&Snapshot::default());
        assert!(text.contains("kshim_connections_open 1\n"));
        assert!(text.contains("kshim_connections_accepted_total 2\n"));
        drop(b);
        assert!(m
            .render(&Snapshot::default())
            .contains("kshim_connections_open 0\n"));
    }

    #[test]
    fn gauges_come_from_the_snapshot() {
        let m = Metrics::new();
        let text = m.render(&Snapshot {
            epoch: 7,
            levels: vec![("metadata.version".into(), 27)],
            overrides: 2,
            certificate_not_after: vec![("client", 1_800_000_000)],
            cluster: None,
            upstream: Some(UpstreamSnapshot {
                reachable: true,
                brokers: vec![(1, true), (2, false)],
                refreshes_ok: 3,
                refreshes_failed: 1,
                stale_views: 4,
            }),
            conflicts: vec![("acme.widgets".into(), "Broker 2".into())],
        });
        for line in [
            "kshim_finalized_features_epoch 7",
            "kshim_finalized_feature_level{feature=\"metadata.version\"} 27",
            "kshim_config_overrides 2",
            "kshim_tls_certificate_expiry_timestamp_seconds{role=\"client\"} 1800000000",
            "kshim_upstream_broker_up{node=\"2\"} 0",
            "kshim_upstream_refreshes_total{result=\"failed\"} 1",
            "kshim_upstream_feature_views_ignored_total 4",
            "kshim_feature_incompatibilities 1",
            "kshim_feature_incompatible{feature=\"acme.widgets\",supporter=\"Broker 2\"} 1",
            "kshim_build_info{version=\"",
        ] {
            assert!(text.contains(line), "missing {line:?} in\n{text}");
        }
    }
}
