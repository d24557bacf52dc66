//! The typed configuration of `kshim serve`, read from TOML.
//!
//! Parsing walks the document by hand instead of through serde so that every
//! problem — unknown keys, wrong types, bad values — is reported in one pass.
//! `ConfigSource` is where a config comes from: the file, then the command
//! line; placeholders in its values are resolved before it is parsed.
//! Owns no runtime state.

mod accepted;
mod cluster;
mod errors;
mod features;
mod lab;
mod operations;
pub mod placeholders;
mod policy;
mod source;
pub mod tls;
mod upstream;
mod walk;
pub use crate::secret::Secret;

pub use accepted::{accepted_keys, key_paths};
pub use errors::{ConfigError, ConfigErrors};
pub use operations::{check_log_filter, AdminConfig, DEFAULT_ADMIN_LISTEN};
pub use source::{parse_document, CliOverrides, ConfigSource, Loaded};

use features::parse_features;
use walk::{
    check_host_port, host_of, is_wildcard, level, per_ip_overrides, string_list, walker, Walker,
};

use crate::features::kafka::KafkaRelease;
use crate::features::{Dependencies, SupportedFeatures, UpdateRules};
use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct Config {
    pub listen: String,
    /// HOST:PORT that clients are told to connect to; defaults to `listen`.
    pub advertised_listener: Option<String>,
    pub data_dir: PathBuf,
    pub node_id: i32,
    pub cluster_id: Option<String>,
    pub max_frame_bytes: usize,
    pub max_connections: usize,
    /// Open connections from one address (Kafka's `max.connections.per.ip`);
    /// by default, as in Kafka, no limit but `max_connections`.
    pub max_connections_per_ip: usize,
    /// Per-address exceptions to `max_connections_per_ip`.
    pub max_connections_per_ip_overrides: BTreeMap<std::net::IpAddr, usize>,
    /// Which PROXY protocol headers client connections begin with.
    pub proxy_protocol: crate::server::proxy_protocol::Mode,
    /// The load balancers that may send them.
    pub proxy_protocol_trusted: Vec<crate::server::proxy_protocol::Cidr>,
    /// A connection with no request for this long is closed.
    pub connections_max_idle_ms: u64,
    /// A frame that has started must arrive whole within this long.
    pub frame_read_timeout_ms: u64,
    /// Bytes of frames in transit held at once across every connection:
    /// requests (Kafka's `queued.max.request.bytes`) and upstream responses
    /// waiting for their clients. `None`: from the memory kshim may use
    /// (`server::memory`).
    pub max_queued_request_bytes: Option<usize>,
    /// The heap's ceiling, near which kshim sheds load. `None`: from the
    /// memory kshim may use (`server::memory::default_ceiling`).
    pub max_memory_bytes: Option<u64>,
    /// In front of brokers that require SASL (`[upstream.sasl]` is set), the
    /// largest frame of a client that has not authenticated: Kafka's
    /// `sasl.server.max.receive.size`.
    pub max_unauthenticated_frame_bytes: usize,
    /// Bytes of answers a client has not taken above which kshim reads no
    /// more of its requests.
    pub max_unsent_response_bytes: usize,
    /// TLS handshakes waiting or running at once; `None`: 128 per CPU.
    pub max_pending_handshakes: Option<usize>,
    /// Of those, from one client address; `None`: a quarter of them.
    pub max_pending_handshakes_per_ip: Option<usize>,
    /// How long a TLS handshake may take from the accept.
    pub tls_handshake_timeout_ms: u64,
    /// File descriptors kept back from client connections, for the store, the
    /// admin API and kshim's own upstream connections.
    pub descriptor_reserve: usize,
    /// After SIGTERM, how long kshim reports not ready and keeps serving before
    /// it stops accepting connections; unset, `shutdown_delay()` decides.
    pub shutdown_delay_ms: Option<u64>,
    /// Once it has stopped accepting, how long open connections have to finish
    /// the requests already read.
    pub shutdown_grace_ms: u64,
    pub draft_tags: bool,
    /// The Apache Kafka release a standalone kshim presents: its features,
    /// metadata.version names and rules, and what a first start finalizes.
    pub kafka_release: KafkaRelease,
    /// `None`: the features of `kafka_release`.
    pub supported: Option<SupportedFeatures>,
    pub bootstrap: Option<BTreeMap<String, i16>>,
    /// Declared rules; they replace Kafka's default rules for the features they name.
    pub dependencies: Dependencies,
    /// `None`: no authorizer, everyone may alter the cluster.
    pub alter_cluster: Option<HashSet<String>>,
    /// Features that stay kshim's in front of a cluster: names, or prefixes ending in `*`.
    pub kshim_owned: Vec<String>,
    /// `None`: a standalone discovery server.
    pub upstream: Option<UpstreamConfig>,
    /// `[cluster]`: state shared with other instances through the upstream;
    /// `None`: state in the data directory alone.
    pub cluster: Option<crate::cluster::ClusterConfig>,
    /// `[policy]`: the create-topic policy and the config validators.
    pub policies: crate::policy::Policies,
    /// `[tls]`: TLS on every client-facing listener; `None`: plaintext.
    pub tls: Option<crate::tls::ListenerTls>,
    /// `[admin]`: the admin HTTP API; `None`: none.
    pub admin: Option<AdminConfig>,
    /// `[log] level`; `None`: `RUST_LOG`, else `info`.
    pub log_level: Option<String>,
    /// `[log] format = "json"`: one JSON object per line instead of text.
    pub log_json: bool,
    /// `[config_providers] file_allowed_paths`.
    pub file_allowed_paths: Vec<PathBuf>,
    /// `[census]`: the client census.
    pub census: crate::census::CensusConfig,
    /// `[[lab.scenarios]]`: discovery-lab scenarios, checked.
    pub lab: Vec<crate::lab::ScenarioSpec>,
}

