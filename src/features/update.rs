//! Whether an UpdateFeatures request may be applied, and what it changes.
//!
//! The rules and their order follow the Kafka 4.1 KRaft controller
//! (FeatureControlManager): upgrade type, level sign, support by every supporter,
//! direction against the upgrade type, metadata.version's own limits, then
//! dependencies against the proposed state. The first failure rejects the whole
//! request and nothing applies.

use super::kafka::{KafkaRelease, KRAFT_VERSION, METADATA_VERSION};
use super::{Dependencies, FinalizedFeatures, SupportedFeatures};
use std::collections::{BTreeMap, HashSet};

/// How a level may move: UpdateFeatures v1+ UpgradeType, or v0's AllowDowngrade.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpgradeType {
    Upgrade,
    SafeDowngrade,
    UnsafeDowngrade,
    /// v0 with AllowDowngrade set: the KIP's flag permits a downgrade without
    /// forbidding an upgrade, so it acts as SafeDowngrade below the current level
    /// and as Upgrade otherwise.
    AllowDowngrade,
    Unknown(i8),
}

impl UpgradeType {
    pub fn from_code(code: i8) -> UpgradeType {
        match code {
            1 => UpgradeType::Upgrade,
            2 => UpgradeType::SafeDowngrade,
            3 => UpgradeType::UnsafeDowngrade,
            other => UpgradeType::Unknown(other),
        }
    }

    pub fn code(self) -> i8 {
        match self {
            UpgradeType::Upgrade => 1,
            UpgradeType::SafeDowngrade => 2,
            UpgradeType::UnsafeDowngrade => 3,
            UpgradeType::AllowDowngrade => 2,
            UpgradeType::Unknown(c) => c,
        }
    }

    pub fn from_allow_downgrade(allow: bool) -> UpgradeType {
        if allow {
            UpgradeType::AllowDowngrade
        } else {
            UpgradeType::Upgrade
        }
    }

    /// The type in force for a move from `current` to `level`.
    fn resolve(self, current: i16, level: i16) -> UpgradeType {
        match self {
            UpgradeType::AllowDowngrade if level < current => UpgradeType::SafeDowngrade,
            UpgradeType::AllowDowngrade => UpgradeType::Upgrade,
            other => other,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureUpdate {
    pub name: String,
    pub level: i16,
    pub upgrade_type: UpgradeType,
}

/// A node whose supported ranges bound every new level: in standalone, this kshim
/// instance; in front of a cluster, also the upstream brokers that advertise the
/// feature. `label` is how messages name it, e.g. "Local controller 1".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supporter {
    pub label: String,
    pub features: SupportedFeatures,
    /// An upstream broker bounds only the features it advertises; kshim itself
    /// must support every feature it finalizes.
    pub only_listed: bool,
}

/// Why a request was refused: the feature that failed first, the reason, and
/// the per-feature message. The wire's error code is the handler's to choose
/// (`handlers::update_features::error_code`), from the reason alone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateRejection {
    pub feature: Option<String>,
    pub reason: Reason,
    pub message: String,
}

impl UpdateRejection {
    pub fn new(reason: Reason, message: impl Into<String>) -> UpdateRejection {
        UpdateRejection {
            feature: None,
            reason,
            message: message.into(),
        }
    }

    pub fn for_feature(mut self, feature: &str) -> UpdateRejection {
        self.feature = Some(feature.to_owned());
        self
    }
}

/// Why an update was refused, in the feature model's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// The request itself is malformed: a feature named twice, or features of
    /// both owners in one request.
    InvalidRequest,
    /// The rules refuse the level (range, direction, dependencies).
    InvalidVersion,
    /// The caller may not alter the cluster.
    NotAuthorized,
    /// Another update held the controller for the request's whole timeout.
    Busy,
    /// Configs of the cluster violate the validators of the target level.
    ConfigViolation,
    /// A supporter's advertised range already excludes the feature's finalized
    /// level: no upgrade until that is resolved.
    Incompatible,
    /// kshim could not read what it must check (a broker's configs).
    AuditBlind,
    /// The upstream could not be reached, or broke, on the way.
    UpstreamFailed,
    /// kshim's own store refused the change.
    StoreFailed,
    /// In a kshim cluster, another instance took the writer role before this
    /// change was committed: nothing was applied, and trying again will see
    /// that instance's change.
    WriterLost,
}

