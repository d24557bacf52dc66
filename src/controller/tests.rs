use super::*;
use crate::features::kafka::KafkaRelease;
use crate::features::{SupportedRange, UpgradeType};
use crate::store::FileStore;

/// A standalone controller presenting Kafka 4.1.
fn settings() -> ControllerSettings {
    let kafka = KafkaRelease::named("4.1").unwrap();
    ControllerSettings {
        node_id: 1,
        cluster_id: None,
        supported: kafka.supported_features(),
        bootstrap: None,
        rules: UpdateRules {
            release: kafka,
            dependencies: kafka.dependencies(),
        },
        ownership: Ownership::standalone(),
        cluster: None,
    }
}

fn open(
    dir: &std::path::Path,
    s: ControllerSettings,
) -> Result<FeatureController, ControllerError> {
    FeatureController::open(Arc::new(FileStore::open(dir).unwrap()), s)
}

#[tokio::test]
async fn bootstraps_supported_maxima_then_persists_updates() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), settings()).unwrap();
    assert_eq!(c.cluster_id().len(), 22);
    let snap = c.snapshot();
    assert_eq!(snap.finalized.epoch, 0);
    assert_eq!(snap.finalized.level("metadata.version"), 27);
    assert_eq!(snap.finalized.level("transaction.version"), 2);
    let update = FeatureUpdate {
        name: "transaction.version".into(),
        level: 1,
        upgrade_type: UpgradeType::SafeDowngrade,
    };
    c.update(vec![update.clone()], true, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(
        c.snapshot().finalized.epoch,
        0,
        "validate-only changes nothing"
    );
    c.update(vec![update], false, Duration::from_secs(1))
        .await
        .unwrap();
    assert_eq!(c.snapshot().finalized.epoch, 1);
    let id = c.cluster_id().to_owned();
    drop(c);
    let c = open(dir.path(), settings()).unwrap();
    assert_eq!(c.snapshot().finalized.level("transaction.version"), 1);
    assert_eq!(c.snapshot().finalized.epoch, 1);
    assert_eq!(c.cluster_id(), id);
}

#[tokio::test]
async fn refuses_to_start_with_an_incompatible_stored_level() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path(), settings()).unwrap());
    let mut narrower = settings();
    narrower
        .supported
        .insert("transaction.version".into(), SupportedRange::new(0, 1));
    let err = open(dir.path(), narrower).err().unwrap().to_string();
    assert!(
        err.contains("transaction.version is finalized at level 2"),
        "{err}"
    );
    assert!(err.contains("supports only 0-1"), "{err}");
}

/// A standalone controller presenting `release`.
fn settings_of(release: &str) -> ControllerSettings {
    let kafka = KafkaRelease::named(release).unwrap();
    ControllerSettings {
        supported: kafka.supported_features(),
        rules: UpdateRules {
            release: kafka,
            dependencies: kafka.dependencies(),
        },
        ..settings()
    }
}

#[tokio::test]
async fn a_first_start_finalizes_what_kafka_storage_format_of_the_release_does() {
    for release in ["4.0", "4.1", "4.2", "4.3", "4.4"] {
        let dir = tempfile::tempdir().unwrap();
        let c = open(dir.path(), settings_of(release)).unwrap();
        let kafka = KafkaRelease::named(release).unwrap();
        assert_eq!(
            c.snapshot().finalized.levels,
            kafka.format_levels(),
            "{release}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), settings_of("4.1")).unwrap();
    assert_eq!(
        c.snapshot().finalized.level("share.version"),
        0,
        "4.1 formats share.version 0"
    );
}

#[tokio::test]
async fn a_newer_release_keeps_the_levels_and_an_older_one_refuses_what_it_cannot_run() {
    // Upgraded software: the levels stay, the ranges widen.
    let dir = tempfile::tempdir().unwrap();
    let before = open(dir.path(), settings_of("4.1")).unwrap().snapshot();
    let after = open(dir.path(), settings_of("4.4")).unwrap().snapshot();
    assert_eq!(after.finalized.levels, before.finalized.levels);
    assert!(after.supported["metadata.version"].max > before.supported["metadata.version"].max);
    // Downgraded software: a finalized level the older release does not know stops it,
    // naming the feature, as a Kafka broker refuses to start.
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path(), settings_of("4.4")).unwrap());
    let err = open(dir.path(), settings_of("4.1"))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("feature metadata.version is finalized at level")
            && err.contains("supports only 7-27"),
        "{err}"
    );
}

#[tokio::test]
async fn bootstrap_levels_are_validated() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = settings();
    s.bootstrap = Some([("group.version".to_owned(), 3), ("nope".to_owned(), 1)].into());
    let err = open(dir.path(), s).err().unwrap().to_string();
    assert!(
        err.contains("group.version=3 is outside") && err.contains("nope is not a supported"),
        "{err}"
    );
}

#[tokio::test]
async fn a_busy_controller_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let c = open(dir.path(), settings()).unwrap();
    let _turn = c.begin(Duration::from_secs(1)).await.unwrap();
    let err = c
        .update(vec![], false, Duration::from_millis(20))
        .await
        .unwrap_err();
    assert_eq!(err.reason, Reason::Busy);
}

#[test]
fn level_changes_name_only_what_changed() {
    let before: BTreeMap<String, i16> = [
        ("a".to_owned(), 1),
        ("b".to_owned(), 2),
        ("c".to_owned(), 3),
    ]
    .into();
    let after: BTreeMap<String, i16> = [
        ("a".to_owned(), 1),
        ("b".to_owned(), 4),
        ("d".to_owned(), 1),
    ]
    .into();
    let changes = super::level_changes(&before, &after);
    assert_eq!(
        changes,
        [
            ("b".to_owned(), 4),
            ("c".to_owned(), 0),
            ("d".to_owned(), 1)
        ]
        .into()
    );
}
