//! The feature model of KIP-584 as Kafka ships it: supported ranges, finalized
//! levels with one epoch, dependencies between features, and the rules that decide
//! whether an UpdateFeatures request may be applied.
//!
//! Pure data and rules: no I/O, no wire format, no locking.

pub mod dependencies;
pub mod kafka;
pub mod ownership;
pub mod update;

pub use dependencies::{Dependencies, Requirement};
pub use ownership::{merge, Mirror, Owner, Ownership, ViewVerdict};
pub use update::{
    invalid_update, plan_update, FeatureUpdate, Reason, Supporter, UpdatePlan, UpdateRejection,
    UpdateRules, UpgradeType,
};

use std::collections::BTreeMap;
use std::fmt;

/// The versions of one feature that a node can run, both ends inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SupportedRange {
    pub min: i16,
    pub max: i16,
}

impl SupportedRange {
    pub fn new(min: i16, max: i16) -> Self {
        SupportedRange { min, max }
    }

    pub fn contains(&self, level: i16) -> bool {
        self.min <= level && level <= self.max
    }
}

/// Written as Kafka's VersionRange writes itself: "3", "3+" (no upper bound) or
/// "1-3", so that messages naming a range read the same as a broker's.
impl fmt::Display for SupportedRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min == self.max {
            write!(f, "{}", self.min)
        } else if self.max == i16::MAX {
            write!(f, "{}+", self.min)
        } else {
            write!(f, "{}-{}", self.min, self.max)
        }
    }
}

/// Feature name -> supported range, in name order.
pub type SupportedFeatures = BTreeMap<String, SupportedRange>;

/// The cluster-wide finalized levels and the epoch that names this state.
/// A feature at level 0 is disabled and not listed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FinalizedFeatures {
    pub epoch: i64,
    pub levels: BTreeMap<String, i16>,
}

impl FinalizedFeatures {
    pub fn level(&self, name: &str) -> i16 {
        self.levels.get(name).copied().unwrap_or(0)
    }

    /// The state after `levels` replaced the current ones, one epoch later.
    pub fn with_levels(&self, levels: &BTreeMap<String, i16>) -> FinalizedFeatures {
        let mut next = self.levels.clone();
        for (name, &level) in levels {
            if level == 0 {
                next.remove(name);
            } else {
                next.insert(name.clone(), level);
            }
        }
        FinalizedFeatures {
            epoch: self.epoch + 1,
            levels: next,
        }
    }
}

/// Everything ApiVersions reports about features, read as one value.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FeatureSnapshot {
    pub supported: SupportedFeatures,
    pub finalized: FinalizedFeatures,
    /// In front of a cluster whose features kshim has not seen yet (no broker
    /// answered since the first start): clients are told epoch -1 and no
    /// finalized features, as a Kafka 4.4 node that has not loaded its
    /// metadata tells them (KAFKA-19964), never levels kshim would invent.
    pub cluster_unknown: bool,
}

/// A stored level this instance cannot run: the KIP's broker protection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incompatibility {
    pub feature: String,
    pub finalized: i16,
    pub supported: Option<SupportedRange>,
}

impl fmt::Display for Incompatibility {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // metadata.version levels are read as Kafka's release names too.
        let name = |level: i16| {
            (self.feature == kafka::METADATA_VERSION)
                .then(|| kafka::KafkaRelease::newest().any_metadata_version_name(level))
                .flatten()
        };
        let (feature, level) = (&self.feature, self.finalized);
        write!(f, "feature {feature} is finalized at level {level}")?;
        if let Some(n) = name(level) {
            write!(f, " ({n})")?;
        }
        write!(f, " (finalized range {level}-{level}) but this instance ")?;
        match self.supported {
            Some(range) => {
                write!(f, "supports only {}-{}", range.min, range.max)?;
                if let (Some(low), Some(high)) = (name(range.min), name(range.max)) {
                    write!(f, " ({low} to {high})")?;
                }
                Ok(())
            }
            None => write!(f, "does not support it"),
        }
    }
}

