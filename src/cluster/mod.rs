//! A kshim cluster: several kshim instances in front of one Kafka cluster share
//! one feature state and one set of config overrides, kept in a compacted
//! single-partition topic on that cluster. Kafka is the engine: kshim adds no
//! consensus of its own.
//!
//! - `wire`: the Kafka requests and bounded response decoders this needs.
//! - `log`: the state topic (created, checked, read).
//! - `writer`: the writer role, fenced by a transactional producer epoch.
//! - `records`: what the topic holds, and the schema version of each record.
//! - `follower`: every instance applies the topic in order (read_committed).
//! - `registration`: every instance announces itself; liveness is a
//!   registration renewed within the session timeout.
//!
//! This module knows the controller and the config registry only through the
//! `Applier` trait: it decides nothing about features or keys.

pub mod follower;
pub mod log;
pub mod records;
pub mod registration;
pub mod settings;
pub mod writer;

pub use follower::{follow, Applier};
pub use log::{LogError, StateLog};
pub use records::{Codec, InstanceStatus, Registration, SharedFeatures};
pub use settings::{ClusterConfig, DEFAULT_STATE_TOPIC};

use crate::features::SupportedFeatures;
use crate::upstream::LinkSettings;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::{watch, Notify};
use writer::{Entry, TxnWriter};

/// How many applied offsets a node remembers for `applied_record`.
const RECENT: usize = 1024;

/// Another instance, as its last registration described it.
#[derive(Debug, Clone)]
pub struct Instance {
    pub registration: Registration,
    /// When this instance read that registration.
    pub seen: Instant,
}

/// An instance as `GET /admin/cluster` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct InstanceReport {
    pub instance_id: String,
    pub live: bool,
    #[serde(rename = "self")]
    pub this: bool,
    pub listeners: Vec<String>,
    pub kshim_version: String,
    pub supported: BTreeMap<String, [i16; 2]>,
    /// Milliseconds since its registration was last renewed, as read here.
    pub last_seen_ms: u64,
    #[serde(flatten)]
    pub status: InstanceStatus,
}

/// This instance's membership in a kshim cluster.
pub struct ClusterNode {
    pub settings: ClusterConfig,
    codec: Codec,
    link: LinkSettings,
    bootstrap: Vec<String>,
    supported: SupportedFeatures,
    listeners: Vec<String>,
    writer: tokio::sync::Mutex<TxnWriter>,
    /// The next offset the follower will apply.
    applied: watch::Sender<i64>,
    /// The committed end when the follower started; caught up once applied
    /// reaches it.
    startup_end: AtomicI64,
    caught_up: AtomicBool,
    /// Whether the follower's last fetch reached the state topic.
    reachable: AtomicBool,
    /// Whether a read of the state topic has failed since startup: startup
    /// then stops waiting and serves the state kept in the data directory.
    read_failed: AtomicBool,
    shared: Mutex<Option<SharedFeatures>>,
    /// Offsets of the records applied last, newest at the back: how a writer
    /// whose commit had no certain answer learns its outcome.
    recent: Mutex<std::collections::VecDeque<i64>>,
    instances: Mutex<BTreeMap<String, Instance>>,
    config: Mutex<ConfigStatus>,
    /// Wakes the registration task to report a new status at once.
    pub(crate) report: Notify,
}

#[derive(Debug, Clone)]
struct ConfigStatus {
    version: i64,
    error: Option<String>,
}

