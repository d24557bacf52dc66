//! The create-topic policy of KIP-108: what a CreateTopics request may ask for.
//! `CreateTopicPolicy` is the interface a library user implements;
//! `DeclaredTopicPolicy` is the one built from `[policy.create_topic]`.

use super::rule::{ValueRule, WholeMatch};
use std::collections::BTreeMap;

/// One topic as a CreateTopics request asks for it, after the protocol's own
/// checks.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicDetails {
    pub name: String,
    /// The partition count the topic will get: the requested count, the number of
    /// assigned partitions, or the cluster's `num.partitions`. `None` when the
    /// request leaves it to a cluster default that kshim does not know.
    pub num_partitions: Option<i32>,
    /// Likewise for the replication factor (the replica count of the assignments,
    /// or `default.replication.factor`).
    pub replication_factor: Option<i16>,
    /// Manual replica assignments: partition → broker ids. Empty when none.
    pub assignments: BTreeMap<i32, Vec<i32>>,
    /// Topic configs; a `None` value is a config the request sends as null.
    pub configs: BTreeMap<String, Option<String>>,
}

/// Why a topic may not be created: the message goes to the client with
/// POLICY_VIOLATION.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyViolation(pub String);

impl std::fmt::Display for PolicyViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Decides whether a topic may be created (the KIP-108 interface). Called once
/// per topic, after the protocol's own checks, on the connection's task: it must
/// not block.
pub trait CreateTopicPolicy: Send + Sync + std::fmt::Debug {
    fn validate(&self, topic: &TopicDetails) -> Result<(), PolicyViolation>;

    /// Whether an existing topic may get `key` = `value` (AlterConfigs,
    /// IncrementalAlterConfigs), so that a policy cannot be dodged by creating a
    /// topic and altering it afterwards. Allows everything unless overridden.
    fn validate_config(&self, _key: &str, _value: &str) -> Result<(), PolicyViolation> {
        Ok(())
    }

    /// Whether an existing topic may lose its config `key`. Allows everything
    /// unless overridden.
    fn validate_removal(&self, _key: &str) -> Result<(), PolicyViolation> {
        Ok(())
    }

    /// Whether an existing topic's configs may be replaced by exactly `configs`
    /// (the legacy AlterConfigs, which drops every key it does not name). Allows
    /// everything unless overridden.
    fn validate_replacement(
        &self,
        _configs: &BTreeMap<String, String>,
    ) -> Result<(), PolicyViolation> {
        Ok(())
    }

    /// Whether this policy allows everything, so that requests need not be
    /// decoded for it. `false` unless overridden.
    fn is_permissive(&self) -> bool {
        false
    }

    /// The declared policy behind this one, when it is one: a reload compares
    /// declared policies by value. A library's own policy has none.
    fn declared(&self) -> Option<&DeclaredTopicPolicy> {
        None
    }
}

/// A config rule of the declared policy, kept with the key it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicConfigRule {
    pub key: String,
    pub rule: ValueRule,
}

/// `[policy.create_topic]`. Every limit that is set applies; the first one a topic
/// breaks is reported, in the order of the fields below.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeclaredTopicPolicy {
    pub min_partitions: Option<i32>,
    pub max_partitions: Option<i32>,
    pub min_replication_factor: Option<i16>,
    pub max_replication_factor: Option<i16>,
    /// `false`: requests with manual replica assignments are refused.
    pub allow_replica_assignment: bool,
    /// A name must match one of these as a whole (when there are any)...
    pub allowed_names: Vec<WholeMatch>,
    /// ...and none of these.
    pub denied_names: Vec<WholeMatch>,
    pub required_configs: Vec<String>,
    pub forbidden_configs: Vec<String>,
    pub configs: Vec<TopicConfigRule>,
}

impl DeclaredTopicPolicy {
    /// A policy that allows everything.
    pub fn permissive() -> DeclaredTopicPolicy {
        DeclaredTopicPolicy {
            allow_replica_assignment: true,
            ..DeclaredTopicPolicy::default()
        }
    }

    /// The rule for config `key`, if the policy has one.
    pub fn config_rule(&self, key: &str) -> Option<&TopicConfigRule> {
        self.configs.iter().find(|r| r.key == key)
    }

