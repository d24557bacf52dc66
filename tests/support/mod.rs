//! Pieces shared by the integration tests that put kshim in front of a fake
//! broker: reading and writing frames on the broker's side, and starting a proxy.

#![allow(dead_code, reason = "each test binary uses a different subset")]

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::Encodable;
use kshim::config::{Config, UpstreamConfig};
use kshim::handlers::Context;
use kshim::proxy::Proxy;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

/// One request frame, without its size prefix; `None` once the peer is gone.
pub async fn read_frame(s: &mut TcpStream) -> Option<Bytes> {
    let size = s.read_i32().await.ok()?;
    let mut buf = vec![0; usize::try_from(size).ok()?];
    s.read_exact(&mut buf).await.ok()?;
    Some(Bytes::from(buf))
}

/// Writes a response frame: size, correlation id, an empty tag section when the
/// header is flexible, then `body`.
pub async fn write_response(
    s: &mut TcpStream,
    correlation_id: i32,
    flexible_header: bool,
    body: &[u8],
) {
    let mut out = BytesMut::new();
    out.put_i32((4 + usize::from(flexible_header) + body.len()) as i32);
    out.put_i32(correlation_id);
    if flexible_header {
        out.put_u8(0);
    }
    out.put_slice(body);
    let _ = s.write_all(&out).await;
}

/// An ApiVersions response body advertising `(api key, min, max)` for each key,
/// at `version` (capped at 3, what the fake brokers speak).
pub fn api_versions_body(keys: &[(i16, i16, i16)], version: i16) -> Bytes {
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    let body = kafka_protocol::messages::ApiVersionsResponse::default().with_api_keys(
        keys.iter()
            .map(|&(key, min, max)| {
                ApiVersion::default()
                    .with_api_key(key)
                    .with_min_version(min)
                    .with_max_version(max)
            })
            .collect(),
    );
    encode(&body, version.min(3))
}

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

pub fn encode<M: Encodable>(m: &M, version: i16) -> Bytes {
    let mut out = BytesMut::new();
    m.encode(&mut out, version).unwrap();
    out.freeze()
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