impl ClusterNode {
    pub fn new(
        settings: ClusterConfig,
        link: LinkSettings,
        bootstrap: Vec<String>,
        supported: SupportedFeatures,
        listeners: Vec<String>,
    ) -> ClusterNode {
        let log = StateLog::new(
            link.clone(),
            bootstrap.clone(),
            settings.state_topic.clone(),
        );
        let writer = TxnWriter::new(
            log,
            &settings.id,
            Duration::from_millis(settings.transaction_timeout_ms),
        );
        ClusterNode {
            codec: Codec::new(&settings.id),
            settings,
            link,
            bootstrap,
            supported,
            listeners,
            writer: tokio::sync::Mutex::new(writer),
            applied: watch::channel(0).0,
            startup_end: AtomicI64::new(i64::MAX),
            caught_up: AtomicBool::new(false),
            reachable: AtomicBool::new(false),
            read_failed: AtomicBool::new(false),
            shared: Mutex::new(None),
            recent: Mutex::new(std::collections::VecDeque::new()),
            instances: Mutex::new(BTreeMap::new()),
            config: Mutex::new(ConfigStatus {
                version: -1,
                error: None,
            }),
            report: Notify::new(),
        }
    }

    pub fn instance_id(&self) -> &str {
        &self.settings.instance_id
    }

    pub fn codec(&self) -> &Codec {
        &self.codec
    }

    /// A new client of the state topic, on connections of its own.
    pub fn new_log(&self) -> StateLog {
        StateLog::new(
            self.link.clone(),
            self.bootstrap.clone(),
            self.settings.state_topic.clone(),
        )
    }

    /// Creates or checks the state topic.
    pub async fn ensure_topic(&self, deadline: Instant) -> Result<(), LogError> {
        self.writer.lock().await.log().ensure_topic(deadline).await
    }

    pub fn applied(&self) -> i64 {
        *self.applied.borrow()
    }

    pub fn caught_up(&self) -> bool {
        self.caught_up.load(Ordering::Relaxed)
    }

    pub fn reachable(&self) -> bool {
        self.reachable.load(Ordering::Relaxed)
    }

    /// Waits until caught up with the topic as it was when the follower
    /// started, at most `timeout`; with `upstream_away`, only until a read of
    /// the topic fails (there is nothing to wait for). Says whether it is.
    pub async fn wait_caught_up(&self, timeout: Duration, upstream_away: bool) -> bool {
        let mut rx = self.applied.subscribe();
        let settled = |_: &i64| {
            self.caught_up() || (upstream_away && self.read_failed.load(Ordering::Relaxed))
        };
        let _ = tokio::time::timeout(timeout, rx.wait_for(settled)).await;
        self.caught_up()
    }

    /// Records a failed read of the state topic, and wakes whoever waits.
    fn read_failed(&self) {
        self.reachable.store(false, Ordering::Relaxed);
        if !self.read_failed.swap(true, Ordering::Relaxed) {
            self.applied.send_modify(|_| {});
        }
    }

    /// Waits until the follower has applied every offset below `offset`.
    pub async fn wait_applied(&self, offset: i64, deadline: Instant) -> Result<(), LogError> {
        let mut rx = self.applied.subscribe();
        let reached =
            tokio::time::timeout_at(deadline.into(), rx.wait_for(|applied| *applied >= offset))
                .await
                .is_ok_and(|r| r.is_ok());
        match reached {
            true => Ok(()),
            false => Err(LogError::Timeout(format!(
                "this instance has not applied the state topic up to offset {offset} (it is at {})",
                self.applied()
            ))),
        }
    }

    /// The last shared feature record applied here.
    pub fn shared_features(&self) -> Option<SharedFeatures> {
        lock(&self.shared).clone()
    }

    /// Every other live instance with the ranges it supports.
    pub fn live_peers(&self) -> Vec<(String, SupportedFeatures)> {
        let session = Duration::from_millis(self.settings.session_timeout_ms);
        lock(&self.instances)
            .iter()
            .filter(|(id, i)| *id != self.instance_id() && i.seen.elapsed() < session)
            .map(|(id, i)| (id.clone(), i.registration.supported_features()))
            .collect()
    }

    /// This instance's registration as it stands now.
    pub fn registration(&self) -> Registration {
        let config = lock(&self.config).clone();
        let shared = self.shared_features();
        Registration {
            version: records::INSTANCE_VERSION,
            supported: Registration::ranges_of(&self.supported),
            listeners: self.listeners.clone(),
            kshim_version: env!("CARGO_PKG_VERSION").to_owned(),
            status: InstanceStatus {
                applied_offset: self.applied(),
                epoch: shared.map_or(0, |s| s.epoch),
                config_version: config.version,
                apply_error: config.error,
                caught_up: self.caught_up(),
            },
        }
    }

