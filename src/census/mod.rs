//! The client census: who connects, what they negotiate and what they are
//! served, kept per live connection and aggregated per (principal, client
//! software name, client software version).
//!
//! Recording is on the request path, so it takes no lock shared between
//! connections: each connection counts into its own record (a mutex only the
//! admin API's readers ever contend for), and folds its counts into the
//! aggregate when it closes or changes identity (ApiVersions naming other
//! software, SASL naming a principal). A reader adds the live connections'
//! counts to the aggregates. Aggregates live in a concurrent map capped at
//! `max_clients`; past the cap, the least recently seen entries without a live
//! connection are evicted (a tenth at a time, so that eviction is rare) and
//! counted.
//!
//! The Prometheus series (`kshim_client_requests_total`) are bounded too: the
//! first `metrics_software_versions` (name, version) pairs seen get series of
//! their own; every later pair is counted under `other`.

pub mod impact;

use crate::features::FeatureSnapshot;
use crate::protocol::api_name;
use crate::protocol::api_versions::ClientSoftware;
use dashmap::DashMap;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Distinct (API key, version) pairs one record keeps; a client that uses
/// more (only a hostile one can) has the rest counted under key -1.
const MAX_API_PAIRS: usize = 512;
/// Source addresses kept per aggregate, most recent last.
const MAX_ADDRESSES: usize = 16;
/// Error kinds kept per record.
const MAX_ERROR_KINDS: usize = 64;
/// Longest software name or version stored; longer ones are cut (Kafka sets no
/// bound, real clients send a few dozen bytes).
const MAX_SOFTWARE_CHARS: usize = 128;
/// API keys and versions with a metrics slot of their own (as in `metrics`).
const API_KEYS: usize = 128;
const VERSIONS: usize = 32;

/// `[census]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CensusConfig {
    pub enabled: bool,
    /// Aggregates kept at most.
    pub max_clients: usize,
    /// (software name, version) pairs with Prometheus series of their own.
    pub metrics_software_versions: usize,
}

impl Default for CensusConfig {
    fn default() -> Self {
        CensusConfig {
            enabled: true,
            max_clients: 10_000,
            metrics_software_versions: 20,
        }
    }
}

/// Milliseconds since the Unix epoch.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What one aggregate is keyed by.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientKey {
    pub principal: String,
    /// Empty when the client did not say (ApiVersions below v3, or none).
    pub software_name: String,
    pub software_version: String,
}

impl ClientKey {
    fn new(principal: &str, software: Option<&ClientSoftware>) -> ClientKey {
        let cut = |s: &str| s.chars().take(MAX_SOFTWARE_CHARS).collect::<String>();
        ClientKey {
            principal: cut(principal),
            software_name: software.map(|s| cut(&s.name)).unwrap_or_default(),
            software_version: software.map(|s| cut(&s.version)).unwrap_or_default(),
        }
    }
}

/// The feature view a client was last served in an ApiVersions answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Served {
    /// The ApiVersions version of the answer.
    pub api_versions_version: i16,
    pub epoch: i64,
    /// Finalized levels as the client read them (disabled features absent).
    pub levels: BTreeMap<String, i16>,
    /// Discovery-lab scenarios that shaped the answer.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scenarios: Vec<String>,
}

/// What a client was last served, kept cheaply on the request path: the
/// snapshot itself (shared with the discovery cache), or the view a lab
/// scenario built. Turned into a `Served` when read.
#[derive(Debug, Clone)]
pub enum ServedRecord {
    Snapshot {
        version: i16,
        snapshot: Arc<FeatureSnapshot>,
    },
    Shaped(Served),
}

impl ServedRecord {
    fn view(&self) -> Served {
        match self {
            ServedRecord::Shaped(served) => served.clone(),
            ServedRecord::Snapshot { version, snapshot } => Served {
                api_versions_version: *version,
                epoch: if *version >= 3 {
                    snapshot.finalized.epoch
                } else {
                    -1
                },
                levels: if *version >= 3 {
                    snapshot
                        .finalized
                        .levels
                        .iter()
                        .filter(|(_, &l)| l > 0)
                        .map(|(n, &l)| (n.clone(), l))
                        .collect()
                } else {
                    BTreeMap::new()
                },
                scenarios: Vec::new(),
            },
        }
    }

