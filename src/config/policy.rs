//! `[policy]`: the create-topic policy and the feature-level config validators.
//! Every problem is reported, as for the rest of the config.

use super::ConfigError;
use super::{walker, Walker};
use crate::policy::create_topic::TopicConfigRule;
use crate::policy::rule::{Bound, ValueRule, WholeMatch};
use crate::policy::{ConfigValidator, ConfigValidators, DeclaredTopicPolicy, Policies};
use std::sync::Arc;

pub(super) fn parse_policy(t: &toml::Table, errors: &mut Vec<ConfigError>) -> Policies {
    let mut w = walker("policy", t, errors);
    let create_topic = w.table("create_topic");
    let validators = w.get("validators");
    let exempt = w.strings("exempt_principals");
    w.finish();
    let mut policies = Policies::default();
    for p in &exempt {
        if !p.contains(':') {
            errors.push(ConfigError::new(
                "policy.exempt_principals",
                format!("\"{p}\" is not TYPE:NAME (for example User:admin)"),
            ));
        }
    }
    policies.exempt_principals = exempt;
    if let Some(t) = create_topic {
        policies.create_topic = Arc::new(parse_create_topic(t, errors));
    }
    if let Some(v) = validators {
        policies.validators = parse_validators(v, errors);
    }
    policies
}

fn parse_create_topic(t: &toml::Table, errors: &mut Vec<ConfigError>) -> DeclaredTopicPolicy {
    let mut w = walker("policy.create_topic", t, errors);
    let mut p = DeclaredTopicPolicy::permissive();
    p.min_partitions = w.int("min_partitions", "1 to 2147483647");
    p.max_partitions = w.int("max_partitions", "1 to 2147483647");
    p.min_replication_factor = w.int("min_replication_factor", "1 to 32767");
    p.max_replication_factor = w.int("max_replication_factor", "1 to 32767");
    if let Some(b) = w.bool("allow_replica_assignment") {
        p.allow_replica_assignment = b;
    }
    p.allowed_names = patterns(&mut w, "allowed_names");
    p.denied_names = patterns(&mut w, "denied_names");
    p.required_configs = w.strings("required_configs");
    p.forbidden_configs = w.strings("forbidden_configs");
    let configs = w.table("configs");
    w.finish();
    for (what, min, max) in [
        ("partitions", p.min_partitions, p.max_partitions),
        (
            "replication_factor",
            p.min_replication_factor.map(i32::from),
            p.max_replication_factor.map(i32::from),
        ),
    ] {
        if let Some(m) = min.or(max).filter(|&m| m < 1) {
            errors.push(ConfigError::new(
                "policy.create_topic",
                format!("a {what} limit of {m} is below 1"),
            ));
        }
        if let (Some(a), Some(b)) = (min, max) {
            if a > b {
                errors.push(ConfigError::new(
                    "policy.create_topic",
                    format!("min_{what} {a} is above max_{what} {b}"),
                ));
            }
        }
    }
    for key in &p.required_configs {
        if p.forbidden_configs.contains(key) {
            errors.push(ConfigError::new(
                "policy.create_topic",
                format!("{key} is both required and forbidden"),
            ));
        }
    }
    if let Some(configs) = configs {
        for (key, v) in configs {
            let path = format!("policy.create_topic.configs.\"{key}\"");
            let Some(table) = v.as_table() else {
                errors.push(ConfigError::new(
                    format!("{path}"),
                    format!("expected a table such as {{ min = 1, max = 10 }}"),
                ));
                continue;
            };
            let mut w = walker(&path, table, errors);
            let rule = value_rule(&mut w);
            w.finish();
            if let Some(rule) = rule {
                p.configs.push(TopicConfigRule {
                    key: key.clone(),
                    rule,
                });
            }
        }
    }
    p
}

fn parse_validators(v: &toml::Value, errors: &mut Vec<ConfigError>) -> ConfigValidators {
    let Some(entries) = v.as_array() else {
        errors.push(ConfigError::new(
            "policy.validators",
            "expected an array of tables ([[policy.validators]] entries)",
        ));
        return ConfigValidators::default();
    };
    let mut validators = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let path = format!("policy.validators[{i}]");
        let Some(table) = entry.as_table() else {
            errors.push(ConfigError::new(
                format!("{path}"),
                format!("expected a table"),
            ));
            continue;
        };
        let mut w = walker(&path, table, errors);
        let key = w.string("key");
        let feature = w.string("feature");
        let level = w.int::<i16>("level", "0 to 32767");
        let rule = value_rule(&mut w);
        for (name, given) in [("key", key.is_some()), ("feature", feature.is_some())] {
            if !given && !table.contains_key(name) {
                w.errors.push(ConfigError::new(
                    format!("{path}.{name}"),
                    format!("missing"),
                ));
            }
        }
        if level.is_none() && !table.contains_key("level") {
            w.errors.push(ConfigError::new(
                format!("{path}.level"),
                format!("missing (the feature level it takes effect from)"),
            ));
        }
        if let Some(l) = level.filter(|&l| l < 0) {
            w.errors.push(ConfigError::new(
                format!("{path}.level"),
                format!("{l} must not be negative"),
            ));
        }
        w.finish();
        if let (Some(key), Some(feature), Some(level), Some(rule)) = (key, feature, level, rule) {
            if key.is_empty() || feature.is_empty() {
                errors.push(ConfigError::new(
                    format!("{path}"),
                    format!("key and feature must not be empty"),
                ));
                continue;
            }
            validators.push(ConfigValidator {
                key,
                feature,
                level,
                rule,
            });
        }
    }
    match ConfigValidators::new(validators) {
        Ok(v) => v,
        Err(e) => {
            errors.extend(
                e.into_iter()
                    .map(|m| ConfigError::new("policy.validators", m)),
            );
            ConfigValidators::default()
        }
    }
}