    /// Every known instance, this one first, for the admin API.
    pub fn report(&self) -> Vec<InstanceReport> {
        let session = Duration::from_millis(self.settings.session_timeout_ms);
        let me = self.registration();
        let mut out = vec![InstanceReport {
            instance_id: self.instance_id().to_owned(),
            live: true,
            this: true,
            listeners: me.listeners,
            kshim_version: me.kshim_version,
            supported: me.supported,
            last_seen_ms: 0,
            status: me.status,
        }];
        for (id, i) in lock(&self.instances).iter() {
            if id == self.instance_id() {
                continue;
            }
            let r = &i.registration;
            out.push(InstanceReport {
                instance_id: id.clone(),
                live: i.seen.elapsed() < session,
                this: false,
                listeners: r.listeners.clone(),
                kshim_version: r.kshim_version.clone(),
                supported: r.supported.clone(),
                last_seen_ms: i.seen.elapsed().as_millis() as u64,
                status: r.status.clone(),
            });
        }
        out
    }

    /// Takes this instance's turn as the writer: the local turn first (one
    /// change at a time per instance), then the cluster-wide role, then the
    /// topic read to its committed end, so that the decision the caller makes
    /// next sees every change committed before it.
    pub async fn turn(&self, deadline: Instant) -> Result<WriterTurn<'_>, LogError> {
        let mut writer = tokio::time::timeout_at(deadline.into(), self.writer.lock())
            .await
            .map_err(|_| LogError::Timeout("waiting for this instance's earlier change".into()))?;
        let caught_up = async {
            writer.claim(deadline).await?;
            let end = writer.log().committed_end_by(deadline).await?;
            self.wait_applied(end, deadline).await
        };
        if let Err(e) = caught_up.await {
            writer.forget();
            return Err(e);
        }
        Ok(WriterTurn { node: self, writer })
    }

    /// Whether the record at `offset` was applied here (among the last
    /// `RECENT` applied).
    pub fn applied_record(&self, offset: i64) -> bool {
        lock(&self.recent).contains(&offset)
    }

    fn note_applied(&self, offset: i64) {
        let mut recent = lock(&self.recent);
        if recent.len() == RECENT {
            recent.pop_front();
        }
        recent.push_back(offset);
    }

    fn set_shared(&self, f: SharedFeatures) {
        *lock(&self.shared) = Some(f);
    }

    fn set_instance(&self, id: String, registration: Option<Registration>) {
        if let Some(r) = &registration {
            // Two instances with one id would count as one supporter: say so.
            if id == self.instance_id() && self.caught_up() && r.listeners != self.listeners {
                tracing::error!(
                    instance = %id,
                    "another kshim instance registers under this instance's id (its listeners: {:?}); give each instance its own cluster.instance_id",
                    r.listeners
                );
            }
        }
        let mut instances = lock(&self.instances);
        match registration {
            Some(registration) => {
                instances.insert(
                    id,
                    Instance {
                        registration,
                        seen: Instant::now(),
                    },
                );
            }
            None => {
                instances.remove(&id);
            }
        }
    }

    fn set_config_status(&self, version: i64, error: Option<String>) {
        *lock(&self.config) = ConfigStatus { version, error };
        self.report.notify_one();
    }

    fn publish_applied(&self, next: i64) {
        self.applied.send_replace(next);
        if !self.caught_up() && next >= self.startup_end.load(Ordering::Relaxed) {
            self.caught_up.store(true, Ordering::Relaxed);
            self.applied.send_modify(|_| {});
            self.report.notify_one();
        }
    }
}

/// Holding this is holding the writer role, with the topic read to its end.
pub struct WriterTurn<'a> {
    node: &'a ClusterNode,
    writer: tokio::sync::MutexGuard<'a, TxnWriter>,
}

