//! Apache Kafka 4.1's own features: their supported ranges, the metadata.version
//! release names, and the dependency table. Used as kshim's defaults so that a
//! client pointed at a standalone kshim sees a realistic cluster.

use super::{Dependencies, Requirement, SupportedFeatures, SupportedRange};

pub const METADATA_VERSION: &str = "metadata.version";
pub const KRAFT_VERSION: &str = "kraft.version";

/// metadata.version levels: (level, release name, whether the level changed the
/// metadata format, which makes a downgrade across it lose information).
/// From org.apache.kafka.server.common.MetadataVersion in Kafka 4.1.
pub const METADATA_VERSIONS: &[(i16, &str, bool)] = &[
    (7, "3.3-IV3", true),
    (8, "3.4-IV0", true),
    (9, "3.5-IV0", false),
    (10, "3.5-IV1", false),
    (11, "3.5-IV2", true),
    (12, "3.6-IV0", false),
    (13, "3.6-IV1", true),
    (14, "3.6-IV2", true),
    (15, "3.7-IV0", true),
    (16, "3.7-IV1", false),
    (17, "3.7-IV2", true),
    (18, "3.7-IV3", false),
    (19, "3.7-IV4", false),
    (20, "3.8-IV0", false),
    (21, "3.9-IV0", false),
    (22, "4.0-IV0", false),
    (23, "4.0-IV1", true),
    (24, "4.0-IV2", false),
    (25, "4.0-IV3", false),
    (26, "4.1-IV0", false),
    (27, "4.1-IV1", false),
];

pub const METADATA_VERSION_MIN: i16 = 7;
pub const METADATA_VERSION_LATEST_PRODUCTION: i16 = 27;

/// The release name of a metadata.version level, as FeatureCommand prints it.
pub fn metadata_version_name(level: i16) -> Option<&'static str> {
    METADATA_VERSIONS
        .iter()
        .find(|(l, _, _)| *l == level)
        .map(|(_, name, _)| *name)
}

/// The level of a release name such as "3.9-IV0" (or "3.9", meaning its latest).
pub fn metadata_version_level(name: &str) -> Option<i16> {
    if let Some((level, _, _)) = METADATA_VERSIONS.iter().find(|(_, n, _)| *n == name) {
        return Some(*level);
    }
    METADATA_VERSIONS
        .iter()
        .filter(|(_, n, _)| n.split('-').next() == Some(name))
        .map(|(l, _, _)| *l)
        .max()
}

/// Whether going from `from` down to `to` crosses a level that changed the
/// metadata format (MetadataVersion.checkIfMetadataChanged).
pub fn metadata_changed_between(to: i16, from: i16) -> bool {
    METADATA_VERSIONS
        .iter()
        .any(|(level, _, changed)| *level > to && *level <= from && *changed)
}

/// metadata.version levels Kafka 4.1 defines but does not yet ship as stable:
/// its tools accept them (`version-mapping`, `--release-version`), its
/// controllers refuse them unless unstable versions are enabled.
pub const UNSTABLE_METADATA_VERSIONS: &[(i16, &str)] = &[(28, "4.2-IV0"), (29, "4.2-IV1")];

/// The release name of any metadata.version level Kafka 4.1's tools know,
/// stable or not.
pub fn any_metadata_version_name(level: i16) -> Option<&'static str> {
    metadata_version_name(level).or_else(|| {
        UNSTABLE_METADATA_VERSIONS
            .iter()
            .find(|(l, _)| *l == level)
            .map(|(_, name)| *name)
    })
}

/// The level of a release name, stable or not (Kafka's
/// `MetadataVersion.fromVersionString` with unstable versions allowed). An
/// unstable level is only known by its full name: "4.2" names no release yet.
pub fn any_metadata_version_level(name: &str) -> Option<i16> {
    metadata_version_level(name).or_else(|| {
        UNSTABLE_METADATA_VERSIONS
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(l, _)| *l)
    })
}

