//! Durable state: the finalized feature levels, their epoch, and the cluster id.
//!
//! The store knows nothing of Kafka rules; it keeps what the controller hands it and
//! guarantees that after a crash it holds either the previous state or the new
//! one, never a mixture.

mod file;

pub use file::FileStore;

use crate::features::FinalizedFeatures;

/// What survives a restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredState {
    pub cluster_id: String,
    pub finalized: FinalizedFeatures,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("data directory {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("data directory {path} is in use by another kshim process")]
    Locked { path: String },
    #[error("state file {path} is damaged: {reason}")]
    Damaged { path: String, reason: String },
}

/// A durable home for `StoredState`. `save` returns only once the state would
/// survive a crash.
pub trait FeatureStore: Send + Sync + 'static {
    fn load(&self) -> Result<Option<StoredState>, StoreError>;
    fn save(&self, state: &StoredState) -> Result<(), StoreError>;
}
