//! Durable state: the finalized feature levels, their epoch, the cluster id, and
//! the last mirrored upstream features (`FileStore`); and the dynamic configuration
//! overrides (`OverrideLog`).
//!
//! The store knows nothing of Kafka rules; it keeps what the controller hands it and
//! guarantees that after a crash it holds either the previous state or the new
//! one, never a mixture.

mod file;
mod overrides;

pub use file::FileStore;
pub use overrides::{OverrideLog, Overrides};

use crate::features::{FinalizedFeatures, Mirror};

/// What survives a restart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredState {
    pub cluster_id: String,
    /// kshim's own levels, with the epoch clients see.
    pub finalized: FinalizedFeatures,
    /// In front of a cluster: the upstream's features as last seen, so that a
    /// restart while the upstream is away still serves the whole view.
    pub mirror: Option<Mirror>,
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