    fn same(&self, other: &ServedRecord) -> bool {
        match (self, other) {
            (
                ServedRecord::Snapshot { version, snapshot },
                ServedRecord::Snapshot {
                    version: v,
                    snapshot: s,
                },
            ) => version == v && Arc::ptr_eq(snapshot, s),
            _ => false,
        }
    }
}

/// Counts that a connection gathers and an aggregate sums.
#[derive(Debug, Clone, Default)]
struct Usage {
    /// (api key, version, requests), in first-use order.
    apis: Vec<(i16, i16, u64)>,
    /// (kind, count): "CreateTopics: refused", "UpdateFeatures: NOT_CONTROLLER".
    errors: Vec<(String, u64)>,
    last_seen: u64,
    served: Option<(u64, ServedRecord)>,
    security: String,
}

impl Usage {
    fn count_request(&mut self, api_key: i16, version: i16) {
        if let Some(slot) = self
            .apis
            .iter_mut()
            .rev()
            .find(|(k, v, _)| *k == api_key && *v == version)
        {
            slot.2 += 1;
        } else if self.apis.len() < MAX_API_PAIRS {
            self.apis.push((api_key, version, 1));
        } else {
            self.add_api(-1, -1, 1);
        }
    }

    fn add_api(&mut self, api_key: i16, version: i16, n: u64) {
        match self
            .apis
            .iter_mut()
            .find(|(k, v, _)| *k == api_key && *v == version)
        {
            Some(slot) => slot.2 += n,
            None => self.apis.push((api_key, version, n)),
        }
    }

    fn add_error(&mut self, kind: &str, n: u64) {
        if let Some(slot) = self.errors.iter_mut().find(|(k, _)| k == kind) {
            slot.1 += n;
        } else if self.errors.len() < MAX_ERROR_KINDS {
            self.errors.push((kind.to_owned(), n));
        }
    }

    /// Adds `other`'s counts; the later of the two served views and the
    /// non-empty security label win.
    fn absorb(&mut self, other: &Usage) {
        for &(k, v, n) in &other.apis {
            if self.apis.len() < MAX_API_PAIRS || self.apis.iter().any(|a| a.0 == k && a.1 == v) {
                self.add_api(k, v, n);
            } else {
                self.add_api(-1, -1, n);
            }
        }
        for (kind, n) in &other.errors {
            self.add_error(kind, *n);
        }
        self.last_seen = self.last_seen.max(other.last_seen);
        if let Some((at, served)) = &other.served {
            if self.served.as_ref().is_none_or(|(mine, _)| mine <= at) {
                self.served = Some((*at, served.clone()));
            }
        }
        if !other.security.is_empty() {
            self.security.clone_from(&other.security);
        }
    }
}

/// One aggregate: a (principal, software) and everything its connections did.
pub struct ClientEntry {
    key: ClientKey,
    /// Its metrics series.
    series: Arc<Series>,
    live: AtomicUsize,
    /// Connections that made a request under this identity.
    connections: AtomicU64,
    last_seen: AtomicU64,
    state: Mutex<Aggregate>,
}

#[derive(Default)]
struct Aggregate {
    first_seen: u64,
    addresses: Vec<IpAddr>,
    usage: Usage,
}

impl ClientEntry {
    fn touch(&self, at: u64) {
        self.last_seen.fetch_max(at, Ordering::Relaxed);
    }
}

/// One live connection's record.
pub struct ConnectionEntry {
    id: u64,
    addr: SocketAddr,
    opened: u64,
    state: Mutex<ConnectionState>,
}

struct ConnectionState {
    client: Arc<ClientEntry>,
    /// Counts since the connection took its current identity.
    usage: Usage,
    /// Discovery-lab scenarios applied to it.
    scenarios: Vec<String>,
}

/// The request counters of one (software name, version) pair, or of `other`.
struct Series {
    name: String,
    version: String,
    /// Indexed by `api_key * VERSIONS + version`.
    requests: Box<[AtomicU64]>,
}

