//! /metrics in the Prometheus text format: the counters kshim keeps and the
//! gauges of a `Snapshot` taken when the page is asked for.

use super::*;
use std::fmt::Write as _;

impl Metrics {
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

        header(
            o,
            "kshim_own_time_seconds",
            "histogram",
            "Time requests and responses spent inside kshim, apart from waiting for a broker or a client: leg=request from the request read to its last byte written upstream (or kshim's answer ready), leg=response from the response read to its last byte written to the client.",
        );
        for key in 0..API_KEYS {
            for leg in Leg::ALL {
                let h = &self.own_time[key * 2 + leg as usize];
                let count = h.count.load(Ordering::Relaxed);
                if count > 0 {
                    let labels = format!("api=\"{}\",leg=\"{}\"", api_name(key), leg.label());
                    h.render_into(o, "kshim_own_time_seconds", &labels, count);
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
                "kshim_sasl_authentications_total",
                "Client SASL authentications through kshim that the upstream accepted.",
                &self.sasl_authentications,
            ),
        ] {
            header(o, name, "counter", help);
            let _ = writeln!(o, "{name} {}", value.load(Ordering::Relaxed));
        }
        let load = |n: &AtomicU64| n.load(Ordering::Relaxed);
        by_label(
            o,
            ("kshim_connections_accepted_total", "counter"),
            "Client connections accepted (after the TLS handshake, with TLS), for the bootstrap or a broker.",
            "route",
            ListenerRoute::ALL.map(|r| (r.label(), load(&self.connections_accepted[r as usize]))),
        );
        by_label(
            o,
            ("kshim_connections_open", "gauge"),
            "Client connections open now, for the bootstrap or a broker.",
            "route",
            ListenerRoute::ALL.map(|r| {
                let open = self.connections_open[r as usize].load(Ordering::Relaxed);
                (r.label(), u64::try_from(open).unwrap_or(0))
            }),
        );
        by_label(
            o,
            ("kshim_connections_refused_total", "counter"),
            "Client connections turned away before their first request, by reason.",
            "reason",
            ConnectionRefusal::ALL
                .map(|w| (w.label(), load(&self.connections_refused[w as usize]))),
        );
        by_label(
            o,
            ("kshim_connections_closed_total", "counter"),
            "Client connections kshim closed for holding resources without using them, or for an upstream that did not answer, by reason.",
            "reason",
            Closure::ALL.map(|w| (w.label(), load(&self.connections_closed[w as usize]))),
        );
        header(
            o,
            "kshim_tls_handshakes_pending",
            "gauge",
            "TLS handshakes waiting or running now (at most max_pending_handshakes).",
        );
        let pending = self.handshakes_pending.load(Ordering::Relaxed);
        let _ = writeln!(o, "kshim_tls_handshakes_pending {}", pending.max(0));
        header(
            o,
            "kshim_connections_muted_total",
            "counter",
            "Times a connection stopped reading requests because its client had not taken answers worth max_unsent_response_bytes.",
        );
        let _ = writeln!(
            o,
            "kshim_connections_muted_total {}",
            load(&self.connections_muted)
        );
        let allocator = crate::heap::allocator_stats();
        for (name, kind, help, value) in [
            (
                "kshim_heap_allocated_bytes",
                "gauge",
                "Bytes kshim has allocated and not yet freed (the heap it holds).",
                crate::heap::allocated_bytes(),
            ),
            (
                "kshim_heap_allocations_total",
                "counter",
                "Allocations (calls to the allocator that allocate or resize a block) since start.",
                crate::heap::allocations(),
            ),
            (
                "kshim_allocator_allocated_bytes",
                "gauge",
                "jemalloc's stats.allocated: bytes in blocks handed out.",
                allocator.map(|s| s.0),
            ),
            (
                "kshim_allocator_resident_bytes",
                "gauge",
                "jemalloc's stats.resident: bytes of its pages that are resident.",
                allocator.map(|s| s.1),
            ),
            (
                "kshim_resident_memory_bytes",
                "gauge",
                "The process's resident memory: the heap, what the allocator keeps for reuse, code and stacks.",
                crate::heap::resident_bytes(),
            ),
        ] {
            if let Some(value) = value {
                header(o, name, kind, help);
                let _ = writeln!(o, "{name} {value}");
            }
        }
        header(
            o,
            "kshim_connections_shed_total",
            "counter",
            "Times a connection stopped reading requests while kshim shed load (its heap near max_memory_bytes) because its client had answers it had not taken.",
        );
        let _ = writeln!(
            o,
            "kshim_connections_shed_total {}",
            load(&self.connections_shed)
        );
        if let Some(ceiling) = self.memory_ceiling() {
            for (name, kind, help, value) in [
                (
                    "kshim_memory_ceiling_bytes",
                    "gauge",
                    "The memory ceiling (max_memory_bytes): kshim sheds load from 80% of it until under 70%.",
                    ceiling.ceiling,
                ),
                (
                    "kshim_memory_held_bytes",
                    "gauge",
                    "What the ceiling counts, at its last reading: the heap and the large blocks kept.",
                    ceiling.held,
                ),
                (
                    "kshim_memory_shedding",
                    "gauge",
                    "1 while kshim sheds load (new connections refused, clients with untaken answers not read), else 0.",
                    u64::from(ceiling.shedding),
                ),
                (
                    "kshim_memory_shedding_total",
                    "counter",
                    "Times kshim began shedding load.",
                    ceiling.episodes,
                ),
            ] {
                header(o, name, kind, help);
                let _ = writeln!(o, "{name} {value}");
            }
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
                "kshim_queued_response_bytes",
                "gauge",
                "Bytes of upstream responses held now until their clients take them.",
            );
            let _ = writeln!(o, "kshim_queued_response_bytes {}", budget.answers);
            header(
                o,
                "kshim_queued_request_bytes_max",
                "gauge",
                "The global budget for frames in transit, requests and upstream responses (max_queued_request_bytes).",
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

/// A series with one sample per value of `label`.
fn by_label<const N: usize>(
    out: &mut String,
    (name, kind): (&str, &str),
    help: &str,
    label: &str,
    samples: [(&str, u64); N],
) {
    header(out, name, kind, help);
    for (value, n) in samples {
        let _ = writeln!(out, "{name}{{{label}=\"{value}\"}} {n}");
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

impl Histogram {
    fn render_into(&self, out: &mut String, name: &str, labels: &str, count: u64) {
        let mut cumulative = 0;
        for (i, le) in self.bounds.iter().enumerate() {
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
