//! Wiring for a standalone kshim (no upstream): store, controller, handlers and a
//! listener, from a `Config`. Used by `kshim serve` and by the integration tests,
//! so that both start the same thing.

use crate::config::{Config, UpstreamConfig};
use crate::controller::{ControllerError, ControllerSettings, FeatureController};
use crate::features::Ownership;
use crate::handlers::api_versions::{Discovery, STANDALONE_APIS};
use crate::handlers::{Authorizer, Context, NodeAddress};
use crate::metrics::Metrics;
use crate::policy::PolicyCell;
use crate::protocol::response::EncodeError;
use crate::server::budget::FrameBudget;
use crate::server::ceiling::{self, MemoryCeiling};
use crate::server::memory::MemoryLimit;
use crate::server::{self, admission, Limits};
use crate::store::{FileStore, StoreError};
use crate::tls::{TlsCell, TlsMaterial};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Controller(#[from] ControllerError),
    #[error(transparent)]
    Encode(#[from] EncodeError),
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    #[error("listening on {addr}: {source}")]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("advertised listener {0} is not HOST:PORT")]
    Advertised(String),
    #[error("kshim cluster: {0}")]
    Cluster(String),
    #[error("upstream.listeners.sni_host: {0}")]
    ServerNames(String),
}

/// A bound, not yet serving, standalone kshim.
pub struct Standalone {
    pub listener: TcpListener,
    pub local_addr: SocketAddr,
    pub context: Arc<Context>,
    pub limits: Limits,
    /// The listener's TLS material, when `[tls]` is set.
    pub tls: Option<Arc<TlsCell>>,
}

impl Standalone {
    /// Opens the store (refusing incompatible stored levels), binds the listener
    /// and builds the handler context.
    pub async fn bind(config: &Config) -> Result<Standalone, StartError> {
        let tls = tls_cell(config)?;
        let store = FileStore::open(&config.data_dir)?;
        Standalone::bind_in(config, store, Arc::new(Metrics::new()), tls).await
    }

    /// As `bind`, on a store the caller opened and with TLS material it built.
    pub async fn bind_in(
        config: &Config,
        store: FileStore,
        metrics: Arc<Metrics>,
        tls: Option<Arc<TlsCell>>,
    ) -> Result<Standalone, StartError> {
        let controller = open_controller(config, store, Ownership::standalone(), None)?;
        let (listener, local_addr) = bind_listener(config).await?;
        let node = advertised_address(config, local_addr)?;
        let discovery = Discovery::new(
            STANDALONE_APIS.to_vec(),
            config.draft_tags,
            controller.snapshot(),
        )?;
        let context = Arc::new(Context {
            controller,
            discovery,
            node,
            authorizer: Arc::new(Authorizer::new(config.alter_cluster.clone())),
            upstream: None,
            policies: Arc::new(PolicyCell::new(config.policies.clone())),
            metrics,
            census: Arc::new(crate::census::Census::new(config.census.clone())),
            lab: Arc::new(crate::lab::Lab::from_specs(&config.lab)),
        });
        let limits = limits(config, None);
        watch_limits(&context.metrics, &limits);
        Ok(Standalone {
            listener,
            local_addr,
            context,
            limits,
            tls,
        })
    }

    /// Serves until `shutdown` turns true.
    pub async fn serve(self, shutdown: watch::Receiver<bool>) {
        let admission = self.limits.admission();
        server::serve(
            self.listener,
            server::Routing::Fixed(crate::upstream::Route::Bootstrap),
            self.context,
            self.limits,
            admission,
            self.tls,
            shutdown,
        )
        .await;
    }
}

/// The TLS material of `[tls]`, built and checked before anything listens.
pub fn tls_cell(config: &Config) -> Result<Option<Arc<TlsCell>>, StartError> {
    Ok(match &config.tls {
        Some(settings) => Some(Arc::new(TlsCell::new(TlsMaterial::build("tls", settings)?))),
        None => None,
    })
}

/// The controller on the store; both modes start here.
pub(crate) fn open_controller(
    config: &Config,
    store: FileStore,
    ownership: Ownership,
    cluster: Option<Arc<crate::cluster::ClusterNode>>,
) -> Result<Arc<FeatureController>, StartError> {
    Ok(Arc::new(FeatureController::open(
        Arc::new(store),
        ControllerSettings {
            node_id: config.node_id,
            cluster_id: config.cluster_id.clone(),
            supported: config.supported_features(),
            bootstrap: config.bootstrap.clone(),
            rules: config.update_rules(),
            ownership,
            cluster,
        },
    )?))
}

/// Binds the listener clients bootstrap from.
pub(crate) async fn bind_listener(
    config: &Config,
) -> Result<(TcpListener, SocketAddr), StartError> {
    let bind_error = |source| StartError::Bind {
        addr: config.listen.clone(),
        source,
    };
    let listener = TcpListener::bind(&config.listen)
        .await
        .map_err(bind_error)?;
    let local_addr = listener.local_addr().map_err(bind_error)?;
    Ok((listener, local_addr))
}

/// The limits of the Kafka listeners. Raises the process's open-file limit
/// toward its hard limit, and keeps `max_connections` within what the
/// descriptors allow: in front of a cluster each client connection holds two
/// (its own and its upstream link), and every broker a listener and a control
/// connection.
pub(crate) fn limits(config: &Config, upstream: Option<&UpstreamConfig>) -> Limits {
    // What kshim may use, read once for the ceiling and the frame budget.
    let limit = crate::server::memory::memory_limit();
    let memory = memory_ceiling(config, &limit);
    let mut max_connections = config.max_connections;
    if let Some(descriptors) = admission::raise_descriptor_limit() {
        let (fixed, per_connection) = match upstream {
            Some(u) => (2 * u.max_brokers, 2),
            None => (0, 1),
        };
        let budget = admission::connection_budget(
            descriptors,
            config.descriptor_reserve,
            fixed,
            per_connection,
        );
        if budget < max_connections {
            // Logged for both modes, under the module that admits connections. The
            // default fitted to the open-file limit is expected; a configured value
            // that cannot be had is worth a warning.
            let why = format!(
                "the open-file limit is {descriptors}, with {} kept back (descriptor_reserve) and {fixed} for broker listeners",
                config.descriptor_reserve
            );
            if max_connections == Config::default().max_connections {
                tracing::info!(target: "kshim::server::admission", "max_connections is {budget} (the default {max_connections}, fitted): {why}");
            } else {
                tracing::warn!(target: "kshim::server::admission", "max_connections lowered from {max_connections} to {budget}: {why}");
            }
            max_connections = budget;
        }
    }
    let room =
        usize::try_from(memory.bytes() / ceiling::CONNECTION_ALLOWANCE).unwrap_or(usize::MAX);
    if room < max_connections {
        let why = format!(
            "the memory ceiling ({} MiB, max_memory_bytes) has room for {room} connections at {} KiB each",
            memory.bytes() >> 20,
            ceiling::CONNECTION_ALLOWANCE >> 10
        );
        if config.max_connections == Config::default().max_connections {
            tracing::info!(target: "kshim::server::admission", "max_connections is {room} (the default, fitted): {why}");
            max_connections = room.max(1);
        } else {
            tracing::warn!(target: "kshim::server::admission", "max_connections ({max_connections}) is more than {why}; kshim sheds load before they are all open");
        }
    }
    Limits {
        max_frame_bytes: config.max_frame_bytes,
        // kshim's own connections authenticate, so the brokers' listener requires SASL of
        // the clients too: until they have, their frames are held to Kafka's pre-auth size.
        max_unauthenticated_frame_bytes: upstream
            .and_then(|u| u.sasl.as_ref())
            .map(|_| config.max_unauthenticated_frame_bytes),
        max_connections,
        max_connections_per_ip: config.max_connections_per_ip,
        max_connections_per_ip_overrides: std::sync::Arc::new(
            config
                .max_connections_per_ip_overrides
                .iter()
                .map(|(ip, n)| (*ip, *n))
                .collect(),
        ),
        max_unsent_response_bytes: config.max_unsent_response_bytes,
        handshakes: config.handshake_limits(),
        handshake_timeout: Duration::from_millis(config.tls_handshake_timeout_ms),
        idle_timeout: Duration::from_millis(config.connections_max_idle_ms),
        frame_timeout: Duration::from_millis(config.frame_read_timeout_ms),
        shutdown_grace: Duration::from_millis(config.shutdown_grace_ms),
        request_timeout: Duration::from_millis(upstream.map_or(30_000, |u| u.request_timeout_ms)),
        budget: FrameBudget::new(frame_budget(config, &limit)),
        memory,
        proxy_protocol: crate::server::ProxyProtocol {
            mode: config.proxy_protocol,
            trusted: std::sync::Arc::new(config.proxy_protocol_trusted.clone()),
        },
        max_in_flight: server::DEFAULT_MAX_IN_FLIGHT,
    }
}

/// The heap's ceiling: `max_memory_bytes`, or the default that the memory
/// kshim may use gives; logged with where it came from.
fn memory_ceiling(config: &Config, limit: &MemoryLimit) -> Arc<MemoryCeiling> {
    use crate::server::memory;
    let (bytes, why) = match config.max_memory_bytes {
        Some(bytes) => (bytes, "max_memory_bytes".to_owned()),
        None => (
            memory::default_ceiling(limit),
            format!(
                "the default for {} MiB, from {}; max_memory_bytes sets it",
                limit.bytes >> 20,
                limit.source
            ),
        ),
    };
    tracing::info!(
        target: "kshim::server::ceiling",
        "the heap's ceiling is {} MiB ({why}): kshim sheds load from {}% of it",
        bytes >> 20,
        ceiling::SHED_AT
    );
    MemoryCeiling::of_heap(bytes)
}

/// Shows the limits every listener shares in the metrics, and starts the
/// memory ceiling's sampler (it ends once the listeners are gone).
pub(crate) fn watch_limits(metrics: &Metrics, limits: &Limits) {
    metrics.watch_frame_budget(limits.budget.clone());
    metrics.watch_memory_ceiling(limits.memory.clone());
    tokio::spawn(MemoryCeiling::watch(Arc::downgrade(&limits.memory)));
}

/// The global budget for frames in transit: `max_queued_request_bytes`, or
/// the default that the memory kshim may use gives. Logged with where it came
/// from, and with a warning when the largest frame leaves little room.
fn frame_budget(config: &Config, limit: &MemoryLimit) -> usize {
    use crate::server::memory;
    let (budget, why) = match config.max_queued_request_bytes {
        Some(bytes) => (bytes, "max_queued_request_bytes"),
        None => (
            memory::default_frame_budget(config.max_frame_bytes, limit),
            "the default for that memory; max_queued_request_bytes sets it",
        ),
    };
    tracing::info!(
        target: "kshim::server::budget",
        "frames in transit are held to {} MiB at most ({why}); kshim may use {} MiB, from {}",
        budget >> 20,
        limit.bytes >> 20,
        limit.source
    );
    if matches!(limit.source, memory::LimitSource::Cgroup(_))
        && (budget as u64).saturating_add(64 << 20) > limit.bytes
    {
        tracing::warn!(
            target: "kshim::server::budget",
            "the frame budget ({} MiB) leaves under 64 MiB of the memory limit ({} MiB) for \
             everything else: lower max_frame_bytes or max_queued_request_bytes, or raise the limit",
            budget >> 20,
            limit.bytes >> 20
        );
    }
    budget
}

/// What clients are told: the advertised listener, or the listen host with the
/// port actually bound (so that port 0 works).
pub(crate) fn advertised_address(
    config: &Config,
    bound: SocketAddr,
) -> Result<NodeAddress, StartError> {
    let text = config.advertised_listener.clone().unwrap_or_else(|| {
        let host = config
            .listen
            .rsplit_once(':')
            .map_or("127.0.0.1", |(h, _)| h);
        format!("{host}:{}", bound.port())
    });
    let (host, port) = text
        .rsplit_once(':')
        .ok_or_else(|| StartError::Advertised(text.clone()))?;
    let port = match port
        .parse::<u16>()
        .map_err(|_| StartError::Advertised(text.clone()))?
    {
        0 => bound.port(),
        p => p,
    };
    Ok(NodeAddress {
        node_id: config.node_id,
        host: host.trim_matches(['[', ']']).to_owned(),
        port: i32::from(port),
    })
}
