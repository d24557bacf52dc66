//! kshim as the controller of its features: it holds the finalized state, applies
//! one UpdateFeatures at a time, and makes each change durable before anyone can
//! see it.
//!
//! In front of a cluster it also holds the mirror of the upstream's features: the
//! snapshot clients see merges both (`features::merge`), with one epoch that moves
//! whenever either part changes and never goes back.
//!
//! Owns the live `FeatureSnapshot` (swapped whole, never edited in place) and the
//! store. Knows no wire format.

use crate::cluster::{ClusterNode, LogError, SharedFeatures, WriterTurn};
use crate::features::kafka::is_kafka_feature;
use crate::features::{
    incompatibilities, merge, plan_update, range_conflicts, Conflict, FeatureSnapshot,
    FeatureUpdate, FinalizedFeatures, Incompatibility, Mirror, Owner, Ownership, Reason,
    SupportedFeatures, Supporter, UpdatePlan, UpdateRejection, UpdateRules, ViewVerdict,
};
use crate::store::{FeatureStore, StoreError, StoredState};
use arc_swap::ArcSwap;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod fence;
mod section;

pub use fence::{ConfigFence, ConfigPass, FenceClosed};
pub use section::UpdateSection;

#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("refusing to start: the stored finalized features are incompatible with this instance: {}. \
             Start from a new data directory (--data-dir), widen [features.supported], or lower the \
             levels first under a kshim that supports them (kshim features downgrade --release-version \
             for a Kafka release, with --unsafe where metadata.version crosses a metadata change)", list(.0))]
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
    /// Levels to finalize on first start; `None` means what `kafka-storage
    /// format` of the presented release finalizes, and every other supported
    /// feature at its highest level.
    pub bootstrap: Option<BTreeMap<String, i16>>,
    pub rules: UpdateRules,
    /// Which features stay kshim's in front of a cluster.
    pub ownership: Ownership,
    /// In a kshim cluster: the shared state every change goes through.
    pub cluster: Option<Arc<ClusterNode>>,
}

/// What the controller changes, one change at a time.
struct OwnState {
    /// kshim's own levels; `epoch` is the epoch clients see.
    own: FinalizedFeatures,
    /// The accepted upstream view. Its epoch is the newest accepted one; the
    /// store keeps the epoch of the last view that changed something, which
    /// is enough for the epoch rule after a restart: a view at least that new
    /// carries levels at least that new.
    mirror: Option<Mirror>,
}

pub struct FeatureController {
    cluster_id: String,
    snapshot: ArcSwap<FeatureSnapshot>,
    /// Published with the snapshot, for deciding who owns a requested feature.
    mirror: ArcSwap<Option<Mirror>>,
    own_supported: SupportedFeatures,
    ownership: Ownership,
    local: Supporter,
    /// Upstream brokers, each bounding the kshim-owned features it advertises.
    upstream_supporters: ArcSwap<Vec<Supporter>>,
    rules: UpdateRules,
    store: Arc<dyn FeatureStore>,
    /// Kafka's controller handles one UpdateFeatures at a time; so does kshim,
    /// from the audit to the answer. An async mutex: the holder awaits the
    /// upstream and the store.
    section: tokio::sync::Mutex<()>,
    /// Held only while a change is stored and published, so that a refresh
    /// (which a forwarded update waits for) never waits for the section.
    state: tokio::sync::Mutex<OwnState>,
    /// Config changes through kshim wait for an audit, or meet its target.
    fence: ConfigFence,
    /// Supporters whose ranges exclude a finalized kshim-owned level.
    range_conflicts: ArcSwap<Vec<Conflict>>,
    /// Brokers audited when they joined, by supporter label.
    config_conflicts: ArcSwap<BTreeMap<String, Vec<Conflict>>>,
    stale_views: AtomicU64,
    /// Whether the last upstream view was ignored as stale (logged once per run).
    stale: AtomicBool,
    /// In a kshim cluster, changes are committed to the shared state topic and
    /// applied from it (`adopt`); the file store only keeps the last applied
    /// state for a restart while the upstream is away.
    cluster: Option<Arc<ClusterNode>>,
}