impl Series {
    fn new(name: &str, version: &str) -> Series {
        Series {
            name: name.to_owned(),
            version: version.to_owned(),
            requests: (0..API_KEYS * VERSIONS)
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }

    fn count(&self, api_key: i16, version: i16) {
        let slot = |v: i16, n: usize| usize::try_from(v).map_or(n - 1, |v| v.min(n - 1));
        let i = slot(api_key, API_KEYS) * VERSIONS + slot(version, VERSIONS);
        self.requests[i].fetch_add(1, Ordering::Relaxed);
    }
}

/// Every client kshim has seen, within its cap.
pub struct Census {
    config: CensusConfig,
    /// A monotonic instant and the wall-clock milliseconds it stood for: request
    /// times come as instants the connection has read anyway.
    started: (Instant, u64),
    clients: DashMap<ClientKey, Arc<ClientEntry>>,
    connections: DashMap<u64, Arc<ConnectionEntry>>,
    next_id: AtomicU64,
    evicted: AtomicU64,
    evicting: Mutex<()>,
    /// `series[0]` is `other`.
    series: Mutex<Vec<Arc<Series>>>,
}

impl Census {
    pub fn new(config: CensusConfig) -> Census {
        Census {
            config,
            started: (Instant::now(), now_ms()),
            clients: DashMap::new(),
            connections: DashMap::new(),
            next_id: AtomicU64::new(1),
            evicted: AtomicU64::new(0),
            evicting: Mutex::new(()),
            series: Mutex::new(vec![Arc::new(Series::new("other", "other"))]),
        }
    }

    pub fn config(&self) -> &CensusConfig {
        &self.config
    }

    /// Wall-clock milliseconds at `at`.
    fn ms_at(&self, at: Instant) -> u64 {
        let (base, base_ms) = self.started;
        base_ms + at.saturating_duration_since(base).as_millis() as u64
    }

    /// A new connection's record; `None` with the census off.
    pub fn open(
        self: &Arc<Self>,
        addr: SocketAddr,
        principal: &str,
        security: &str,
    ) -> Option<Tracked> {
        if !self.config.enabled {
            return None;
        }
        let now = now_ms();
        let client = self.attach(ClientKey::new(principal, None), addr.ip(), now);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let entry = Arc::new(ConnectionEntry {
            id,
            addr,
            opened: now,
            state: Mutex::new(ConnectionState {
                client,
                usage: Usage {
                    last_seen: now,
                    security: security.to_owned(),
                    ..Usage::default()
                },
                scenarios: Vec::new(),
            }),
        });
        self.connections.insert(id, Arc::clone(&entry));
        Some(Tracked {
            census: Arc::clone(self),
            entry,
        })
    }

    /// The aggregate for `key`, created if new, with one more live connection.
    fn attach(&self, key: ClientKey, ip: IpAddr, now: u64) -> Arc<ClientEntry> {
        let entry = loop {
            // The live count rises under the map's lock, so that eviction (which
            // removes only entries with none) cannot take an entry being attached.
            if let Some(entry) = self.clients.get(&key) {
                entry.live.fetch_add(1, Ordering::AcqRel);
                break Arc::clone(entry.value());
            }
            let series = self.series_for(&key);
            let fresh = Arc::new(ClientEntry {
                key: key.clone(),
                series,
                live: AtomicUsize::new(0),
                connections: AtomicU64::new(0),
                last_seen: AtomicU64::new(now),
                state: Mutex::new(Aggregate {
                    first_seen: now,
                    ..Aggregate::default()
                }),
            });
            self.clients.entry(key.clone()).or_insert(fresh);
            if self.clients.len() > self.config.max_clients {
                self.evict();
            }
        };
        entry.touch(now);
        entry.connections.fetch_add(1, Ordering::AcqRel);
        let mut agg = lock(&entry.state);
        if let Some(i) = agg.addresses.iter().position(|a| *a == ip) {
            agg.addresses.remove(i);
        } else if agg.addresses.len() >= MAX_ADDRESSES {
            agg.addresses.remove(0);
        }
        agg.addresses.push(ip);
        drop(agg);
        entry
    }

