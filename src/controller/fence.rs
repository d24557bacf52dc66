//! The fence between an upgrade audit and the config changes that could slip
//! past it.
//!
//! An audit reads every config of the cluster, then the level changes. A
//! CreateTopics or config change that kshim checked against the old level and
//! that reaches the brokers between the read and the change would break the new
//! level's validators unseen. So:
//! - a config change passes the fence before kshim checks it and holds its pass
//!   until the upstream has answered it;
//! - an audit closes the fence: it names its target levels, then waits for every
//!   pass in flight to come back before it reads a single config;
//! - a config change that meets a closed fence does not wait: it is checked
//!   against the current levels and the target levels both, so whichever way
//!   the audit ends, it breaks neither.

use crate::features::FinalizedFeatures;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

#[derive(Debug, Default)]
pub struct ConfigFence {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    lock: Arc<RwLock<()>>,
    /// The levels an audit in progress may put in force.
    target: Mutex<Option<Arc<FinalizedFeatures>>>,
}

impl Inner {
    fn set_target(&self, target: Option<Arc<FinalizedFeatures>>) {
        // A poisoned lock only means a panic elsewhere; the value is still whole.
        *self.target.lock().unwrap_or_else(|e| e.into_inner()) = target;
    }

    fn target(&self) -> Option<Arc<FinalizedFeatures>> {
        self.target
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// How a config change passed the fence.
#[derive(Debug)]
pub enum ConfigPass {
    /// No audit runs: an audit that starts now waits until this is dropped.
    Open(OwnedRwLockReadGuard<()>),
    /// An audit runs: the change must also hold at these levels.
    Audit(Option<Arc<FinalizedFeatures>>),
}

impl ConfigPass {
    /// The levels besides the current ones a change must satisfy.
    pub fn target(&self) -> Option<&FinalizedFeatures> {
        match self {
            ConfigPass::Open(_) => None,
            ConfigPass::Audit(target) => target.as_deref(),
        }
    }
}

/// The fence closed by an audit; dropping it reopens the fence.
#[derive(Debug)]
pub struct FenceClosed {
    inner: Arc<Inner>,
    _closed: OwnedRwLockWriteGuard<()>,
}

impl Drop for FenceClosed {
    fn drop(&mut self) {
        self.inner.set_target(None);
    }
}

impl ConfigFence {
    /// Never waits.
    pub fn pass(&self) -> ConfigPass {
        match Arc::clone(&self.inner.lock).try_read_owned() {
            Ok(guard) => ConfigPass::Open(guard),
            Err(_) => ConfigPass::Audit(self.inner.target()),
        }
    }

    /// Names `target`, then waits until every pass in flight is back.
    pub async fn close(&self, target: FinalizedFeatures) -> FenceClosed {
        self.inner.set_target(Some(Arc::new(target)));
        let closed = Arc::clone(&self.inner.lock).write_owned().await;
        FenceClosed {
            inner: Arc::clone(&self.inner),
            _closed: closed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn target(level: i16) -> FinalizedFeatures {
        FinalizedFeatures {
            epoch: 1,
            levels: [("acme.audit".to_owned(), level)].into(),
        }
    }

    #[tokio::test]
    async fn an_audit_waits_for_passes_in_flight_and_later_ones_meet_its_target() {
        let fence = ConfigFence::default();
        let first = fence.pass();
        assert!(first.target().is_none());
        let closing = fence.close(target(2));
        tokio::pin!(closing);
        // The pass in flight holds the audit back.
        assert!(
            tokio::time::timeout(Duration::from_millis(50), &mut closing)
                .await
                .is_err()
        );
        // A change arriving now is checked against the target too.
        let during = fence.pass();
        assert_eq!(during.target(), Some(&target(2)));
        drop(first);
        let closed = tokio::time::timeout(Duration::from_secs(1), closing)
            .await
            .expect("the audit proceeds once the pass is back");
        assert_eq!(fence.pass().target(), Some(&target(2)));
        drop(closed);
        assert!(matches!(fence.pass(), ConfigPass::Open(_)));
    }
}
