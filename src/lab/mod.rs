//! The discovery lab: scenarios that make kshim misbehave on purpose, in the
//! ways client libraries have tripped over real brokers, for the connections
//! they match and for no others.
//!
//! A scenario matches connections by client software name and version (from
//! ApiVersions v3+), principal, and source address; every condition it names
//! must hold. It can
//! - serve a pinned feature view in ApiVersions: finalized levels and an epoch
//!   of its choosing (an epoch lower than one served before included), and
//!   supported features with a min of 0 below v4 (Kafka leaves those out for
//!   older clients, KAFKA-17011);
//! - add tagged fields a client does not know to ApiVersions answers;
//! - advertise narrower API version ranges;
//! - answer an API with an error code, a given number of times or always;
//! - delay the answers to an API;
//! - be an Apache Kafka release (`release = "4.1"`): the release's API ranges
//!   (intersected with what kshim offers; APIs the release lacks left out, and a
//!   request outside them closes the connection, as that release's broker does),
//!   its supported features, and the levels `kafka-storage format` of that
//!   release finalizes, unless the scenario pins others.
//!
//! Scenarios come from `[[lab.scenarios]]` and from the admin API
//! (`/admin/lab/scenarios`). Each connection works out which scenarios match it
//! when its identity changes and when the scenarios change (a generation
//! number, read once per request); with none matching, a request costs one
//! atomic load.

pub mod errors;
pub mod gates;
pub mod matrix;

use crate::features::kafka::KafkaRelease;
use crate::protocol::api_versions::ClientSoftware;
use arc_swap::ArcSwap;
use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Scenarios kept at most (config and admin API together).
pub const MAX_SCENARIOS: usize = 64;
/// The longest delay a scenario may ask for.
const MAX_DELAY_MS: u64 = 300_000;
/// Tags kshim puts in ApiVersions answers itself; a scenario may not add them.
const OWN_TAGS: [u32; 7] = [0, 1, 2, 3, 10_000, 10_001, 10_002];

/// A scenario as written in the config or sent to the admin API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioSpec {
    #[serde(default)]
    pub name: String,
    #[serde(default, rename = "match")]
    pub matches: MatchSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features: Option<PinnedFeatures>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tagged_fields: Vec<ExtraTag>,
    /// API name or key -> [min, max], intersected with what kshim advertises;
    /// an empty intersection leaves the API out.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub api_versions: BTreeMap<String, [i16; 2]>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<ErrorSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delays: Vec<DelaySpec>,
    /// An Apache Kafka release to present, "4.0" to the newest in the data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
}

/// Which connections a scenario applies to. A name or version ending in `*`
/// matches by prefix; an address may be a CIDR block.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub software_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub software_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

/// The feature view served instead of the real one; what is not given stays real.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinnedFeatures {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<i64>,
    /// Finalized levels; a level of 0 leaves the feature out, as Kafka does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub levels: Option<BTreeMap<String, i16>>,
    /// false: send supported features with a min of 0 to ApiVersions v3 clients
    /// too (Kafka leaves them out, KAFKA-17011).
    #[serde(default = "yes")]
    pub min_zero_filter: bool,
    /// true: `levels` are the whole finalized set (every other feature left
    /// out); false: they change only the features they name.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replace: bool,
}

impl PinnedFeatures {
    /// The level this view presents for `feature`: `None` where it leaves the
    /// level as it is.
    pub fn level(&self, feature: &str) -> Option<i16> {
        let levels = self.levels.as_ref()?;
        match levels.get(feature) {
            Some(level) => Some(*level),
            None => self.replace.then_some(0),
        }
    }
}

fn yes() -> bool {
    true
}

/// A tagged field added to ApiVersions answers (v3+).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtraTag {
    pub tag: u32,
    /// The field's bytes, in hex.
    #[serde(default)]
    pub value: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorSpec {
    pub api: String,
    pub error_code: i16,
    /// Answers given this way, over every matching connection; absent: always.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub times: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DelaySpec {
    pub api: String,
    pub ms: u64,
}

