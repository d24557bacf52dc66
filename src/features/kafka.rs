//! Apache Kafka's own features as one release defines them: their supported
//! ranges, the metadata.version release names, the default levels per release
//! and the dependency table. All of it is read from that release's generated
//! data (`crate::releases`), none typed here. A standalone kshim presents the
//! release `kafka_release` names (default: the newest), so that a client
//! pointed at it sees a realistic cluster of that release; `kshim features`
//! speaks as the newest release's tools do.

use super::{Dependencies, Requirement, SupportedFeatures, SupportedRange};
use crate::releases::{self, MetadataVersionDefinition, Release};
use std::collections::BTreeMap;
use std::fmt;

pub const METADATA_VERSION: &str = "metadata.version";
pub const KRAFT_VERSION: &str = "kraft.version";

/// One Kafka release's features.
#[derive(Clone, Copy)]
pub struct KafkaRelease(&'static Release);

impl KafkaRelease {
    /// The release by its major.minor, such as "4.1".
    pub fn named(minor: &str) -> Option<KafkaRelease> {
        releases::release(minor).map(KafkaRelease)
    }

    /// The newest release kshim has data for.
    pub fn newest() -> KafkaRelease {
        KafkaRelease(releases::newest())
    }

    /// Every release kshim has data for, as "4.0, 4.1, ...", for messages.
    pub fn known() -> String {
        releases::releases()
            .iter()
            .map(Release::minor)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The major.minor, such as "4.4".
    pub fn minor(self) -> &'static str {
        self.0.minor()
    }

    pub fn data(self) -> &'static Release {
        self.0
    }

    /// The stable metadata.version levels, oldest first.
    pub fn stable_metadata_versions(
        self,
    ) -> impl Iterator<Item = &'static MetadataVersionDefinition> {
        self.0.metadata_versions.iter().filter(|m| m.production)
    }

    /// The lowest metadata.version level.
    pub fn metadata_version_min(self) -> i16 {
        self.0.minimum_metadata_version
    }

    /// The newest stable metadata.version level.
    pub fn metadata_version_latest_production(self) -> i16 {
        self.0.latest_production_metadata_version
    }

    /// The release name of a stable metadata.version level, as FeatureCommand prints it.
    pub fn metadata_version_name(self, level: i16) -> Option<&'static str> {
        self.stable_metadata_versions()
            .find(|m| m.level == level)
            .map(|m| m.name.as_str())
    }

    /// The level of a stable release name such as "3.9-IV0" (or "3.9", meaning its latest).
    pub fn metadata_version_level(self, name: &str) -> Option<i16> {
        if let Some(m) = self.stable_metadata_versions().find(|m| m.name == name) {
            return Some(m.level);
        }
        self.stable_metadata_versions()
            .filter(|m| m.name.split('-').next() == Some(name))
            .map(|m| m.level)
            .max()
    }

    /// Whether going from `from` down to `to` crosses a level that changed the
    /// metadata format (MetadataVersion.checkIfMetadataChanged).
    pub fn metadata_changed_between(self, to: i16, from: i16) -> bool {
        self.0
            .metadata_versions
            .iter()
            .any(|m| m.level > to && m.level <= from && m.metadata_changed)
    }

    /// The release name of any metadata.version level the release's tools know,
    /// stable or not (its tools accept unstable ones in `version-mapping` and
    /// `--release-version`; its controllers refuse them unless unstable versions
    /// are enabled).
    pub fn any_metadata_version_name(self, level: i16) -> Option<&'static str> {
        self.0.metadata_version(level).map(|m| m.name.as_str())
    }

    /// The level of a release name, stable or not (Kafka's
    /// `MetadataVersion.fromVersionString` with unstable versions allowed). An
    /// unstable level is only known by its full name: in 4.1, "4.2" names no
    /// release yet.
    pub fn any_metadata_version_level(self, name: &str) -> Option<i16> {
        self.metadata_version_level(name).or_else(|| {
            self.0
                .metadata_versions
                .iter()
                .find(|m| m.name == name)
                .map(|m| m.level)
        })
    }

    /// What the release finalizes for the release whose metadata.version is
    /// `metadata_level`: metadata.version first, then each feature's default level
    /// (0 included), in FeatureCommand's order (Feature.defaultLevel).
    pub fn release_levels(self, metadata_level: i16) -> Vec<(&'static str, i16)> {
        let mut out = vec![(METADATA_VERSION, metadata_level)];
        for feature in &self.0.features {
            let level = feature.default_level(metadata_level).unwrap_or(0);
            out.push((feature.name.as_str(), level));
        }
        out
    }

    /// What `kafka-storage format` of this release finalizes when given no
    /// release version: the newest stable metadata.version and each feature's
    /// default level for it, the features left at 0 not listed.
    pub fn format_levels(self) -> BTreeMap<String, i16> {
        self.release_levels(self.metadata_version_latest_production())
            .into_iter()
            .filter(|(_, level)| *level > 0)
            .map(|(name, level)| (name.to_owned(), level))
            .collect()
    }

    /// Whether the release defines `level` of the feature or metadata.version
    /// `name`: `None` when it does not know the feature at all.
    pub fn defines_level(self, name: &str, level: i16) -> Option<bool> {
        if name == METADATA_VERSION {
            return Some(self.any_metadata_version_name(level).is_some());
        }
        self.0
            .feature(name)
            .map(|f| f.levels.iter().any(|l| l.level == level))
    }

    /// The features a broker of the release supports: every feature whose newest
    /// production level is above 0, from 0, and metadata.version's stable range.
    pub fn supported_features(self) -> SupportedFeatures {
        let mut supported: SupportedFeatures = self
            .0
            .features
            .iter()
            .filter(|f| f.latest_production > 0)
            .map(|f| (f.name.clone(), SupportedRange::new(0, f.latest_production)))
            .collect();
        supported.insert(
            METADATA_VERSION.to_owned(),
            SupportedRange::new(
                self.metadata_version_min(),
                self.metadata_version_latest_production(),
            ),
        );
        supported
    }

    /// The release's dependency table (each FeatureVersion's dependencies).
    pub fn dependencies(self) -> Dependencies {
        let mut d = Dependencies::default();
        for feature in &self.0.features {
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
}

impl Default for KafkaRelease {
    fn default() -> Self {
        KafkaRelease::newest()
    }
}

impl PartialEq for KafkaRelease {
    fn eq(&self, other: &Self) -> bool {
        self.minor() == other.minor()
    }
}

impl Eq for KafkaRelease {}

impl fmt::Debug for KafkaRelease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Kafka {}", self.minor())
    }
}