    /// The series a new aggregate counts into: its pair's own, while there is
    /// room for one more, else `other`.
    fn series_for(&self, key: &ClientKey) -> Arc<Series> {
        let (name, version) = (label(&key.software_name), label(&key.software_version));
        let mut series = lock(&self.series);
        if let Some(s) = series
            .iter()
            .skip(1)
            .find(|s| s.name == name && s.version == version)
        {
            return Arc::clone(s);
        }
        if series.len() <= self.config.metrics_software_versions {
            let s = Arc::new(Series::new(&name, &version));
            series.push(Arc::clone(&s));
            return s;
        }
        Arc::clone(&series[0])
    }

    /// Folds a connection's counts into its aggregate and lets go of it. A
    /// connection that made no request under the aggregate's identity (every
    /// connection starts without a software name) is not counted there, and an
    /// aggregate left with no connection at all is dropped.
    fn detach(&self, client: &ClientEntry, usage: &Usage) {
        if usage.apis.is_empty() {
            client.connections.fetch_sub(1, Ordering::AcqRel);
        } else {
            client.touch(usage.last_seen);
            lock(&client.state).usage.absorb(usage);
        }
        client.live.fetch_sub(1, Ordering::AcqRel);
        if client.connections.load(Ordering::Acquire) == 0 {
            self.clients.remove_if(&client.key, |_, e| {
                e.live.load(Ordering::Acquire) == 0 && e.connections.load(Ordering::Acquire) == 0
            });
        }
    }

    /// Evicts the least recently seen aggregates without a live connection,
    /// down to nine tenths of the cap.
    fn evict(&self) {
        let _one_at_a_time = lock(&self.evicting);
        let cap = self.config.max_clients;
        let len = self.clients.len();
        if len <= cap {
            return;
        }
        let target = cap - cap / 10;
        let excess = len.saturating_sub(target).max(1);
        let mut idle: Vec<(u64, ClientKey)> = self
            .clients
            .iter()
            .filter(|e| e.live.load(Ordering::Acquire) == 0)
            .map(|e| (e.last_seen.load(Ordering::Relaxed), e.key().clone()))
            .collect();
        if idle.len() > excess {
            idle.select_nth_unstable_by_key(excess, |(seen, _)| *seen);
            idle.truncate(excess);
        }
        let mut gone = 0;
        for (_, key) in idle {
            if self
                .clients
                .remove_if(&key, |_, e| e.live.load(Ordering::Acquire) == 0)
                .is_some()
            {
                gone += 1;
            }
        }
        self.evicted.fetch_add(gone, Ordering::Relaxed);
        tracing::debug!(
            evicted = gone,
            kept = self.clients.len(),
            "census: least recently seen clients evicted (census.max_clients)"
        );
    }

    /// Aggregates kept now, and aggregates evicted so far.
    pub fn sizes(&self) -> (usize, u64) {
        (self.clients.len(), self.evicted.load(Ordering::Relaxed))
    }

    /// Every aggregate that `filter` keeps, with its live connections' counts
    /// added in, most recently seen first.
    pub fn clients(&self, filter: &Filter) -> Vec<ClientView> {
        // The live connections, grouped by the aggregate they count towards.
        let mut live: BTreeMap<ClientKey, Vec<ConnectionView>> = BTreeMap::new();
        let mut pending: BTreeMap<ClientKey, Usage> = BTreeMap::new();
        for conn in self.connections.iter() {
            let state = lock(&conn.state);
            let key = state.client.key.clone();
            if !filter.keeps_key(&key) {
                continue;
            }
            pending.entry(key.clone()).or_default().absorb(&state.usage);
            live.entry(key).or_default().push(ConnectionView {
                id: conn.id,
                peer: conn.addr.to_string(),
                opened_ms: conn.opened,
                last_seen_ms: state.usage.last_seen,
                security: state.usage.security.clone(),
                apis: api_views(&state.usage.apis),
                served: state.usage.served.as_ref().map(|(_, s)| s.view()),
                scenarios: state.scenarios.clone(),
            });
        }
        let mut out = Vec::new();
        for entry in self.clients.iter() {
            if !filter.keeps_key(entry.key()) {
                continue;
            }
            let agg = lock(&entry.state);
            let mut usage = agg.usage.clone();
            if let Some(more) = pending.get(entry.key()) {
                usage.absorb(more);
            }
            let view = ClientView {
                principal: entry.key.principal.clone(),
                software_name: some(&entry.key.software_name),
                software_version: some(&entry.key.software_version),
                first_seen_ms: agg.first_seen,
                last_seen_ms: usage.last_seen.max(entry.last_seen.load(Ordering::Relaxed)),
                connections_total: entry.connections.load(Ordering::Relaxed),
                connections_live: entry.live.load(Ordering::Relaxed),
                addresses: agg
                    .addresses
                    .iter()
                    .rev()
                    .map(ToString::to_string)
                    .collect(),
                security: usage.security.clone(),
                apis: api_views(&usage.apis),
                errors: usage.errors.iter().cloned().collect(),
                served: usage.served.map(|(_, s)| s.view()),
                connections: live.remove(entry.key()).unwrap_or_default(),
            };
            drop(agg);
            if filter.keeps_view(&view) {
                out.push(view);
            }
        }
        out.sort_by(|a, b| {
            b.last_seen_ms
                .cmp(&a.last_seen_ms)
                .then_with(|| a.principal.cmp(&b.principal))
        });
        out
    }