impl WriterTurn<'_> {
    /// Commits `entries` as one transaction and returns once this instance
    /// has applied them, so that what the caller answers is already served.
    pub async fn append(&mut self, entries: &[Entry], deadline: Instant) -> Result<(), LogError> {
        let last = match self.writer.commit(entries, deadline).await {
            Ok(last) => last,
            Err(LogError::Undecided { last, reason }) => {
                return self.settle(last, reason, deadline).await
            }
            Err(e) => return Err(e),
        };
        let upto = if last >= 0 {
            last + 1
        } else {
            // A retried batch the leader had already taken: its offset is not
            // known, the committed end covers it.
            self.writer.log().committed_end_by(deadline).await?
        };
        self.node.wait_applied(upto, deadline).await
    }

    pub fn codec(&self) -> &Codec {
        &self.node.codec
    }

    /// Finds out whether the change ending at `last` was committed: once the
    /// committed end has passed it (the coordinator finishes or aborts every
    /// transaction, at the latest after its timeout), it was committed if and
    /// only if this instance applied it.
    async fn settle(
        &mut self,
        last: i64,
        reason: String,
        deadline: Instant,
    ) -> Result<(), LogError> {
        tracing::warn!(
            "{reason}; reading the state topic to learn whether the change was committed"
        );
        loop {
            match self.writer.log().committed_end().await {
                Ok(end) if end > last => {
                    self.node.wait_applied(end, deadline).await?;
                    break;
                }
                Ok(_) => {}
                Err(e) if !e.retriable() => return Err(e),
                Err(_) => {}
            }
            if Instant::now() >= deadline {
                return Err(LogError::Timeout(format!(
                    "the outcome of the change ending at offset {last} is still unknown ({reason})"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if self.node.applied_record(last) {
            Ok(())
        } else {
            Err(LogError::Fenced)
        }
    }
}

/// A poisoned lock only means another thread panicked while holding it; the
/// data (plain values, replaced whole) is still consistent.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The pause before trying again after another instance took the writer role
/// in the middle of this one's change (`lost` is how long the lost attempt
/// ran): one to two times as long as that attempt, spread by the clock's
/// nanoseconds, and longer with each attempt. The instance that took the role
/// last then has the time to commit before this one takes it back; with a
/// pause much shorter than an attempt, two instances changing the state at
/// once took the role from each other in turn until one gave up (seen in the
/// soak: seven times each in four seconds, under load).
fn retry_pause(attempt: u32, lost: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let spread = f64::from(nanos % 1000) / 1000.0;
    let floor = Duration::from_millis(10 * u64::from(attempt.min(10)));
    floor + lost.min(MAX_CONTENDED_ATTEMPT).mul_f64(1.0 + spread)
}

/// Waits `retry_pause` after an attempt begun at `started` lost the writer
/// role, but not past `deadline`: both retry loops (UpdateFeatures and the
/// shared config change) call this.
pub async fn pause_after_lost_role(attempt: u32, started: Instant, deadline: Instant) {
    let pause = retry_pause(attempt, started.elapsed());
    tokio::time::sleep_until(deadline.min(Instant::now() + pause).into()).await;
}

/// What `retry_pause` takes of a lost attempt at most: an attempt that ran
/// longer waited on the brokers (a leader moving), not on the other writer.
const MAX_CONTENDED_ATTEMPT: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_attempt_pauses_at_least_as_long_as_it_ran() {
        let lost = Duration::from_millis(500);
        for attempt in 1..=12 {
            let pause = retry_pause(attempt, lost);
            let floor = Duration::from_millis(10 * u64::from(attempt.min(10)));
            assert!(pause >= floor + lost, "{pause:?}");
            assert!(pause < floor + lost * 2, "{pause:?}");
        }
        // An attempt that waited on the brokers for long is not a measure of the
        // other writer.
        assert!(retry_pause(1, Duration::from_secs(30)) < Duration::from_millis(2010));
    }
}
