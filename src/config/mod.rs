//! The typed configuration of `kshim serve`, read from TOML.
//!
//! Parsing walks the document by hand instead of through serde so that every
//! problem — unknown keys, wrong types, bad values — is reported in one pass.
//! `ConfigSource` is where a config comes from: the file, then the command
//! line; placeholders in its values are resolved before it is parsed.
//! Owns no runtime state.

mod cluster;
mod lab;
mod operations;
pub mod placeholders;
mod policy;
mod source;
pub mod tls;
mod upstream;
pub use crate::secret::Secret;

pub use operations::{check_log_filter, AdminConfig, DEFAULT_ADMIN_LISTEN};
pub use source::{parse_document, CliOverrides, ConfigSource, Loaded};

use crate::features::{kafka, Dependencies, Requirement, SupportedFeatures, SupportedRange};
use std::collections::{BTreeMap, HashSet};
use std::fmt;
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
    /// Open connections from one address (Kafka's `max.connections.per.ip`).
    pub max_connections_per_ip: usize,
    /// Per-address exceptions to `max_connections_per_ip`.
    pub max_connections_per_ip_overrides: BTreeMap<std::net::IpAddr, usize>,
    /// A connection with no request for this long is closed.
    pub connections_max_idle_ms: u64,
    /// A frame that has started must arrive whole within this long.
    pub frame_read_timeout_ms: u64,
    /// Bytes of request frames held at once across every connection (Kafka's
    /// `queued.max.request.bytes`).
    pub max_queued_request_bytes: usize,
    /// File descriptors kept back from client connections, for the store, the
    /// admin API and kshim's own upstream connections.
    pub descriptor_reserve: usize,
    pub draft_tags: bool,
    /// `None`: Kafka 4.1's own features.
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
    pub ports: BTreeMap<i32, u16>,
    /// Credentials for kshim's own connections (discovery, forwarded
    /// UpdateFeatures). Client connections carry their clients' own SASL.
    pub sasl: Option<crate::client::SaslCredentials>,
    /// `[upstream.tls]`: TLS to the brokers; `None`: plaintext.
    pub tls: Option<crate::tls::UpstreamTls>,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        UpstreamConfig {
            bootstrap: Vec::new(),
            refresh_interval_ms: 5_000,
            connect_timeout_ms: 5_000,
            request_timeout_ms: 30_000,
            max_response_bytes: 256 * 1024 * 1024,
            max_brokers: 1_000,
            listener_grace_ms: 300_000,
            listener_host: None,
            advertised_host: None,
            port_base: None,
            ports: BTreeMap::new(),
            sasl: None,
            tls: None,
        }
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
            max_connections_per_ip: 1_000,
            max_connections_per_ip_overrides: BTreeMap::new(),
            connections_max_idle_ms: 600_000,
            frame_read_timeout_ms: 60_000,
            max_queued_request_bytes: crate::server::default_queued_request_bytes(),
            descriptor_reserve: 256,
            draft_tags: true,
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

/// One problem in a config: the key path it is about ("upstream.sasl",
/// "policy.validators[2].min"; "config" for the document as a whole) and what
/// is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub key: String,
    pub message: String,
}