    /// The census's Prometheus series.
    pub fn render_metrics(&self, out: &mut String) {
        let (kept, evicted) = self.sizes();
        let _ = writeln!(out, "# HELP kshim_census_clients Client aggregates (principal, software name, software version) the census keeps.\n# TYPE kshim_census_clients gauge\nkshim_census_clients {kept}");
        let _ = writeln!(out, "# HELP kshim_census_evicted_total Client aggregates evicted to stay within census.max_clients.\n# TYPE kshim_census_evicted_total counter\nkshim_census_evicted_total {evicted}");
        let mut connected: BTreeMap<(String, String), usize> = BTreeMap::new();
        for entry in self.clients.iter() {
            let live = entry.live.load(Ordering::Relaxed);
            if live > 0 {
                let s = &entry.series;
                *connected
                    .entry((s.name.clone(), s.version.clone()))
                    .or_default() += live;
            }
        }
        let _ = writeln!(out, "# HELP kshim_client_connections Open client connections by client software (pairs without series of their own under \"other\").\n# TYPE kshim_client_connections gauge");
        for ((name, version), n) in connected {
            let _ = writeln!(out, "kshim_client_connections{{software_name=\"{name}\",software_version=\"{version}\"}} {n}");
        }
        let _ = writeln!(out, "# HELP kshim_client_requests_total Requests by client software, API key and version (pairs past census.metrics_software_versions under \"other\").\n# TYPE kshim_client_requests_total counter");
        let series = lock(&self.series).clone();
        for s in series {
            for (i, n) in s.requests.iter().enumerate() {
                let n = n.load(Ordering::Relaxed);
                if n == 0 {
                    continue;
                }
                let (key, version) = (i / VERSIONS, i % VERSIONS);
                let _ = writeln!(
                    out,
                    "kshim_client_requests_total{{software_name=\"{}\",software_version=\"{}\",api_key=\"{key}\",api_version=\"{version}\"}} {n}",
                    s.name, s.version
                );
            }
        }
    }
}

/// A metrics label value for a software field: what it says, when it is safe to
/// put between quotes as it is (Kafka's own pattern for the fields), else
/// "invalid"; "unknown" when the client did not say.
fn label(field: &str) -> String {
    if field.is_empty() {
        "unknown".into()
    } else if field
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
    {
        field.into()
    } else {
        "invalid".into()
    }
}

fn some(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

fn api_views(apis: &[(i16, i16, u64)]) -> Vec<ApiUse> {
    let mut out: Vec<ApiUse> = apis
        .iter()
        .map(|&(api_key, version, requests)| ApiUse {
            api_key,
            api: api_name(api_key),
            version,
            requests,
        })
        .collect();
    out.sort_by_key(|a| (a.api_key, a.version));
    out
}

/// One connection's census record, held by its session; folded into its
/// aggregate when dropped.
pub struct Tracked {
    census: Arc<Census>,
    entry: Arc<ConnectionEntry>,
}

impl Tracked {
    /// One request read from the client at `at`.
    pub fn request(&self, api_key: i16, version: i16, at: Instant) {
        let mut state = lock(&self.entry.state);
        state.usage.count_request(api_key, version);
        state.usage.last_seen = self.census.ms_at(at);
        state.client.series.count(api_key, version);
    }

    /// An ApiVersions request read at `at`, and the feature view it was served.
    pub fn api_versions(&self, version: i16, at: Instant, served: Option<ServedRecord>) {
        let mut state = lock(&self.entry.state);
        state.usage.count_request(18, version);
        let at = self.census.ms_at(at);
        state.usage.last_seen = at;
        state.client.series.count(18, version);
        match (&mut state.usage.served, served) {
            (_, None) => {}
            (Some((when, last)), Some(served)) if last.same(&served) => *when = at,
            (slot, Some(served)) => *slot = Some((at, served)),
        }
    }

    /// An error kshim itself returned, or a refusal ("CreateTopics: refused").
    pub fn error(&self, kind: &str) {
        lock(&self.entry.state).usage.add_error(kind, 1);
    }

    /// The discovery-lab scenarios now applied to the connection.
    pub fn scenarios(&self, names: Vec<String>) {
        lock(&self.entry.state).scenarios = names;
    }

    /// The connection's identity changed (ApiVersions named its software, SASL
    /// its principal): what it did so far stays with the old aggregate.
    pub fn identify(
        &self,
        principal: &str,
        software: Option<&ClientSoftware>,
        security: Option<&str>,
    ) {
        let key = ClientKey::new(principal, software);
        let mut state = lock(&self.entry.state);
        if let Some(security) = security {
            state.usage.security = security.to_owned();
        }
        if state.client.key == key {
            return;
        }
        let now = now_ms();
        let fresh = self.census.attach(key, self.entry.addr.ip(), now);
        let old = std::mem::replace(&mut state.client, fresh);
        let fresh_usage = Usage {
            last_seen: now,
            security: state.usage.security.clone(),
            served: state.usage.served.clone(),
            ..Usage::default()
        };
        let usage = std::mem::replace(&mut state.usage, fresh_usage);
        drop(state);
        self.census.detach(&old, &usage);
    }

    /// The principal and software the connection counts under now.
    pub fn key(&self) -> ClientKey {
        lock(&self.entry.state).client.key.clone()
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.census.connections.remove(&self.entry.id);
        let state = lock(&self.entry.state);
        self.census.detach(&state.client, &state.usage);
    }
}

/// Which aggregates a reader wants.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Software name, exact; "name/version" narrows to one version.
    pub software: Option<String>,
    pub principal: Option<String>,
    /// Clients that used this API key.
    pub api_key: Option<i16>,
}

impl Filter {
    fn keeps_key(&self, key: &ClientKey) -> bool {
        let software = self
            .software
            .as_deref()
            .is_none_or(|s| match s.split_once('/') {
                Some((name, version)) => {
                    key.software_name == name && key.software_version == version
                }
                None => key.software_name == s,
            });
        software && self.principal.as_deref().is_none_or(|p| key.principal == p)
    }

