//! kshim as the controller of its features: it holds the finalized state, applies
//! one UpdateFeatures at a time, and makes each change durable before anyone can
//! see it.
//!
//! Owns the live `FeatureSnapshot` (swapped whole, never edited in place) and the
//! store. Knows no wire format.

use crate::features::{
    incompatibilities, plan_update, Dependencies, FeatureSnapshot, FeatureUpdate,
    FinalizedFeatures, Incompatibility, SupportedFeatures, Supporter, UpdatePlan, UpdateRejection,
};
use crate::protocol::error_codes;
use crate::store::{FeatureStore, StoreError, StoredState};
use arc_swap::ArcSwap;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("refusing to start: the stored finalized features are incompatible with this instance: {}", list(.0))]
    Incompatible(Vec<Incompatibility>),
    #[error("invalid features.bootstrap: {0}")]
    InvalidBootstrap(String),
    #[error("cluster_id {configured} in the config differs from {stored} in the data directory")]
    ClusterIdMismatch { configured: String, stored: String },
}

fn list(items: &[Incompatibility]) -> String {
    items
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// What the controller starts from.
pub struct ControllerSettings {
    pub node_id: i32,
    pub cluster_id: Option<String>,
    pub supported: SupportedFeatures,
    /// Levels to finalize on first start; `None` means every supported max.
    pub bootstrap: Option<BTreeMap<String, i16>>,
    pub dependencies: Dependencies,
}

pub struct FeatureController {
    node_id: i32,
    cluster_id: String,
    snapshot: ArcSwap<FeatureSnapshot>,
    supporters: Vec<Supporter>,
    dependencies: Dependencies,
    store: Arc<dyn FeatureStore>,
    /// Kafka's controller handles one UpdateFeatures at a time; so does kshim. An
    /// async mutex, because the holder awaits the store.
    update_lock: tokio::sync::Mutex<()>,
}

impl FeatureController {
    /// Loads the stored state, or bootstraps it on first start, and refuses to run
    /// when a stored level lies outside what this instance supports.
    pub fn open(
        store: Arc<dyn FeatureStore>,
        settings: ControllerSettings,
    ) -> Result<FeatureController, ControllerError> {
        let finalized_and_id = match store.load()? {
            Some(stored) => {
                if let Some(configured) = &settings.cluster_id {
                    if *configured != stored.cluster_id {
                        return Err(ControllerError::ClusterIdMismatch {
                            configured: configured.clone(),
                            stored: stored.cluster_id,
                        });
                    }
                }
                let found = incompatibilities(&settings.supported, &stored.finalized);
                if !found.is_empty() {
                    return Err(ControllerError::Incompatible(found));
                }
                (stored.finalized, stored.cluster_id)
            }
            None => {
                let levels = bootstrap_levels(&settings)?;
                let cluster_id = settings.cluster_id.clone().unwrap_or_else(new_cluster_id);
                let state = StoredState {
                    cluster_id,
                    finalized: FinalizedFeatures { epoch: 0, levels },
                };
                store.save(&state)?;
                tracing::info!(
                    epoch = 0,
                    "bootstrapped finalized features: {:?}",
                    state.finalized.levels
                );
                (state.finalized, state.cluster_id)
            }
        };
        let (finalized, cluster_id) = finalized_and_id;
        let supporters = vec![Supporter {
            label: format!("Local controller {}", settings.node_id),
            features: settings.supported.clone(),
        }];
        Ok(FeatureController {
            node_id: settings.node_id,
            cluster_id,
            snapshot: ArcSwap::from_pointee(FeatureSnapshot {
                supported: settings.supported,
                finalized,
            }),
            supporters,
            dependencies: settings.dependencies,
            store,
            update_lock: tokio::sync::Mutex::new(()),
        })
    }

    pub fn node_id(&self) -> i32 {
        self.node_id
    }

    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// The current snapshot; cheap, lock-free.
    pub fn snapshot(&self) -> Arc<FeatureSnapshot> {
        self.snapshot.load_full()
    }

    /// Validates `updates` and, unless `validate_only`, applies them: persisted
    /// first, then published. Waits at most `timeout` for an update in progress.
    pub async fn update(
        &self,
        updates: Vec<FeatureUpdate>,
        validate_only: bool,
        timeout: Duration,
    ) -> Result<UpdatePlan, UpdateRejection> {
        let _turn = tokio::time::timeout(timeout, self.update_lock.lock())
            .await
            .map_err(|_| UpdateRejection {
                feature: None,
                code: error_codes::REQUEST_TIMED_OUT,
                message: format!(
                    "Timed out after {} ms waiting for another feature update to finish.",
                    timeout.as_millis()
                ),
            })?;
        let current = self.snapshot.load_full();
        let plan = plan_update(
            &current.finalized,
            &self.supporters,
            &self.dependencies,
            &updates,
        )?;
        if validate_only || plan.changes.is_empty() {
            return Ok(plan);
        }
        let next = current.finalized.with_levels(&plan.changes);
        let state = StoredState {
            cluster_id: self.cluster_id.clone(),
            finalized: next.clone(),
        };
        let store = Arc::clone(&self.store);
        let saved = tokio::task::spawn_blocking(move || store.save(&state)).await;
        let failure = match saved {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(e) => Some(format!("the store task failed: {e}")),
        };
        if let Some(reason) = failure {
            tracing::error!("feature update not applied, the store refused it: {reason}");
            return Err(UpdateRejection {
                feature: None,
                code: error_codes::FEATURE_UPDATE_FAILED,
                message: "Unable to update finalized features due to an unexpected server error."
                    .to_owned(),
            });
        }
        tracing::info!(
            epoch = next.epoch,
            "finalized features changed: {:?}",
            plan.changes
        );
        self.snapshot.store(Arc::new(FeatureSnapshot {
            supported: current.supported.clone(),
            finalized: next,
        }));
        Ok(plan)
    }
}

fn bootstrap_levels(
    settings: &ControllerSettings,
) -> Result<BTreeMap<String, i16>, ControllerError> {
    let levels: BTreeMap<String, i16> = match &settings.bootstrap {
        Some(levels) => levels.clone(),
        None => settings
            .supported
            .iter()
            .map(|(name, r)| (name.clone(), r.max))
            .collect(),
    };
    let mut problems = Vec::new();
    for (name, &level) in &levels {
        match settings.supported.get(name) {
            None => problems.push(format!("{name} is not a supported feature")),
            Some(r) if !r.contains(level) => {
                problems.push(format!("{name}={level} is outside the supported range {r}"))
            }
            Some(_) => {}
        }
        let proposed = |f: &str| levels.get(f).copied().unwrap_or(0);
        if let Some(reason) = settings.dependencies.unmet(name, level, &proposed) {
            problems.push(reason);
        }
    }
    if !problems.is_empty() {
        return Err(ControllerError::InvalidBootstrap(problems.join("; ")));
    }
    Ok(levels.into_iter().filter(|(_, level)| *level > 0).collect())
}

/// A Kafka-style cluster id: a random UUID in unpadded URL-safe base64.
fn new_cluster_id() -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = uuid::Uuid::new_v4().into_bytes();
    let mut out = String::with_capacity(22);
    let mut acc: u32 = 0;
    let mut bits = 0;
    for b in bytes {
        acc = (acc << 8) | u32::from(b);
        bits += 8;
        while bits >= 6 {
            bits -= 6;
            out.push(ALPHABET[((acc >> bits) & 63) as usize] as char);
        }
    }
    if bits > 0 {
        out.push(ALPHABET[((acc << (6 - bits)) & 63) as usize] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::features::{kafka, SupportedRange, UpgradeType};
    use crate::store::FileStore;

    fn settings() -> ControllerSettings {
        ControllerSettings {
            node_id: 1,
            cluster_id: None,
            supported: kafka::supported_features(),
            bootstrap: None,
            dependencies: kafka::dependencies(),
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
        let _held = c.update_lock.lock().await;
        let err = c
            .update(vec![], false, Duration::from_millis(20))
            .await
            .unwrap_err();
        assert_eq!(err.code, error_codes::REQUEST_TIMED_OUT);
    }
}
