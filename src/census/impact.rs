//! Upgrade impact: which clients the census has seen would break, or change
//! behaviour, under a planned change. Two questions:
//!
//! - a Kafka release (`--kafka-version 4.0`): every client that used an API
//!   version the release's brokers no longer serve (Kafka 4.0 removed the
//!   oldest versions of many APIs, KIP-896): 3.x from the generated table in
//!   `releases`, 4.0 and later from the release data (`crate::releases`), the
//!   two checked against each other where both have a release;
//! - a feature level (`--feature group.version=1`): which clients were served a
//!   lower level (they switch protocols once they see it), and which use API
//!   versions that need a higher level than the one planned (they break if the
//!   feature is set below them), from the release data (`crate::releases::feature_apis`).

use super::ClientView;
use crate::protocol::api_name;
use kafka_protocol::messages::ApiKey;
use serde::Serialize;
use std::sync::OnceLock;

/// The API versions one Apache Kafka release's brokers serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseApis {
    /// "3.9", "4.4": patch releases do not change the protocol.
    pub version: String,
    /// (api_key, min, max), sorted by api_key.
    pub apis: Vec<(i16, i16, i16)>,
}

/// What a broker of a release in the data serves.
fn from_data(release: &crate::releases::Release) -> ReleaseApis {
    ReleaseApis {
        version: release.minor().to_owned(),
        apis: release.broker_apis(),
    }
}

/// Every release the census knows, oldest first: 3.x from
/// `data/census/kafka-3.x-apis.json` (generated from each release's kafka-clients jar
/// by tests/tools/release_apis), each release of the release data from that
/// data: a new Kafka release needs its release data and nothing here.
fn releases() -> &'static [ReleaseApis] {
    static ALL: OnceLock<Vec<ReleaseApis>> = OnceLock::new();
    ALL.get_or_init(|| {
        let data = crate::releases::releases();
        let mut all: Vec<ReleaseApis> = older_releases()
            .into_iter()
            .filter(|r| data.iter().all(|d| d.minor() != r.version))
            .collect();
        all.extend(data.iter().map(from_data));
        all
    })
}

/// The 3.x releases' API ranges, oldest first.
fn older_releases() -> Vec<ReleaseApis> {
    #[derive(serde::Deserialize)]
    struct Older {
        releases: std::collections::BTreeMap<String, Vec<(i16, i16, i16)>>,
    }
    let older: Older = serde_json::from_str(include_str!("../../data/census/kafka-3.x-apis.json"))
        .expect("data/census/kafka-3.x-apis.json is checked by the census tests");
    let mut out: Vec<ReleaseApis> = older
        .releases
        .into_iter()
        .map(|(version, apis)| ReleaseApis { version, apis })
        .collect();
    out.sort_by_key(|r| minor_number(&r.version));
    out
}

/// "3.10" -> (3, 10), so that releases sort as numbers.
fn minor_number(version: &str) -> (u32, u32) {
    let mut parts = version.split('.').map(|p| p.parse().unwrap_or(0));
    (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
}

/// The release table's entry for "4.0" (or "4.0.1": patch releases share their
/// minor's protocol).
pub fn release(version: &str) -> Option<&'static ReleaseApis> {
    let minor: String = version.split('.').take(2).collect::<Vec<_>>().join(".");
    releases().iter().find(|r| r.version == minor)
}

/// The releases the table knows, oldest first.
pub fn known_releases() -> Vec<&'static str> {
    releases().iter().map(|r| r.version.as_str()).collect()
}

/// One API version a client used that the target does not serve.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unserved {
    pub api_key: i16,
    pub api: String,
    pub version: i16,
    pub requests: u64,
    /// What the release serves of this API; `None`: the API itself is gone.
    pub served_min: Option<i16>,
    pub served_max: Option<i16>,
}

/// A client and what it would lose.
#[derive(Debug, Clone, Serialize)]
pub struct Affected<T> {
    pub principal: String,
    pub software_name: Option<String>,
    pub software_version: Option<String>,
    pub addresses: Vec<String>,
    pub last_seen_ms: u64,
    pub connections_live: usize,
    pub apis: Vec<T>,
}

impl<T> Affected<T> {
    fn of(client: &ClientView, apis: Vec<T>) -> Affected<T> {
        Affected {
            principal: client.principal.clone(),
            software_name: client.software_name.clone(),
            software_version: client.software_version.clone(),
            addresses: client.addresses.clone(),
            last_seen_ms: client.last_seen_ms,
            connections_live: client.connections_live,
            apis,
        }
    }
}