    fn keeps_view(&self, view: &ClientView) -> bool {
        self.api_key
            .is_none_or(|k| view.apis.iter().any(|a| a.api_key == k))
    }
}

/// One aggregate as the admin API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ClientView {
    pub principal: String,
    pub software_name: Option<String>,
    pub software_version: Option<String>,
    pub first_seen_ms: u64,
    pub last_seen_ms: u64,
    pub connections_total: u64,
    pub connections_live: usize,
    /// Source addresses, most recent first.
    pub addresses: Vec<String>,
    /// "PLAINTEXT", "SSL", "SASL_PLAINTEXT/SCRAM-SHA-256", ...
    pub security: String,
    pub apis: Vec<ApiUse>,
    pub errors: BTreeMap<String, u64>,
    pub served: Option<Served>,
    pub connections: Vec<ConnectionView>,
}

/// One live connection as the admin API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ConnectionView {
    pub id: u64,
    pub peer: String,
    pub opened_ms: u64,
    pub last_seen_ms: u64,
    pub security: String,
    pub apis: Vec<ApiUse>,
    pub served: Option<Served>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub scenarios: Vec<String>,
}

/// Requests of one API key and version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApiUse {
    pub api_key: i16,
    pub api: String,
    pub version: i16,
    pub requests: u64,
}

#[cfg(test)]
mod tests;
