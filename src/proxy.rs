//! Wiring for kshim in front of a Kafka cluster: the store and controller as in
//! standalone, the bootstrap listener, the per-broker listeners, and the refresher
//! that keeps the upstream view fresh and hands what it learns to ApiVersions (the
//! API table) and to the controller (the mirrored features and the supporters).
//! Used by `kshim serve --upstream` and by the integration tests.

use crate::cluster::ClusterNode;
use crate::config::{Config, UpstreamConfig};
use crate::features::{Mirror, Ownership, Supporter};
use crate::handlers::api_versions::{narrowings, proxy_apis, Discovery};
use crate::handlers::{Authorizer, Context, NodeAddress};
use crate::metrics::Metrics;
use crate::policy::PolicyCell;
use crate::protocol::api_versions::ApiRange;
use crate::server::{self, Limits};
use crate::standalone::{
    advertised_address, bind_listener, limits, open_controller, tls_cell, watch_limits, StartError,
};
use crate::store::FileStore;
use crate::tls::{ClientTlsCell, ClientTlsMaterial, TlsCell};
use crate::upstream::cluster::Discoverer;
use crate::upstream::listeners::BoundListener;
use crate::upstream::sni::ServerNames;
use crate::upstream::{ClusterView, LinkSettings, ListenerLayout, Listeners, Route, Upstream};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::task::TaskTracker;

/// A bound, not yet serving, kshim in front of a cluster.
pub struct Proxy {
    pub listener: TcpListener,
    pub local_addr: SocketAddr,
    pub context: Arc<Context>,
    pub limits: Limits,
    /// TLS material of every client-facing listener, when `[tls]` is set.
    pub tls: Option<Arc<TlsCell>>,
    pub upstream: Arc<Upstream>,
    discoverer: Discoverer,
    refresh_interval: Duration,
    bound: mpsc::UnboundedReceiver<BoundListener>,
    refresh_requests: mpsc::UnboundedReceiver<oneshot::Sender<()>>,
    /// Brokers whose configs have been audited against the finalized levels.
    audited: BTreeSet<i32>,
}

impl Proxy {
    /// Opens the store, binds the bootstrap listener, and makes a first attempt
    /// to reach the upstream, so that the first clients already see the cluster.
    /// An unreachable upstream is logged, not fatal: kshim starts with what its
    /// store remembers and keeps trying.
    pub async fn bind(
        config: &Config,
        upstream_config: &UpstreamConfig,
    ) -> Result<Proxy, StartError> {
        // TLS material is checked before anything is stored or any broker is asked.
        let tls = tls_cell(config)?;
        let store = FileStore::open(&config.data_dir)?;
        Proxy::bind_in(
            config,
            upstream_config,
            store,
            Arc::new(Metrics::new()),
            tls,
        )
        .await
    }