impl ConfigError {
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            key: key.into(),
            message: message.into(),
        }
    }

    /// The key without an array index: the key a change is reported under.
    pub fn top_key(&self) -> &str {
        self.key.split('[').next().unwrap_or(&self.key)
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// Every problem found in a config, listed together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// Each problem as "key: message".
    pub fn messages(&self) -> Vec<String> {
        self.0.iter().map(ToString::to_string).collect()
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} configuration error(s):", self.0.len())?;
        for e in &self.0 {
            writeln!(f, "  - {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Collects errors while walking one table.
struct Walker<'a, 'e> {
    path: String,
    table: &'a toml::Table,
    seen: HashSet<&'a str>,
    errors: &'e mut Vec<ConfigError>,
}

impl<'a> Walker<'a, '_> {
    fn key(&self, k: &str) -> String {
        if self.path.is_empty() {
            k.to_owned()
        } else {
            format!("{}.{k}", self.path)
        }
    }

    fn get(&mut self, k: &'a str) -> Option<&'a toml::Value> {
        self.seen.insert(k);
        let table: &'a toml::Table = self.table;
        table.get(k)
    }

    fn string(&mut self, k: &'a str) -> Option<String> {
        match self.get(k)? {
            toml::Value::String(s) => Some(s.clone()),
            other => {
                self.errors.push(ConfigError::new(
                    self.key(k),
                    format!("expected a string, found {}", other.type_str()),
                ));
                None
            }
        }
    }

    fn bool(&mut self, k: &'a str) -> Option<bool> {
        match self.get(k)? {
            toml::Value::Boolean(b) => Some(*b),
            other => {
                self.errors.push(ConfigError::new(
                    self.key(k),
                    format!("expected true or false, found {}", other.type_str()),
                ));
                None
            }
        }
    }

    fn int<T: TryFrom<i64>>(&mut self, k: &'a str, range: &str) -> Option<T> {
        let full = self.key(k);
        match self.get(k)? {
            toml::Value::Integer(i) => match T::try_from(*i) {
                Ok(v) => Some(v),
                Err(_) => {
                    self.errors.push(ConfigError::new(
                        format!("{full}"),
                        format!("{i} is out of range ({range})"),
                    ));
                    None
                }
            },
            other => {
                self.errors.push(ConfigError::new(
                    format!("{full}"),
                    format!("expected an integer, found {}", other.type_str()),
                ));
                None
            }
        }
    }

    fn table(&mut self, k: &'a str) -> Option<&'a toml::Table> {
        match self.get(k)? {
            toml::Value::Table(t) => Some(t),
            other => {
                self.errors.push(ConfigError::new(
                    self.key(k),
                    format!("expected a table, found {}", other.type_str()),
                ));
                None
            }
        }
    }

    /// A list of strings; empty when the key is absent.
    fn strings(&mut self, k: &'a str) -> Vec<String> {
        let full = self.key(k);
        let Some(v) = self.get(k) else {
            return Vec::new();
        };
        match v.as_array().and_then(|a| {
            a.iter()
                .map(|s| s.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
        }) {
            Some(list) => list,
            None => {
                self.errors.push(ConfigError::new(
                    format!("{full}"),
                    format!("expected a list of strings"),
                ));
                Vec::new()
            }
        }
    }

    fn finish(self) {
        for k in self.table.keys() {
            if !self.seen.contains(k.as_str()) {
                self.errors
                    .push(ConfigError::new(self.key(k), "unknown key"));
            }
        }
    }
}

fn walker<'a, 'e>(
    path: &str,
    table: &'a toml::Table,
    errors: &'e mut Vec<ConfigError>,
) -> Walker<'a, 'e> {
    Walker {
        path: path.to_owned(),
        table,
        seen: HashSet::new(),
        errors,
    }
}

fn level(v: &toml::Value, key: &str, errors: &mut Vec<ConfigError>) -> Option<i16> {
    match v {
        toml::Value::Integer(i) => match i16::try_from(*i) {
            Ok(l) if l >= 0 => Some(l),
            _ => {
                errors.push(ConfigError::new(
                    format!("{key}"),
                    format!("level {i} must be between 0 and {}", i16::MAX),
                ));
                None
            }
        },
        other => {
            errors.push(ConfigError::new(
                format!("{key}"),
                format!("expected an integer level, found {}", other.type_str()),
            ));
            None
        }
    }
}

/// `max_connections_per_ip_overrides`: IP address = count (0 refuses the address).
fn per_ip_overrides(
    t: &toml::Table,
    errors: &mut Vec<ConfigError>,
) -> BTreeMap<std::net::IpAddr, usize> {
    let mut out = BTreeMap::new();
    for (addr, count) in t {
        let key = format!("max_connections_per_ip_overrides.\"{addr}\"");
        let Ok(ip) = addr.parse::<std::net::IpAddr>() else {
            errors.push(ConfigError::new(
                format!("{key}"),
                format!("the key must be an IP address"),
            ));
            continue;
        };
        match count.as_integer().map(usize::try_from) {
            Some(Ok(n)) => {
                out.insert(ip, n);
            }
            _ => errors.push(ConfigError::new(
                format!("{key}"),
                format!("expected a count of connections"),
            )),
        }
    }
    out
}

/// The host of `HOST:PORT` (brackets of an IPv6 address removed).
fn host_of(host_port: &str) -> &str {
    host_port
        .rsplit_once(':')
        .map_or(host_port, |(h, _)| h)
        .trim_matches(['[', ']'])
}

/// Whether `host` means every address: never one to tell clients.
fn is_wildcard(host: &str) -> bool {
    host.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_unspecified())
}

/// `HOST:PORT` with a numeric port.
fn check_host_port(key: &str, value: &str, errors: &mut Vec<ConfigError>) {
    match value.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {}
        _ => errors.push(ConfigError::new(
            format!("{key}"),
            format!("\"{value}\" is not HOST:PORT"),
        )),
    }
}

impl Config {
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
                c.max_queued_request_bytes = v;
            }
            if let Some(v) = top.int::<usize>("descriptor_reserve", "a count of descriptors") {
                c.descriptor_reserve = v;
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
        if self.max_connections == 0 {
            errors.push(ConfigError::new("max_connections", "must be at least 1"));
        }
        if self.max_connections_per_ip == 0 {
            errors.push(ConfigError::new(
                "max_connections_per_ip",
                "must be at least 1",
            ));
        }
        if self.connections_max_idle_ms == 0 {
            errors.push(ConfigError::new(
                "connections_max_idle_ms",
                "must be at least 1",
            ));
        }
        if self.frame_read_timeout_ms == 0 {
            errors.push(ConfigError::new(
                "frame_read_timeout_ms",
                "must be at least 1",
            ));
        }
        if self.max_queued_request_bytes < self.max_frame_bytes {
            errors.push(ConfigError::new(
                "max_queued_request_bytes",
                format!(
                    "{} is below max_frame_bytes ({}): a frame of the largest size could never be read",
                    self.max_queued_request_bytes, self.max_frame_bytes
                ),
            ));
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
            .unwrap_or_else(kafka::supported_features)
    }

    /// Kafka's own dependency rules for the supported features it knows, with the
    /// declared rules in place of Kafka's for the features they name.
    pub fn effective_dependencies(&self) -> Dependencies {
        let supported = self.supported_features();
        let mut defaults = Dependencies::default();
        for (f, level, req) in kafka::dependencies().iter() {
            if supported.contains_key(f) && supported.contains_key(&req.feature) {
                defaults.add(f, level, req.clone());
            }
        }
        defaults.overridden_by(self.dependencies.clone())
    }
}

/// A list of strings, or one comma-separated string.
fn string_list(v: &toml::Value, key: &str, errors: &mut Vec<ConfigError>) -> Option<Vec<String>> {
    match v {
        toml::Value::String(s) => Some(
            s.split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect(),
        ),
        toml::Value::Array(items) => {
            let out: Option<Vec<String>> = items
                .iter()
                .map(|i| i.as_str().map(str::to_owned))
                .collect();
            if out.is_none() {
                errors.push(ConfigError::new(
                    format!("{key}"),
                    format!("expected a list of strings"),
                ));
            }
            out
        }
        other => {
            errors.push(ConfigError::new(
                format!("{key}"),
                format!(
                    "expected a string or a list of strings, found {}",
                    other.type_str()
                ),
            ));
            None
        }
    }
}

fn parse_features(t: &toml::Table, c: &mut Config, errors: &mut Vec<ConfigError>) {
    let mut w = walker("features", t, errors);
    let supported = w.table("supported");
    let bootstrap = w.table("bootstrap");
    let dependencies = w.table("dependencies");
    let ownership = w.table("ownership");
    w.finish();

    if let Some(t) = ownership {
        let mut w = walker("features.ownership", t, errors);
        if let Some(v) = w.get("kshim_owned") {
            if let Some(list) = string_list(v, "features.ownership.kshim_owned", w.errors) {
                c.kshim_owned = list;
            }
        }
        w.finish();
    }

    if let Some(t) = supported {
        let mut out = SupportedFeatures::new();
        for (name, v) in t {
            let key = format!("features.supported.\"{name}\"");
            let Some(range) = v.as_table() else {
                errors.push(ConfigError::new(
                    format!("{key}"),
                    format!("expected {{ min = A, max = B }}"),
                ));
                continue;
            };
            let mut w = walker(&key, range, errors);
            let min = w
                .get("min")
                .and_then(|v| level(v, &format!("{key}.min"), w.errors));
            let max = w
                .get("max")
                .and_then(|v| level(v, &format!("{key}.max"), w.errors));
            w.finish();
            match (min, max) {
                (Some(min), Some(max)) if min <= max => {
                    out.insert(name.clone(), SupportedRange::new(min, max));
                }
                (Some(min), Some(max)) => errors.push(ConfigError::new(
                    format!("{key}"),
                    format!("min {min} is above max {max}"),
                )),
                (None, _) | (_, None)
                    if !range.contains_key("min") || !range.contains_key("max") =>
                {
                    errors.push(ConfigError::new(
                        format!("{key}"),
                        format!("both min and max are required"),
                    ))
                }
                _ => {}
            }
        }
        c.supported = Some(out);
    }
    if let Some(t) = bootstrap {
        let mut out = BTreeMap::new();
        for (name, v) in t {
            if let Some(l) = level(v, &format!("features.bootstrap.\"{name}\""), errors) {
                out.insert(name.clone(), l);
            }
        }
        c.bootstrap = Some(out);
    }
    if let Some(t) = dependencies {
        // "feature" = [{ level = L, requires = { "other" = M, ... } }, ...]
        for (name, v) in t {
            let key = format!("features.dependencies.\"{name}\"");
            let Some(rules) = v.as_array() else {
                errors.push(ConfigError::new(
                    format!("{key}"),
                    format!("expected a list of {{ level = L, requires = {{ \"feature\" = M }} }}"),
                ));
                continue;
            };
            for (i, rule) in rules.iter().enumerate() {
                let key = format!("{key}[{i}]");
                let Some(rule) = rule.as_table() else {
                    errors.push(ConfigError::new(
                        format!("{key}"),
                        format!("expected {{ level = L, requires = {{ ... }} }}"),
                    ));
                    continue;
                };
                let mut w = walker(&key, rule, errors);
                let from = w
                    .get("level")
                    .and_then(|v| level(v, &format!("{key}.level"), w.errors));
                let requires = w.table("requires");
                w.finish();
                let (Some(from), Some(requires)) = (from, requires) else {
                    errors.push(ConfigError::new(
                        format!("{key}"),
                        format!("both level and requires are required"),
                    ));
                    continue;
                };
                for (dep, min) in requires {
                    if let Some(min_level) =
                        level(min, &format!("{key}.requires.\"{dep}\""), errors)
                    {
                        c.dependencies.add(
                            name,
                            from,
                            Requirement {
                                feature: dep.clone(),
                                min_level,
                            },
                        );
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_config_parses() {
        let c = Config::from_toml(
            r#"
            listen = "127.0.0.1:19092"
            advertised_listener = "localhost:19092"
            data_dir = "/tmp/x"
            node_id = 3
            cluster_id = "abc"
            [discovery]
            draft_tags = false
            [features.supported]
            "metadata.version" = { min = 7, max = 27 }
            "acme.widgets" = { min = 1, max = 4 }
            [features.bootstrap]
            "acme.widgets" = 2
            [features.dependencies]
            "acme.widgets" = [{ level = 3, requires = { "metadata.version" = 25 } }]
            [authorization]
            alter_cluster = ["User:admin"]
            "#,
        )
        .unwrap();
        assert_eq!(c.node_id, 3);
        assert!(!c.draft_tags);
        assert_eq!(c.supported_features().len(), 2);
        assert_eq!(
            c.effective_dependencies()
                .requirements("acme.widgets", 3)
                .len(),
            1
        );
        assert!(c.alter_cluster.unwrap().contains("User:admin"));
        assert!(c.upstream.is_none());
    }

    #[test]
    fn an_upstream_section_parses() {
        let c = Config::from_toml(
            r#"
            listen = "127.0.0.1:19092"
            [upstream]
            bootstrap = "127.0.0.1:9092, 127.0.0.1:9093"
            refresh_interval_ms = 1000
            [upstream.listeners]
            port_base = 19100
            advertised_host = "proxy.example"
            [upstream.listeners.ports]
            "1001" = 19201
            [features.ownership]
            kshim_owned = ["acme.*", "kshim.interop.version"]
            "#,
        )
        .unwrap();
        let u = c.upstream.unwrap();
        assert_eq!(u.bootstrap, vec!["127.0.0.1:9092", "127.0.0.1:9093"]);
        assert_eq!(u.port_base, Some(19100));
        assert_eq!(u.ports[&1001], 19201);
        assert_eq!(c.kshim_owned.len(), 2);
        let mut no_bootstrap = Vec::new();
        Config::from_toml("[upstream]\nrefresh_interval_ms = 10")
            .expect("the broker list may come from --upstream")
            .validate(&mut no_bootstrap);
        assert_eq!(no_bootstrap.len(), 1, "{no_bootstrap:?}");
        let err = Config::from_toml(
            "[upstream]\nbootstrap = [\"nope\"]\nwat = 1\n[upstream.listeners.ports]\n\"x\" = 1\n\"2\" = 70000\n[features.ownership]\nkshim_owned = \"*\"",
        )
        .unwrap_err()
        .to_string();
        for expected in [
            "upstream.bootstrap: \"nope\" is not HOST:PORT",
            "upstream.wat: unknown key",
            "the key must be a node id",
            "expected a port",
            "would claim every feature",
        ] {
            assert!(err.contains(expected), "missing {expected:?} in:\n{err}");
        }
    }

    #[test]
    fn connection_limits_parse_and_bad_ones_are_named() {
        let c = Config::from_toml(
            r#"
max_connections_per_ip = 50
max_connections_per_ip_overrides = { "10.0.0.7" = 5000, "::1" = 0 }
connections_max_idle_ms = 1000
frame_read_timeout_ms = 2000
descriptor_reserve = 64
[upstream]
bootstrap = "k:9092"
max_brokers = 10
listener_grace_ms = 0
"#,
        )
        .unwrap();
        assert_eq!(c.max_connections_per_ip, 50);
        assert_eq!(
            c.max_connections_per_ip_overrides[&"10.0.0.7".parse::<std::net::IpAddr>().unwrap()],
            5000
        );
        assert_eq!(c.connections_max_idle_ms, 1000);
        assert_eq!(c.frame_read_timeout_ms, 2000);
        assert_eq!(c.descriptor_reserve, 64);
        let u = c.upstream.unwrap();
        assert_eq!((u.max_brokers, u.listener_grace_ms), (10, 0));
        let errors = Config::from_toml(
            r#"
max_connections_per_ip = 0
max_connections_per_ip_overrides = { "kafka.example" = 1, "10.0.0.1" = -1 }
connections_max_idle_ms = 0
frame_read_timeout_ms = 0
[admin]
listen = "127.0.0.1:9880"
[upstream]
bootstrap = "k:9092"
max_brokers = 0
[upstream.listeners.ports]
"1" = 9880
"#,
        )
        .unwrap_err()
        .messages()
        .join("\n");
        for expected in [
            "max_connections_per_ip: must be at least 1",
            "\"kafka.example\": the key must be an IP address",
            "\"10.0.0.1\": expected a count",
            "connections_max_idle_ms: must be at least 1",
            "frame_read_timeout_ms: must be at least 1",
            "upstream.max_brokers: must be at least 1",
            "port 9880 is admin.listen's port",
        ] {
            assert!(
                errors.contains(expected),
                "{expected} missing from:\n{errors}"
            );
        }
    }

    #[test]
    fn every_error_is_reported_at_once() {
        let err = Config::from_toml(
            r#"
            listen = "nowhere"
            colour = "blue"
            node_id = "one"
            [discovery]
            draft_tag = true
            [features.supported]
            "a" = { min = 3, max = 1 }
            "b" = { min = 1 }
            [features.dependencies]
            "a" = [{ level = 1, requires = { "zzz" = 1 } }]
            "#,
        )
        .unwrap_err();
        let all = err.to_string();
        for expected in [
            "listen: \"nowhere\" is not HOST:PORT",
            "colour: unknown key",
            "node_id: expected an integer",
            "discovery.draft_tag: unknown key",
            "min 3 is above max 1",
            "both min and max are required",
            "zzz is not a supported feature",
        ] {
            assert!(all.contains(expected), "missing {expected:?} in:\n{all}");
        }
    }

    #[test]
    fn kafka_defaults_apply_when_nothing_is_configured() {
        let c = Config::from_toml("").unwrap();
        assert_eq!(c.supported_features(), kafka::supported_features());
        assert_eq!(c.effective_dependencies(), kafka::dependencies());
        assert!(c.draft_tags);
        assert!(c.alter_cluster.is_none());
    }
}

#[cfg(test)]
mod wildcard_tests {
    use super::*;

    fn complete_errors(text: &str) -> Vec<String> {
        let config = Config::from_toml(text).expect("parses");
        let mut errors = Vec::new();
        config.validate(&mut errors);
        errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_wildcard_is_never_advertised() {
        let refused = complete_errors("listen = \"0.0.0.0:19092\"");
        assert!(
            refused[0].starts_with("listen: 0.0.0.0:19092 listens on every address"),
            "{refused:?}"
        );
        assert!(complete_errors("listen = \"[::]:19092\"")[0].contains("advertised_listener"));
        assert!(complete_errors(
            "listen = \"0.0.0.0:19092\"\nadvertised_listener = \"kshim.example:19092\""
        )
        .is_empty());
        assert!(complete_errors("listen = \"127.0.0.1:19092\"").is_empty());
        let advertised = Config::from_toml("advertised_listener = \"0.0.0.0:19092\"").unwrap_err();
        assert!(
            advertised.to_string().contains(
                "advertised_listener: 0.0.0.0:19092 is not an address clients can connect to"
            ),
            "{advertised}"
        );
        let host = Config::from_toml(
            "advertised_listener = \"kshim.example:19092\"\n[upstream]\nbootstrap = \"k:9092\"\n[upstream.listeners]\nadvertised_host = \"::\"",
        )
        .unwrap_err();
        assert!(
            host.to_string()
                .contains("upstream.listeners.advertised_host: :: is not"),
            "{host}"
        );
    }
}
