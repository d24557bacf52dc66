//! `kshim serve`: the standalone discovery server, or with an upstream the proxy.

use anyhow::{bail, Context as _, Result};
use kshim::config::{Config, UpstreamConfig};
use kshim::proxy::Proxy;
use kshim::standalone::Standalone;
use std::path::PathBuf;
use tokio::sync::watch;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// TOML config file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address to listen on (default 127.0.0.1:9092).
    #[arg(long)]
    listen: Option<String>,
    /// HOST:PORT that clients are told to connect to (default: the listen address).
    #[arg(long)]
    advertised_listener: Option<String>,
    /// Where the finalized features are kept (default ./kshim-data).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Stand in front of this Kafka cluster: HOST:PORT[,HOST:PORT...] of its
    /// brokers (overrides upstream.bootstrap).
    #[arg(long)]
    upstream: Option<String>,
}

fn load_config(args: &ServeArgs) -> Result<Config> {
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            Config::from_toml(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
        }
        None => Config::default(),
    };
    if let Some(v) = &args.listen {
        config.listen = v.clone();
    }
    if let Some(v) = &args.advertised_listener {
        config.advertised_listener = Some(v.clone());
    }
    if let Some(v) = &args.data_dir {
        config.data_dir = v.clone();
    }
    if let Some(v) = &args.upstream {
        let upstream = config.upstream.get_or_insert_with(UpstreamConfig::default);
        upstream.bootstrap = v
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
    }
    let mut errors = Vec::new();
    config.validate(&mut errors);
    if !errors.is_empty() {
        bail!("{}", kshim::config::ConfigErrors(errors));
    }
    Ok(config)
}

pub async fn run(args: ServeArgs) -> Result<()> {
    let config = load_config(&args)?;
    if let Some(upstream) = config.upstream.clone() {
        return run_proxy(&args, &config, &upstream).await;
    }
    let server = Standalone::bind(&config).await?;
    reload_on_hangup(&args, &config, &server.context.policies, server.tls.clone());
    if config.alter_cluster.is_none() {
        tracing::warn!(
            "authorization.alter_cluster is not set: every client may finalize features, as in Kafka without an authorizer"
        );
    }
    let controller = &server.context.controller;
    let node = &server.context.node;
    tracing::info!(
        cluster_id = controller.cluster_id(),
        epoch = controller.snapshot().finalized.epoch,
        data_dir = %config.data_dir.display(),
        "kshim standalone discovery server listening on {}, advertised as {}:{}",
        server.local_addr,
        node.host,
        node.port
    );
    log_tls(&config);
    println!("kshim listening on {}", server.local_addr);
    server.serve(stop_on_signal()).await;
    Ok(())
}

/// Turns true on SIGINT or SIGTERM.
fn stop_on_signal() -> watch::Receiver<bool> {
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutting down");
        let _ = stop_tx.send(true);
    });
    stop_rx
}

async fn run_proxy(args: &ServeArgs, config: &Config, upstream: &UpstreamConfig) -> Result<()> {
    let proxy = Proxy::bind(config, upstream).await?;
    reload_on_hangup(args, config, &proxy.context.policies, proxy.tls.clone());
    if config.alter_cluster.is_none() {
        tracing::warn!(
            "authorization.alter_cluster is not set: every client may finalize kshim-owned features"
        );
    }
    tracing::info!(
        epoch = proxy.context.controller.snapshot().finalized.epoch,
        data_dir = %config.data_dir.display(),
        "kshim proxy for {} listening on {}",
        upstream.bootstrap.join(","),
        proxy.local_addr
    );
    log_tls(config);
    println!("kshim listening on {}", proxy.local_addr);
    proxy.serve(stop_on_signal()).await;
    Ok(())
}

/// On SIGHUP, reads the config file again (with the same command-line
/// overrides) and puts its TLS material and policies in force, all or nothing.
fn reload_on_hangup(
    args: &ServeArgs,
    config: &Config,
    policies: &std::sync::Arc<kshim::policy::PolicyCell>,
    tls: Option<std::sync::Arc<kshim::server::tls::TlsCell>>,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let Some(path) = args.config.clone() else {
        return;
    };
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::warn!(
            "SIGHUP cannot be watched; reloading {} is not available",
            path.display()
        );
        return;
    };
    let args = ServeArgs {
        config: Some(path.clone()),
        listen: args.listen.clone(),
        advertised_listener: args.advertised_listener.clone(),
        data_dir: args.data_dir.clone(),
        upstream: args.upstream.clone(),
    };
    let mut reloadable = kshim::reload::Reloadable {
        policies: std::sync::Arc::clone(policies),
        tls,
        running: config.clone(),
    };
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            let next = match load_config(&args) {
                Ok(c) => c,
                Err(e) => {
                    tracing::error!(
                        "SIGHUP: {} not reloaded, nothing changed: {e:#}",
                        path.display()
                    );
                    continue;
                }
            };
            match reloadable.apply(next) {
                Ok(outcome) => {
                    tracing::info!(applied = ?outcome.applied, "SIGHUP: {} reloaded", path.display());
                    if !outcome.need_restart.is_empty() {
                        tracing::warn!(keys = ?outcome.need_restart, "SIGHUP: these changes need a restart and were not applied");
                    }
                }
                Err(errors) => tracing::error!(
                    "SIGHUP: {} not reloaded, nothing changed: {}",
                    path.display(),
                    errors.join("; ")
                ),
            }
        }
    });
}

fn log_tls(config: &Config) {
    match &config.tls {
        Some(t) => tracing::info!(
            certificate = %t.certificate.display(),
            client_auth = ?t.client_auth,
            "TLS on every client-facing listener"
        ),
        None => tracing::info!("client-facing listeners are plaintext ([tls] is not set)"),
    }
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(mut int), Ok(mut term)) => {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
