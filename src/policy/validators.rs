//! Config validators keyed by feature level: a validator constrains one config
//! key, belongs to one feature, and takes effect from a level. The one in force is
//! the one registered at the highest level <= the feature's finalized level (the
//! seed's `floorEntry` rule); below every registered level none is.
//!
//! A validator declared for a broker key also holds for the topic config that
//! overrides it, and the other way round (`log.segment.bytes` / `segment.bytes`):
//! keys are compared in their broker spelling.

use super::rule::ValueRule;
use std::collections::BTreeMap;
use std::fmt;

/// One declared validator.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigValidator {
    /// The key as declared.
    pub key: String,
    pub feature: String,
    /// In force from this finalized level of `feature`.
    pub level: i16,
    pub rule: ValueRule,
}

/// Where a config lives.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum ConfigResource {
    Topic(String),
    /// A broker by node id; the empty name is the cluster-wide default.
    Broker(String),
}

impl fmt::Display for ConfigResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigResource::Topic(t) => write!(f, "topic {t}"),
            ConfigResource::Broker(b) if b.is_empty() => write!(f, "cluster-wide broker default"),
            ConfigResource::Broker(b) => write!(f, "broker {b}"),
        }
    }
}

/// A value that breaks the validator in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatorViolation {
    /// The key as the config names it.
    pub key: String,
    pub value: String,
    /// Why, with the validator, its feature and the level it is in force from.
    pub reason: String,
    /// The validator's feature, and the level it was checked at.
    pub feature: String,
    pub checked_at: i16,
}

impl fmt::Display for ValidatorViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={} {}", self.key, self.value, self.reason)
    }
}

/// All declared validators, indexed for lookup by key.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConfigValidators {
    /// Broker spelling of the key → feature → level → validator.
    by_key: BTreeMap<String, BTreeMap<String, BTreeMap<i16, ConfigValidator>>>,
}

impl ConfigValidators {
    /// Indexes `validators`; two for the same key, feature and level are an error.
    pub fn new(validators: Vec<ConfigValidator>) -> Result<ConfigValidators, Vec<String>> {
        let mut out = ConfigValidators::default();
        let mut errors = Vec::new();
        for v in validators {
            let levels = out
                .by_key
                .entry(broker_key(&v.key).to_owned())
                .or_default()
                .entry(v.feature.clone())
                .or_default();
            if let Some(old) = levels.get(&v.level) {
                errors.push(format!(
                    "{} and {} are both registered for {} at level {}",
                    old.key, v.key, v.feature, v.level
                ));
                continue;
            }
            levels.insert(v.level, v);
        }
        if errors.is_empty() {
            Ok(out)
        } else {
            Err(errors)
        }
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// The features some validator belongs to.
    pub fn features(&self) -> Vec<&str> {
        let mut f: Vec<&str> = self
            .by_key
            .values()
            .flat_map(|by_feature| by_feature.keys().map(String::as_str))
            .collect();
        f.sort_unstable();
        f.dedup();
        f
    }

    /// The config keys (broker spelling) that have a validator of `feature`.
    pub fn keys_of(&self, feature: &str) -> Vec<&str> {
        self.by_key
            .iter()
            .filter(|(_, by_feature)| by_feature.contains_key(feature))
            .map(|(k, _)| k.as_str())
            .collect()
    }

    /// The validators in force for `key` when each feature is at `level_of(feature)`.
    pub fn in_force<'a>(
        &'a self,
        key: &str,
        level_of: &'a dyn Fn(&str) -> i16,
    ) -> impl Iterator<Item = &'a ConfigValidator> + 'a {
        self.by_key
            .get(broker_key(key))
            .into_iter()
            .flat_map(move |by_feature| {
                by_feature
                    .iter()
                    .filter_map(move |(feature, levels)| floor(levels, level_of(feature)))
            })
    }

    /// Checks one value of `key` against every validator in force.
    pub fn check(
        &self,
        key: &str,
        value: &str,
        level_of: &dyn Fn(&str) -> i16,
    ) -> Result<(), ValidatorViolation> {
        for v in self.in_force(key, level_of) {
            if let Some(why) = v.rule.check(value) {
                return Err(ValidatorViolation {
                    key: key.to_owned(),
                    value: value.to_owned(),
                    reason: format!(
                        "{why} (validator {}: {}, in force from {} level {})",
                        v.key, v.rule, v.feature, v.level
                    ),
                    feature: v.feature.clone(),
                    checked_at: level_of(&v.feature),
                });
            }
        }
        Ok(())
    }

    /// Checks `key` against the validators `feature` would have in force at
    /// `target`, the other features staying at `level_of`: the audit before a
    /// level change.
    pub fn check_at(
        &self,
        key: &str,
        value: &str,
        feature: &str,
        target: i16,
        level_of: &dyn Fn(&str) -> i16,
    ) -> Result<(), ValidatorViolation> {
        let at_target = |f: &str| if f == feature { target } else { level_of(f) };
        self.check(key, value, &at_target)
    }
}