/// `[upstream]`: the cluster kshim stands in front of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamConfig {
    /// HOST:PORT of upstream brokers, tried in order.
    pub bootstrap: Vec<String>,
    pub refresh_interval_ms: u64,
    pub connect_timeout_ms: u64,
    /// A forwarded request unanswered for this long closes its client's
    /// connection (Kafka's `request.timeout.ms`).
    pub request_timeout_ms: u64,
    /// /readyz turns unready once the upstream has been unreachable this long.
    pub unready_after_ms: u64,
    /// The largest response accepted from a broker.
    pub max_response_bytes: usize,
    /// Broker ids kshim opens listeners for; a Metadata answer naming more is
    /// not passed on.
    pub max_brokers: usize,
    /// How long the listener of a broker that left stays open for its return.
    pub listener_grace_ms: u64,
    /// The address per-broker listeners bind; default: the listen host.
    pub listener_host: Option<String>,
    /// The host clients are told for per-broker listeners; default: the host of
    /// `advertised_listener`, else the listener host.
    pub advertised_host: Option<String>,
    /// Node N listens on port_base + N; default: the listen port + 1; 0: ephemeral.
    pub port_base: Option<u16>,
    /// Every broker on the bootstrap port under the TLS server name this
    /// pattern gives it (`{node_id}` replaced), instead of a port each.
    pub sni_host: Option<String>,
    pub ports: BTreeMap<i32, u16>,
    /// Credentials for kshim's own connections (discovery, forwarded
    /// UpdateFeatures). Client connections carry their clients' own SASL.
    pub sasl: Option<crate::client::SaslCredentials>,
    /// `[upstream.tls]`: TLS to the brokers; `None`: plaintext.
    pub tls: Option<crate::tls::UpstreamTls>,
    pub unknown_api_keys: crate::upstream::UnknownApiKeys,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            bootstrap: Vec::new(),
            refresh_interval_ms: 5_000,
            connect_timeout_ms: 5_000,
            request_timeout_ms: 30_000,
            unready_after_ms: 30_000,
            max_response_bytes: 256 * 1024 * 1024,
            max_brokers: 1_000,
            listener_grace_ms: 300_000,
            listener_host: None,
            advertised_host: None,
            port_base: None,
            sni_host: None,
            ports: BTreeMap::new(),
            sasl: None,
            tls: None,
            unknown_api_keys: crate::upstream::UnknownApiKeys::Hide,
        }
    }
}