/// The actions a scenario can take, for its metrics.
#[derive(Debug, Clone, Copy)]
pub enum LabAction {
    Features,
    TaggedFields,
    ApiVersions,
    Error,
    Delay,
}

impl LabAction {
    const ALL: [LabAction; 5] = [
        LabAction::Features,
        LabAction::TaggedFields,
        LabAction::ApiVersions,
        LabAction::Error,
        LabAction::Delay,
    ];

    fn label(self) -> &'static str {
        match self {
            LabAction::Features => "features",
            LabAction::TaggedFields => "tagged_fields",
            LabAction::ApiVersions => "api_versions",
            LabAction::Error => "error",
            LabAction::Delay => "delay",
        }
    }
}

/// An injected error and how many are left to give (`None`: no limit).
struct Injection {
    api: i16,
    code: i16,
    left: Option<AtomicU64>,
}

/// A checked scenario, ready to apply.
pub struct Scenario {
    spec: ScenarioSpec,
    address: Option<(IpAddr, u8)>,
    /// The ranges it presents: its own `api_versions`, then its release's.
    ranges: Vec<(i16, i16, i16)>,
    /// With a release: that release's features, and no API beyond `ranges`.
    release: Option<ReleaseView>,
    tags: BTreeMap<i32, Bytes>,
    injections: Vec<Injection>,
    /// APIs its presented feature levels turn off, and why (`gates`).
    gated: Vec<(i16, String)>,
    delays: Vec<(i16, Duration)>,
    matched: AtomicU64,
    applied: [AtomicU64; LabAction::ALL.len()],
}

/// Who a connection is, as scenarios match it.
pub struct Who<'a> {
    pub software: Option<&'a ClientSoftware>,
    pub principal: &'a str,
    pub addr: IpAddr,
}

fn glob(pattern: &str, value: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => value.starts_with(prefix),
        None => pattern == value,
    }
}