/// What an accepted request changes. `changes` holds only levels that differ from
/// the current state; it is empty when every update was a no-op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdatePlan {
    pub changes: BTreeMap<String, i16>,
}

pub fn invalid_update(name: &str, level: i16, reason: &str) -> UpdateRejection {
    UpdateRejection::new(
        Reason::InvalidVersion,
        format!("Invalid update version {level} for feature {name}. {reason}"),
    )
    .for_feature(name)
}

/// What decides an update besides the state and its supporters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateRules {
    /// The release whose metadata.version rules apply (the one kshim presents).
    pub release: KafkaRelease,
    /// The dependencies between feature levels.
    pub dependencies: Dependencies,
}

/// Decides whether `updates` may be applied to `current`.
pub fn plan_update(
    current: &FinalizedFeatures,
    supporters: &[Supporter],
    rules: &UpdateRules,
    updates: &[FeatureUpdate],
) -> Result<UpdatePlan, UpdateRejection> {
    let mut seen = HashSet::new();
    if let Some(dup) = updates.iter().find(|u| !seen.insert(u.name.as_str())) {
        return Err(UpdateRejection::new(
            Reason::InvalidRequest,
            format!(
                "Feature {} appears more than once in the request.",
                dup.name
            ),
        )
        .for_feature(&dup.name));
    }

    let mut proposed = current.levels.clone();
    for u in updates {
        proposed.insert(u.name.clone(), u.level);
    }
    let proposed_level = |name: &str| proposed.get(name).copied().unwrap_or(0);

    let mut changes = BTreeMap::new();
    for u in updates {
        check_one(current, supporters, rules, u, &proposed_level)?;
        if u.level != current.level(&u.name) {
            changes.insert(u.name.clone(), u.level);
        }
    }
    Ok(UpdatePlan { changes })
}

fn check_one(
    current: &FinalizedFeatures,
    supporters: &[Supporter],
    rules: &UpdateRules,
    u: &FeatureUpdate,
    proposed: &dyn Fn(&str) -> i16,
) -> Result<(), UpdateRejection> {
    let (name, level) = (u.name.as_str(), u.level);
    let current_level = current.level(name);
    let upgrade_type = u.upgrade_type.resolve(current_level, level);
    if let UpgradeType::Unknown(_) = upgrade_type {
        return Err(invalid_update(
            name,
            level,
            "The controller does not support the given upgrade type.",
        ));
    }
    if level < 0 {
        return Err(invalid_update(
            name,
            level,
            "A feature version cannot be less than 0.",
        ));
    }
    if let Some(reason) = reason_not_supported(supporters, name, level) {
        return Err(invalid_update(name, level, &reason));
    }
    if level < current_level && upgrade_type == UpgradeType::Upgrade {
        return Err(invalid_update(
            name,
            level,
            "Can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe downgrade.",
        ));
    }
    if level > current_level && upgrade_type != UpgradeType::Upgrade {
        return Err(invalid_update(
            name,
            level,
            "Can't downgrade to a newer version.",
        ));
    }
    if name == METADATA_VERSION {
        return check_metadata_version(rules.release, current_level, level, upgrade_type);
    }
    // kraft.version moves only forward: in Kafka the Raft layer itself upgrades it.
    if name == KRAFT_VERSION && upgrade_type != UpgradeType::Upgrade && level != current_level {
        return Err(invalid_update(
            name,
            level,
            "Can't downgrade the version of this feature.",
        ));
    }
    // A feature no supporter knows can still be "disabled" past the range check
    // (level 0 is in everyone's range), but there is nothing to disable.
    if supporters.iter().all(|s| !s.features.contains_key(name)) {
        return Err(invalid_update(
            name,
            level,
            &format!("Feature {name} not found."),
        ));
    }
    if let Some(reason) = rules.dependencies.unmet(name, level, proposed) {
        return Err(invalid_update(name, level, &reason));
    }
    Ok(())
}

fn invalid_metadata_version(level: i16, reason: &str) -> UpdateRejection {
    UpdateRejection::new(
        Reason::InvalidVersion,
        format!("Invalid metadata.version {level}. {reason}"),
    )
    .for_feature(METADATA_VERSION)
}

