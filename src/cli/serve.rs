//! `kshim serve`: the standalone discovery server, or with an upstream the proxy;
//! with `[admin]`, the admin API beside it. SIGHUP re-reads the config file
//! through the same pipeline as the admin API's changes.

use anyhow::{Context as _, Result};
use kshim::config::{CliOverrides, ConfigSource};
use kshim::features::kafka::KafkaRelease;
use kshim::reconfig::Registry;
use kshim::service::{LogControl, Service};
use std::path::PathBuf;
use std::sync::Arc;
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
    service.serve(stop_on_signal()).await;
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

/// On SIGHUP, reads the config file again and puts it in force (with the stored
/// overrides over it), all or nothing.
fn reload_on_hangup(path: PathBuf, registry: Arc<Registry>) {
    use tokio::signal::unix::{signal, SignalKind};
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