/// The finalized kshim-owned levels outside what this instance supports.
/// Levels kept for features the upstream now owns are not served, so they
/// cannot make this instance incompatible.
fn own_incompatibilities(
    supported: &SupportedFeatures,
    finalized: &FinalizedFeatures,
    ownership: &Ownership,
    mirror: Option<&Mirror>,
) -> Vec<Incompatibility> {
    let mut served = finalized.clone();
    served
        .levels
        .retain(|name, _| ownership.owner(name, mirror) == Owner::Kshim);
    incompatibilities(supported, &served)
}

/// The upstream's finalized levels in a view, as a shared record keeps them.
fn upstream_levels(mirror: Option<&Mirror>) -> BTreeMap<String, i16> {
    mirror
        .map(|m| m.finalized.levels.clone())
        .unwrap_or_default()
}

/// How a failure of the shared state reaches an UpdateFeatures caller.
fn shared_state_failed(e: &LogError) -> UpdateRejection {
    match e {
        LogError::Fenced => UpdateRejection::new(
            Reason::WriterLost,
            "Another kshim instance changed the shared feature state first; nothing was applied, try again.",
        ),
        other => UpdateRejection::new(
            Reason::UpstreamFailed,
            format!("The kshim cluster's shared state could not be changed: {other}"),
        ),
    }
}

impl FeatureController {
    /// Loads the stored state, or bootstraps it on first start, and refuses to run
    /// when a stored level lies outside what this instance supports.
    pub fn open(
        store: Arc<dyn FeatureStore>,
        settings: ControllerSettings,
    ) -> Result<FeatureController, ControllerError> {
        let (own, cluster_id, mirror) = match store.load()? {
            Some(stored) => {
                if let Some(configured) = &settings.cluster_id {
                    if *configured != stored.cluster_id {
                        return Err(ControllerError::ClusterIdMismatch {
                            configured: configured.clone(),
                            stored: stored.cluster_id,
                        });
                    }
                }
                let found = own_incompatibilities(
                    &settings.supported,
                    &stored.finalized,
                    &settings.ownership,
                    stored.mirror.as_ref(),
                );
                if !found.is_empty() {
                    return Err(ControllerError::Incompatible(found));
                }
                (stored.finalized, stored.cluster_id, stored.mirror)
            }
            None => {
                let levels = bootstrap_levels(&settings)?;
                let cluster_id = settings.cluster_id.clone().unwrap_or_else(new_cluster_id);
                let state = StoredState {
                    cluster_id,
                    finalized: FinalizedFeatures { epoch: 0, levels },
                    mirror: None,
                };
                store.save(&state)?;
                // In front of a cluster, Kafka's own features are the brokers' to
                // say: only kshim's own are bootstrapped here.
                let own: BTreeMap<&String, &i16> = state
                    .finalized
                    .levels
                    .iter()
                    .filter(|(name, _)| settings.ownership.owner(name, None) == Owner::Kshim)
                    .collect();
                tracing::info!(
                    epoch = 0,
                    "bootstrapped kshim's finalized features: {own:?}"
                );
                (state.finalized, state.cluster_id, None)
            }
        };
        for name in settings.ownership.claimed_kafka_features() {
            tracing::warn!(
                feature = name,
                "features.ownership.kshim_owned makes Apache Kafka's {name} kshim's: clients see kshim's level for it, \
                 not the brokers'; use this only to test clients"
            );
        }
        let local = Supporter {
            label: match &settings.cluster {
                Some(node) => format!("kshim instance {}", node.instance_id()),
                None => format!("Local controller {}", settings.node_id),
            },
            features: settings.supported.clone(),
            only_listed: false,
        };
        let snapshot = merge(
            &settings.supported,
            &own,
            mirror.as_ref(),
            &settings.ownership,
        );
        Ok(FeatureController {
            cluster_id,
            snapshot: ArcSwap::from_pointee(snapshot),
            mirror: ArcSwap::from_pointee(mirror.clone()),
            own_supported: settings.supported,
            ownership: settings.ownership,
            local,
            upstream_supporters: ArcSwap::from_pointee(Vec::new()),
            rules: settings.rules,
            store,
            section: tokio::sync::Mutex::new(()),
            state: tokio::sync::Mutex::new(OwnState { own, mirror }),
            fence: ConfigFence::default(),
            range_conflicts: ArcSwap::from_pointee(Vec::new()),
            config_conflicts: ArcSwap::from_pointee(BTreeMap::new()),
            stale_views: AtomicU64::new(0),
            stale: AtomicBool::new(false),
            cluster: settings.cluster,
        })
    }

    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// The current snapshot; cheap, lock-free.
    pub fn snapshot(&self) -> Arc<FeatureSnapshot> {
        self.snapshot.load_full()
    }