    /// As `bind`, on a store the caller opened and with client-facing TLS
    /// material it built.
    pub async fn bind_in(
        config: &Config,
        upstream_config: &UpstreamConfig,
        store: FileStore,
        metrics: Arc<Metrics>,
        tls: Option<Arc<TlsCell>>,
    ) -> Result<Proxy, StartError> {
        let upstream_tls = match &upstream_config.tls {
            Some(settings) => Some(Arc::new(ClientTlsCell::new(ClientTlsMaterial::build(
                "upstream.tls",
                settings,
            )?))),
            None => None,
        };
        let (listener, local_addr) = bind_listener(config).await?;
        let node = advertised_address(config, local_addr)?;
        let layout = layout(config, upstream_config, &node, local_addr)?;
        if let (Some(names), Some(cell)) = (&layout.server_names, &tls) {
            if let Some(why) = names.uncovered(&cell.current().dns_names()) {
                tracing::warn!("upstream.listeners.sni_host: {why}");
            }
        }
        let (bound_tx, bound) = mpsc::unbounded_channel();
        let (refresh_tx, refresh_requests) = mpsc::unbounded_channel();
        let link = LinkSettings {
            connect_timeout: Duration::from_millis(upstream_config.connect_timeout_ms),
            request_timeout: Duration::from_millis(upstream_config.request_timeout_ms),
            max_response_bytes: upstream_config.max_response_bytes,
            tls: upstream_tls,
            sasl: upstream_config.sasl.clone(),
            unknown_api_keys: upstream_config.unknown_api_keys,
        };
        let cluster = config.cluster.as_ref().map(|settings| {
            Arc::new(ClusterNode::new(
                settings.clone(),
                link.clone(),
                upstream_config.bootstrap.clone(),
                config.supported_features(),
                vec![format!("{}:{}", node.host, node.port)],
            ))
        });
        let controller = open_controller(
            config,
            store,
            Ownership::in_front(config.kshim_owned.clone()),
            cluster.clone(),
        )?;
        let upstream = Arc::new(Upstream::new(
            Listeners::new(layout, bound_tx),
            link.clone(),
            upstream_config.bootstrap.clone(),
            refresh_tx,
            Duration::from_millis(upstream_config.unready_after_ms),
        ));
        // Until the upstream answers, kshim offers only what it serves itself.
        let discovery = Discovery::new(
            proxy_apis(&[], upstream_config.unknown_api_keys),
            config.draft_tags,
            controller.snapshot(),
        )?;
        let context = Arc::new(Context {
            controller,
            discovery,
            node,
            authorizer: Arc::new(Authorizer::new(config.alter_cluster.clone())),
            upstream: Some(Arc::clone(&upstream)),
            policies: Arc::new(PolicyCell::new(config.policies.clone())),
            metrics,
            census: Arc::new(crate::census::Census::new(config.census.clone())),
            lab: Arc::new(crate::lab::Lab::from_specs(&config.lab)),
        });
        // Before the first refresh binds a listener per broker: the open-file limit is
        // raised here, and a cluster of a thousand brokers needs more than the usual
        // soft limit of 1,024 descriptors for those listeners alone.
        let limits = limits(config, Some(upstream_config));
        let mut discoverer = Discoverer::new(upstream_config.bootstrap.clone(), link);
        let mut audited = BTreeSet::new();
        match discoverer.refresh(&ClusterView::default()).await {
            Ok(view) => {
                upstream.record_refresh(true);
                apply(&context, &upstream, view, true).await;
                audit_new_brokers(&context, &upstream, &mut audited).await;
            }
            Err(e) if !context.controller.snapshot().cluster_unknown => tracing::warn!(
                "{e}; starting anyway with the stored feature view (epoch {}), and retrying every {} ms",
                context.controller.snapshot().finalized.epoch,
                upstream_config.refresh_interval_ms
            ),
            Err(e) => tracing::warn!(
                "{e}; starting anyway with no feature view stored: until a broker answers, clients \
                 are told that nothing is finalized (epoch -1) and are offered only ApiVersions and \
                 UpdateFeatures. Retrying every {} ms",
                upstream_config.refresh_interval_ms
            ),
        }
        if let Some(node) = &cluster {
            // A state topic that exists but cannot hold the state stops kshim
            // here; an upstream that is away does not (the state kept in the
            // data directory is served until it returns).
            let deadline = std::time::Instant::now()
                + Duration::from_millis(
                    config
                        .cluster
                        .as_ref()
                        .map_or(30_000, |c| c.startup_timeout_ms),
                );
            match node.ensure_topic(deadline).await {
                Ok(()) => {}
                Err(e @ crate::cluster::LogError::Topic { .. }) => {
                    return Err(StartError::Cluster(e.to_string()))
                }
                Err(e) => {
                    tracing::warn!("the kshim cluster's state topic cannot be checked now: {e}")
                }
            }
        }
        watch_limits(&context.metrics, &limits);
        Ok(Proxy {
            listener,
            local_addr,
            context,
            limits,
            tls,
            upstream,
            discoverer,
            refresh_interval: Duration::from_millis(upstream_config.refresh_interval_ms),
            bound,
            refresh_requests,
            audited,
        })
    }