impl Config {
    /// After SIGTERM, how long to keep serving while `/readyz` says not ready:
    /// `shutdown_delay_ms`, else 5 s in front of a cluster (the time a load
    /// balancer takes to stop sending clients) and none for a standalone kshim,
    /// which is most often a local discovery server that should stop at once.
    pub fn shutdown_delay(&self) -> std::time::Duration {
        let default = if self.upstream.is_some() { 5_000 } else { 0 };
        std::time::Duration::from_millis(self.shutdown_delay_ms.unwrap_or(default))
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:9092".into(),
            advertised_listener: None,
            data_dir: PathBuf::from("./kshim-data"),
            node_id: 1,
            cluster_id: None,
            max_frame_bytes: crate::protocol::DEFAULT_MAX_FRAME_BYTES,
            max_connections: 10_000,
            max_connections_per_ip: usize::MAX,
            max_connections_per_ip_overrides: BTreeMap::new(),
            proxy_protocol: crate::server::proxy_protocol::Mode::Off,
            proxy_protocol_trusted: Vec::new(),
            connections_max_idle_ms: 600_000,
            frame_read_timeout_ms: 60_000,
            max_queued_request_bytes: None,
            max_memory_bytes: None,
            max_unauthenticated_frame_bytes: 512 * 1024,
            max_unsent_response_bytes: crate::server::DEFAULT_MAX_UNSENT_RESPONSE_BYTES,
            max_pending_handshakes: None,
            max_pending_handshakes_per_ip: None,
            tls_handshake_timeout_ms: crate::server::DEFAULT_HANDSHAKE_TIMEOUT.as_millis() as u64,
            descriptor_reserve: 256,
            shutdown_delay_ms: None,
            shutdown_grace_ms: 30_000,
            draft_tags: true,
            kafka_release: KafkaRelease::newest(),
            supported: None,
            bootstrap: None,
            dependencies: Dependencies::default(),
            alter_cluster: None,
            kshim_owned: Vec::new(),
            upstream: None,
            cluster: None,
            policies: crate::policy::Policies::default(),
            tls: None,
            admin: None,
            log_level: None,
            log_json: false,
            file_allowed_paths: Vec::new(),
            census: crate::census::CensusConfig::default(),
            lab: Vec::new(),
        }
    }
}

impl Config {
    /// The bound on pending TLS handshakes: the configured one, or the
    /// machine's default; the share per address never above the whole.
    pub fn handshake_limits(&self) -> crate::server::admission::HandshakeLimits {
        let default = crate::server::admission::HandshakeLimits::for_this_machine();
        let max_pending = self.max_pending_handshakes.unwrap_or(default.max_pending);
        let per_ip = self
            .max_pending_handshakes_per_ip
            .unwrap_or((max_pending / 4).max(1));
        crate::server::admission::HandshakeLimits {
            max_pending,
            max_pending_per_ip: per_ip.min(max_pending),
        }
    }

    /// The TLS server names brokers are told apart by, when
    /// `upstream.listeners.sni_host` is set: the bootstrap's name is the host of
    /// `advertised_listener` (or `listen`), and every name comes with its port.
    pub fn server_names(&self) -> Option<Result<crate::upstream::sni::ServerNames, String>> {
        let pattern = self.upstream.as_ref()?.sni_host.as_deref()?;
        let advertised = self.advertised_listener.as_deref().unwrap_or(&self.listen);
        let Some((host, port)) = advertised.rsplit_once(':') else {
            return Some(Err(format!("{advertised} is not HOST:PORT")));
        };
        let port = port
            .parse::<u16>()
            .map_err(|_| format!("{advertised} is not HOST:PORT"));
        Some(port.and_then(|port| {
            crate::upstream::sni::ServerNames::new(pattern, host.trim_matches(['[', ']']), port)
        }))
    }