    /// Who decides the level of `name` now.
    pub fn owner(&self, name: &str) -> Owner {
        self.ownership
            .owner(name, self.mirror.load().as_ref().as_ref())
    }

    /// The fence config changes pass before they are checked.
    pub fn fence(&self) -> &ConfigFence {
        &self.fence
    }

    /// Upstream views ignored because an older epoch than the accepted one.
    pub fn stale_views(&self) -> u64 {
        self.stale_views.load(Ordering::Relaxed)
    }

    /// Everything that makes a finalized kshim-owned level untrue for part of
    /// the cluster now.
    pub fn conflicts(&self) -> Vec<Conflict> {
        let mut all: Vec<Conflict> = self.range_conflicts.load().iter().cloned().collect();
        all.extend(self.config_conflicts.load().values().flatten().cloned());
        all
    }

    /// Records what the audit of a joining broker found (empty: nothing).
    pub fn set_config_conflicts(&self, supporter: &str, found: Vec<Conflict>) {
        let mut next = BTreeMap::clone(&self.config_conflicts.load());
        let before = next.remove(supporter).unwrap_or_default();
        for c in found.iter().filter(|c| !before.contains(c)) {
            tracing::warn!(feature = %c.feature, "{c}; further upgrades of {} are refused until this is resolved", c.feature);
        }
        if !before.is_empty() && found.is_empty() {
            tracing::info!(
                "{supporter}: its configs no longer violate any finalized level's validators"
            );
        }
        if !found.is_empty() {
            next.insert(supporter.to_owned(), found);
        }
        self.config_conflicts.store(Arc::new(next));
    }

