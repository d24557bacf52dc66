//! Pieces shared by the integration tests: the one fake broker
//! ([`fake_broker`]), starting a proxy in process, and reading the address a
//! `kshim serve` child prints.

#![allow(
    dead_code,
    reason = "not every helper has a caller in every test build"
)]

pub mod fake_broker;

use kshim::config::{Config, UpstreamConfig};
use kshim::handlers::Context;
use kshim::proxy::Proxy;
use std::sync::Arc;
use tokio::sync::watch;

/// The address a `kshim serve` child prints on its first stdout line.
pub fn listening_addr(child: &mut std::process::Child) -> String {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read the listening line");
    line.trim()
        .strip_prefix("kshim listening on ")
        .unwrap_or_else(|| panic!("unexpected line {line:?}"))
        .to_owned()
}

/// A proxy serving in the background.
pub struct RunningProxy {
    pub addr: String,
    pub context: Arc<Context>,
    pub stop: watch::Sender<bool>,
    pub _dir: tempfile::TempDir,
}

/// Starts kshim in front of `upstream_addr`, with ephemeral ports and its own
/// data dir; `configure` adjusts the config first.
pub async fn start_proxy(
    upstream_addr: String,
    refresh_interval_ms: u64,
    configure: impl FnOnce(&mut Config),
) -> RunningProxy {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        listen: "127.0.0.1:0".into(),
        data_dir: dir.path().to_owned(),
        upstream: Some(UpstreamConfig {
            bootstrap: vec![upstream_addr],
            refresh_interval_ms,
            connect_timeout_ms: 2000,
            port_base: Some(0),
            ..UpstreamConfig::default()
        }),
        ..Config::default()
    };
    configure(&mut config);
    let upstream_config = config.upstream.clone().expect("an upstream");
    let proxy = Proxy::bind(&config, &upstream_config)
        .await
        .expect("proxy starts");
    let addr = proxy.local_addr.to_string();
    let context = Arc::clone(&proxy.context);
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(proxy.serve(stopped));
    RunningProxy {
        addr,
        context,
        stop,
        _dir: dir,
    }
}