/// Something found while running that makes a finalized kshim-owned level
/// untrue for part of the cluster: a supporter whose advertised range excludes
/// it (the KIP's check on every change), or a broker whose configs break the
/// validators of that level (a broker that joined after the level was audited).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    pub feature: String,
    pub level: i16,
    /// How messages name the supporter: "Broker 2", "Local controller 1".
    pub supporter: String,
    pub problem: Problem,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// The supporter's range for the feature, `None` when it does not support it.
    Range(Option<SupportedRange>),
    /// The validators' findings, as one line.
    Configs(String),
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Conflict {
            feature,
            level,
            supporter,
            problem,
        } = self;
        match problem {
            Problem::Range(Some(range)) => write!(
                f,
                "{supporter} supports {feature} only at {range}, which excludes its finalized level {level}"
            ),
            Problem::Range(None) => write!(
                f,
                "{supporter} does not support {feature}, which is finalized at level {level}"
            ),
            Problem::Configs(findings) => write!(
                f,
                "{supporter} has configs that violate the validators of {feature} at its finalized level {level}: {findings}"
            ),
        }
    }
}

/// Every finalized level of a feature `owned` says is kshim's that some
/// supporter cannot run. An upstream broker bounds only the features it
/// advertises, except Apache Kafka's own: a broker leaves out every feature
/// whose highest version it supports is 0, so not listing one of those means
/// it runs level 0 only.
pub fn range_conflicts(
    finalized: &FinalizedFeatures,
    owned: &dyn Fn(&str) -> bool,
    supporters: &[Supporter],
) -> Vec<Conflict> {
    let mut found = Vec::new();
    for (name, &level) in finalized.levels.iter().filter(|(n, _)| owned(n)) {
        for s in supporters {
            let range = s.features.get(name).copied();
            let excluded = match range {
                Some(r) => !r.contains(level),
                None => !s.only_listed || kafka::is_kafka_feature(name),
            };
            if excluded {
                found.push(Conflict {
                    feature: name.clone(),
                    level,
                    supporter: s.label.clone(),
                    problem: Problem::Range(range),
                });
            }
        }
    }
    found
}

/// Every finalized level that `supported` cannot run.
pub fn incompatibilities(
    supported: &SupportedFeatures,
    finalized: &FinalizedFeatures,
) -> Vec<Incompatibility> {
    finalized
        .levels
        .iter()
        .filter(|(name, &level)| !supported.get(*name).is_some_and(|r| r.contains(level)))
        .map(|(name, &level)| Incompatibility {
            feature: name.clone(),
            finalized: level,
            supported: supported.get(name).copied(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_levels_drops_disabled_features_and_moves_the_epoch() {
        let f = FinalizedFeatures {
            epoch: 3,
            levels: [("a".into(), 1), ("b".into(), 2)].into(),
        };
        let next = f.with_levels(&[("a".into(), 0), ("c".into(), 4)].into());
        assert_eq!(next.epoch, 4);
        assert_eq!(
            next.levels,
            [("b".to_owned(), 2), ("c".to_owned(), 4)].into()
        );
    }

    #[test]
    fn range_conflicts_name_the_supporter_and_its_range() {
        let finalized = FinalizedFeatures {
            epoch: 1,
            levels: [("acme.a".into(), 2), ("acme.b".into(), 1), ("up".into(), 9)].into(),
        };
        let broker = |label: &str, features: &[(&str, i16, i16)]| Supporter {
            label: label.into(),
            features: features
                .iter()
                .map(|&(n, min, max)| (n.to_owned(), SupportedRange::new(min, max)))
                .collect(),
            only_listed: true,
        };
        let local = Supporter {
            label: "Local controller 1".into(),
            features: [("acme.a".into(), SupportedRange::new(0, 3))].into(),
            only_listed: false,
        };
        let supporters = [
            local,
            broker("Broker 1", &[("acme.a", 0, 3)]),
            broker("Broker 2", &[("acme.a", 0, 1), ("up", 0, 0)]),
        ];
        let owned = |n: &str| n.starts_with("acme.");
        let found = range_conflicts(&finalized, &owned, &supporters);
        let text: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert_eq!(
            text,
            [
                "Broker 2 supports acme.a only at 0-1, which excludes its finalized level 2",
                "Local controller 1 does not support acme.b, which is finalized at level 1",
            ]
        );
    }

    #[test]
    fn incompatibilities_name_the_feature_and_both_ranges() {
        let supported: SupportedFeatures = [("a".into(), SupportedRange::new(1, 2))].into();
        let f = FinalizedFeatures {
            epoch: 1,
            levels: [("a".into(), 3), ("z".into(), 1)].into(),
        };
        let found = incompatibilities(&supported, &f);
        assert_eq!(found.len(), 2);
        assert!(found[0].to_string().contains("supports only 1-2"));
        assert!(found[1].to_string().contains("does not support it"));
    }
}
