//! What each Apache Kafka release defines, as kshim needs it: the data in
//! `data/kafka/<major.minor>.json`, generated from the release's own jars by
//! `tools/release-data` and checked against them by
//! `tests/interop/test_release_data.py`. Nothing here is typed by hand. The
//! lowest layer: it imports nothing from the crate.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// One metadata.version level.
#[derive(Debug, Clone, Deserialize)]
pub struct MetadataVersionDefinition {
    pub level: i16,
    /// The release name, such as "4.1-IV1".
    pub name: String,
    /// Whether the release ships it as stable.
    pub production: bool,
    /// Whether the level changed the metadata format: a downgrade across it
    /// loses information.
    pub metadata_changed: bool,
}

/// One level of a feature.
#[derive(Debug, Clone, Deserialize)]
pub struct FeatureLevel {
    pub level: i16,
    /// The metadata.version this level needs to be bootstrapped with.
    pub bootstrap_metadata_version: i16,
    /// Feature name -> the lowest level of it this level needs.
    pub dependencies: BTreeMap<String, i16>,
}

/// One production feature other than metadata.version.
#[derive(Debug, Clone, Deserialize)]
pub struct FeatureDefinition {
    pub name: String,
    pub minimum_production: i16,
    pub latest_production: i16,
    pub latest_testing: i16,
    pub levels: Vec<FeatureLevel>,
    /// metadata.version level (as text) -> this feature's default level for
    /// it (what `kafka-features.sh version-mapping` prints).
    pub default_level_by_metadata_version: BTreeMap<String, i16>,
}

impl FeatureDefinition {
    /// The default level for a metadata.version level the release defines.
    pub fn default_level(&self, metadata_version: i16) -> Option<i16> {
        self.default_level_by_metadata_version
            .get(&metadata_version.to_string())
            .copied()
    }
}

/// One API key as a release defines it.
#[derive(Debug, Clone, Deserialize)]
pub struct ApiDefinition {
    pub key: i16,
    pub name: String,
    /// Who serves it: "broker", "controller" or both.
    pub listeners: Vec<String>,
    /// [lowest, highest] valid version.
    pub versions: [i16; 2],
    pub first_flexible: Option<i16>,
    pub latest_version_unstable: bool,
    /// The structures of its response that hold a host and a port.
    pub addresses: Vec<AddressCarrier>,
}

/// A response structure with a Host and a Port.
#[derive(Debug, Clone, Deserialize)]
pub struct AddressCarrier {
    /// Field names from the top of the response, dotted.
    pub path: String,
    /// [lowest, highest] version in which the structure is present.
    pub versions: [i16; 2],
    /// Whether the structure names a broker by id (a broker's address, which a
    /// client must not learn) or not (an application endpoint, such as Kafka
    /// Streams' `application.server`, which clients must get as it is).
    pub names_broker: bool,
}

impl ApiDefinition {
    /// The versions whose responses hold a broker's address.
    pub fn broker_address_versions(&self) -> Option<(i16, i16)> {
        self.addresses
            .iter()
            .filter(|c| c.names_broker)
            .map(|c| (c.versions[0], c.versions[1]))
            .reduce(|(lo, hi), (l, h)| (lo.min(l), hi.max(h)))
    }
}

/// API versions a client uses only once a feature is finalized at a level.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
pub struct FeatureApi {
    pub feature: String,
    pub level: i16,
    pub key: i16,
    /// The lowest version of the API that needs the level.
    pub min_version: i16,
}

/// One release's data.
#[derive(Debug, Clone, Deserialize)]
pub struct Release {
    /// The release the data was generated from, such as "4.4.0".
    pub release: String,
    pub apis: Vec<ApiDefinition>,
    /// Every metadata.version level, oldest first, stable or not.
    pub metadata_versions: Vec<MetadataVersionDefinition>,
    pub minimum_metadata_version: i16,
    pub latest_production_metadata_version: i16,
    /// The production features other than metadata.version, in the order
    /// Kafka's tools print them.
    pub features: Vec<FeatureDefinition>,
    /// Every feature name the release defines, test features included.
    pub all_feature_names: Vec<String>,
    /// The API versions that need a feature level: the group protocols' APIs
    /// (KIP-848, KIP-932, KIP-1071) and the transaction protocol's versions
    /// (KIP-890).
    pub feature_apis: Vec<FeatureApi>,
    /// Topic config -> the broker config it overrides, where the names differ
    /// (Kafka's topic config synonyms).
    pub topic_config_synonyms: BTreeMap<String, String>,
}

impl Release {
    /// The release's major.minor, such as "4.4".
    pub fn minor(&self) -> &str {
        self.release
            .rsplit_once('.')
            .map_or(self.release.as_str(), |(minor, _)| minor)
    }

    /// Looked up for every forwarded request: the generator writes the APIs
    /// sorted by key (checked below), so this is a binary search.
    pub fn api(&self, key: i16) -> Option<&ApiDefinition> {
        self.apis
            .binary_search_by_key(&key, |a| a.key)
            .ok()
            .map(|i| &self.apis[i])
    }

    pub fn feature(&self, name: &str) -> Option<&FeatureDefinition> {
        self.features.iter().find(|f| f.name == name)
    }

    pub fn metadata_version(&self, level: i16) -> Option<&MetadataVersionDefinition> {
        self.metadata_versions.iter().find(|m| m.level == level)
    }

