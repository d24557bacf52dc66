//! The decision step of UpdateFeatures: an authorized request and what kshim
//! knows at this moment go in, a plan comes out. Pure: no sockets, no locks, no
//! clock. `execute` runs the plan.
//!
//! The order of the checks:
//! 1. in front of a cluster, every feature must have one owner: a request for
//!    the upstream's features goes there whole, one that mixes owners is
//!    refused whole (all-or-nothing cannot span two controllers);
//! 2. kshim's own rules (`features::plan_update`, in the order of Kafka's controller);
//! 3. runtime protection: no upgrade of a feature whose finalized level some
//!    supporter already cannot run;
//! 4. the upgrade audit, when a feature with validators changes level and there
//!    is a cluster whose configs can be read.

use crate::features::{
    invalid_update, plan_update, Conflict, FeatureUpdate, FinalizedFeatures, Owner, Reason,
    Supporter, UpdateRejection, UpdateRules,
};
use crate::policy::ConfigValidators;
use std::collections::BTreeMap;

/// An UpdateFeatures request, as the rules read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub updates: Vec<FeatureUpdate>,
    pub validate_only: bool,
}

/// What kshim knows when it decides: read in the controller's section, so that
/// nothing but the upstream's own state changes before the plan is carried out.
pub struct Facts<'a> {
    pub finalized: &'a FinalizedFeatures,
    pub supporters: &'a [Supporter],
    pub rules: &'a UpdateRules,
    pub conflicts: &'a [Conflict],
    pub validators: &'a ConfigValidators,
    pub owner: &'a (dyn Fn(&str) -> Owner + Sync),
    /// Whether an upstream cluster is behind kshim (its configs can be audited).
    pub in_front: bool,
}

/// What to do with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Answer now: a refusal, or a success that changes nothing.
    Answer(Result<(), UpdateRejection>),
    /// kshim's own features: audit first if need be, then store `changes`
    /// unless the request only validates.
    Apply {
        changes: BTreeMap<String, i16>,
        audit: Option<Audit>,
        commit: bool,
    },
    /// The upstream's features: audit first if need be, then send the request
    /// on; the upstream's answer stands.
    Forward { audit: Option<Audit> },
}

/// An upgrade audit to run before a plan goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Audit {
    /// Every level as it will be if the request applies.
    pub target: FinalizedFeatures,
    /// The features with validators whose level changes, with their new level.
    pub changing: Vec<(String, i16)>,
    /// The config keys those validators constrain (broker spelling).
    pub keys: Vec<String>,
}

pub fn decide(request: &Request, facts: &Facts<'_>) -> Plan {
    if facts.in_front {
        let (theirs, ours): (Vec<&str>, Vec<&str>) = request
            .updates
            .iter()
            .map(|u| u.name.as_str())
            .partition(|name| (facts.owner)(name) == Owner::Upstream);
        if !theirs.is_empty() && !ours.is_empty() {
            return Plan::Answer(Err(UpdateRejection::new(
                Reason::InvalidRequest,
                format!(
                    "The request mixes features owned by the upstream cluster ({}) with features owned by kshim ({}); \
                     nothing was applied. Send them in separate requests.",
                    theirs.join(", "),
                    ours.join(", ")
                ),
            )));
        }
        if !theirs.is_empty() {
            return Plan::Forward {
                audit: audit_for(request, facts),
            };
        }
    }
    let planned = match plan_update(
        facts.finalized,
        facts.supporters,
        facts.rules,
        &request.updates,
    ) {
        Ok(p) => p,
        Err(rejection) => return Plan::Answer(Err(rejection)),
    };
    // Anything but a lowering (a repeat of the current level included) waits
    // until the conflict is resolved.
    for u in &request.updates {
        let (name, level) = (u.name.as_str(), u.level);
        if level == 0 || level < facts.finalized.level(name) {
            continue;
        }
        if let Some(conflict) = facts.conflicts.iter().find(|c| c.feature == name) {
            let mut refusal = invalid_update(
                name,
                level,
                &format!("{conflict}; resolve that before upgrading {name}."),
            );
            refusal.reason = Reason::Incompatible;
            return Plan::Answer(Err(refusal));
        }
    }
    let audit = audit_for(request, facts);
    if planned.changes.is_empty() && audit.is_none() {
        return Plan::Answer(Ok(()));
    }
    Plan::Apply {
        changes: planned.changes,
        audit,
        commit: !request.validate_only,
    }
}

