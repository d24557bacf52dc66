//! Everything `kshim serve` runs, put together in one place: the config (the file,
//! the command line and the stored overrides), the data directory, the Kafka
//! listeners (standalone, or in front of a cluster), the admin API, and the
//! registry of what can change while kshim runs. Used by `kshim serve` and by the
//! integration tests, so that both start the same thing.

use crate::admin::{self, Access, AccessCell, AdminAccessComponent, AdminState};
use crate::cluster::{self, Applier, ClusterNode, SharedFeatures};
use crate::config::{Config, ConfigErrors, ConfigSource};
use crate::controller::ControllerError;
use crate::handlers::Context;
use crate::metrics::Metrics;
use crate::proxy::Proxy;
use crate::reconfig::{
    self, AuthorizationComponent, ListenerTlsComponent, LogLevelComponent, PolicyComponent,
    Reconfigurable, Registry, UpstreamTlsComponent,
};
use crate::standalone::{tls_cell, Standalone, StartError};
use crate::store::Overrides;
use crate::store::{FileStore, OverrideLog};
use crate::tls::{TlsCell, TlsMaterial};
use arc_swap::ArcSwap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("{0}")]
    Config(#[from] ConfigErrors),
    #[error(transparent)]
    Start(#[from] StartError),
    #[error("admin.listen {addr}: {source}")]
    AdminBind {
        addr: String,
        source: std::io::Error,
    },
}

/// How the running process's log filter is changed (`log.level`).
pub struct LogControl {
    pub set: reconfig::LogFilterSetter,
    /// The filter kshim started with (`RUST_LOG`, or its default).
    pub startup_filter: String,
}

enum Mode {
    Standalone(Standalone),
    Proxy(Proxy),
}

struct AdminListener {
    listener: TcpListener,
    tls: Option<Arc<TlsCell>>,
}

/// A bound, not yet serving, kshim.
pub struct Service {
    /// The bootstrap listener's address.
    pub local_addr: SocketAddr,
    /// The admin API's address, when `[admin]` is set.
    pub admin_addr: Option<SocketAddr>,
    pub context: Arc<Context>,
    pub registry: Arc<Registry>,
    /// The config kshim started with (the file, the command line and the stored
    /// overrides, or the file alone when the overrides did not check out).
    pub config: Config,
    /// The admin API's state, also when it has no listener (tests use it).
    pub admin: Arc<AdminState>,
    mode: Mode,
    admin_listener: Option<AdminListener>,
    cluster: Option<ClusterTasks>,
}

/// The tasks of a kshim cluster member, stopped after the listeners.
struct ClusterTasks {
    stop: watch::Sender<bool>,
    announcer: tokio::task::JoinHandle<()>,
}

impl Service {
    /// Reads the config, opens the data directory, puts the stored overrides in
    /// force when they check out, and binds every listener.
    pub async fn start(
        source: ConfigSource,
        log: Option<LogControl>,
    ) -> Result<Service, ServiceError> {
        let doc = source.read_document()?;
        let file = source.build(doc.clone())?;
        let data_dir = file.config.data_dir.clone();
        let store = FileStore::open(&data_dir).map_err(StartError::from)?;
        let overrides = OverrideLog::open(&data_dir).map_err(StartError::from)?;
        let loaded = reconfig::startup_config(&source, &doc, overrides.active(), file);
        let config = loaded.config;
        let metrics = Arc::new(Metrics::new());
        // TLS material is checked before any broker is asked or anything listens.
        let tls = tls_cell(&config)?;
        let admin_tls = match config.admin.as_ref().and_then(|a| a.tls.as_ref()) {
            Some(settings) => Some(Arc::new(TlsCell::new(
                TlsMaterial::build("admin.tls", settings).map_err(StartError::from)?,
            ))),
            None => None,
        };
        // The admin listener is bound before the feature state is first written:
        // a start that fails on a busy admin port leaves no state behind.
        let admin_listener = match &config.admin {
            Some(a) => {
                let (listener, _) = admin::server::bind(&a.listen).await.map_err(|source| {
                    ServiceError::AdminBind {
                        addr: a.listen.clone(),
                        source,
                    }
                })?;
                Some(AdminListener {
                    listener,
                    tls: admin_tls.clone(),
                })
            }
            None => None,
        };
        let mode = match &config.upstream {
            Some(upstream) => Mode::Proxy(
                Proxy::bind_in(&config, upstream, store, Arc::clone(&metrics), tls.clone()).await?,
            ),
            None => Mode::Standalone(
                Standalone::bind_in(&config, store, Arc::clone(&metrics), tls.clone()).await?,
            ),
        };
        // A standalone kshim has no upstream connections, so no upstream TLS to
        // change: its `upstream.*` keys are restart keys like the rest of `[upstream]`.
        let (context, local_addr, upstream_tls) = match &mode {
            Mode::Standalone(s) => (Arc::clone(&s.context), s.local_addr, None),
            Mode::Proxy(p) => (
                Arc::clone(&p.context),
                p.local_addr,
                Some(UpstreamTlsComponent {
                    cell: p.upstream.link.tls.clone(),
                }),
            ),
        };
        let admin_addr = admin_listener
            .as_ref()
            .and_then(|a| a.listener.local_addr().ok());
        let access: Arc<AccessCell> = Arc::new(ArcSwap::from_pointee(
            config
                .admin
                .as_ref()
                .map(Access::from_config)
                .unwrap_or_default(),
        ));
        let mut components: Vec<Box<dyn Reconfigurable>> = vec![
            Box::new(ListenerTlsComponent::kafka(tls)),
            Box::new(ListenerTlsComponent::admin(admin_tls)),
            Box::new(PolicyComponent {
                cell: Arc::clone(&context.policies),
            }),
            Box::new(AuthorizationComponent {
                authorizer: Arc::clone(&context.authorizer),
            }),
            Box::new(AdminAccessComponent {
                cell: Arc::clone(&access),
            }),
        ];
        if let Some(upstream_tls) = upstream_tls {
            components.push(Box::new(upstream_tls));
        }
        if let Some(log) = log {
            let current = config
                .log_level
                .clone()
                .unwrap_or_else(|| log.startup_filter.clone());
            if let Some(level) = &config.log_level {
                if let Err(e) = (log.set)(level) {
                    tracing::error!("log.level {level:?} not applied: {e}");
                }
            }
            components.push(Box::new(LogLevelComponent::new(
                log.set,
                log.startup_filter,
                current,
            )));
        }
        let registry = Arc::new(Registry::new(
            source,
            doc,
            overrides,
            &config,
            components,
            Arc::clone(&metrics),
            context.controller.cluster().cloned(),
        ));
        let cluster = match context.controller.cluster() {
            Some(node) => Some(
                join_cluster(
                    Arc::clone(node),
                    Arc::clone(&context),
                    Arc::clone(&registry),
                )
                .await?,
            ),
            None => None,
        };
        let admin = Arc::new(AdminState {
            registry: Arc::clone(&registry),
            context: Arc::clone(&context),
            access,
            max_body_bytes: config
                .admin
                .as_ref()
                .map_or(64 * 1024, |a| a.max_body_bytes),
            stopping: AtomicBool::new(false),
        });
        warn_about(&config);
        Ok(Service {
            local_addr,
            admin_addr,
            context,
            registry,
            config,
            admin,
            mode,
            admin_listener,
            cluster,
        })
    }

    /// Serves every listener until `shutdown` turns true.
    pub async fn serve(self, shutdown: watch::Receiver<bool>) {
        if let Some(a) = self.admin_listener {
            let router = admin::router(Arc::clone(&self.admin));
            tokio::spawn(admin::server::serve(
                a.listener,
                router,
                a.tls,
                shutdown.clone(),
            ));
        }
        match self.mode {
            Mode::Standalone(s) => s.serve(shutdown).await,
            Mode::Proxy(p) => p.serve(shutdown).await,
        }
        if let Some(tasks) = self.cluster {
            // Withdrawing the registration lets the other instances count this
            // one out at once instead of after the session timeout.
            let _ = tasks.stop.send(true);
            let _ = tasks.announcer.await;
        }
    }
}

/// What the state topic's follower hands to this instance.
struct SharedApplier {
    context: Arc<Context>,
    registry: Arc<Registry>,
}

impl Applier for SharedApplier {
    async fn features(&self, features: SharedFeatures) {
        self.context.controller.adopt(features).await;
        let incompatible = self.context.controller.incompatible_with_self();
        if !incompatible.is_empty() {
            tracing::error!(
                "the kshim cluster finalized a level this instance does not support: {}",
                incompatible
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            );
        }
    }

    async fn config(&self, overrides: Overrides) -> Result<(), String> {
        self.registry.adopt(overrides).await
    }
}

/// Follows the shared state, waits (at most `cluster.startup_timeout_ms`) to
/// catch up with it, refuses to start when it finalizes a level this instance
/// does not support, and then announces this instance to the others.
async fn join_cluster(
    node: Arc<ClusterNode>,
    context: Arc<Context>,
    registry: Arc<Registry>,
) -> Result<ClusterTasks, StartError> {
    let (stop, stopped) = watch::channel(false);
    let applier = SharedApplier {
        context: Arc::clone(&context),
        registry,
    };
    tokio::spawn(cluster::follow(Arc::clone(&node), applier, stopped.clone()));
    let timeout = Duration::from_millis(node.settings.startup_timeout_ms);
    // An upstream that did not answer at startup is not waited for: the state
    // kept in the data directory is served meanwhile.
    let away = context.upstream.as_ref().is_some_and(|u| !u.reachable());
    if node.wait_caught_up(timeout, away).await {
        let incompatible = context.controller.incompatible_with_self();
        if !incompatible.is_empty() {
            let _ = stop.send(true);
            return Err(StartError::Controller(ControllerError::Incompatible(
                incompatible,
            )));
        }
        if node.shared_features().is_none() {
            let seeded = match context.controller.begin(timeout).await {
                Ok(section) => section.seed_shared_state().await,
                Err(e) => Err(e),
            };
            if let Err(e) = seeded {
                tracing::warn!(
                    "could not write the kshim cluster's first feature state: {}",
                    e.message
                );
            }
        }
        tracing::info!(
            cluster = %node.settings.id,
            instance = node.instance_id(),
            offset = node.applied(),
            epoch = context.controller.snapshot().finalized.epoch,
            "caught up with the kshim cluster's shared state"
        );
    } else {
        tracing::warn!(
            cluster = %node.settings.id,
            "not caught up with the kshim cluster's shared state (the state topic cannot be read now, or not within {} ms): serving the state kept in the data directory, not ready until caught up",
            timeout.as_millis()
        );
    }
    let announcer = tokio::spawn(cluster::registration::announce(node, stopped));
    Ok(ClusterTasks { stop, announcer })
}

fn warn_about(config: &Config) {
    if config.alter_cluster.is_none() {
        tracing::warn!(
            "authorization.alter_cluster is not set: every client may finalize features, as in Kafka without an authorizer"
        );
    }
    if let Some(a) = &config.admin {
        let client_certs = a
            .tls
            .as_ref()
            .is_some_and(|t| t.client_auth != crate::tls::ClientAuth::None);
        if a.token.is_none() && !client_certs {
            tracing::warn!(
                "the admin API has no credential (admin.token, or [admin.tls] with client certificates): it refuses every write{}",
                if a.read_requires_auth { " and read" } else { "" }
            );
        }
    }
}