    /// What a broker of this release serves, as (api_key, min, max) sorted by
    /// key: the APIs a broker listener serves, from the oldest version it parses
    /// to the newest stable one (a latest version marked unstable is served only
    /// with `unstable.api.versions.enable`).
    pub fn broker_apis(&self) -> Vec<(i16, i16, i16)> {
        self.apis
            .iter()
            .filter(|a| a.listeners.iter().any(|l| l == "broker"))
            .filter_map(|a| {
                let max = a.versions[1] - i16::from(a.latest_version_unstable);
                (max >= a.versions[0]).then_some((a.key, a.versions[0], max))
            })
            .collect()
    }
}

/// The data of a release by its major.minor ("4.1").
pub fn release(minor: &str) -> Option<&'static Release> {
    releases().iter().find(|r| r.minor() == minor)
}

const DATA: [&str; 5] = [
    include_str!("../data/kafka/4.0.json"),
    include_str!("../data/kafka/4.1.json"),
    include_str!("../data/kafka/4.2.json"),
    include_str!("../data/kafka/4.3.json"),
    include_str!("../data/kafka/4.4.json"),
];

/// Every release kshim has data for, oldest first.
pub fn releases() -> &'static [Release] {
    static RELEASES: OnceLock<Vec<Release>> = OnceLock::new();
    RELEASES.get_or_init(|| {
        DATA.iter()
            .map(|text| {
                // Checked in and checked by tests: unreadable data is a build defect.
                serde_json::from_str(text).expect("data/kafka holds release data")
            })
            .collect()
    })
}

/// The API versions that need a feature level, in any release kshim has data
/// for: per feature, level and API, the lowest version any release names (a
/// release that removed an API's first versions still meets clients that use
/// them).
pub fn feature_apis() -> &'static [FeatureApi] {
    static ALL: OnceLock<Vec<FeatureApi>> = OnceLock::new();
    ALL.get_or_init(|| {
        let mut lowest: BTreeMap<(String, i16, i16), i16> = BTreeMap::new();
        for entry in releases().iter().flat_map(|r| &r.feature_apis) {
            let at = (entry.feature.clone(), entry.level, entry.key);
            let min = lowest.entry(at).or_insert(entry.min_version);
            *min = (*min).min(entry.min_version);
        }
        lowest
            .into_iter()
            .map(|((feature, level, key), min_version)| FeatureApi {
                feature,
                level,
                key,
                min_version,
            })
            .collect()
    })
}

/// Topic config -> the broker config it overrides, where the names differ, in
/// any release kshim has data for.
pub fn topic_config_synonyms() -> &'static BTreeMap<String, String> {
    static ALL: OnceLock<BTreeMap<String, String>> = OnceLock::new();
    ALL.get_or_init(|| {
        releases()
            .iter()
            .flat_map(|r| r.topic_config_synonyms.clone())
            .collect()
    })
}

/// The newest release kshim has data for.
pub fn newest() -> &'static Release {
    releases().last().expect("at least one release")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_release_serves_every_version_an_older_one_serves() {
        // What makes one broker of the newest release every release, at the
        // protocol level: KIP-896 removed the old versions in 4.0, and nothing
        // since has been removed.
        let served_by_newest = newest().broker_apis();
        for release in releases() {
            for (key, min, max) in release.broker_apis() {
                let served = served_by_newest.iter().find(|a| a.0 == key);
                assert!(
                    served.is_some_and(|&(_, lo, hi)| lo <= min && max <= hi),
                    "{} serves API {key} v{min}-v{max}; {} serves {served:?}",
                    release.release,
                    newest().release
                );
            }
        }
    }

    #[test]
    fn every_release_reads_oldest_first() {
        let minors: Vec<&str> = releases().iter().map(Release::minor).collect();
        assert_eq!(minors, ["4.0", "4.1", "4.2", "4.3", "4.4"]);
        assert_eq!(newest().minor(), "4.4");
        for release in releases() {
            assert!(
                release.apis.windows(2).all(|w| w[0].key < w[1].key),
                "{}: APIs sorted by key",
                release.release
            );
        }
    }

    #[test]
    fn feature_levels_gate_the_group_and_transaction_protocols() {
        let gated = |feature: &str| -> Vec<(i16, i16, i16)> {
            feature_apis()
                .iter()
                .filter(|e| e.feature == feature)
                .map(|e| (e.level, e.key, e.min_version))
                .collect()
        };
        // ConsumerGroupHeartbeat, ConsumerGroupDescribe.
        assert_eq!(gated("group.version"), [(1, 68, 0), (1, 69, 0)]);
        // ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch, ShareAcknowledge.
        assert_eq!(
            gated("share.version")
                .iter()
                .map(|g| g.1)
                .collect::<Vec<_>>(),
            [76, 77, 78, 79]
        );
        // StreamsGroupHeartbeat, StreamsGroupDescribe, and 4.4's topology update.
        assert_eq!(
            gated("streams.version")
                .iter()
                .map(|g| g.1)
                .collect::<Vec<_>>(),
            [88, 89, 93]
        );
        // Produce v12, EndTxn v5, TxnOffsetCommit v5.
        assert_eq!(
            gated("transaction.version"),
            [(2, 0, 12), (2, 26, 5), (2, 28, 5)]
        );
    }

    #[test]
    fn broker_addresses_and_application_endpoints_are_told_apart() {
        let r = newest();
        assert_eq!(r.api(3).unwrap().broker_address_versions(), Some((0, 13)));
        assert_eq!(r.api(10).unwrap().broker_address_versions(), Some((0, 6)));
        assert_eq!(r.api(78).unwrap().broker_address_versions(), Some((1, 2)));
        // StreamsGroupHeartbeat and StreamsGroupDescribe carry application endpoints only.
        assert_eq!(r.api(88).unwrap().broker_address_versions(), None);
        assert_eq!(r.api(89).unwrap().broker_address_versions(), None);
        assert_eq!(r.api(18).unwrap().broker_address_versions(), None);
    }
}