/// `min`, `max`, `allowed` and `pattern` of one table; `None` after an error.
fn value_rule(w: &mut Walker<'_, '_>) -> Option<ValueRule> {
    let before = w.errors.len();
    let mut rule = ValueRule {
        min: bound(w, "min"),
        max: bound(w, "max"),
        ..ValueRule::default()
    };
    if w.get("allowed").is_some() {
        let list = w.strings("allowed");
        if list.is_empty() {
            let k = w.key("allowed");
            w.errors.push(ConfigError::new(
                format!("{k}"),
                format!("give at least one value"),
            ));
        }
        rule.allowed = Some(list);
    }
    if let Some(p) = w.string("pattern") {
        match WholeMatch::new(&p) {
            Ok(m) => rule.pattern = Some(m),
            Err(e) => {
                let k = w.key("pattern");
                w.errors.push(ConfigError::new(
                    format!("{k}"),
                    format!("invalid pattern: {e}"),
                ));
            }
        }
    }
    if let (Some(min), Some(max)) = (rule.min, rule.max) {
        let above = match (min, max) {
            (Bound::Int(a), Bound::Int(b)) => a > b,
            (a, b) => as_f64(a) > as_f64(b),
        };
        if above {
            let k = w.key("min");
            w.errors.push(ConfigError::new(
                format!("{k}"),
                format!("{min} is above max {max}"),
            ));
        }
    }
    if rule.is_empty() && w.errors.len() == before {
        let k = w.key("");
        w.errors.push(ConfigError::new(
            k.trim_end_matches('.'),
            "give at least one of min, max, allowed, pattern",
        ));
    }
    (w.errors.len() == before).then_some(rule)
}

fn as_f64(b: Bound) -> f64 {
    match b {
        Bound::Int(i) => i as f64,
        Bound::Float(f) => f,
    }
}

fn bound(w: &mut Walker<'_, '_>, k: &'static str) -> Option<Bound> {
    let full = w.key(k);
    match w.get(k)? {
        toml::Value::Integer(i) => Some(Bound::Int(*i)),
        toml::Value::Float(f) if f.is_finite() => Some(Bound::Float(*f)),
        other => {
            w.errors.push(ConfigError::new(
                format!("{full}"),
                format!("expected a number, found {}", other.type_str()),
            ));
            None
        }
    }
}

fn patterns(w: &mut Walker<'_, '_>, k: &'static str) -> Vec<WholeMatch> {
    let full = w.key(k);
    w.strings(k)
        .iter()
        .filter_map(|p| match WholeMatch::new(p) {
            Ok(m) => Some(m),
            Err(e) => {
                w.errors.push(ConfigError::new(
                    format!("{full}"),
                    format!("invalid pattern \"{p}\": {e}"),
                ));
                None
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn every_malformed_policy_entry_is_reported_at_once() {
        let errors = Config::from_toml(
            r#"
            [policy.create_topic]
            max_partitions = "ten"
            min_replication_factor = 3
            max_replication_factor = 2
            denied_names = ["(unclosed"]
            colour = "blue"
            [policy.create_topic.configs."retention.ms"]
            min = "an hour"
            [[policy.validators]]
            key = "log.segment.bytes"
            level = 26
            min = 10
            [[policy.validators]]
            key = "log.segment.bytes"
            feature = "metadata.version"
            level = 27
            [[policy.validators]]
            key = "x"
            feature = "metadata.version"
            level = 1
            min = 5
            max = 1
            "#,
        )
        .unwrap_err()
        .messages();
        let all = errors.join("\n");
        for expected in [
            "policy.create_topic.max_partitions: expected an integer",
            "min_replication_factor 3 is above max_replication_factor 2",
            "policy.create_topic.denied_names: invalid pattern",
            "policy.create_topic.colour: unknown key",
            "configs.\"retention.ms\".min: expected a number",
            "policy.validators[0].feature: missing",
            "policy.validators[1]: give at least one of min, max, allowed, pattern",
            "policy.validators[2].min: 5 is above max 1",
        ] {
            assert!(all.contains(expected), "missing {expected:?} in:\n{all}");
        }
    }

    #[test]
    fn the_docker_example_config_parses() {
        let text = include_str!("../../docker/kshim.toml");
        let c = Config::from_toml(text).unwrap();
        assert!(!c.policies.create_topic.is_permissive());
        assert!(c.admin.is_some_and(|a| a.token.is_some()));
        assert_eq!(
            c.policies.validators.keys_of("metadata.version"),
            ["log.segment.bytes"]
        );
    }

    #[test]
    fn a_full_policy_parses() {
        let c = Config::from_toml(
            r#"
            [policy.create_topic]
            min_partitions = 1
            max_partitions = 10
            allow_replica_assignment = false
            allowed_names = ["[a-z][a-z0-9._-]*"]
            required_configs = ["retention.ms"]
            [policy.create_topic.configs."cleanup.policy"]
            allowed = ["delete", "compact"]
            [[policy.validators]]
            key = "log.segment.bytes"
            feature = "metadata.version"
            level = 26
            min = 3145728
            "#,
        )
        .unwrap();
        assert_eq!(
            c.policies.validators.keys_of("metadata.version"),
            ["log.segment.bytes"]
        );
    }
}
