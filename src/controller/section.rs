//! One UpdateFeatures at a time: the section that holds the controller's turn
//! (and, in a kshim cluster, the writer role) while an update is planned,
//! checked and applied.

use super::*;

/// One UpdateFeatures at a time: holding this is holding the controller's turn.
/// What it reads (snapshot, supporters, conflicts) cannot change under it but by
/// a refresh of the upstream's own features.
pub struct UpdateSection<'a> {
    pub(super) controller: &'a FeatureController,
    pub(super) _turn: tokio::sync::MutexGuard<'a, ()>,
    /// In a kshim cluster: the writer role, taken with the topic read to its
    /// end before anything is decided.
    pub(super) writer: Option<tokio::sync::Mutex<WriterTurn<'a>>>,
    pub(super) deadline: std::time::Instant,
}

impl<'a> UpdateSection<'a> {
    pub fn snapshot(&self) -> Arc<FeatureSnapshot> {
        self.controller.snapshot()
    }

    /// kshim itself, every other live kshim instance, then every upstream
    /// broker.
    pub fn supporters(&self) -> Vec<Supporter> {
        self.controller.supporters()
    }

    pub fn conflicts(&self) -> Vec<Conflict> {
        self.controller.conflicts()
    }

    pub fn rules(&self) -> &UpdateRules {
        &self.controller.rules
    }

    pub fn owner(&self, name: &str) -> Owner {
        self.controller.owner(name)
    }

    /// Makes config changes through kshim wait (or meet `target`) until the
    /// returned value is dropped.
    pub async fn fence(&self, target: FinalizedFeatures) -> FenceClosed {
        self.controller.fence.close(target).await
    }

    /// Stores `changes` to kshim's own levels, one epoch later, then publishes
    /// them. In a kshim cluster the change is committed to the state topic and
    /// this returns once this instance has applied it from there.
    pub async fn apply(&self, changes: &BTreeMap<String, i16>) -> Result<(), UpdateRejection> {
        let c = self.controller;
        if self.writer.is_some() {
            let record = {
                let state = c.state.lock().await;
                let epoch = c.snapshot.load().finalized.epoch + 1;
                self.shared_record(&state, epoch, state.own.with_levels(changes).levels)
            };
            return self.commit_shared(record).await;
        }
        let mut state = c.state.lock().await;
        let current = c.snapshot.load_full();
        let mut own = state.own.with_levels(changes);
        own.epoch = current.finalized.epoch + 1;
        let saved = StoredState {
            cluster_id: c.cluster_id.clone(),
            finalized: own.clone(),
            mirror: state.mirror.clone(),
        };
        if let Err(reason) = c.save(saved).await {
            tracing::error!("feature update not applied, the store refused it: {reason}");
            return Err(UpdateRejection::new(
                Reason::StoreFailed,
                "Unable to update finalized features due to an unexpected server error.",
            ));
        }
        tracing::info!(epoch = own.epoch, "finalized features changed: {changes:?}");
        let next = merge(&c.own_supported, &own, state.mirror.as_ref(), &c.ownership);
        state.own = own;
        c.snapshot.store(Arc::new(next));
        drop(state);
        c.check_ranges();
        Ok(())
    }

    /// In a kshim cluster whose state topic holds no feature state yet: this
    /// instance's state (its bootstrap levels, or what its data directory
    /// kept) becomes the cluster's, one epoch later. The first instance to
    /// get here writes it; the others find it written.
    pub async fn seed_shared_state(&self) -> Result<(), UpdateRejection> {
        let c = self.controller;
        let Some(node) = &c.cluster else {
            return Ok(());
        };
        if node.shared_features().is_some() {
            return Ok(());
        }
        let record = {
            let state = c.state.lock().await;
            let epoch = c.snapshot.load().finalized.epoch + 1;
            self.shared_record(&state, epoch, state.own.levels.clone())
        };
        tracing::info!(
            epoch = record.epoch,
            "the kshim cluster has no feature state yet: writing this instance's"
        );
        self.commit_shared(record).await
    }

    /// In a kshim cluster: gives the upstream's current levels an epoch of the
    /// shared state, unless the last shared record already has them. Every
    /// instance then serves the same epoch for the same levels.
    pub async fn settle_upstream_epoch(&self) -> Result<(), UpdateRejection> {
        let c = self.controller;
        let Some(node) = &c.cluster else {
            return Ok(());
        };
        let record = {
            let state = c.state.lock().await;
            let Some(mirror) = &state.mirror else {
                return Ok(());
            };
            let settled = node
                .shared_features()
                .is_some_and(|s| s.upstream_levels == mirror.finalized.levels);
            if settled {
                return Ok(());
            }
            let epoch = (c.snapshot.load().finalized.epoch + 1).max(mirror.finalized.epoch);
            self.shared_record(&state, epoch, state.own.levels.clone())
        };
        self.commit_shared(record).await
    }

    /// A shared record of kshim's `levels` at `epoch`, cut for the upstream's
    /// levels as this instance sees them.
    fn shared_record(
        &self,
        state: &OwnState,
        epoch: i64,
        levels: BTreeMap<String, i16>,
    ) -> SharedFeatures {
        SharedFeatures {
            version: crate::cluster::records::FEATURES_VERSION,
            epoch,
            levels,
            upstream_levels: upstream_levels(state.mirror.as_ref()),
            writer: self
                .controller
                .cluster
                .as_ref()
                .map_or_else(String::new, |n| n.instance_id().to_owned()),
        }
    }

    /// Commits `record` through the writer role this section holds, and
    /// returns once this instance serves it.
    async fn commit_shared(&self, record: SharedFeatures) -> Result<(), UpdateRejection> {
        let Some(writer) = &self.writer else {
            return Ok(());
        };
        let mut writer = writer.lock().await;
        let entry = writer.codec().features(&record);
        writer
            .append(&[entry], self.deadline)
            .await
            .map_err(|e| shared_state_failed(&e))
    }
}
