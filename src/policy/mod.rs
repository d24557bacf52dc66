//! Guard rails on what clients may ask of the cluster: the create-topic policy
//! (KIP-108, `create_topic`) and the config validators keyed by feature level
//! (`validators`), with the audit that runs before a level changes and the offline
//! check of a broker's properties file.
//!
//! Pure and synchronous: values in, verdicts out. Knows nothing of the wire (the
//! handlers decode requests and encode answers) or of the upstream (the handlers
//! fetch the configs an audit needs).

pub mod create_topic;
pub mod properties;
pub mod rule;
pub mod validators;

pub use create_topic::{CreateTopicPolicy, DeclaredTopicPolicy, PolicyViolation, TopicDetails};
pub use validators::{ConfigResource, ConfigValidator, ConfigValidators, ValidatorViolation};

use arc_swap::ArcSwap;
use std::sync::Arc;

/// Every policy in force, as one value: a request reads one snapshot from start
/// to end, so that a change applies to the next request and never to half of one.
#[derive(Debug, Clone)]
pub struct Policies {
    pub create_topic: Arc<dyn CreateTopicPolicy>,
    pub validators: ConfigValidators,
    /// Principals whose CreateTopics and config changes are not checked (the
    /// upgrade audit still runs for them).
    pub exempt_principals: Vec<String>,
}

impl Default for Policies {
    fn default() -> Self {
        Policies {
            create_topic: Arc::new(DeclaredTopicPolicy::permissive()),
            validators: ConfigValidators::default(),
            exempt_principals: Vec::new(),
        }
    }
}

impl Policies {
    pub fn exempts(&self, principal: &str) -> bool {
        self.exempt_principals.iter().any(|p| p == principal)
    }
}

/// The swappable home of the policies in force.
///
/// A create-topic policy a library installs (`install_create_topic`) wins over
/// the declared `[policy.create_topic]` for as long as kshim runs: a reload of
/// the config (SIGHUP, the admin API) replaces the validators and exemptions,
/// never the installed policy.
#[derive(Debug, Default)]
pub struct PolicyCell {
    current: ArcSwap<Policies>,
    installed: std::sync::Mutex<Option<Arc<dyn CreateTopicPolicy>>>,
}

impl PolicyCell {
    pub fn new(policies: Policies) -> PolicyCell {
        PolicyCell {
            current: ArcSwap::from_pointee(policies),
            installed: std::sync::Mutex::new(None),
        }
    }

    pub fn load(&self) -> Arc<Policies> {
        self.current.load_full()
    }

    /// Puts `policies` in force for every request that starts from now on,
    /// with the installed create-topic policy, if any, in place of theirs.
    pub fn replace(&self, mut policies: Policies) {
        let installed = self.installed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = installed.as_ref() {
            policies.create_topic = Arc::clone(p);
        }
        self.current.store(Arc::new(policies));
    }

    /// Installs a library's own create-topic policy, in force from the next
    /// request and kept across every later `replace`.
    pub fn install_create_topic(&self, policy: Arc<dyn CreateTopicPolicy>) {
        let mut installed = self.installed.lock().unwrap_or_else(|e| e.into_inner());
        *installed = Some(Arc::clone(&policy));
        let mut next = Policies::clone(&self.current.load());
        next.create_topic = policy;
        self.current.store(Arc::new(next));
    }

    /// Whether a library installed its own create-topic policy.
    pub fn has_installed_policy(&self) -> bool {
        self.installed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }
}

/// One config value as the upstream reports it, for an audit.
#[derive(Debug, Clone)]
pub struct ReportedConfig {
    pub resource: ConfigResource,
    pub key: String,
    pub value: String,
    /// Where the value comes from, as DescribeConfigs names it (for the message).
    pub source: &'static str,
}

/// One value an audit found in breach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditFinding {
    pub resource: ConfigResource,
    pub source: &'static str,
    pub violation: ValidatorViolation,
}