    fn check_server_names(&self, u: &UpstreamConfig, errors: &mut Vec<ConfigError>) {
        let Some(names) = self.server_names() else {
            return;
        };
        let key = "upstream.listeners.sni_host";
        if let Err(e) = names {
            errors.push(ConfigError::new(key, e));
        }
        if self.tls.is_none() {
            errors.push(ConfigError::new(
                key,
                "brokers are told apart by the TLS server name, so [tls] must be set",
            ));
        }
        if u.port_base.is_some() || !u.ports.is_empty() {
            errors.push(ConfigError::new(
                key,
                "every broker is served on the bootstrap port: port_base and ports do not apply",
            ));
        }
    }

    /// Parses a TOML document, reporting every error at once. Placeholders are
    /// left as they are (see `ConfigSource` for the whole way in).
    pub fn from_toml(text: &str) -> Result<Config, ConfigErrors> {
        Config::from_document(&parse_document(text)?)
    }

    /// Reads a parsed TOML document, reporting every error at once.
    pub fn from_document(doc: &toml::Table) -> Result<Config, ConfigErrors> {
        let mut errors = Vec::new();
        let mut c = Config::default();
        {
            let mut top = walker("", doc, &mut errors);
            if let Some(v) = top.string("listen") {
                c.listen = v;
            }
            c.advertised_listener = top.string("advertised_listener");
            if let Some(v) = top.string("data_dir") {
                c.data_dir = PathBuf::from(v);
            }
            if let Some(v) = top.int::<i32>("node_id", "0 to 2147483647") {
                c.node_id = v;
            }
            c.cluster_id = top.string("cluster_id");
            if let Some(v) = top.int::<usize>("max_frame_bytes", "a positive size") {
                c.max_frame_bytes = v;
            }
            if let Some(v) = top.int::<usize>("max_connections", "a positive count") {
                c.max_connections = v;
            }
            if let Some(v) = top.int::<usize>("max_connections_per_ip", "a positive count") {
                c.max_connections_per_ip = v;
            }
            if let Some(t) = top.table("max_connections_per_ip_overrides") {
                c.max_connections_per_ip_overrides = per_ip_overrides(t, top.errors);
            }
            walk::proxy_protocol(&mut top, &mut c);
            if let Some(v) = top.int::<u64>(
                "connections_max_idle_ms",
                "a positive number of milliseconds",
            ) {
                c.connections_max_idle_ms = v;
            }
            if let Some(v) =
                top.int::<u64>("frame_read_timeout_ms", "a positive number of milliseconds")
            {
                c.frame_read_timeout_ms = v;
            }
            if let Some(v) = top.int::<usize>("max_queued_request_bytes", "a positive size") {
                c.max_queued_request_bytes = Some(v);
            }
            if let Some(v) = top.int::<u64>("max_memory_bytes", "a positive size") {
                c.max_memory_bytes = Some(v);
            }
            if let Some(v) = top.int::<usize>("max_unauthenticated_frame_bytes", "a positive size")
            {
                c.max_unauthenticated_frame_bytes = v;
            }
            if let Some(v) = top.int::<usize>("max_unsent_response_bytes", "a positive size") {
                c.max_unsent_response_bytes = v;
            }
            if let Some(v) = top.int::<usize>("max_pending_handshakes", "a positive count") {
                c.max_pending_handshakes = Some(v);
            }
            if let Some(v) = top.int::<usize>("max_pending_handshakes_per_ip", "a positive count") {
                c.max_pending_handshakes_per_ip = Some(v);
            }
            if let Some(v) = top.int::<u64>(
                "tls_handshake_timeout_ms",
                "a positive number of milliseconds",
            ) {
                c.tls_handshake_timeout_ms = v;
            }
            if let Some(v) = top.int::<usize>("descriptor_reserve", "a count of descriptors") {
                c.descriptor_reserve = v;
            }
            if let Some(v) = top.int::<u64>("shutdown_delay_ms", "a number of milliseconds") {
                c.shutdown_delay_ms = Some(v);
            }
            if let Some(v) = top.int::<u64>("shutdown_grace_ms", "a number of milliseconds") {
                c.shutdown_grace_ms = v;
            }
            if let Some(v) = top.string("kafka_release") {
                match KafkaRelease::named(&v) {
                    Some(release) => c.kafka_release = release,
                    None => top.errors.push(ConfigError::new(
                        "kafka_release",
                        format!(
                            "\"{v}\" is not a Kafka release kshim has data for ({})",
                            KafkaRelease::known()
                        ),
                    )),
                }
            }
            let discovery = top.table("discovery");
            let features = top.table("features");
            let authorization = top.table("authorization");
            let upstream = top.table("upstream");
            let cluster = top.table("cluster");
            let policy = top.table("policy");
            let tls_table = top.table("tls");
            let admin = top.table("admin");
            let log = top.table("log");
            let providers = top.table("config_providers");
            let census = top.table("census");
            let lab = top.table("lab");
            top.finish();

            if let Some(t) = census {
                let mut w = walker("census", t, &mut errors);
                if let Some(v) = w.bool("enabled") {
                    c.census.enabled = v;
                }
                if let Some(v) = w.int::<usize>("max_clients", "1 or more") {
                    if v == 0 {
                        w.errors
                            .push(ConfigError::new("census.max_clients", "must be 1 or more"));
                    } else {
                        c.census.max_clients = v;
                    }
                }
                if let Some(v) = w.int::<usize>("metrics_software_versions", "0 or more") {
                    c.census.metrics_software_versions = v;
                }
                w.finish();
            }
            if let Some(t) = lab {
                c.lab = lab::parse_lab(t, &mut errors);
            }

            if let Some(t) = tls_table {
                c.tls = tls::parse_listener_tls("tls", t, &mut errors);
            }
            if let Some(t) = admin {
                c.admin = Some(operations::parse_admin(t, &mut errors));
            }
            if let Some(t) = log {
                (c.log_level, c.log_json) = operations::parse_log(t, &mut errors);
            }
            if let Some(t) = providers {
                c.file_allowed_paths = operations::parse_providers(t, &mut errors);
            }

            if let Some(t) = policy {
                c.policies = policy::parse_policy(t, &mut errors);
            }

            if let Some(t) = upstream {
                c.upstream = Some(upstream::parse_upstream(t, &mut errors));
            }
            if let Some(t) = cluster {
                c.cluster = cluster::parse_cluster(t, c.node_id, &mut errors);
            }

            if let Some(t) = discovery {
                let mut w = walker("discovery", t, &mut errors);
                if let Some(v) = w.bool("draft_tags") {
                    c.draft_tags = v;
                }
                w.finish();
            }
            if let Some(t) = features {
                parse_features(t, &mut c, &mut errors);
            }
            if let Some(t) = authorization {
                let mut w = walker("authorization", t, &mut errors);
                if let Some(v) = w.get("alter_cluster") {
                    match v.as_array().map(|a| {
                        a.iter()
                            .map(|p| p.as_str().map(str::to_owned))
                            .collect::<Option<HashSet<_>>>()
                    }) {
                        Some(Some(set)) => c.alter_cluster = Some(set),
                        _ => w.errors.push(ConfigError::new(
                            "authorization.alter_cluster",
                            "expected a list of principals such as \"User:alice\"",
                        )),
                    }
                }
                w.finish();
            }
        }
        // `kshim serve --upstream` may still supply the broker list.
        c.check(&mut errors, false);
        if errors.is_empty() {
            Ok(c)
        } else {
            Err(ConfigErrors(errors))
        }
    }