impl fmt::Display for KafkaRelease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.minor())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn kafka(minor: &str) -> KafkaRelease {
        KafkaRelease::named(minor).unwrap()
    }

    #[test]
    fn release_names_round_trip() {
        for release in releases::releases() {
            let k = KafkaRelease(release);
            for m in k.stable_metadata_versions() {
                assert_eq!(k.metadata_version_name(m.level), Some(m.name.as_str()));
                assert_eq!(k.metadata_version_level(&m.name), Some(m.level));
            }
        }
        let k = kafka("4.1");
        assert_eq!(k.metadata_version_level("3.7"), Some(19));
        assert_eq!(k.metadata_version_level("9.9"), None);
        assert_eq!(k.any_metadata_version_level("4.2-IV1"), Some(29));
        assert_eq!(k.metadata_version_level("4.2"), None);
        assert_eq!(kafka("4.4").metadata_version_level("4.2"), Some(29));
        assert_eq!(KafkaRelease::default(), KafkaRelease::newest());
        assert_eq!(KafkaRelease::known(), "4.0, 4.1, 4.2, 4.3, 4.4");
    }

    #[test]
    fn kafka_4_1_as_its_tools_show_it() {
        let k = kafka("4.1");
        assert_eq!(
            (
                k.metadata_version_min(),
                k.metadata_version_latest_production()
            ),
            (7, 27)
        );
        assert_eq!(
            k.release_levels(27),
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
        assert!(!k.format_levels().contains_key("share.version"));
        let supported = k.supported_features();
        assert_eq!(supported["share.version"], SupportedRange::new(0, 1));
        assert!(!supported.contains_key("streams.version"));
        assert_eq!(k.defines_level("transaction.version", 1), Some(true));
        assert_eq!(k.defines_level("group.version", 2), Some(false));
        assert_eq!(k.defines_level("acme.widgets", 1), None);
        assert!(is_kafka_feature("test.feature.version"));
        assert!(!is_kafka_feature("acme.widgets"));
    }

    #[test]
    fn newer_releases_widen_what_they_support() {
        let mut previous: Option<SupportedFeatures> = None;
        for release in releases::releases() {
            let supported = KafkaRelease(release).supported_features();
            if let Some(previous) = previous {
                for (name, range) in &previous {
                    let now = supported[name];
                    assert!(
                        now.min <= range.min && now.max >= range.max,
                        "{} {name}",
                        release.release
                    );
                }
            }
            previous = Some(supported);
        }
    }
}
