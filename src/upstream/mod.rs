//! kshim in front of a Kafka cluster: finding the upstream brokers and keeping that
//! view fresh (`cluster`), one kshim listener per broker (`listeners`), the
//! connections that carry forwarded requests (`link`), and the rewriting of broker
//! addresses in responses (`rewrite`).
//!
//! Knows the Kafka wire format only as far as forwarding needs it. Knows nothing of
//! feature rules or of the handlers: the proxy wiring (`crate::proxy`) connects
//! what this module learns to the controller and to ApiVersions.

pub mod cluster;
pub mod configs;
pub mod link;
pub mod listeners;
pub mod sni;

pub use cluster::{ClusterView, UpstreamFeatures};
pub use link::{LinkSettings, UnknownApiKeys, UpstreamLink};
pub use listeners::{ListenerLayout, Listeners, NameRoute, Route};

/// What went wrong between kshim and the upstream. Each variant says who caused it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    /// No upstream address accepted a connection (the upstream is away).
    #[error("no upstream broker reachable at {targets}: {reason}")]
    Unreachable { targets: String, reason: String },
    /// An upstream connection broke or the broker misbehaved on it.
    #[error("upstream connection to {target} failed: {reason}")]
    Broken { target: String, reason: String },
    /// The link was already closed when a request was handed to it.
    #[error("upstream connection to {target} is closed")]
    LinkClosed { target: String },
    /// The upstream answered, but not in a way kshim can use.
    #[error("upstream at {target}: {reason}")]
    Protocol { target: String, reason: String },
}

use crate::protocol::response::{response_body_offset, Answer};
use arc_swap::ArcSwap;
use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// The upstream as the connections see it: where to send, and how to make
/// responses safe to hand to clients.
pub struct Upstream {
    pub listeners: Listeners,
    pub link: LinkSettings,
    /// How long the upstream may be unreachable before /readyz says not ready
    /// (`upstream.unready_after_ms`).
    pub unready_after: Duration,
    bootstrap: Vec<String>,
    view: ArcSwap<ClusterView>,
    /// Spreads bootstrap connections over the live brokers.
    rotation: AtomicUsize,
    /// Whether the last refresh reached the upstream.
    reachable: AtomicBool,
    /// Since when no refresh has reached the upstream (`None` while it does).
    unreachable_since: std::sync::Mutex<Option<std::time::Instant>>,
    refreshes_ok: AtomicU64,
    refreshes_failed: AtomicU64,
    refresh: mpsc::UnboundedSender<oneshot::Sender<()>>,
    /// When the last refresh asked for by a server name of an unseen broker
    /// ended; those who ask while one runs wait for it here.
    unseen_refresh: tokio::sync::Mutex<Option<std::time::Instant>>,
}

/// Refreshes asked for by server names of unseen brokers: at most one a
/// second, whatever names a client makes up.
const UNSEEN_REFRESH_SPACING: Duration = Duration::from_secs(1);

impl Upstream {
    /// `refresh` reaches whoever refreshes the view; each request is answered
    /// once a refresh has finished.
    pub fn new(
        listeners: Listeners,
        link: LinkSettings,
        bootstrap: Vec<String>,
        refresh: mpsc::UnboundedSender<oneshot::Sender<()>>,
        unready_after: Duration,
    ) -> Upstream {
        Upstream {
            listeners,
            link,
            unready_after,
            bootstrap,
            view: ArcSwap::from_pointee(ClusterView::default()),
            rotation: AtomicUsize::new(0),
            reachable: AtomicBool::new(false),
            unreachable_since: std::sync::Mutex::new(None),
            refreshes_ok: AtomicU64::new(0),
            refreshes_failed: AtomicU64::new(0),
            refresh,
            unseen_refresh: tokio::sync::Mutex::new(None),
        }
    }