/// metadata.version carries the metadata format itself: it must be a known level,
/// and a downgrade that crosses a format change is refused (4.1 supports no unsafe
/// metadata downgrade at all).
fn check_metadata_version(
    release: KafkaRelease,
    current: i16,
    level: i16,
    upgrade_type: UpgradeType,
) -> Result<(), UpdateRejection> {
    let lowest = release.metadata_version_min();
    let highest = release.metadata_version_latest_production();
    if !(lowest..=highest).contains(&level) {
        return Err(invalid_metadata_version(
            level,
            &format!("Valid versions are from {lowest} to {highest}."),
        ));
    }
    if level < current && release.metadata_changed_between(level, current) {
        let reason = if upgrade_type == UpgradeType::UnsafeDowngrade {
            "Unsafe metadata downgrade is not supported in this version."
        } else {
            "Refusing to perform the requested downgrade because it might delete metadata information."
        };
        return Err(invalid_metadata_version(level, reason));
    }
    Ok(())
}

fn reason_not_supported(supporters: &[Supporter], name: &str, level: i16) -> Option<String> {
    supporters.iter().find_map(|s| match s.features.get(name) {
        None if level == 0 || s.only_listed => None,
        None => Some(format!("{} does not support this feature.", s.label)),
        Some(range) if !range.contains(level) => {
            Some(format!("{} only supports versions {}", s.label, range))
        }
        Some(_) => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka 4.1, whose controller the differential test compares with.
    fn kafka_like() -> (FinalizedFeatures, Vec<Supporter>, UpdateRules) {
        let kafka = KafkaRelease::named("4.1").unwrap();
        let finalized = FinalizedFeatures {
            epoch: 5,
            levels: [
                ("metadata.version".to_owned(), 27),
                ("group.version".to_owned(), 1),
                ("transaction.version".to_owned(), 2),
            ]
            .into(),
        };
        let supporters = vec![Supporter {
            label: "Local controller 1".into(),
            features: kafka.supported_features(),
            only_listed: false,
        }];
        let rules = UpdateRules {
            release: kafka,
            dependencies: kafka.dependencies(),
        };
        (finalized, supporters, rules)
    }

    fn upd(name: &str, level: i16, t: UpgradeType) -> FeatureUpdate {
        FeatureUpdate {
            name: name.into(),
            level,
            upgrade_type: t,
        }
    }

    fn reject(updates: &[FeatureUpdate]) -> UpdateRejection {
        let (f, s, d) = kafka_like();
        plan_update(&f, &s, &d, updates).unwrap_err()
    }

    #[test]
    fn upgrade_within_range_is_planned() {
        let (f, s, d) = kafka_like();
        let plan =
            plan_update(&f, &s, &d, &[upd("share.version", 1, UpgradeType::Upgrade)]).unwrap();
        assert_eq!(plan.changes, [("share.version".to_owned(), 1)].into());
    }

    #[test]
    fn same_level_is_a_no_op() {
        let (f, s, d) = kafka_like();
        let plan =
            plan_update(&f, &s, &d, &[upd("group.version", 1, UpgradeType::Upgrade)]).unwrap();
        assert!(plan.changes.is_empty());
    }

    #[test]
    fn out_of_range_names_the_supporter_and_its_range() {
        let r = reject(&[upd("group.version", 2, UpgradeType::Upgrade)]);
        assert_eq!(r.reason, Reason::InvalidVersion);
        assert_eq!(
            r.message,
            "Invalid update version 2 for feature group.version. Local controller 1 only supports versions 0-1"
        );
    }

    #[test]
    fn unknown_feature_is_refused_but_disabling_it_is_not() {
        let r = reject(&[upd("no.such.feature", 1, UpgradeType::Upgrade)]);
        assert_eq!(
            r.message,
            "Invalid update version 1 for feature no.such.feature. Local controller 1 does not support this feature."
        );
        let r = reject(&[upd("no.such.feature", 0, UpgradeType::SafeDowngrade)]);
        assert!(
            r.message.ends_with("Feature no.such.feature not found."),
            "{}",
            r.message
        );
    }

    #[test]
    fn kraft_version_cannot_go_down() {
        let (mut f, s, d) = kafka_like();
        f.levels.insert("kraft.version".into(), 1);
        let r = plan_update(
            &f,
            &s,
            &d,
            &[upd("kraft.version", 0, UpgradeType::SafeDowngrade)],
        )
        .unwrap_err();
        assert!(
            r.message
                .ends_with("Can't downgrade the version of this feature."),
            "{}",
            r.message
        );
    }

    #[test]
    fn direction_must_match_the_upgrade_type() {
        let r = reject(&[upd("group.version", 0, UpgradeType::Upgrade)]);
        assert!(r.message.contains("without setting the upgrade type"));
        let r = reject(&[upd("share.version", 1, UpgradeType::SafeDowngrade)]);
        assert!(r.message.ends_with("Can't downgrade to a newer version."));
        let (f, s, d) = kafka_like();
        for t in [UpgradeType::SafeDowngrade, UpgradeType::UnsafeDowngrade] {
            let plan = plan_update(&f, &s, &d, &[upd("transaction.version", 1, t)]).unwrap();
            assert_eq!(plan.changes, [("transaction.version".to_owned(), 1)].into());
        }
    }

    #[test]
    fn v0_allow_downgrade_permits_both_directions() {
        let (f, s, d) = kafka_like();
        let down = plan_update(
            &f,
            &s,
            &d,
            &[upd("group.version", 0, UpgradeType::AllowDowngrade)],
        )
        .unwrap();
        assert_eq!(down.changes, [("group.version".to_owned(), 0)].into());
        let up = plan_update(
            &f,
            &s,
            &d,
            &[upd("share.version", 1, UpgradeType::AllowDowngrade)],
        )
        .unwrap();
        assert_eq!(up.changes, [("share.version".to_owned(), 1)].into());
    }

    #[test]
    fn unknown_upgrade_type_and_negative_levels_fail() {
        assert!(reject(&[upd("group.version", 1, UpgradeType::Unknown(0))])
            .message
            .contains("upgrade type"));
        assert!(reject(&[upd("group.version", -1, UpgradeType::Upgrade)])
            .message
            .contains("less than 0"));
    }

    #[test]
    fn duplicates_are_an_invalid_request() {
        let r = reject(&[
            upd("group.version", 1, UpgradeType::Upgrade),
            upd("group.version", 0, UpgradeType::SafeDowngrade),
        ]);
        assert_eq!(r.reason, Reason::InvalidRequest);
    }

    #[test]
    fn first_failure_rejects_the_whole_request() {
        let r = reject(&[
            upd("share.version", 1, UpgradeType::Upgrade),
            upd("group.version", 5, UpgradeType::Upgrade),
        ]);
        assert_eq!(r.feature.as_deref(), Some("group.version"));
    }

    #[test]
    fn metadata_version_limits() {
        let r = reject(&[upd("metadata.version", 22, UpgradeType::SafeDowngrade)]);
        assert_eq!(
            r.message,
            "Invalid metadata.version 22. Refusing to perform the requested downgrade because it might delete metadata information."
        );
        let r = reject(&[upd("metadata.version", 22, UpgradeType::UnsafeDowngrade)]);
        assert_eq!(r.message, "Invalid metadata.version 22. Unsafe metadata downgrade is not supported in this version.");
        let r = reject(&[upd("metadata.version", 0, UpgradeType::SafeDowngrade)]);
        assert!(
            r.message
                .ends_with("Local controller 1 only supports versions 7-27"),
            "{}",
            r.message
        );
        let (f, s, d) = kafka_like();
        let plan = plan_update(
            &f,
            &s,
            &d,
            &[upd("metadata.version", 26, UpgradeType::SafeDowngrade)],
        )
        .unwrap();
        assert_eq!(plan.changes, [("metadata.version".to_owned(), 26)].into());
    }

    #[test]
    fn dependencies_are_checked_against_the_proposed_state() {
        let elr = "eligible.leader.replicas.version";
        let (mut f, s, d) = kafka_like();
        f.levels.insert("metadata.version".into(), 22);
        let r = plan_update(&f, &s, &d, &[upd(elr, 1, UpgradeType::Upgrade)]).unwrap_err();
        assert_eq!(
            r.message,
            "Invalid update version 1 for feature eligible.leader.replicas.version. \
             eligible.leader.replicas.version could not be set to 1 because it depends on metadata.version level 23"
        );
        let ok = plan_update(
            &f,
            &s,
            &d,
            &[
                upd("metadata.version", 23, UpgradeType::Upgrade),
                upd(elr, 1, UpgradeType::Upgrade),
            ],
        );
        assert!(ok.is_ok());
    }
}