    /// Checks across keys; run after command-line overrides.
    pub fn validate(&self, errors: &mut Vec<ConfigError>) {
        self.check(errors, true);
    }

    fn check(&self, errors: &mut Vec<ConfigError>, complete: bool) {
        check_host_port("listen", &self.listen, errors);
        if let Some(a) = &self.advertised_listener {
            check_host_port("advertised_listener", a, errors);
            if is_wildcard(host_of(a)) {
                errors.push(ConfigError::new(
                    "advertised_listener",
                    format!("{a} is not an address clients can connect to: give the host name or address they should use"),
                ));
            }
        } else if complete && is_wildcard(host_of(&self.listen)) {
            // Kafka refuses a wildcard advertised address too: clients would be
            // told to connect to 0.0.0.0.
            errors.push(ConfigError::new(
                "listen",
                format!(
                    "{} listens on every address, so kshim cannot tell clients which one to use: set advertised_listener (or --advertised-listener) to the HOST:PORT clients connect to",
                    self.listen
                ),
            ));
        }
        if let Some(host) = self
            .upstream
            .as_ref()
            .and_then(|u| u.advertised_host.as_deref())
            .filter(|h| is_wildcard(h))
        {
            errors.push(ConfigError::new(
                "upstream.listeners.advertised_host",
                format!("{host} is not an address clients can connect to"),
            ));
        }
        if let Some(u) = &self.upstream {
            self.check_server_names(u, errors);
        }
        if let Some(admin) = &self.admin {
            check_host_port("admin.listen", &admin.listen, errors);
            if admin.listen == self.listen && !admin.listen.ends_with(":0") {
                errors.push(ConfigError::new(
                    "admin.listen",
                    format!("{} is the Kafka listener's address too", admin.listen),
                ));
            }
        }
        if self.node_id < 0 {
            errors.push(ConfigError::new(
                "node_id",
                format!("{} must not be negative", self.node_id),
            ));
        }
        if self.max_frame_bytes < 64 {
            errors.push(ConfigError::new(
                "max_frame_bytes",
                format!(
                    "{} is too small for any Kafka request",
                    self.max_frame_bytes
                ),
            ));
        }
        // Counts and durations where 0 would refuse or close everything.
        let at_least_one = [
            ("max_connections", self.max_connections as u64),
            ("max_connections_per_ip", self.max_connections_per_ip as u64),
            ("connections_max_idle_ms", self.connections_max_idle_ms),
            ("frame_read_timeout_ms", self.frame_read_timeout_ms),
            ("tls_handshake_timeout_ms", self.tls_handshake_timeout_ms),
            (
                "max_unsent_response_bytes",
                self.max_unsent_response_bytes as u64,
            ),
            ("max_memory_bytes", self.max_memory_bytes.unwrap_or(1)),
            (
                "max_unauthenticated_frame_bytes",
                self.max_unauthenticated_frame_bytes as u64,
            ),
            (
                "max_pending_handshakes",
                self.max_pending_handshakes.map_or(1, |n| n as u64),
            ),
            (
                "max_pending_handshakes_per_ip",
                self.max_pending_handshakes_per_ip.map_or(1, |n| n as u64),
            ),
        ];
        for (key, value) in at_least_one {
            if value == 0 {
                errors.push(ConfigError::new(key, "must be at least 1"));
            }
        }
        if let Some(budget) = self.max_queued_request_bytes {
            if budget < self.max_frame_bytes {
                errors.push(ConfigError::new(
                    "max_queued_request_bytes",
                    format!(
                        "{budget} is below max_frame_bytes ({}): a frame of the largest size could never be read",
                        self.max_frame_bytes
                    ),
                ));
            }
        }
        if let Some(alter) = &self.alter_cluster {
            for p in alter {
                if !p.contains(':') {
                    errors.push(ConfigError::new(
                        "authorization.alter_cluster",
                        format!("\"{p}\" is not TYPE:NAME (for example User:alice)"),
                    ));
                }
            }
        }
        if complete && self.cluster.is_some() && self.upstream.is_none() {
            errors.push(ConfigError::new(
                "cluster",
                "a kshim cluster keeps its state on the upstream: [upstream] (or --upstream) is required",
            ));
        }
        if let Some(u) = &self.upstream {
            if complete && u.bootstrap.is_empty() {
                errors.push(ConfigError::new(
                    "upstream.bootstrap",
                    "give at least one HOST:PORT",
                ));
            }
            for b in &u.bootstrap {
                check_host_port("upstream.bootstrap", b, errors);
            }
            if u.refresh_interval_ms == 0 {
                errors.push(ConfigError::new(
                    "upstream.refresh_interval_ms",
                    "must be at least 1",
                ));
            }
            if u.connect_timeout_ms == 0 {
                errors.push(ConfigError::new(
                    "upstream.connect_timeout_ms",
                    "must be at least 1",
                ));
            }
            if u.request_timeout_ms == 0 {
                errors.push(ConfigError::new(
                    "upstream.request_timeout_ms",
                    "must be at least 1",
                ));
            }
            if u.max_brokers == 0 {
                errors.push(ConfigError::new(
                    "upstream.max_brokers",
                    "must be at least 1",
                ));
            }
            if u.max_response_bytes < 1024 {
                errors.push(ConfigError::new(
                    "upstream.max_response_bytes",
                    format!(
                        "{} is too small for any Kafka response",
                        u.max_response_bytes
                    ),
                ));
            }
            let mut taken: BTreeMap<u16, i32> = BTreeMap::new();
            let configured = self.configured_ports();
            for (&node, &port) in &u.ports {
                if port != 0 {
                    if let Some(other) = taken.insert(port, node) {
                        errors.push(ConfigError::new(
                            "upstream.listeners.ports",
                            format!("nodes {other} and {node} both have port {port}"),
                        ));
                    }
                    if let Some((key, _)) = configured.iter().find(|(_, p)| *p == port) {
                        errors.push(ConfigError::new(
                            format!("upstream.listeners.ports.\"{node}\""),
                            format!("port {port} is {key}'s port"),
                        ));
                    }
                }
            }
        }
        for p in &self.kshim_owned {
            if p.is_empty() || p == "*" {
                errors.push(ConfigError::new("features.ownership.kshim_owned", format!("\"{p}\" would claim every feature; name features or prefixes such as \"acme.*\""
                )));
            }
        }
        let supported = self.supported_features();
        for (f, _, req) in self.dependencies.iter() {
            for name in [f, req.feature.as_str()] {
                if !supported.contains_key(name) {
                    errors.push(ConfigError::new(
                        format!("features.dependencies.\"{f}\""),
                        format!("{name} is not a supported feature"),
                    ));
                }
            }
        }
    }