    /// The forbidden configs and the per-config rules.
    fn check_config(&self, key: &str, value: &str) -> Result<(), PolicyViolation> {
        if self.forbidden_configs.iter().any(|f| f == key) {
            return Err(violation(format!(
                "config {key} may not be set (forbidden_configs)"
            )));
        }
        if let Some(r) = self.config_rule(key) {
            if let Some(why) = r.rule.check(value) {
                return Err(violation(format!(
                    "{key}={value} {why} (configs.{key}: {})",
                    r.rule
                )));
            }
        }
        Ok(())
    }

    fn check_removal(&self, key: &str) -> Result<(), PolicyViolation> {
        if self.required_configs.iter().any(|r| r == key) {
            return Err(violation(format!(
                "config {key} is required and may not be removed (required_configs)"
            )));
        }
        Ok(())
    }

    fn check_counts(&self, topic: &TopicDetails) -> Result<(), PolicyViolation> {
        let unknown = |what: &str, default: &str| {
            violation(format!(
                "the {what} is left to the cluster default {default}, which kshim does not know yet; give it explicitly"
            ))
        };
        if self.min_partitions.is_some() || self.max_partitions.is_some() {
            let n = topic
                .num_partitions
                .ok_or_else(|| unknown("partition count", "num.partitions"))?;
            if let Some(min) = self.min_partitions.filter(|&m| n < m) {
                return Err(violation(format!(
                    "{n} partitions is below the minimum of {min} (min_partitions)"
                )));
            }
            if let Some(max) = self.max_partitions.filter(|&m| n > m) {
                return Err(violation(format!(
                    "{n} partitions is above the maximum of {max} (max_partitions)"
                )));
            }
        }
        if self.min_replication_factor.is_some() || self.max_replication_factor.is_some() {
            let rf = topic
                .replication_factor
                .ok_or_else(|| unknown("replication factor", "default.replication.factor"))?;
            if let Some(min) = self.min_replication_factor.filter(|&m| rf < m) {
                return Err(violation(format!(
                    "replication factor {rf} is below the minimum of {min} (min_replication_factor)"
                )));
            }
            if let Some(max) = self.max_replication_factor.filter(|&m| rf > m) {
                return Err(violation(format!(
                    "replication factor {rf} is above the maximum of {max} (max_replication_factor)"
                )));
            }
        }
        Ok(())
    }
}

fn violation(reason: String) -> PolicyViolation {
    PolicyViolation(reason)
}

impl CreateTopicPolicy for DeclaredTopicPolicy {
    fn declared(&self) -> Option<&DeclaredTopicPolicy> {
        Some(self)
    }

    fn validate(&self, topic: &TopicDetails) -> Result<(), PolicyViolation> {
        let name = &topic.name;
        if !self.allowed_names.is_empty() && !self.allowed_names.iter().any(|p| p.matches(name)) {
            let patterns: Vec<&str> = self
                .allowed_names
                .iter()
                .map(|p| p.source.as_str())
                .collect();
            return Err(violation(format!(
                "the name matches none of the allowed patterns [{}] (allowed_names)",
                patterns.join(", ")
            )));
        }
        if let Some(p) = self.denied_names.iter().find(|p| p.matches(name)) {
            return Err(violation(format!(
                "the name matches the denied pattern {} (denied_names)",
                p.source
            )));
        }
        self.check_counts(topic)?;
        if !self.allow_replica_assignment && !topic.assignments.is_empty() {
            return Err(violation(
                "manual replica assignments are not allowed (allow_replica_assignment = false)"
                    .into(),
            ));
        }
        for key in &self.required_configs {
            if !matches!(topic.configs.get(key), Some(Some(_))) {
                return Err(violation(format!(
                    "config {key} is required (required_configs)"
                )));
            }
        }
        for (key, value) in &topic.configs {
            if let Some(value) = value {
                self.check_config(key, value)?;
            } else if self.forbidden_configs.iter().any(|f| f == key) {
                return Err(violation(format!(
                    "config {key} may not be set (forbidden_configs)"
                )));
            }
        }
        Ok(())
    }

    fn validate_config(&self, key: &str, value: &str) -> Result<(), PolicyViolation> {
        self.check_config(key, value)
    }

    fn validate_removal(&self, key: &str) -> Result<(), PolicyViolation> {
        self.check_removal(key)
    }

