//! Apache Kafka's own features as the release a standalone kshim presents
//! defines them (Kafka 4.1): their supported ranges, the metadata.version release
//! names, the default levels per release and the dependency table. All of it is
//! read from that release's generated data (`crate::releases`), none typed here.
//! Used as kshim's defaults so that a client pointed at a standalone kshim sees
//! a realistic cluster.

use super::{Dependencies, Requirement, SupportedFeatures, SupportedRange};
use crate::releases::{self, MetadataVersionDefinition, Release};

pub const METADATA_VERSION: &str = "metadata.version";
pub const KRAFT_VERSION: &str = "kraft.version";

/// The Kafka release whose features a standalone kshim presents.
pub const PRESENTED_RELEASE: &str = "4.1";

/// The data of the presented release.
pub fn presented() -> &'static Release {
    releases::release(PRESENTED_RELEASE).expect("data/kafka holds the presented release")
}

/// The stable metadata.version levels, oldest first.
pub fn stable_metadata_versions() -> impl Iterator<Item = &'static MetadataVersionDefinition> {
    presented()
        .metadata_versions
        .iter()
        .filter(|m| m.production)
}

/// The lowest metadata.version level.
pub fn metadata_version_min() -> i16 {
    presented().minimum_metadata_version
}

/// The newest stable metadata.version level.
pub fn metadata_version_latest_production() -> i16 {
    presented().latest_production_metadata_version
}

/// The release name of a stable metadata.version level, as FeatureCommand prints it.
pub fn metadata_version_name(level: i16) -> Option<&'static str> {
    stable_metadata_versions()
        .find(|m| m.level == level)
        .map(|m| m.name.as_str())
}

/// The level of a stable release name such as "3.9-IV0" (or "3.9", meaning its latest).
pub fn metadata_version_level(name: &str) -> Option<i16> {
    if let Some(m) = stable_metadata_versions().find(|m| m.name == name) {
        return Some(m.level);
    }
    stable_metadata_versions()
        .filter(|m| m.name.split('-').next() == Some(name))
        .map(|m| m.level)
        .max()
}

/// Whether going from `from` down to `to` crosses a level that changed the
/// metadata format (MetadataVersion.checkIfMetadataChanged).
pub fn metadata_changed_between(to: i16, from: i16) -> bool {
    presented()
        .metadata_versions
        .iter()
        .any(|m| m.level > to && m.level <= from && m.metadata_changed)
}

/// The release name of any metadata.version level the release's tools know,
/// stable or not (its tools accept unstable ones in `version-mapping` and
/// `--release-version`; its controllers refuse them unless unstable versions
/// are enabled).
pub fn any_metadata_version_name(level: i16) -> Option<&'static str> {
    presented().metadata_version(level).map(|m| m.name.as_str())
}

/// The level of a release name, stable or not (Kafka's
/// `MetadataVersion.fromVersionString` with unstable versions allowed). An
/// unstable level is only known by its full name: "4.2" names no release yet.
pub fn any_metadata_version_level(name: &str) -> Option<i16> {
    metadata_version_level(name).or_else(|| {
        presented()
            .metadata_versions
            .iter()
            .find(|m| m.name == name)
            .map(|m| m.level)
    })
}

/// What the release finalizes for the release whose metadata.version is
/// `metadata_level`: metadata.version first, then each feature's default level
/// (0 included), in FeatureCommand's order (Feature.defaultLevel).
pub fn release_levels(metadata_level: i16) -> Vec<(&'static str, i16)> {
    let mut out = vec![(METADATA_VERSION, metadata_level)];
    for feature in &presented().features {
        let level = feature.default_level(metadata_level).unwrap_or(0);
        out.push((feature.name.as_str(), level));
    }
    out
}

/// Whether the release defines `level` of the feature or metadata.version
/// `name`: `None` when it does not know the feature at all.
pub fn defines_level(name: &str, level: i16) -> Option<bool> {
    if name == METADATA_VERSION {
        return Some(any_metadata_version_name(level).is_some());
    }
    presented()
        .feature(name)
        .map(|f| f.levels.iter().any(|l| l.level == level))
}

/// Every feature name Apache Kafka defines in any release kshim has data for
/// (test features included), and metadata.version, sorted. In front of a
/// cluster these are the upstream's: kshim never finalizes them itself unless
/// configured to.
pub fn kafka_feature_names() -> &'static [&'static str] {
    static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let mut names: Vec<&'static str> = releases::releases()
            .iter()
            .flat_map(|r| r.all_feature_names.iter().map(String::as_str))
            .chain([METADATA_VERSION])
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    })
}

/// Whether `name` is one of Apache Kafka's own features.
pub fn is_kafka_feature(name: &str) -> bool {
    kafka_feature_names().contains(&name)
}

/// The features a broker of the release supports: every feature whose newest
/// production level is above 0, from 0, and metadata.version's stable range.
pub fn supported_features() -> SupportedFeatures {
    let release = presented();
    let mut supported: SupportedFeatures = release
        .features
        .iter()
        .filter(|f| f.latest_production > 0)
        .map(|f| (f.name.clone(), SupportedRange::new(0, f.latest_production)))
        .collect();
    supported.insert(
        METADATA_VERSION.to_owned(),
        SupportedRange::new(metadata_version_min(), metadata_version_latest_production()),
    );
    supported
}

/// The release's dependency table (each FeatureVersion's dependencies).
pub fn dependencies() -> Dependencies {
    let mut d = Dependencies::default();
    for feature in &presented().features {
        for level in &feature.levels {
            for (needed, &min_level) in &level.dependencies {
                d.add(
                    &feature.name,
                    level.level,
                    Requirement {
                        feature: needed.clone(),
                        min_level,
                    },
                );
            }
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_names_round_trip() {
        for m in stable_metadata_versions() {
            assert_eq!(metadata_version_name(m.level), Some(m.name.as_str()));
            assert_eq!(metadata_version_level(&m.name), Some(m.level));
        }
        assert_eq!(metadata_version_level("3.7"), Some(19));
        assert_eq!(metadata_version_level("9.9"), None);
        assert_eq!(any_metadata_version_level("4.2-IV1"), Some(29));
        assert_eq!(metadata_version_level("4.2"), None);
    }

    #[test]
    fn kafka_4_1_as_its_tools_show_it() {
        assert_eq!(
            (metadata_version_min(), metadata_version_latest_production()),
            (7, 27)
        );
        assert_eq!(
            release_levels(27),
            [
                (METADATA_VERSION, 27),
                ("kraft.version", 1),
                ("transaction.version", 2),
                ("group.version", 1),
                ("eligible.leader.replicas.version", 1),
                ("share.version", 0),
                ("streams.version", 0),
            ]
        );
        let supported = supported_features();
        assert_eq!(supported["share.version"], SupportedRange::new(0, 1));
        assert!(!supported.contains_key("streams.version"));
        assert_eq!(defines_level("transaction.version", 1), Some(true));
        assert_eq!(defines_level("group.version", 2), Some(false));
        assert_eq!(defines_level("acme.widgets", 1), None);
        assert!(is_kafka_feature("test.feature.version"));
        assert!(!is_kafka_feature("acme.widgets"));
    }
}