/// The report for a Kafka release.
#[derive(Debug, Clone, Serialize)]
pub struct ReleaseImpact {
    pub kafka_version: String,
    pub clients_checked: usize,
    pub affected: Vec<Affected<Unserved>>,
}

/// Which of `clients` used API versions that `release`'s brokers do not serve.
/// Versions above what the release serves are not counted: clients negotiate
/// those down.
pub fn release_impact(release: &ReleaseApis, clients: &[ClientView]) -> ReleaseImpact {
    let affected = clients
        .iter()
        .filter_map(|client| {
            let apis: Vec<Unserved> = client
                .apis
                .iter()
                .filter(|a| a.api_key >= 0)
                .filter_map(|a| {
                    let range = release.apis.iter().find(|(k, _, _)| *k == a.api_key);
                    match range {
                        Some(&(_, min, _)) if a.version >= min => None,
                        _ => Some(Unserved {
                            api_key: a.api_key,
                            api: a.api.clone(),
                            version: a.version,
                            requests: a.requests,
                            served_min: range.map(|r| r.1),
                            served_max: range.map(|r| r.2),
                        }),
                    }
                })
                .collect();
            (!apis.is_empty()).then(|| Affected::of(client, apis))
        })
        .collect();
    ReleaseImpact {
        kafka_version: release.version.clone(),
        clients_checked: clients.len(),
        affected,
    }
}

/// One API version a client used that needs a feature level.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gated {
    pub api_key: i16,
    pub api: String,
    pub version: i16,
    pub requests: u64,
    pub needs_level: i16,
}

/// A client that was served a lower level than the planned one.
#[derive(Debug, Clone, Serialize)]
pub struct ServedLower {
    pub principal: String,
    pub software_name: Option<String>,
    pub software_version: Option<String>,
    pub addresses: Vec<String>,
    pub served_level: i16,
    pub served_epoch: i64,
}

/// The report for a feature level.
#[derive(Debug, Clone, Serialize)]
pub struct FeatureImpact {
    pub feature: String,
    pub level: i16,
    pub clients_checked: usize,
    /// Served a lower level (or the feature not at all) in an ApiVersions v3+
    /// answer: they change behaviour once they are served the planned level.
    pub served_lower: Vec<ServedLower>,
    /// Using API versions that need a higher level than the planned one: they
    /// break if the feature is set to it.
    pub would_break: Vec<Affected<Gated>>,
    /// Using API versions that need this feature at a level the plan keeps.
    pub depend_on_it: Vec<Affected<Gated>>,
}

/// Kafka's transaction APIs: a client seen using one is a transactional
/// producer. The Produce versions that need transaction.version 2 (v12+,
/// KIP-890) need it only for transactional batches: brokers serve them to
/// idempotent and plain producers at any level, and Kafka's Java producer sends
/// them whatever is finalized. So Produce counts against a transaction.version
/// level only for a transactional producer. (The census counts API versions per
/// client software, so one transactional connection marks its whole software.)
const TRANSACTION_APIS: [ApiKey; 4] = [
    ApiKey::AddPartitionsToTxn,
    ApiKey::AddOffsetsToTxn,
    ApiKey::EndTxn,
    ApiKey::TxnOffsetCommit,
];

/// What finalizing `feature` at `level` means for `clients`.
pub fn feature_impact(feature: &str, level: i16, clients: &[ClientView]) -> FeatureImpact {
    let mut report = FeatureImpact {
        feature: feature.to_owned(),
        level,
        clients_checked: clients.len(),
        served_lower: Vec::new(),
        would_break: Vec::new(),
        depend_on_it: Vec::new(),
    };
    for client in clients {
        // Below ApiVersions v3 an answer carries no features: such a client reads
        // none, whatever is finalized.
        if let Some(served) = client
            .served
            .as_ref()
            .filter(|s| s.api_versions_version >= 3)
        {
            let served_level = served.levels.get(feature).copied().unwrap_or(0);
            if served_level < level {
                report.served_lower.push(ServedLower {
                    principal: client.principal.clone(),
                    software_name: client.software_name.clone(),
                    software_version: client.software_version.clone(),
                    addresses: client.addresses.clone(),
                    served_level,
                    served_epoch: served.epoch,
                });
            }
        }
        let transactional = client
            .apis
            .iter()
            .any(|a| TRANSACTION_APIS.iter().any(|t| *t as i16 == a.api_key));
        let gated: Vec<Gated> = client
            .apis
            .iter()
            .filter(|a| transactional || a.api_key != ApiKey::Produce as i16)
            .filter_map(|a| {
                let needs = crate::releases::feature_apis()
                    .iter()
                    .filter(|g| {
                        g.feature == feature && g.key == a.api_key && a.version >= g.min_version
                    })
                    .map(|g| g.level)
                    .max()?;
                Some(Gated {
                    api_key: a.api_key,
                    api: api_name(a.api_key),
                    version: a.version,
                    requests: a.requests,
                    needs_level: needs,
                })
            })
            .collect();
        let (breaking, kept): (Vec<Gated>, Vec<Gated>) =
            gated.into_iter().partition(|g| g.needs_level > level);
        if !breaking.is_empty() {
            report.would_break.push(Affected::of(client, breaking));
        }
        if !kept.is_empty() {
            report.depend_on_it.push(Affected::of(client, kept));
        }
    }
    report
}