    fn validate_replacement(
        &self,
        configs: &BTreeMap<String, String>,
    ) -> Result<(), PolicyViolation> {
        for key in &self.required_configs {
            if !configs.contains_key(key) {
                return Err(violation(format!(
                    "config {key} is required, and AlterConfigs drops every config it does not name (required_configs)"
                )));
            }
        }
        for (key, value) in configs {
            self.check_config(key, value)?;
        }
        Ok(())
    }

    fn is_permissive(&self) -> bool {
        self.min_partitions.is_none()
            && self.max_partitions.is_none()
            && self.min_replication_factor.is_none()
            && self.max_replication_factor.is_none()
            && self.allow_replica_assignment
            && self.allowed_names.is_empty()
            && self.denied_names.is_empty()
            && self.required_configs.is_empty()
            && self.forbidden_configs.is_empty()
            && self.configs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::super::rule::Bound;
    use super::*;

    fn topic(name: &str, partitions: Option<i32>, rf: Option<i16>) -> TopicDetails {
        TopicDetails {
            name: name.into(),
            num_partitions: partitions,
            replication_factor: rf,
            assignments: BTreeMap::new(),
            configs: BTreeMap::new(),
        }
    }

    fn policy() -> DeclaredTopicPolicy {
        DeclaredTopicPolicy {
            min_partitions: Some(1),
            max_partitions: Some(10),
            min_replication_factor: Some(1),
            max_replication_factor: Some(3),
            allow_replica_assignment: false,
            allowed_names: vec![WholeMatch::new("[a-z][a-z0-9._-]*").unwrap()],
            denied_names: vec![WholeMatch::new("tmp\\..*").unwrap()],
            required_configs: vec!["retention.ms".into()],
            forbidden_configs: vec!["unclean.leader.election.enable".into()],
            configs: vec![TopicConfigRule {
                key: "retention.ms".into(),
                rule: ValueRule {
                    min: Some(Bound::Int(3_600_000)),
                    ..ValueRule::default()
                },
            }],
        }
    }

    fn with(mut t: TopicDetails, k: &str, v: Option<&str>) -> TopicDetails {
        t.configs.insert(k.into(), v.map(str::to_owned));
        t
    }

    fn refused(t: &TopicDetails) -> String {
        policy().validate(t).unwrap_err().0
    }

    #[test]
    fn each_limit_is_named_in_its_refusal() {
        let ok = with(
            topic("orders", Some(3), Some(1)),
            "retention.ms",
            Some("86400000"),
        );
        assert_eq!(policy().validate(&ok), Ok(()));
        assert!(refused(&with(
            topic("orders", Some(11), Some(1)),
            "retention.ms",
            Some("86400000")
        ))
        .contains("max_partitions"));
        assert!(refused(&with(
            topic("orders", Some(0), Some(1)),
            "retention.ms",
            Some("86400000")
        ))
        .contains("min_partitions"));
        assert!(refused(&with(
            topic("orders", Some(1), Some(4)),
            "retention.ms",
            Some("86400000")
        ))
        .contains("max_replication_factor"));
        assert!(refused(&with(
            topic("Orders", Some(1), Some(1)),
            "retention.ms",
            Some("86400000")
        ))
        .contains("allowed_names"));
        assert!(refused(&with(
            topic("tmp.x", Some(1), Some(1)),
            "retention.ms",
            Some("86400000")
        ))
        .contains("denied_names"));
        assert!(refused(&topic("orders", Some(1), Some(1))).contains("required_configs"));
        assert!(refused(&with(
            topic("orders", Some(1), Some(1)),
            "retention.ms",
            None
        ))
        .contains("required_configs"));
        assert!(refused(&with(
            topic("orders", Some(1), Some(1)),
            "retention.ms",
            Some("1000")
        ))
        .contains("configs.retention.ms"));
        let forbidden = with(ok.clone(), "unclean.leader.election.enable", Some("true"));
        assert!(refused(&forbidden).contains("forbidden_configs"));
        let mut assigned = ok.clone();
        assigned.assignments.insert(0, vec![1]);
        assert!(refused(&assigned).contains("allow_replica_assignment"));
    }

    #[test]
    fn an_unknown_cluster_default_is_refused_only_when_a_limit_needs_it() {
        let t = with(
            topic("orders", None, None),
            "retention.ms",
            Some("86400000"),
        );
        assert!(refused(&t).contains("num.partitions"));
        assert_eq!(DeclaredTopicPolicy::permissive().validate(&t), Ok(()));
    }
}
