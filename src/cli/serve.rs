//! `kshim serve`: the standalone discovery server, or with an upstream the proxy;
//! with `[admin]`, the admin API beside it. SIGHUP re-reads the config file
//! through the same pipeline as the admin API's changes; SIGTERM drains and
//! SIGINT stops (`stop_on_signal`).

use anyhow::{Context as _, Result};
use kshim::admin::AdminState;
use kshim::config::{CliOverrides, ConfigSource};
use kshim::features::kafka::KafkaRelease;
use kshim::reconfig::Registry;
use kshim::service::{LogControl, Service};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::signal::unix::{signal, SignalKind};
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
    /// Where the finalized features and config overrides are kept (default ./kshim-data).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Stand in front of this Kafka cluster: HOST:PORT[,HOST:PORT...] of its
    /// brokers (overrides upstream.bootstrap).
    #[arg(long)]
    upstream: Option<String>,
    /// The Apache Kafka release a standalone kshim presents, such as 4.1
    /// (overrides kafka_release; default: the newest kshim has data for).
    #[arg(long, value_parser = parse_kafka_release)]
    kafka_release: Option<KafkaRelease>,
    /// Serve the admin API on HOST:PORT (overrides admin.listen); its token is
    /// admin.token, else $KSHIM_ADMIN_TOKEN.
    #[arg(long)]
    admin_listen: Option<String>,
}

fn parse_kafka_release(text: &str) -> Result<KafkaRelease, String> {
    KafkaRelease::named(text).ok_or_else(|| {
        format!(
            "not a Kafka release kshim has data for ({})",
            KafkaRelease::known()
        )
    })
}

impl ServeArgs {
    /// Whether the config file asks for JSON logs (`[log] format = "json"`).
    /// Logging starts before the config is loaded, so only this key is read
    /// here; a file that cannot be read is reported by the full load.
    pub fn log_json(&self) -> bool {
        let Some(path) = &self.config else {
            return false;
        };
        std::fs::read_to_string(path)
            .ok()
            .and_then(|text| text.parse::<toml::Table>().ok())
            .and_then(|doc| doc.get("log")?.get("format")?.as_str().map(|f| f == "json"))
            .unwrap_or(false)
    }
}

pub async fn run(args: ServeArgs, log: LogControl) -> Result<()> {
    let source = ConfigSource {
        file: args.config.clone(),
        cli: CliOverrides {
            listen: args.listen,
            advertised_listener: args.advertised_listener,
            data_dir: args.data_dir,
            upstream: args.upstream,
            kafka_release: args.kafka_release,
            admin_listen: args.admin_listen,
        },
    };
    let service = Service::start(source, Some(log))
        .await
        .with_context(|| match &args.config {
            Some(path) => format!("starting with {}", path.display()),
            None => "starting".to_owned(),
        })?;
    if let Some(path) = &args.config {
        reload_on_hangup(path.clone(), Arc::clone(&service.registry));
    }
    let config = &service.config;
    let controller = &service.context.controller;
    match &config.upstream {
        Some(upstream) => tracing::info!(
            epoch = controller.snapshot().finalized.epoch,
            data_dir = %config.data_dir.display(),
            "kshim proxy for {} listening on {}",
            upstream.bootstrap.join(","),
            service.local_addr
        ),
        None => tracing::info!(
            cluster_id = controller.cluster_id(),
            epoch = controller.snapshot().finalized.epoch,
            data_dir = %config.data_dir.display(),
            "kshim standalone discovery server, as Kafka {}, listening on {}, advertised as {}:{}",
            config.kafka_release,
            service.local_addr,
            service.context.node.host,
            service.context.node.port
        ),
    }
    match &config.tls {
        Some(t) => tracing::info!(
            client_auth = ?t.client_auth,
            "TLS on every client-facing listener"
        ),
        None => tracing::info!("client-facing listeners are plaintext ([tls] is not set)"),
    }
    if let Some(addr) = service.admin_addr {
        let scheme = if config.admin.as_ref().is_some_and(|a| a.tls.is_some()) {
            "https"
        } else {
            "http"
        };
        tracing::info!("admin API on {scheme}://{addr}");
        println!("kshim admin API on {scheme}://{addr}");
    }
    println!("kshim listening on {}", service.local_addr);
    let stop = stop_on_signal(Arc::clone(&service.admin), service.config.shutdown_delay())?;
    service.serve(stop).await;
    Ok(())
}

/// Turns true when kshim is to stop accepting connections; open connections
/// then finish the requests already read, within `shutdown_grace_ms`.
///
/// SIGTERM (what Kubernetes, systemd and `docker stop` send) drains first:
/// /readyz reports not ready at once, so that load balancers send new clients
/// elsewhere, and kshim keeps serving for `delay` (`shutdown_delay_ms`). SIGINT
/// (Ctrl-C) stops without the delay, as does a second signal during it. A signal
/// after that ends the process at once.
fn stop_on_signal(admin: Arc<AdminState>, delay: Duration) -> Result<watch::Receiver<bool>> {
    let mut signals = Signals::watch()?;
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        let first = signals.next().await;
        admin.stopping.store(true, Ordering::Relaxed);
        if first == SignalKind::terminate() && !delay.is_zero() {
            tracing::info!(
                "SIGTERM: draining: /readyz reports not ready; serving for {} ms more \
                 (shutdown_delay_ms), then accepting no new connections",
                delay.as_millis()
            );
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                again = signals.next() => tracing::info!("{}: the rest of shutdown_delay_ms skipped", name(again)),
            }
        }
        tracing::info!(
            "{}: shutting down: no new connections; open connections finish the requests \
             already read (within shutdown_grace_ms)",
            name(first)
        );
        let _ = stop_tx.send(true);
        let again = signals.next().await;
        tracing::warn!(
            "{}: exiting without waiting for the requests in flight",
            name(again)
        );
        std::process::exit(1);
    });
    Ok(stop_rx)
}

/// SIGINT and SIGTERM, as they arrive.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    fn watch() -> Result<Signals> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt()).context("watching SIGINT")?,
            terminate: signal(SignalKind::terminate()).context("watching SIGTERM")?,
        })
    }

    async fn next(&mut self) -> SignalKind {
        tokio::select! {
            _ = self.interrupt.recv() => SignalKind::interrupt(),
            _ = self.terminate.recv() => SignalKind::terminate(),
        }
    }
}

fn name(kind: SignalKind) -> &'static str {
    if kind == SignalKind::terminate() {
        "SIGTERM"
    } else {
        "SIGINT"
    }
}

/// On SIGHUP, reads the config file again and puts it in force (with the stored
/// overrides over it), all or nothing.
fn reload_on_hangup(path: PathBuf, registry: Arc<Registry>) {
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::warn!(
            "SIGHUP cannot be watched; reloading {} is not available",
            path.display()
        );
        return;
    };
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            match registry.reload_file().await {
                Ok(change) => {
                    tracing::info!(applied = ?change.applied, "SIGHUP: {} reloaded", path.display());
                    if !change.pending_restart.is_empty() {
                        tracing::warn!(keys = ?change.pending_restart, "SIGHUP: these changes need a restart and were not applied");
                    }
                }
                Err(e) => tracing::error!(
                    "SIGHUP: {} not reloaded, nothing changed: {e}",
                    path.display()
                ),
            }
        }
    });
}