    /// Waits (at most `timeout`) for the controller's turn. In a kshim cluster
    /// the turn also takes the writer role and reads the shared state to its
    /// end, so that what is decided in the section sees every earlier change.
    pub async fn begin(&self, timeout: Duration) -> Result<UpdateSection<'_>, UpdateRejection> {
        let turn = tokio::time::timeout(timeout, self.section.lock())
            .await
            .map_err(|_| {
                UpdateRejection::new(
                    Reason::Busy,
                    format!(
                        "Timed out after {} ms waiting for another feature update to finish.",
                        timeout.as_millis()
                    ),
                )
            })?;
        self.section_with(turn).await
    }

    /// The turn if nobody holds it now; `None` otherwise.
    pub async fn try_begin(&self) -> Option<Result<UpdateSection<'_>, UpdateRejection>> {
        let turn = self.section.try_lock().ok()?;
        Some(self.section_with(turn).await)
    }

    async fn section_with<'a>(
        &'a self,
        turn: tokio::sync::MutexGuard<'a, ()>,
    ) -> Result<UpdateSection<'a>, UpdateRejection> {
        let (writer, deadline) = match &self.cluster {
            Some(node) => {
                let deadline = std::time::Instant::now()
                    + Duration::from_millis(node.settings.write_timeout_ms);
                let writer = node
                    .turn(deadline)
                    .await
                    .map_err(|e| shared_state_failed(&e))?;
                (Some(tokio::sync::Mutex::new(writer)), deadline)
            }
            None => (None, std::time::Instant::now()),
        };
        Ok(UpdateSection {
            controller: self,
            _turn: turn,
            writer,
            deadline,
        })
    }

    /// Every supporter of kshim-owned features: this instance, the other live
    /// kshim instances, and the upstream brokers.
    fn supporters(&self) -> Vec<Supporter> {
        let mut all = vec![self.local.clone()];
        if let Some(node) = &self.cluster {
            all.extend(
                node.live_peers()
                    .into_iter()
                    .map(|(id, features)| Supporter {
                        label: format!("kshim instance {id}"),
                        features,
                        only_listed: false,
                    }),
            );
        }
        all.extend(self.upstream_supporters.load().iter().cloned());
        all
    }

    /// In a kshim cluster: whether the upstream's levels as seen here differ
    /// from those the last shared record was cut for (and the state topic is
    /// in reach, with this instance caught up).
    pub async fn upstream_epoch_unsettled(&self) -> bool {
        let Some(node) = &self.cluster else {
            return false;
        };
        if !node.caught_up() || !node.reachable() {
            return false;
        }
        let state = self.state.lock().await;
        let Some(mirror) = &state.mirror else {
            return false;
        };
        node.shared_features()
            .is_none_or(|s| s.upstream_levels != mirror.finalized.levels)
    }

    /// The kshim cluster this instance belongs to, if any.
    pub fn cluster(&self) -> Option<&Arc<ClusterNode>> {
        self.cluster.as_ref()
    }

    /// Finalized kshim-owned levels this instance does not support: in a kshim
    /// cluster, checked once caught up with the shared state (the KIP's broker
    /// protection: such an instance must not serve).
    pub fn incompatible_with_self(&self) -> Vec<Incompatibility> {
        let snapshot = self.snapshot.load_full();
        let mirror = self.mirror.load_full();
        own_incompatibilities(
            &self.own_supported,
            &snapshot.finalized,
            &self.ownership,
            mirror.as_ref().as_ref(),
        )
    }

    /// Applies a shared feature state read from the state topic: kshim's own
    /// levels and the epoch every instance serves with them. Kept in the file
    /// store too, so that a restart while the upstream is away serves it.
    pub async fn adopt(&self, shared: SharedFeatures) {
        let mut state = self.state.lock().await;
        let own = FinalizedFeatures {
            epoch: shared.epoch,
            levels: shared.levels,
        };
        if own == state.own {
            return;
        }
        let saved = StoredState {
            cluster_id: self.cluster_id.clone(),
            finalized: own.clone(),
            mirror: state.mirror.clone(),
        };
        if let Err(reason) = self.save(saved).await {
            // Served all the same: the topic, not the file, is the truth here.
            tracing::error!(
                "the shared feature state could not be kept in the data directory: {reason}"
            );
        }
        tracing::info!(epoch = own.epoch, writer = %shared.writer, "finalized features changed: {:?}", level_changes(&state.own.levels, &own.levels));
        let next = merge(
            &self.own_supported,
            &own,
            state.mirror.as_ref(),
            &self.ownership,
        );
        state.own = own;
        self.snapshot.store(Arc::new(next));
        drop(state);
        self.check_ranges();
    }

    /// Takes in the upstream's feature state as the latest refresh saw it, and the
    /// upstream brokers as supporters of kshim-owned features.
    ///
    /// The epoch rule: a view older than the accepted one (a lagging broker's)
    /// is ignored and counted. An accepted view that changes the levels clients
    /// see moves kshim's epoch to max(epoch + 1, upstream epoch), so that it
    /// never goes back and follows the upstream's when only the upstream moves.
    pub async fn apply_mirror(&self, mirror: Mirror, supporters: Vec<Supporter>) {
        self.upstream_supporters.store(Arc::new(supporters));
        self.take_view(mirror).await;
        self.check_ranges();
    }

    async fn take_view(&self, mirror: Mirror) {
        let mut state = self.state.lock().await;
        match Mirror::judge(state.mirror.as_ref(), &mirror) {
            ViewVerdict::Stale { seen, accepted } => {
                self.stale_views.fetch_add(1, Ordering::Relaxed);
                if !self.stale.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "ignoring the upstream's feature view at epoch {seen}: it is older than the accepted epoch {accepted} \
                         (a broker that lags behind answered); clients keep the newer view"
                    );
                }
                return;
            }
            ViewVerdict::Accept => {
                if self.stale.swap(false, Ordering::Relaxed) {
                    tracing::info!(
                        "the upstream's feature view is current again (epoch {})",
                        mirror.finalized.epoch
                    );
                }
            }
        }
        let unchanged = state.mirror.as_ref().is_some_and(|m| {
            m.supported == mirror.supported
                && m.finalized.levels == mirror.finalized.levels
                && m.cluster_id == mirror.cluster_id
        });
        if unchanged {
            // Newer, but the same: only the accepted epoch moves, in memory.
            state.mirror = Some(mirror);
            return;
        }
        let current = self.snapshot.load_full();
        let mut own = state.own.clone();
        let mut next = merge(&self.own_supported, &own, Some(&mirror), &self.ownership);
        // In a kshim cluster the epoch comes from the shared state alone
        // (`settle_upstream_epoch`), so that every instance serves one epoch.
        if self.cluster.is_none() && next.finalized.levels != current.finalized.levels {
            own.epoch = (own.epoch + 1).max(mirror.finalized.epoch);
            next.finalized.epoch = own.epoch;
        }
        let saved = StoredState {
            cluster_id: self.cluster_id.clone(),
            finalized: own.clone(),
            mirror: Some(mirror.clone()),
        };
        if let Err(reason) = self.save(saved).await {
            tracing::error!("upstream features not mirrored, the store refused them: {reason}");
            return;
        }
        if next.finalized != current.finalized {
            tracing::info!(
                epoch = next.finalized.epoch,
                upstream_epoch = mirror.finalized.epoch,
                "finalized features changed upstream: {:?}",
                level_changes(&current.finalized.levels, &next.finalized.levels)
            );
        }
        state.own = own;
        state.mirror = Some(mirror.clone());
        self.mirror.store(Arc::new(Some(mirror)));
        self.snapshot.store(Arc::new(next));
    }

    /// The KIP's check on every change: every supporter's range against every
    /// finalized kshim-owned level. A new conflict is logged once; a resolved
    /// one once.
    fn check_ranges(&self) {
        let snapshot = self.snapshot.load_full();
        let mirror = self.mirror.load_full();
        let owned =
            |name: &str| self.ownership.owner(name, mirror.as_ref().as_ref()) == Owner::Kshim;
        let supporters = self.supporters();
        let found = range_conflicts(&snapshot.finalized, &owned, &supporters);
        let before = self.range_conflicts.load_full();
        if *before == found {
            return;
        }
        for c in found.iter().filter(|c| !before.contains(c)) {
            tracing::warn!(feature = %c.feature, "{c}; further upgrades of {} are refused until this is resolved", c.feature);
        }
        for c in before.iter().filter(|c| !found.contains(c)) {
            tracing::info!(feature = %c.feature, "resolved: {c}");
        }
        self.range_conflicts.store(Arc::new(found));
    }

    async fn save(&self, state: StoredState) -> Result<(), String> {
        let store = Arc::clone(&self.store);
        match tokio::task::spawn_blocking(move || store.save(&state)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(format!("the store task failed: {e}")),
        }
    }

    /// Validates `updates` against kshim's own rules and, unless
    /// `validate_only`, applies them: persisted first, then published. Waits at
    /// most `timeout` for an update in progress. (The UpdateFeatures handler
    /// plans with ownership, policies and the upstream as well.)
    pub async fn update(
        &self,
        updates: Vec<FeatureUpdate>,
        validate_only: bool,
        timeout: Duration,
    ) -> Result<UpdatePlan, UpdateRejection> {
        let section = self.begin(timeout).await?;
        let current = section.snapshot();
        let plan = plan_update(
            &current.finalized,
            &section.supporters(),
            &self.rules,
            &updates,
        )?;
        if !validate_only && !plan.changes.is_empty() {
            section.apply(&plan.changes).await?;
        }
        Ok(plan)
    }
}