    /// Serves the bootstrap listener and every broker listener until `shutdown`
    /// turns true.
    pub async fn serve(self, shutdown: watch::Receiver<bool>) {
        let Proxy {
            listener,
            context,
            limits,
            upstream,
            mut discoverer,
            refresh_interval,
            mut bound,
            mut refresh_requests,
            tls,
            mut audited,
            ..
        } = self;
        let admission = limits.admission();
        let tracker = TaskTracker::new();
        let routing = if upstream.listeners.by_server_name() {
            let upstream = Arc::clone(&upstream);
            server::Routing::ByServerName(Arc::new(move |name: Option<&str>| {
                upstream.listeners.route_by_name(name)
            }))
        } else {
            server::Routing::Fixed(Route::Bootstrap)
        };
        tracker.spawn(server::serve(
            listener,
            routing,
            Arc::clone(&context),
            limits.clone(),
            Arc::clone(&admission),
            tls.clone(),
            shutdown.clone(),
        ));
        let mut stop = shutdown.clone();
        let mut ticker = tokio::time::interval(refresh_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut reachable = !upstream.view().brokers.is_empty();
        loop {
            tokio::select! {
                _ = server::stopped(&mut stop) => break,
                Some(b) = bound.recv() => match TcpListener::from_std(b.socket) {
                    Ok(l) => {
                        tracker.spawn(server::serve(
                            l,
                            server::Routing::Fixed(Route::Node(b.node_id)),
                            Arc::clone(&context),
                            limits.clone(),
                            Arc::clone(&admission),
                            tls.clone(),
                            b.closed,
                        ));
                    }
                    Err(e) => tracing::error!(node = b.node_id, "cannot serve the listener of broker {}: {e}", b.node_id),
                },
                request = refresh_requests.recv() => {
                    // Everyone who asked while this refresh runs is answered by it.
                    let mut waiting: Vec<oneshot::Sender<()>> = request.into_iter().collect();
                    while let Ok(more) = refresh_requests.try_recv() {
                        waiting.push(more);
                    }
                    reachable = refresh(&context, &upstream, &mut discoverer, reachable).await;
                    audit_new_brokers(&context, &upstream, &mut audited).await;
                    for w in waiting {
                        let _ = w.send(());
                    }
                }
                _ = ticker.tick() => {
                    reachable = refresh(&context, &upstream, &mut discoverer, reachable).await;
                    audit_new_brokers(&context, &upstream, &mut audited).await;
                }
            }
        }
        upstream.listeners.close_all();
        tracker.close();
        tracker.wait().await;
    }
}

/// One refresh; returns whether the upstream answered. Losing and regaining the
/// upstream are logged once each.
async fn refresh(
    context: &Context,
    upstream: &Upstream,
    discoverer: &mut Discoverer,
    was_reachable: bool,
) -> bool {
    let previous = upstream.view();
    match discoverer.refresh(&previous).await {
        Ok(view) => {
            if !was_reachable {
                tracing::info!("upstream reachable again: {} broker(s)", view.brokers.len());
            }
            upstream.record_refresh(true);
            apply(context, upstream, view, false).await;
            true
        }
        Err(e) => {
            upstream.record_refresh(false);
            if was_reachable {
                tracing::warn!(
                    "{e}; kshim keeps serving ApiVersions from its cached view and keeps retrying"
                );
            } else {
                tracing::debug!("{e}");
            }
            false
        }
    }
}

/// Hands a fresh view to the listeners, ApiVersions and the controller.
async fn apply(context: &Context, upstream: &Upstream, view: ClusterView, first: bool) {
    let previous = upstream.view();
    // A misbehaving upstream may name thousands of brokers: one line for all
    // that could not be served, not one each.
    let mut unserved = Vec::new();
    for (&id, broker) in &view.brokers {
        if let Err(e) = upstream.listeners.ensure(id, &broker.address()) {
            unserved.push((id, e));
        }
    }
    if let Some((id, e)) = unserved.first() {
        tracing::error!(
            node = id,
            "{e}{}",
            match unserved.len() {
                1 => String::new(),
                n => format!(" (and {} more brokers not served)", n - 1),
            }
        );
    }
    let left: Vec<i32> = previous
        .brokers
        .keys()
        .filter(|id| !view.brokers.contains_key(id))
        .copied()
        .collect();
    for &id in &left {
        upstream.listeners.retire(id);
    }
    match left.as_slice() {
        [] => {}
        [id] => tracing::warn!(
            node = id,
            "broker {id} left the upstream cluster; closing its client connections"
        ),
        ids => tracing::warn!(
            "{} brokers left the upstream cluster (first {}); closing their client connections",
            ids.len(),
            ids[0]
        ),
    }
    let closed = upstream.listeners.sweep();
    if !closed.is_empty() {
        tracing::info!(
            "closed the listeners of {} broker(s) gone for longer than upstream.listener_grace_ms (first {})",
            closed.len(),
            closed[0]
        );
    }
    if first {
        tracing::info!(
            cluster_id = view.cluster_id.as_deref().unwrap_or("?"),
            "upstream has {} broker(s), {} answering",
            view.brokers.len(),
            view.live.len()
        );
    }
    if !view.live.is_empty() {
        let brokers_apis = view.api_intersection();
        let unknown = context
            .upstream
            .as_ref()
            .map_or_else(Default::default, |u| u.link.unknown_api_keys);
        let offered = proxy_apis(&brokers_apis, unknown);
        log_narrowings(&brokers_apis, &offered);
        context.discovery.set_apis(offered);
        let features = view.features();
        let supporters = features
            .per_broker
            .iter()
            .map(|(id, supported)| Supporter {
                label: format!("Broker {id}"),
                features: supported.clone(),
                only_listed: true,
            })
            .collect();
        context
            .controller
            .apply_mirror(
                Mirror {
                    supported: features.supported,
                    finalized: features.finalized,
                    cluster_id: view.cluster_id.clone(),
                },
                supporters,
            )
            .await;
        settle_upstream_epoch(context).await;
    }
    upstream.set_view(view);
}

/// In a kshim cluster, a change of the upstream's levels gets an epoch of the
/// shared state, written by whichever instance sees it first; the others find
/// it settled. Skipped while an update holds the section (it settles the
/// levels it forwarded itself) or while the state topic is out of reach.
async fn settle_upstream_epoch(context: &Context) {
    let controller = &context.controller;
    if !controller.upstream_epoch_unsettled().await {
        return;
    }
    match controller.try_begin().await {
        None => {}
        Some(Err(e)) => tracing::debug!(
            "the upstream's levels have no shared epoch yet: {}",
            e.message
        ),
        Some(Ok(section)) => {
            if let Err(e) = section.settle_upstream_epoch().await {
                tracing::warn!(
                    "the upstream's levels have no shared epoch yet: {}",
                    e.message
                );
            }
        }
    }
}

/// Audits each broker the first time a refresh sees it answer (and again
/// while it is found in breach) against the validators of the levels in force:
/// a broker that joined after a level was audited must not hide a violation.
/// What it finds is reported beside the range conflicts. A broker that cannot
/// be read now is tried again at the next refresh.
async fn audit_new_brokers(context: &Context, upstream: &Upstream, audited: &mut BTreeSet<i32>) {
    let view = upstream.view();
    let policies = context.policies.load();
    let supporter = |id: i32| format!("Broker {id}");
    for id in audited.clone() {
        if !view.brokers.contains_key(&id) {
            audited.remove(&id);
            context
                .controller
                .set_config_conflicts(&supporter(id), Vec::new());
        }
    }
    if policies.validators.is_empty() {
        return;
    }
    let snapshot = context.controller.snapshot();
    let level_of = |f: &str| snapshot.finalized.level(f);
    let features: Vec<&str> = policies.validators.features();
    let mut keys: Vec<String> = features
        .iter()
        .flat_map(|f| policies.validators.keys_of(f))
        .map(str::to_owned)
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let Some(version) = crate::upstream::configs::describe_version(&view) else {
        return;
    };
    let in_breach: BTreeSet<String> = context
        .controller
        .conflicts()
        .into_iter()
        .filter(|c| matches!(c.problem, crate::features::Problem::Configs(_)))
        .map(|c| c.supporter)
        .collect();
    for (&id, broker) in &view.brokers {
        if !view.live.contains_key(&id)
            || (audited.contains(&id) && !in_breach.contains(&supporter(id)))
        {
            continue;
        }
        let deadline = std::time::Instant::now() + upstream.link.connect_timeout;
        let configs = match crate::upstream::configs::broker_configs(
            id,
            &broker.address(),
            version,
            &keys,
            &upstream.link,
            None,
            deadline,
        )
        .await
        {
            Ok(configs) => configs,
            Err(e) => {
                tracing::debug!(node = id, "broker {id} not audited yet: {e}");
                continue;
            }
        };
        let found = features
            .iter()
            .filter_map(|&feature| {
                let level = level_of(feature);
                let findings =
                    crate::policy::audit(&policies.validators, feature, level, &level_of, &configs);
                (!findings.is_empty()).then(|| crate::features::Conflict {
                    feature: feature.to_owned(),
                    level,
                    supporter: supporter(id),
                    problem: crate::features::Problem::Configs(
                        findings
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join("; "),
                    ),
                })
            })
            .collect();
        context
            .controller
            .set_config_conflicts(&supporter(id), found);
        audited.insert(id);
    }
}

fn layout(
    config: &Config,
    upstream: &UpstreamConfig,
    node: &NodeAddress,
    bound: SocketAddr,
) -> Result<ListenerLayout, StartError> {
    let bind_host = upstream.listener_host.clone().unwrap_or_else(|| {
        config
            .listen
            .rsplit_once(':')
            .map_or("127.0.0.1", |(h, _)| h)
            .trim_matches(['[', ']'])
            .to_owned()
    });
    // The config check refused a bad pattern; the advertised address is known
    // only now (an ephemeral bootstrap port).
    let server_names = match &upstream.sni_host {
        Some(pattern) => Some(
            u16::try_from(node.port)
                .map_err(|e| e.to_string())
                .and_then(|port| ServerNames::new(pattern, &node.host, port))
                .map_err(StartError::ServerNames)?,
        ),
        None => None,
    };
    Ok(ListenerLayout {
        advertised_host: upstream
            .advertised_host
            .clone()
            .unwrap_or_else(|| node.host.clone()),
        bind_host,
        // Node 0 must not land on the bootstrap port.
        port_base: upstream
            .port_base
            .unwrap_or_else(|| bound.port().saturating_add(1)),
        ports: upstream.ports.clone(),
        bootstrap_port: bound.port(),
        reserved: config
            .configured_ports()
            .into_iter()
            .filter(|(key, _)| *key != "listen")
            .collect(),
        max_brokers: upstream.max_brokers,
        grace: Duration::from_millis(upstream.listener_grace_ms),
        server_names,
    })
}

/// Logs, once each for the life of the process, the ways kshim's ApiVersions
/// differs from what the brokers offer (a version capped, a key hidden).
fn log_narrowings(brokers: &[ApiRange], offered: &[ApiRange]) {
    static LOGGED: crate::log_limit::OncePerCause = crate::log_limit::OncePerCause::new(1024);
    for line in narrowings(brokers, offered) {
        if LOGGED.first(&line) {
            tracing::info!("{line}");
        }
    }
}