/// The entry of `levels` registered at the highest level <= `level`.
pub fn floor(levels: &BTreeMap<i16, ConfigValidator>, level: i16) -> Option<&ConfigValidator> {
    levels.range(..=level).next_back().map(|(_, v)| v)
}

/// The broker spelling of a config key (Kafka's topic config synonyms, from
/// the release data).
pub fn broker_key(key: &str) -> &str {
    crate::releases::topic_config_synonyms()
        .get(key)
        .map_or(key, String::as_str)
}

/// The topic spelling of a config key.
pub fn topic_key(key: &str) -> &str {
    crate::releases::topic_config_synonyms()
        .iter()
        .find(|(_, broker)| *broker == key)
        .map_or(key, |(topic, _)| topic.as_str())
}

#[cfg(test)]
mod tests {
    use super::super::rule::Bound;
    use super::*;

    fn min(key: &str, feature: &str, level: i16, min: i64) -> ConfigValidator {
        ConfigValidator {
            key: key.into(),
            feature: feature.into(),
            level,
            rule: ValueRule {
                min: Some(Bound::Int(min)),
                ..ValueRule::default()
            },
        }
    }

    /// The seed's example, with a stricter rule at a later level and a looser one
    /// after that.
    fn seed() -> ConfigValidators {
        ConfigValidators::new(vec![
            min("log.segment.bytes", "metadata.version", 26, 3 * 1024 * 1024),
            min("log.segment.bytes", "metadata.version", 28, 8 * 1024 * 1024),
            min("segment.bytes", "metadata.version", 30, 1024 * 1024),
        ])
        .unwrap()
    }

    fn in_force_at(v: &ConfigValidators, level: i16) -> Option<i16> {
        let at = move |_: &str| level;
        let mut found = v.in_force("log.segment.bytes", &at).map(|v| v.level);
        let first = found.next();
        assert!(found.next().is_none(), "one validator per feature");
        first
    }

    #[test]
    fn the_validator_in_force_is_the_floor_entry() {
        let v = seed();
        for (level, expected) in [
            (0, None),
            (25, None),
            (26, Some(26)),
            (27, Some(26)),
            (28, Some(28)),
            (29, Some(28)),
            (30, Some(30)),
            (i16::MAX, Some(30)),
        ] {
            assert_eq!(in_force_at(&v, level), expected, "level {level}");
        }
    }

    #[test]
    fn values_are_checked_at_below_and_above_each_level() {
        let v = seed();
        let check = |value: &str, level: i16| {
            let at = move |_: &str| level;
            v.check("log.segment.bytes", value, &at)
        };
        assert!(check("1048576", 25).is_ok());
        let refused = check("1048576", 26).unwrap_err();
        assert!(refused.reason.contains("at least 3145728"), "{refused}");
        assert!(
            refused.reason.contains("metadata.version level 26"),
            "{refused}"
        );
        assert!(check("3145728", 26).is_ok());
        assert!(check("3145728", 28).is_err());
        assert!(check("8388608", 29).is_ok());
        assert!(check("1048576", 30).is_ok());
        assert!(check("1048575", 30).is_err());
    }

    #[test]
    fn a_validator_holds_for_the_topic_and_the_broker_spelling() {
        let v = seed();
        let at = |_: &str| 26;
        assert!(v.check("segment.bytes", "1024", &at).is_err());
        assert!(v.check("log.segment.bytes", "1024", &at).is_err());
        assert!(v.check("segment.ms", "1024", &at).is_ok());
        assert_eq!(topic_key("log.segment.bytes"), "segment.bytes");
        assert_eq!(broker_key("min.insync.replicas"), "min.insync.replicas");
    }

    #[test]
    fn check_at_moves_only_the_named_feature() {
        let v = ConfigValidators::new(vec![
            min("log.segment.bytes", "metadata.version", 26, 3_000_000),
            min("log.segment.bytes", "acme.version", 2, 5_000_000),
        ])
        .unwrap();
        let now = |f: &str| if f == "metadata.version" { 25 } else { 1 };
        assert!(v.check("log.segment.bytes", "4000000", &now).is_ok());
        assert!(v
            .check_at("log.segment.bytes", "4000000", "metadata.version", 26, &now)
            .is_ok());
        let e = v
            .check_at("log.segment.bytes", "4000000", "acme.version", 2, &now)
            .unwrap_err();
        assert!(e.reason.contains("acme.version level 2"), "{e}");
        assert_eq!(v.features(), ["acme.version", "metadata.version"]);
    }

    #[test]
    fn duplicate_registrations_are_refused() {
        let e = ConfigValidators::new(vec![
            min("log.segment.bytes", "metadata.version", 26, 1),
            min("segment.bytes", "metadata.version", 26, 2),
        ])
        .unwrap_err();
        assert_eq!(e.len(), 1);
        assert!(e[0].contains("level 26"));
    }
}