fn in_block(addr: IpAddr, (net, bits): (IpAddr, u8)) -> bool {
    match (addr, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// "Produce" or "0" -> 0.
pub fn api_key_named(name: &str) -> Option<i16> {
    if let Ok(key) = name.parse::<i16>() {
        return ApiKey::try_from(key).ok().map(|_| key);
    }
    (0..=i16::from(u8::MAX))
        .find(|&k| ApiKey::try_from(k).is_ok_and(|api| format!("{api:?}") == name))
}

fn parse_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

impl Scenario {
    /// Checks a spec; every problem, as "field: message".
    pub fn new(spec: ScenarioSpec) -> Result<Scenario, Vec<String>> {
        let mut errors = Vec::new();
        if spec.name.is_empty()
            || spec.name.len() > 64
            || !spec
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        {
            errors.push("name: 1 to 64 letters, digits, '-', '_' or '.'".to_owned());
        }
        let address = spec.matches.address.as_deref().and_then(|text| {
            let (ip, bits) = match text.split_once('/') {
                Some((ip, bits)) => (ip, Some(bits)),
                None => (text, None),
            };
            let Ok(ip) = ip.parse::<IpAddr>() else {
                errors.push(format!(
                    "match.address: \"{text}\" is not an IP address or CIDR block"
                ));
                return None;
            };
            let full = if ip.is_ipv4() { 32 } else { 128 };
            let bits = match bits {
                None => Some(full),
                Some(b) => b.parse::<u8>().ok().filter(|b| *b <= full),
            };
            if bits.is_none() {
                errors.push(format!("match.address: bad prefix length in \"{text}\""));
            }
            Some((ip, bits?))
        });
        let mut ranges = Vec::new();
        for (name, [min, max]) in &spec.api_versions {
            match api_key_named(name) {
                Some(_) if min > max || *min < 0 => {
                    errors.push(format!(
                        "api_versions.{name}: [{min}, {max}] is not a version range"
                    ));
                }
                Some(key) => ranges.push((key, *min, *max)),
                None => errors.push(format!("api_versions.{name}: not a Kafka API name or key")),
            }
        }
        let mut tags = BTreeMap::new();
        for t in &spec.tagged_fields {
            if OWN_TAGS.contains(&t.tag) || t.tag > i32::MAX as u32 {
                errors.push(format!(
                    "tagged_fields: tag {} is one kshim sends itself (0-3, 10000-10002) or too large",
                    t.tag
                ));
            } else if let Some(bytes) = parse_hex(&t.value) {
                tags.insert(t.tag as i32, Bytes::from(bytes));
            } else {
                errors.push(format!("tagged_fields: tag {}: value is not hex", t.tag));
            }
        }
        let mut injections = Vec::new();
        for e in &spec.errors {
            match api_key_named(&e.api).and_then(|k| ApiKey::try_from(k).ok()) {
                Some(api) if errors::INJECTABLE.iter().any(|(a, _, _)| *a == api) => {
                    injections.push(Injection {
                        api: api as i16,
                        code: e.error_code,
                        left: e.times.map(AtomicU64::new),
                    });
                }
                _ => errors.push(format!(
                    "errors: {} cannot be answered with an error: its responses carry no top-level error code (these can: {})",
                    e.api,
                    errors::INJECTABLE
                        .iter()
                        .map(|(a, _, _)| format!("{a:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            }
        }
        let mut delays = Vec::new();
        for d in &spec.delays {
            match api_key_named(&d.api) {
                Some(_) if d.ms > MAX_DELAY_MS => {
                    errors.push(format!("delays: {} ms is more than {MAX_DELAY_MS}", d.ms));
                }
                Some(key) => delays.push((key, Duration::from_millis(d.ms))),
                None => errors.push(format!("delays: {} is not a Kafka API name or key", d.api)),
            }
        }
        let release = spec.release.as_deref().and_then(|name| {
            let found = KafkaRelease::named(name).map(ReleaseView::of);
            if found.is_none() {
                errors.push(format!(
                    "release: \"{name}\" is not a Kafka release kshim has data for ({})",
                    KafkaRelease::known()
                ));
            }
            found
        });
        if let Some(release) = &release {
            for &(key, min, max) in &release.apis {
                if !ranges.iter().any(|r| r.0 == key) {
                    ranges.push((key, min, max));
                }
            }
        }
        if let Some(levels) = spec.features.as_ref().and_then(|f| f.levels.as_ref()) {
            for (name, level) in levels {
                if *level < 0 {
                    errors.push(format!("features.levels.{name}: a level is 0 or more"));
                }
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        let gated = gates::closed(|feature| {
            let pinned = spec.features.as_ref().and_then(|f| f.level(feature));
            pinned.or_else(|| {
                let release = release.as_ref()?;
                Some(release.levels.get(feature).copied().unwrap_or(0))
            })
        });
        Ok(Scenario {
            spec,
            address,
            ranges,
            release,
            tags,
            injections,
            gated,
            delays,
            matched: AtomicU64::new(0),
            applied: std::array::from_fn(|_| AtomicU64::new(0)),
        })
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    pub fn spec(&self) -> &ScenarioSpec {
        &self.spec
    }

    pub fn matches(&self, who: &Who<'_>) -> bool {
        let m = &self.spec.matches;
        let software = |pattern: &Option<String>, field: fn(&ClientSoftware) -> &str| {
            pattern
                .as_deref()
                .is_none_or(|p| who.software.is_some_and(|s| glob(p, field(s))))
        };
        software(&m.software_name, |s| &s.name)
            && software(&m.software_version, |s| &s.version)
            && m.principal
                .as_deref()
                .is_none_or(|p| glob(p, who.principal))
            && self.address.is_none_or(|block| in_block(who.addr, block))
    }

    fn count(&self, action: LabAction) {
        self.applied[action as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// The error to answer `api` with: one it was told to give, if it has
    /// one left, or the refusal of an API its presented levels turn off.
    fn take_error(&self, api: i16) -> Option<LabError<'_>> {
        let answer = match self.injections.iter().find(|i| i.api == api) {
            Some(injection) => {
                if let Some(left) = &injection.left {
                    left.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                        .ok()?;
                }
                LabError {
                    code: injection.code,
                    scenario: self.name(),
                    gate: None,
                }
            }
            None => {
                let (_, why) = self.gated.iter().find(|(a, _)| *a == api)?;
                LabError {
                    code: gates::gate_error(),
                    scenario: self.name(),
                    gate: Some(why),
                }
            }
        };
        self.count(LabAction::Error);
        Some(answer)
    }
}

/// An error answer the lab gives in place of the real one.
pub struct LabError<'a> {
    pub code: i16,
    pub scenario: &'a str,
    /// Why, when a presented feature level turns the API off.
    pub gate: Option<&'a str>,
}

/// The scenarios in force.
pub struct Lab {
    scenarios: ArcSwap<Vec<Arc<Scenario>>>,
    generation: AtomicU64,
    changing: Mutex<()>,
}

/// A scenario as the admin API lists it.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioView {
    #[serde(flatten)]
    pub spec: ScenarioSpec,
    /// Connections it matched.
    pub matched: u64,
    /// Times each action applied.
    pub applied: BTreeMap<&'static str, u64>,
    /// Errors left to give, per API.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub errors_left: BTreeMap<String, u64>,
}

impl Lab {
    /// The lab with the scenarios of the config (already checked).
    pub fn new(scenarios: Vec<Scenario>) -> Lab {
        Lab {
            scenarios: ArcSwap::from_pointee(scenarios.into_iter().map(Arc::new).collect()),
            generation: AtomicU64::new(1),
            changing: Mutex::new(()),
        }
    }

    /// The lab with the scenarios of a config (checked when it was read).
    pub fn from_specs(specs: &[ScenarioSpec]) -> Lab {
        let scenarios: Vec<Scenario> = specs
            .iter()
            .filter_map(|spec| Scenario::new(spec.clone()).ok())
            .collect();
        if !scenarios.is_empty() {
            let names: Vec<&str> = scenarios.iter().map(Scenario::name).collect();
            tracing::info!(
                "discovery lab: {} scenario(s) from the config: {}",
                names.len(),
                names.join(", ")
            );
        }
        Lab::new(scenarios)
    }

    /// Changes whenever the scenarios do.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The scenarios that apply to `who`, in order.
    pub fn matching(&self, who: &Who<'_>) -> Vec<Arc<Scenario>> {
        self.scenarios
            .load()
            .iter()
            .filter(|s| s.matches(who))
            .cloned()
            .collect()
    }

    /// Adds a scenario, or replaces the one of the same name (its counters
    /// start again). Returns whether it replaced one.
    pub fn put(&self, scenario: Scenario) -> Result<bool, String> {
        let _one = self.changing.lock().unwrap_or_else(|p| p.into_inner());
        let mut next: Vec<Arc<Scenario>> = self.scenarios.load().as_ref().clone();
        let replaced = match next.iter().position(|s| s.name() == scenario.name()) {
            Some(i) => {
                next[i] = Arc::new(scenario);
                true
            }
            None if next.len() >= MAX_SCENARIOS => {
                return Err(format!(
                    "{MAX_SCENARIOS} scenarios already; remove one first"
                ));
            }
            None => {
                next.push(Arc::new(scenario));
                false
            }
        };
        self.scenarios.store(Arc::new(next));
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(replaced)
    }

    /// Removes a scenario; whether there was one.
    pub fn remove(&self, name: &str) -> bool {
        let _one = self.changing.lock().unwrap_or_else(|p| p.into_inner());
        let mut next: Vec<Arc<Scenario>> = self.scenarios.load().as_ref().clone();
        let before = next.len();
        next.retain(|s| s.name() != name);
        if next.len() == before {
            return false;
        }
        self.scenarios.store(Arc::new(next));
        self.generation.fetch_add(1, Ordering::AcqRel);
        true
    }

    pub fn list(&self) -> Vec<ScenarioView> {
        self.scenarios
            .load()
            .iter()
            .map(|s| ScenarioView {
                spec: s.spec.clone(),
                matched: s.matched.load(Ordering::Relaxed),
                applied: LabAction::ALL
                    .iter()
                    .map(|a| (a.label(), s.applied[*a as usize].load(Ordering::Relaxed)))
                    .collect(),
                errors_left: s
                    .injections
                    .iter()
                    .filter_map(|i| {
                        let left = i.left.as_ref()?.load(Ordering::Relaxed);
                        Some((crate::protocol::api_name(i.api), left))
                    })
                    .collect(),
            })
            .collect()
    }

    pub fn render_metrics(&self, out: &mut String) {
        let scenarios = self.scenarios.load();
        let _ = writeln!(out, "# HELP kshim_lab_matched_total Connections each discovery-lab scenario matched.\n# TYPE kshim_lab_matched_total counter");
        for s in scenarios.iter() {
            let _ = writeln!(
                out,
                "kshim_lab_matched_total{{scenario=\"{}\"}} {}",
                s.name(),
                s.matched.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(out, "# HELP kshim_lab_applied_total Times a discovery-lab scenario changed an answer, by action.\n# TYPE kshim_lab_applied_total counter");
        for s in scenarios.iter() {
            for a in LabAction::ALL {
                let n = s.applied[a as usize].load(Ordering::Relaxed);
                let _ = writeln!(
                    out,
                    "kshim_lab_applied_total{{scenario=\"{}\",action=\"{}\"}} {n}",
                    s.name(),
                    a.label()
                );
            }
        }
    }
}

/// The scenarios one connection is under.
#[derive(Default)]
pub struct Applied {
    generation: u64,
    scenarios: Vec<Arc<Scenario>>,
}

/// An Apache Kafka release as a scenario presents it.
#[derive(Debug, Clone)]
pub struct ReleaseView {
    /// "4.1".
    pub name: &'static str,
    /// What its brokers serve: (api_key, min, max).
    pub apis: Vec<(i16, i16, i16)>,
    /// Its supported features: name -> (min, max).
    pub supported: BTreeMap<String, (i16, i16)>,
    /// What `kafka-storage format` of the release finalizes.
    pub levels: BTreeMap<String, i16>,
}

impl ReleaseView {
    fn of(release: KafkaRelease) -> ReleaseView {
        ReleaseView {
            name: release.minor(),
            apis: release.data().broker_apis(),
            supported: release
                .supported_features()
                .iter()
                .map(|(name, r)| (name.clone(), (r.min, r.max)))
                .collect(),
            levels: release.format_levels(),
        }
    }
}

/// What the lab makes of an ApiVersions answer for one connection.
pub struct Shape<'a> {
    pub features: Option<&'a PinnedFeatures>,
    pub ranges: Vec<(i16, i16, i16)>,
    /// A release presented: its features, and no API beyond `ranges`.
    pub release: Option<&'a ReleaseView>,
    pub tags: BTreeMap<i32, Bytes>,
    /// The scenarios that shaped it.
    pub names: Vec<String>,
}

impl Applied {
    /// Whether the lab's scenarios changed since this connection matched them.
    pub fn stale(&self, lab: &Lab) -> bool {
        self.generation != lab.generation()
    }

    /// Matches `who` against the lab's scenarios again; the names of the
    /// scenarios newly matched.
    pub fn rematch(&mut self, lab: &Lab, who: &Who<'_>) -> Vec<String> {
        self.generation = lab.generation();
        let next = lab.matching(who);
        let fresh: Vec<String> = next
            .iter()
            .filter(|s| !self.scenarios.iter().any(|o| Arc::ptr_eq(o, s)))
            .map(|s| {
                s.matched.fetch_add(1, Ordering::Relaxed);
                s.name().to_owned()
            })
            .collect();
        self.scenarios = next;
        fresh
    }

    pub fn is_empty(&self) -> bool {
        self.scenarios.is_empty()
    }

    pub fn names(&self) -> Vec<String> {
        self.scenarios.iter().map(|s| s.name().to_owned()).collect()
    }

    /// The error to answer `api` with, and the scenario giving it.
    pub fn error_for(&self, api: i16) -> Option<LabError<'_>> {
        self.scenarios.iter().find_map(|s| s.take_error(api))
    }

    /// Why a request for `api` at `version` is not served, when a scenario
    /// presents a release whose brokers do not serve it: a broker closes the
    /// connection of a request it does not serve (ApiVersions excepted, which
    /// the session answers). A scenario that only narrows `api_versions`
    /// changes what is advertised, not what is served.
    pub fn refusal(&self, api: i16, version: i16) -> Option<String> {
        let name = || {
            ApiKey::try_from(api).map_or_else(|_| format!("API key {api}"), |a| format!("{a:?}"))
        };
        for s in &self.scenarios {
            if let Some(&(_, min, max)) = s.ranges.iter().find(|r| r.0 == api) {
                let release = s.release.as_ref()?;
                if (min..=max).contains(&version) {
                    return None;
                }
                return Some(format!(
                    "{} v{version} is not offered by Kafka {} as presented (v{min}-v{max}; discovery lab scenario {})",
                    name(),
                    release.name,
                    s.name()
                ));
            }
        }
        let release = self
            .scenarios
            .iter()
            .find_map(|s| s.release.as_ref().map(|r| (r, s)))?;
        Some(format!(
            "{} is not offered by Kafka {} as presented (discovery lab scenario {})",
            name(),
            release.0.name,
            release.1.name()
        ))
    }

    /// The highest ApiVersions version a presented release serves, when a
    /// release scenario decides it.
    pub fn api_versions_max(&self) -> Option<i16> {
        let api = ApiKey::ApiVersions as i16;
        let (s, max) = self
            .scenarios
            .iter()
            .find_map(|s| s.ranges.iter().find(|r| r.0 == api).map(|r| (s, r.2)))?;
        s.release.as_ref().map(|_| max)
    }

    /// How long to hold the answer to `api`.
    pub fn delay_for(&self, api: i16) -> Option<Duration> {
        self.scenarios.iter().find_map(|s| {
            let (_, d) = s.delays.iter().find(|(k, _)| *k == api)?;
            s.count(LabAction::Delay);
            Some(*d)
        })
    }

    /// How to shape an ApiVersions answer; `None` when no scenario shapes it.
    /// The first scenario to pin features, or to narrow an API, wins.
    pub fn shape(&self) -> Option<Shape<'_>> {
        let mut shape = Shape {
            features: None,
            ranges: Vec::new(),
            release: None,
            tags: BTreeMap::new(),
            names: Vec::new(),
        };
        for s in &self.scenarios {
            let mut used = false;
            if shape.features.is_none() {
                if let Some(f) = &s.spec.features {
                    shape.features = Some(f);
                    s.count(LabAction::Features);
                    used = true;
                }
            }
            for &(key, min, max) in &s.ranges {
                if !shape.ranges.iter().any(|r| r.0 == key) {
                    shape.ranges.push((key, min, max));
                    used = true;
                }
            }
            if shape.release.is_none() && s.release.is_some() {
                shape.release = s.release.as_ref();
                used = true;
            }
            if !s.ranges.is_empty() {
                s.count(LabAction::ApiVersions);
            }
            for (tag, value) in &s.tags {
                shape.tags.entry(*tag).or_insert_with(|| value.clone());
                used = true;
            }
            if !s.tags.is_empty() {
                s.count(LabAction::TaggedFields);
            }
            if used {
                shape.names.push(s.name().to_owned());
            }
        }
        (!shape.names.is_empty()).then_some(shape)
    }
}

#[cfg(test)]
mod tests;