impl std::fmt::Display for AuditFinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {}={} ({}) {}",
            self.resource,
            self.violation.key,
            self.violation.value,
            self.source,
            self.violation.reason
        )
    }
}

/// Every reported value that the validators of `feature` at level `target`
/// reject, the other features staying at `level_of`.
pub fn audit(
    validators: &ConfigValidators,
    feature: &str,
    target: i16,
    level_of: &dyn Fn(&str) -> i16,
    configs: &[ReportedConfig],
) -> Vec<AuditFinding> {
    configs
        .iter()
        .filter_map(|c| {
            validators
                .check_at(&c.key, &c.value, feature, target, level_of)
                .err()
                .map(|violation| AuditFinding {
                    resource: c.resource.clone(),
                    source: c.source,
                    violation,
                })
        })
        .collect()
}

/// The message that refuses a level change, listing every finding.
pub fn audit_refusal(feature: &str, target: i16, findings: &[AuditFinding]) -> String {
    let listed: Vec<String> = findings.iter().map(ToString::to_string).collect();
    format!(
        "{} existing config(s) violate the validators of {feature} at level {target}; fix them first: {}",
        findings.len(),
        listed.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::rule::{Bound, ValueRule};
    use super::*;

    /// A library's policy: refuses every topic.
    #[derive(Debug)]
    struct NoTopics;

    impl CreateTopicPolicy for NoTopics {
        fn validate(&self, _topic: &TopicDetails) -> Result<(), PolicyViolation> {
            Err(PolicyViolation("no topics here".into()))
        }
    }

    #[test]
    fn an_installed_policy_survives_a_reload_and_the_rest_follows_the_config() {
        let cell = PolicyCell::new(Policies::default());
        cell.install_create_topic(Arc::new(NoTopics));
        assert!(cell.load().create_topic.declared().is_none());
        cell.replace(Policies {
            exempt_principals: vec!["User:ops".into()],
            ..Policies::default()
        });
        let now = cell.load();
        assert!(
            now.create_topic.declared().is_none(),
            "the library's policy stays"
        );
        assert_eq!(now.exempt_principals, ["User:ops"]);
        assert!(cell.has_installed_policy());
    }

    #[test]
    fn the_seed_audit_names_the_topic_and_the_broker() {
        let validators = ConfigValidators::new(vec![ConfigValidator {
            key: "log.segment.bytes".into(),
            feature: "metadata.version".into(),
            level: 26,
            rule: ValueRule {
                min: Some(Bound::Int(3 * 1024 * 1024)),
                ..ValueRule::default()
            },
        }])
        .unwrap();
        let configs = vec![
            ReportedConfig {
                resource: ConfigResource::Topic("payments".into()),
                key: "segment.bytes".into(),
                value: "1048576".into(),
                source: "DYNAMIC_TOPIC_CONFIG",
            },
            ReportedConfig {
                resource: ConfigResource::Topic("orders".into()),
                key: "segment.bytes".into(),
                value: "4194304".into(),
                source: "DYNAMIC_TOPIC_CONFIG",
            },
            ReportedConfig {
                resource: ConfigResource::Broker("3".into()),
                key: "log.segment.bytes".into(),
                value: "2097152".into(),
                source: "STATIC_BROKER_CONFIG",
            },
        ];
        let at_25 = |_: &str| 25;
        let findings = audit(&validators, "metadata.version", 26, &at_25, &configs);
        let message = audit_refusal("metadata.version", 26, &findings);
        assert_eq!(findings.len(), 2, "{message}");
        assert!(
            message.contains("topic payments: segment.bytes=1048576"),
            "{message}"
        );
        assert!(
            message.contains("broker 3: log.segment.bytes=2097152 (STATIC_BROKER_CONFIG)"),
            "{message}"
        );
        assert!(!message.contains("orders"), "{message}");
        assert!(audit(&validators, "metadata.version", 25, &at_25, &configs).is_empty());
    }
}