    /// Counts a refresh of the view, and whether it reached the upstream.
    pub fn record_refresh(&self, reached: bool) {
        self.reachable.store(reached, Ordering::Relaxed);
        {
            let mut since = self
                .unreachable_since
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            *since = match (reached, *since) {
                (true, _) => None,
                (false, Some(earlier)) => Some(earlier),
                (false, None) => Some(std::time::Instant::now()),
            };
        }
        let counter = if reached {
            &self.refreshes_ok
        } else {
            &self.refreshes_failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether the last refresh reached the upstream.
    pub fn reachable(&self) -> bool {
        self.reachable.load(Ordering::Relaxed)
    }

    /// How long refreshes have failed to reach the upstream, one after
    /// another; `None` while the last one reached it.
    pub fn unreachable_for(&self) -> Option<Duration> {
        let since = *self
            .unreachable_since
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        since.map(|t| t.elapsed())
    }

    /// Refreshes that reached the upstream, and those that did not.
    pub fn refreshes(&self) -> (u64, u64) {
        (
            self.refreshes_ok.load(Ordering::Relaxed),
            self.refreshes_failed.load(Ordering::Relaxed),
        )
    }

    pub fn view(&self) -> Arc<ClusterView> {
        self.view.load_full()
    }

    pub fn set_view(&self, view: ClusterView) {
        self.view.store(Arc::new(view));
    }

    /// Where a connection on `route` sends its requests, in the order to try:
    /// the broker itself, or for the bootstrap listener every known broker
    /// (starting at a different one for each connection) and then the configured
    /// bootstrap addresses.
    pub fn targets(&self, route: Route) -> Vec<String> {
        match route {
            Route::Node(id) => self.listeners.upstream_of(id).into_iter().collect(),
            Route::Bootstrap => {
                let view = self.view.load();
                let mut known: Vec<String> = view
                    .brokers
                    .iter()
                    .filter(|(id, _)| view.live.contains_key(id))
                    .map(|(_, b)| b.address())
                    .collect();
                if !known.is_empty() {
                    let start = self.rotation.fetch_add(1, Ordering::Relaxed) % known.len();
                    known.rotate_left(start);
                }
                for b in &self.bootstrap {
                    if !known.contains(b) {
                        known.push(b.clone());
                    }
                }
                known
            }
        }
    }

    /// Asks for a refresh of the view and waits (at most `timeout`) until one has
    /// finished.
    pub async fn refresh_now(&self, timeout: Duration) {
        let (tx, rx) = oneshot::channel();
        if self.refresh.send(tx).is_ok() {
            let _ = tokio::time::timeout(timeout, rx).await;
        }
    }

    /// A client asked, by TLS server name, for a broker this instance has not
    /// seen: refreshes the view once (within `timeout`), so that a broker that
    /// just joined, or that another replica knows already, is served. One such
    /// refresh at a time, and at most one a second: a client that asks for
    /// names of brokers that do not exist gets the view of the last second.
    pub async fn refresh_for_unseen_broker(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, async {
            let mut last = self.unseen_refresh.lock().await;
            if last.is_some_and(|t| t.elapsed() < UNSEEN_REFRESH_SPACING) {
                return;
            }
            self.refresh_now(timeout).await;
            *last = Some(std::time::Instant::now());
        })
        .await;
    }

    /// Rewrites the broker addresses in a response frame (without its size
    /// prefix) of `api` at `version`; frames that need no change come back as they
    /// were.
    /// The top-level tagged fields of a Fetch v16+ response, rewritten at
    /// their length (see `protocol::rewrite::rewrite_fetch_tail`).
    pub fn rewrite_fetch_tail(
        &self,
        version: i16,
        tail: &[u8],
    ) -> Result<Option<Vec<u8>>, crate::protocol::rewrite::RewriteError> {
        crate::protocol::rewrite::rewrite_fetch_tail(version, tail, &self.listeners)
    }

    pub fn rewrite_response(
        &self,
        api: ApiKey,
        version: i16,
        frame: Bytes,
    ) -> Result<Answer, crate::protocol::rewrite::RewriteError> {
        let malformed = |source| crate::protocol::rewrite::RewriteError::Malformed {
            api,
            version,
            source,
        };
        let header_len = response_body_offset(api, version, &frame).map_err(malformed)?;
        let rewritten = crate::protocol::rewrite::rewrite_frame(
            api,
            version,
            &frame,
            header_len,
            &self.listeners,
        )?;
        Ok(rewritten.unwrap_or_else(|| Answer::whole(frame)))
    }
}