/// The levels that differ between two views, as the later one has them (0:
/// no longer finalized), as a standalone kshim logs the changes it makes.
fn level_changes(
    before: &BTreeMap<String, i16>,
    after: &BTreeMap<String, i16>,
) -> BTreeMap<String, i16> {
    before
        .keys()
        .chain(after.keys())
        .filter(|name| before.get(*name) != after.get(*name))
        .map(|name| (name.clone(), after.get(name).copied().unwrap_or(0)))
        .collect()
}

fn bootstrap_levels(
    settings: &ControllerSettings,
) -> Result<BTreeMap<String, i16>, ControllerError> {
    let levels: BTreeMap<String, i16> = match &settings.bootstrap {
        Some(levels) => levels.clone(),
        None => {
            let format = settings.rules.release.format_levels();
            settings
                .supported
                .iter()
                .map(|(name, r)| {
                    let level = match format.get(name) {
                        Some(&level) if r.contains(level) => level,
                        // Apache Kafka's features that format leaves at 0 stay there.
                        None if is_kafka_feature(name) && r.contains(0) => 0,
                        _ => r.max,
                    };
                    (name.clone(), level)
                })
                .collect()
        }
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
        if let Some(reason) = settings.rules.dependencies.unmet(name, level, &proposed) {
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
mod tests;