    /// The fixed ports of kshim's own listeners (the Kafka listener and the
    /// admin API), which no broker's listener may take.
    pub fn configured_ports(&self) -> Vec<(&'static str, u16)> {
        let port = |addr: &str| {
            addr.rsplit_once(':')
                .and_then(|(_, p)| p.parse::<u16>().ok())
                .filter(|p| *p != 0)
        };
        let mut out = Vec::new();
        if let Some(p) = port(&self.listen) {
            out.push(("listen", p));
        }
        if let Some(p) = self.admin.as_ref().and_then(|a| port(&a.listen)) {
            out.push(("admin.listen", p));
        }
        out
    }

    pub fn supported_features(&self) -> SupportedFeatures {
        self.supported
            .clone()
            .unwrap_or_else(|| self.kafka_release.supported_features())
    }

    /// Kafka's own dependency rules for the supported features it knows, with the
    /// declared rules in place of Kafka's for the features they name.
    pub fn effective_dependencies(&self) -> Dependencies {
        let supported = self.supported_features();
        let mut defaults = Dependencies::default();
        for (f, level, req) in self.kafka_release.dependencies().iter() {
            if supported.contains_key(f) && supported.contains_key(&req.feature) {
                defaults.add(f, level, req.clone());
            }
        }
        defaults.overridden_by(self.dependencies.clone())
    }

    /// The rules an UpdateFeatures request is decided by.
    pub fn update_rules(&self) -> UpdateRules {
        UpdateRules {
            release: self.kafka_release,
            dependencies: self.effective_dependencies(),
        }
    }
}

#[cfg(test)]
mod tests;