/// "group.version=1" -> ("group.version", 1).
pub fn parse_feature_level(text: &str) -> Result<(String, i16), String> {
    let (name, level) = text
        .split_once('=')
        .ok_or_else(|| format!("\"{text}\" is not NAME=LEVEL"))?;
    let level: i16 = level
        .trim()
        .parse()
        .ok()
        .filter(|l| *l >= 0)
        .ok_or_else(|| format!("\"{level}\" is not a feature level (0 to 32767)"))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("\"{text}\" names no feature"));
    }
    Ok((name.to_owned(), level))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 3.x table and the release data join into one list, oldest first,
    /// each release once, the newest being the release data's newest; every
    /// release serves ApiVersions and Produce, and KIP-896's removals show
    /// between 3.9 and 4.0 (Produce v0-v2 went).
    #[test]
    fn the_census_knows_every_release_from_3_0_to_the_newest_in_the_data() {
        let known = known_releases();
        let older: Vec<String> = (0..=9).map(|m| format!("3.{m}")).collect();
        let data: Vec<&str> = crate::releases::releases()
            .iter()
            .map(|r| r.minor())
            .collect();
        let expected: Vec<&str> = older.iter().map(String::as_str).chain(data).collect();
        assert_eq!(known, expected);
        for r in releases() {
            for key in [0, 18] {
                assert!(
                    r.apis.iter().any(|a| a.0 == key),
                    "{} serves API {key}",
                    r.version
                );
            }
            assert!(
                r.apis.windows(2).all(|w| w[0].0 < w[1].0),
                "{} sorted by key",
                r.version
            );
        }
        let produce_min = |v: &str| {
            release(v)
                .unwrap()
                .apis
                .iter()
                .find(|a| a.0 == 0)
                .unwrap()
                .1
        };
        assert_eq!((produce_min("3.9"), produce_min("4.0")), (0, 3));
        assert!(release("4.4.0")
            .unwrap()
            .apis
            .iter()
            .any(|&(key, _, _)| key == 89));
    }

    fn client(name: &str, apis: &[(i16, i16)]) -> ClientView {
        ClientView {
            principal: "User:ANONYMOUS".into(),
            software_name: Some(name.into()),
            software_version: Some("1".into()),
            first_seen_ms: 0,
            last_seen_ms: 0,
            connections_total: 1,
            connections_live: 0,
            addresses: Vec::new(),
            security: "PLAINTEXT".into(),
            apis: apis
                .iter()
                .map(|&(api_key, version)| super::super::ApiUse {
                    api_key,
                    api: api_name(api_key),
                    version,
                    requests: 1,
                })
                .collect(),
            errors: Default::default(),
            served: None,
            connections: Vec::new(),
        }
    }

    /// Produce v13 needs transaction.version 2 only for a transactional
    /// producer; the transaction APIs' own newer versions need it from anyone.
    #[test]
    fn only_transactional_producers_break_below_transaction_version_2() {
        let idempotent = client("idempotent", &[(0, 13), (22, 5)]);
        let transactional = client("transactional", &[(0, 13), (22, 5), (26, 5)]);
        let report = feature_impact("transaction.version", 1, &[idempotent, transactional]);
        let names: Vec<_> = report
            .would_break
            .iter()
            .map(|c| c.software_name.clone().unwrap())
            .collect();
        assert_eq!(names, ["transactional"]);
        let apis: Vec<&str> = report.would_break[0]
            .apis
            .iter()
            .map(|a| a.api.as_str())
            .collect();
        assert_eq!(apis, ["Produce", "EndTxn"]);
    }
}
