//! `kshim serve`: the standalone discovery server.

use anyhow::{bail, Context as _, Result};
use kshim::config::Config;
use kshim::controller::{ControllerSettings, FeatureController};
use kshim::handlers::api_versions::{Discovery, STANDALONE_APIS};
use kshim::handlers::{Authorizer, Context, NodeAddress};
use kshim::server::{self, Limits};
use kshim::store::FileStore;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::net::TcpListener;
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
}

fn load_config(args: &ServeArgs) -> Result<Config> {
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
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
    let mut errors = Vec::new();
    config.validate(&mut errors);
    if !errors.is_empty() {
        bail!("{}", kshim::config::ConfigErrors(errors));
    }
    Ok(config)
}

pub async fn run(args: ServeArgs) -> Result<()> {
    let config = load_config(&args)?;
    let store = FileStore::open(&config.data_dir)?;
    let controller = FeatureController::open(
        Arc::new(store),
        ControllerSettings {
            node_id: config.node_id,
            cluster_id: config.cluster_id.clone(),
            supported: config.supported_features(),
            bootstrap: config.bootstrap.clone(),
            dependencies: config.effective_dependencies(),
        },
    )?;
    let controller = Arc::new(controller);

    let listener = TcpListener::bind(&config.listen).await.with_context(|| format!("listening on {}", config.listen))?;
    let bound = listener.local_addr()?;
    let advertised = config.advertised_listener.clone().unwrap_or_else(|| {
        let host = config.listen.rsplit_once(':').map_or("127.0.0.1", |(h, _)| h);
        format!("{host}:{}", bound.port())
    });
    let (host, port) = advertised.rsplit_once(':').context("advertised listener is HOST:PORT")?;
    let port: i32 = match port.parse::<u16>()? {
        0 => i32::from(bound.port()),
        p => i32::from(p),
    };

    if config.alter_cluster.is_none() {
        tracing::warn!(
            "authorization.alter_cluster is not set: every client may finalize features, as in Kafka without an authorizer"
        );
    }
    let discovery = Discovery::new(STANDALONE_APIS.to_vec(), config.draft_tags, controller.snapshot())?;
    let ctx = Arc::new(Context {
        node: NodeAddress { node_id: config.node_id, host: host.trim_matches(['[', ']']).to_owned(), port },
        controller: Arc::clone(&controller),
        discovery,
        authorizer: Authorizer { alter_cluster: config.alter_cluster.clone() },
    });
    let snapshot = controller.snapshot();
    tracing::info!(
        cluster_id = controller.cluster_id(),
        epoch = snapshot.finalized.epoch,
        data_dir = %config.data_dir.display(),
        "kshim standalone discovery server listening on {bound}, advertised as {host}:{port}"
    );
    println!("kshim listening on {bound}");

    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        wait_for_signal().await;
        tracing::info!("shutting down");
        let _ = stop_tx.send(true);
    });
    let limits = Limits { max_frame_bytes: config.max_frame_bytes, max_connections: config.max_connections, ..Limits::default() };
    server::serve(listener, ctx, limits, stop_rx).await;
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
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