/// The audit a request needs: only in front of a cluster, and only when a
/// feature with validators changes level.
fn audit_for(request: &Request, facts: &Facts<'_>) -> Option<Audit> {
    if !facts.in_front || facts.validators.is_empty() {
        return None;
    }
    let changing: Vec<(String, i16)> = request
        .updates
        .iter()
        .filter(|u| {
            u.level >= 0
                && u.level != facts.finalized.level(&u.name)
                && !facts.validators.keys_of(&u.name).is_empty()
        })
        .map(|u| (u.name.clone(), u.level))
        .collect();
    if changing.is_empty() {
        return None;
    }
    let mut keys: Vec<String> = changing
        .iter()
        .flat_map(|(name, _)| facts.validators.keys_of(name))
        .map(str::to_owned)
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let requested: BTreeMap<String, i16> = request
        .updates
        .iter()
        .map(|u| (u.name.clone(), u.level.max(0)))
        .collect();
    Some(Audit {
        target: facts.finalized.with_levels(&requested),
        changing,
        keys,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::kafka::KafkaRelease;
    use crate::features::{Problem, SupportedRange, UpgradeType};
    use crate::policy::rule::{Bound, ValueRule};
    use crate::policy::ConfigValidator;

    fn at_least(key: &str, level: i16, min: i64) -> ConfigValidator {
        ConfigValidator {
            key: key.into(),
            feature: "acme.audit".into(),
            level,
            rule: ValueRule {
                min: Some(Bound::Int(min)),
                ..ValueRule::default()
            },
        }
    }

    struct World {
        finalized: FinalizedFeatures,
        supporters: Vec<Supporter>,
        rules: UpdateRules,
        conflicts: Vec<Conflict>,
        validators: ConfigValidators,
        in_front: bool,
    }

    impl World {
        fn new() -> World {
            let kafka = KafkaRelease::named("4.1").unwrap();
            let mut features = kafka.supported_features();
            features.insert("acme.audit".into(), SupportedRange::new(0, 3));
            features.insert("acme.plain".into(), SupportedRange::new(0, 3));
            World {
                finalized: FinalizedFeatures {
                    epoch: 7,
                    levels: [
                        ("metadata.version".to_owned(), 27),
                        ("acme.audit".to_owned(), 1),
                        ("acme.plain".to_owned(), 1),
                    ]
                    .into(),
                },
                supporters: vec![Supporter {
                    label: "Local controller 1".into(),
                    features,
                    only_listed: false,
                }],
                rules: UpdateRules {
                    release: kafka,
                    dependencies: kafka.dependencies(),
                },
                conflicts: Vec::new(),
                validators: ConfigValidators::new(vec![
                    at_least("log.segment.bytes", 2, 2097152),
                    at_least("min.insync.replicas", 3, 2),
                ])
                .unwrap(),
                in_front: true,
            }
        }

        fn decide(&self, updates: &[(&str, i16, UpgradeType)], validate_only: bool) -> Plan {
            let owner = |name: &str| {
                if name.starts_with("acme.") {
                    Owner::Kshim
                } else {
                    Owner::Upstream
                }
            };
            let request = Request {
                updates: updates
                    .iter()
                    .map(|&(name, level, upgrade_type)| FeatureUpdate {
                        name: name.into(),
                        level,
                        upgrade_type,
                    })
                    .collect(),
                validate_only,
            };
            decide(
                &request,
                &Facts {
                    finalized: &self.finalized,
                    supporters: &self.supporters,
                    rules: &self.rules,
                    conflicts: &self.conflicts,
                    validators: &self.validators,
                    owner: &owner,
                    in_front: self.in_front,
                },
            )
        }
    }

    fn refusal(plan: Plan) -> UpdateRejection {
        match plan {
            Plan::Answer(Err(r)) => r,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    const UP: UpgradeType = UpgradeType::Upgrade;
    const DOWN: UpgradeType = UpgradeType::SafeDowngrade;

    #[test]
    fn the_upstreams_features_are_forwarded_and_audited_only_with_validators() {
        let w = World::new();
        assert_eq!(
            w.decide(&[("group.version", 1, UP)], false),
            Plan::Forward { audit: None }
        );
        assert_eq!(
            w.decide(&[("metadata.version", 26, DOWN)], true),
            Plan::Forward { audit: None }
        );
    }

    #[test]
    fn mixed_owners_are_refused_whole() {
        let w = World::new();
        let r = refusal(w.decide(&[("group.version", 1, UP), ("acme.plain", 2, UP)], false));
        assert_eq!(r.reason, Reason::InvalidRequest);
        assert!(r.message.contains("(group.version)") && r.message.contains("(acme.plain)"));
    }

    #[test]
    fn kshims_features_are_applied_or_validated() {
        let w = World::new();
        let changes: BTreeMap<String, i16> = [("acme.plain".to_owned(), 2)].into();
        assert_eq!(
            w.decide(&[("acme.plain", 2, UP)], false),
            Plan::Apply {
                changes: changes.clone(),
                audit: None,
                commit: true
            }
        );
        assert_eq!(
            w.decide(&[("acme.plain", 2, UP)], true),
            Plan::Apply {
                changes,
                audit: None,
                commit: false
            }
        );
        assert_eq!(
            w.decide(&[("acme.plain", 1, UP)], false),
            Plan::Answer(Ok(()))
        );
    }

    #[test]
    fn the_rules_refuse_before_anything_is_audited() {
        let w = World::new();
        let r = refusal(w.decide(&[("acme.audit", 9, UP)], false));
        assert_eq!(r.reason, Reason::InvalidVersion);
        assert!(
            r.message.contains("only supports versions 0-3"),
            "{}",
            r.message
        );
        let r = refusal(w.decide(&[("acme.audit", 0, UP)], false));
        assert!(r.message.contains("without setting the upgrade type"));
    }

    #[test]
    fn a_level_change_with_validators_is_audited_against_the_target() {
        let w = World::new();
        let Plan::Apply {
            audit: Some(audit),
            commit: true,
            ..
        } = w.decide(&[("acme.audit", 3, UP), ("acme.plain", 0, DOWN)], false)
        else {
            panic!("expected an audited apply");
        };
        assert_eq!(audit.changing, [("acme.audit".to_owned(), 3)]);
        assert_eq!(audit.keys, ["log.segment.bytes", "min.insync.replicas"]);
        assert_eq!(audit.target.level("acme.audit"), 3);
        assert_eq!(audit.target.level("acme.plain"), 0);
        assert_eq!(audit.target.level("metadata.version"), 27);
        // A lowering is audited too (a lower level may tighten a rule).
        assert!(matches!(
            w.decide(&[("acme.audit", 0, DOWN)], true),
            Plan::Apply {
                audit: Some(_),
                commit: false,
                ..
            }
        ));
        // Standing alone there are no configs to audit.
        let mut alone = World::new();
        alone.in_front = false;
        assert!(matches!(
            alone.decide(&[("acme.audit", 2, UP)], false),
            Plan::Apply { audit: None, .. }
        ));
        // No-op: nothing to audit, nothing to do.
        assert_eq!(
            w.decide(&[("acme.audit", 1, UP)], false),
            Plan::Answer(Ok(()))
        );
    }

    #[test]
    fn a_conflict_refuses_upgrades_of_its_feature_only() {
        let mut w = World::new();
        w.conflicts.push(Conflict {
            feature: "acme.plain".into(),
            level: 1,
            supporter: "Broker 2".into(),
            problem: Problem::Range(Some(SupportedRange::new(0, 0))),
        });
        let r = refusal(w.decide(&[("acme.plain", 2, UP)], false));
        assert_eq!(r.reason, Reason::Incompatible);
        assert_eq!(r.feature.as_deref(), Some("acme.plain"));
        assert!(
            r.message.contains(
                "Broker 2 supports acme.plain only at 0, which excludes its finalized level 1"
            ),
            "{}",
            r.message
        );
        // A downgrade may resolve it; other features are not held back.
        assert!(matches!(
            w.decide(&[("acme.plain", 0, DOWN)], false),
            Plan::Apply { .. }
        ));
        // Repeating the current level is not a way around it.
        assert_eq!(
            refusal(w.decide(&[("acme.plain", 1, UP)], false)).reason,
            Reason::Incompatible
        );
        assert!(matches!(
            w.decide(&[("acme.audit", 1, UP)], false),
            Plan::Answer(Ok(()))
        ));
    }
}