/// The features whose default level follows the release, in the order Kafka's
/// FeatureCommand prints them, each with the levels it defines and, per level
/// above 0, the metadata.version from which that level is the release default
/// (Feature.defaultLevel in Kafka 4.1). A level with no metadata.version is
/// defined but never a default (transaction.version 1).
pub const RELEASE_FEATURES: &[(&str, &[(i16, Option<i16>)])] = &[
    (KRAFT_VERSION, &[(1, Some(21))]),
    ("transaction.version", &[(1, None), (2, Some(24))]),
    ("group.version", &[(1, Some(22))]),
    ("eligible.leader.replicas.version", &[(1, Some(26))]),
    ("share.version", &[(1, Some(28))]),
    ("streams.version", &[(1, Some(29))]),
];

/// What Kafka 4.1 finalizes for the release whose metadata.version is
/// `metadata_level`: metadata.version first, then each release feature's
/// default level (0 included), in FeatureCommand's order.
pub fn release_levels(metadata_level: i16) -> Vec<(&'static str, i16)> {
    let mut out = vec![(METADATA_VERSION, metadata_level)];
    for (name, levels) in RELEASE_FEATURES {
        let level = levels
            .iter()
            .filter(|(_, from)| from.is_some_and(|from| metadata_level >= from))
            .map(|(level, _)| *level)
            .max()
            .unwrap_or(0);
        out.push((name, level));
    }
    out
}

/// Whether Kafka 4.1 defines `level` of the release feature or metadata.version
/// `name`: `None` when it does not know the feature at all.
pub fn defines_level(name: &str, level: i16) -> Option<bool> {
    if name == METADATA_VERSION {
        return Some(any_metadata_version_name(level).is_some());
    }
    RELEASE_FEATURES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, levels)| level == 0 || levels.iter().any(|(l, _)| *l == level))
}

/// Every feature name Apache Kafka 4.x defines (org.apache.kafka.server.common.Feature,
/// metadata.version and kraft.version). In front of a cluster these are the
/// upstream's: kshim never finalizes them itself unless configured to.
pub const KAFKA_FEATURE_NAMES: &[&str] = &[
    "eligible.leader.replicas.version",
    "group.version",
    KRAFT_VERSION,
    METADATA_VERSION,
    "share.version",
    "streams.version",
    "test.feature.version",
    "transaction.version",
];

/// Whether `name` is one of Apache Kafka's own features.
pub fn is_kafka_feature(name: &str) -> bool {
    KAFKA_FEATURE_NAMES.contains(&name)
}

/// The features a Kafka 4.1 broker supports.
pub fn supported_features() -> SupportedFeatures {
    [
        ("eligible.leader.replicas.version", 0, 1),
        ("group.version", 0, 1),
        ("kraft.version", 0, 1),
        (
            METADATA_VERSION,
            METADATA_VERSION_MIN,
            METADATA_VERSION_LATEST_PRODUCTION,
        ),
        ("share.version", 0, 1),
        ("transaction.version", 0, 2),
    ]
    .into_iter()
    .map(|(name, min, max)| (name.to_owned(), SupportedRange::new(min, max)))
    .collect()
}

/// Kafka 4.1's dependency table (org.apache.kafka.server.common.Feature and its
/// FeatureVersion enums). In 4.1 only eligible.leader.replicas.version declares
/// one; every other feature's levels stand alone.
pub fn dependencies() -> Dependencies {
    let mut d = Dependencies::default();
    d.add(
        "eligible.leader.replicas.version",
        1,
        Requirement {
            feature: METADATA_VERSION.to_owned(),
            min_level: 23,
        },
    );
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_names_round_trip() {
        for (level, name, _) in METADATA_VERSIONS {
            assert_eq!(metadata_version_name(*level), Some(*name));
            assert_eq!(metadata_version_level(name), Some(*level));
        }
        assert_eq!(metadata_version_level("3.7"), Some(19));
        assert_eq!(metadata_version_level("9.9"), None);
    }
}
