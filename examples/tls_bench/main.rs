//! What TLS costs kshim next to an Apache Kafka broker, measured in one run so
//! that machine noise hits every target alike. Two modes:
//!
//! `handshakes`: full TLS handshakes per second. One operation is a new TCP
//! connection, a full handshake (the client keeps no sessions, so nothing is
//! resumed), one ApiVersions v3 request and its answer, and a close. For every
//! concurrency level and round each target gets the same number of seconds, and
//! the order of the targets rotates from round to round. Printed per target:
//! handshakes/s (median over rounds), p50/p99 from connect to the ApiVersions
//! answer, the CPU the server spent per handshake (from /proc, for targets
//! whose PID is given) and the load generator's own CPU; then every target
//! against the baseline.
//!
//! `storm`: a storm of new TLS connections beside connected clients (storm.rs).
//!
//! `reload`: what rotating kshim's certificate through its admin API costs.
//! The keystore is switched with `PATCH /admin/config {"tls.keystore": ...}`,
//! alternating between the stores given.
//!   (a) PATCH latency, request sent to 200 read;
//!   (b) from sending the PATCH until a new handshake, polled back to back from
//!       the moment of sending, sees the new leaf certificate; a handshake that
//!       starts after the 200 and still sees the old leaf is counted as stale;
//!   (c) one established TLS connection to kshim's per-broker listener sends
//!       Metadata v12 requests (forwarded to the broker) one at a time on a fixed
//!       interval, through windows with a reload every few hundred ms and
//!       windows without, interleaved ABBA; latency per kind of window, and
//!       whether that connection ever broke (it is reopened if it does, and the
//!       break is reported).
//!
//! ```text
//! tls_bench handshakes --ca ca.pem --target broker=127.0.0.1:9093 \
//!     --target kshim=127.0.0.1:19092 --pid broker=1234 --pid kshim=5678
//! KSHIM_BENCH_ADMIN_TOKEN=... tls_bench reload --ca ca.pem --tls-listener 127.0.0.1:19092 \
//!     --inflight 127.0.0.1:19094 --admin 127.0.0.1:9880 \
//!     --keystore a.pem=a.p12 --keystore b.pem=b.p12
//! ```
//!
//! Output: markdown tables on stdout, progress on stderr. Exit status 0 when the
//! measurements ran, whatever they show; 1 when a target could not be used at
//! all (no handshake succeeded, a PATCH was refused, a certificate never showed);
//! 2 on bad arguments.

use bytes::BytesMut;
use clap::{Args as ClapArgs, Parser, Subcommand};
use kshim::protocol::wire::put_compact_string;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, MissedTickBehavior};
use tokio_rustls::TlsConnector;

#[path = "../common/frames.rs"]
mod frames;
mod handshakes;
mod reload;
mod storm;

use handshakes::handshakes;
use reload::reload;
use storm::{storm, StormArgs};

const CLIENT_ID: &str = "kshim-tls-bench";
const API_VERSIONS: i16 = 18;
const API_VERSIONS_VERSION: i16 = 3;
const METADATA: i16 = 3;
const METADATA_VERSION: i16 = 12;
/// Anything larger is not an answer to the small requests sent here.
const MAX_RESPONSE_BYTES: usize = 4 << 20;
const MAX_REPORTED_FAILURES: usize = 5;
const TOKEN_ENV: &str = "KSHIM_BENCH_ADMIN_TOKEN";
/// /proc reports CPU times in USER_HZ ticks, which the kernel ABI fixes at 100.
const USER_HZ: f64 = 100.0;

#[derive(Parser, Debug)]
#[command(about = "TLS handshake rate and certificate-reload cost of kshim next to a Kafka broker")]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// Full TLS handshakes (+ one ApiVersions) per second against every target.
    Handshakes(HandshakeArgs),
    /// Certificate rotation through kshim's admin API: latency, visibility, and
    /// the effect on an established connection.
    Reload(ReloadArgs),
    /// A storm of new TLS connections beside connected clients: what the
    /// connected clients wait, and what becomes of each new connection.
    Storm(StormArgs),
}

#[derive(ClapArgs, Debug)]
struct TlsArgs {
    /// PEM bundle of the CA the servers' certificates chain to.
    #[arg(long)]
    ca: PathBuf,
    /// The name the servers' certificates are checked against.
    #[arg(long, default_value = "localhost")]
    server_name: String,
    /// An operation without an answer after this long counts as failed.
    #[arg(long, default_value_t = 5_000)]
    timeout_ms: u64,
    /// Worker threads of the load generator (default: one per CPU).
    #[arg(long)]
    client_threads: Option<usize>,
}

#[derive(ClapArgs, Debug)]
struct HandshakeArgs {
    #[command(flatten)]
    tls: TlsArgs,
    /// NAME=HOST:PORT of a TLS listener; repeat for every target.
    #[arg(long = "target", required = true, value_parser = parse_named)]
    targets: Vec<(String, String)>,
    /// NAME=PID: the server process behind target NAME, for its CPU per handshake.
    #[arg(long = "pid", value_parser = parse_named)]
    pids: Vec<(String, String)>,
    /// Comma-separated numbers of concurrent clients.
    #[arg(long, value_delimiter = ',', default_value = "1,8")]
    concurrency: Vec<usize>,
    /// Rounds per concurrency level; every target runs once per round.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Measured seconds per target and round.
    #[arg(long, default_value_t = 4)]
    duration_secs: u64,
    /// Unmeasured seconds per target before the first round, at the highest
    /// concurrency; a JVM broker needs a while before its TLS code is compiled.
    #[arg(long, default_value_t = 15)]
    warmup_secs: u64,
    /// The target every other one is compared with.
    #[arg(long, default_value = "broker")]
    baseline: String,
}

#[derive(ClapArgs, Debug)]
struct ReloadArgs {
    #[command(flatten)]
    tls: TlsArgs,
    /// HOST:PORT of kshim's TLS listener where new handshakes are polled.
    #[arg(long)]
    tls_listener: String,
    /// HOST:PORT of kshim's per-broker TLS listener for the established connection.
    #[arg(long)]
    inflight: String,
    /// HOST:PORT of kshim's admin API (plain HTTP); the bearer token is read from
    /// the environment variable KSHIM_BENCH_ADMIN_TOKEN.
    #[arg(long)]
    admin: String,
    /// LEAF_PEM=KEYSTORE: a PKCS#12 store kshim can switch to, and the PEM of its
    /// leaf certificate to recognise it by. At least two.
    #[arg(long = "keystore", required = true, value_parser = parse_keystore)]
    keystores: Vec<(PathBuf, PathBuf)>,
    /// Rotations timed on an idle kshim, parts (a) and (b).
    #[arg(long, default_value_t = 20)]
    reloads: usize,
    /// Pause between those rotations.
    #[arg(long, default_value_t = 300)]
    reload_gap_ms: u64,
    /// Pairs of windows (one with reloads, one without) for part (c).
    #[arg(long, default_value_t = 4)]
    window_pairs: usize,
    #[arg(long, default_value_t = 3)]
    window_secs: u64,
    /// Time between reloads inside a window with reloads.
    #[arg(long, default_value_t = 300)]
    reload_every_ms: u64,
    /// Time between the starts of two requests on the established connection.
    #[arg(long, default_value_t = 2_000)]
    probe_interval_us: u64,
}

fn parse_named(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, value)) if !name.is_empty() && !value.is_empty() => {
            Ok((name.to_owned(), value.to_owned()))
        }
        _ => Err(format!("`{s}` is not NAME=VALUE")),
    }
}

fn parse_keystore(s: &str) -> Result<(PathBuf, PathBuf), String> {
    let (pem, store) = parse_named(s)?;
    Ok((PathBuf::from(pem), PathBuf::from(store)))
}

// ---------------------------------------------------------------------------
// TLS client and wire helpers

/// What every connection of the load generator uses.
struct Client {
    connector: TlsConnector,
    name: ServerName<'static>,
    timeout: Duration,
}

fn client(args: &TlsArgs) -> Result<Client, String> {
    let pem =
        std::fs::read(&args.ca).map_err(|e| format!("cannot read {}: {e}", args.ca.display()))?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| format!("{}: {e}", args.ca.display()))?;
        roots.add(cert).map_err(|e| {
            format!(
                "{}: not a CA certificate rustls accepts: {e}",
                args.ca.display()
            )
        })?;
    }
    if roots.is_empty() {
        return Err(format!("{} holds no PEM certificate", args.ca.display()));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("rustls: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    // Every handshake must be a full one: a resumed session skips the server's
    // certificate signature, which is most of what is being measured.
    config.resumption = rustls::client::Resumption::disabled();
    let name = ServerName::try_from(args.server_name.clone())
        .map_err(|e| format!("--server-name {}: {e}", args.server_name))?;
    Ok(Client {
        connector: TlsConnector::from(Arc::new(config)),
        name,
        timeout: Duration::from_millis(args.timeout_ms),
    })
}

type TlsStream = tokio_rustls::client::TlsStream<TcpStream>;

async fn connect(addr: &str, client: &Client) -> Result<TlsStream, String> {
    connect_from(addr, client, None).await
}

/// A TCP connection to `addr`, from the local address `from` when given (any
/// 127.x address is this machine's, which lets a test be several clients).
async fn tcp_from(addr: &str, from: Option<std::net::IpAddr>) -> std::io::Result<TcpStream> {
    let Some(from) = from else {
        return TcpStream::connect(addr).await;
    };
    let target: std::net::SocketAddr = addr.parse().map_err(|e| {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{addr}: {e}"))
    })?;
    let socket = match from {
        std::net::IpAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        std::net::IpAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.bind(std::net::SocketAddr::new(from, 0))?;
    socket.connect(target).await
}

async fn connect_from(
    addr: &str,
    client: &Client,
    from: Option<std::net::IpAddr>,
) -> Result<TlsStream, String> {
    let tcp = tcp_from(addr, from)
        .await
        .map_err(|e| format!("connect to {addr}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    client
        .connector
        .connect(client.name.clone(), tcp)
        .await
        .map_err(|e| format!("TLS handshake with {addr}: {e}"))
}

/// A request frame with its size prefix; the correlation id sits at bytes 8..12.
fn request_frame(api_key: i16, version: i16, body: &[u8]) -> Vec<u8> {
    let mut frame = vec![0u8; 4];
    frame.extend_from_slice(&api_key.to_be_bytes());
    frame.extend_from_slice(&version.to_be_bytes());
    frame.extend_from_slice(&1i32.to_be_bytes());
    // Request header v2: a classic nullable client id, then (empty) tags.
    frame.extend_from_slice(&(CLIENT_ID.len() as i16).to_be_bytes());
    frame.extend_from_slice(CLIENT_ID.as_bytes());
    frame.push(0);
    frame.extend_from_slice(body);
    let size = (frame.len() - 4) as i32;
    frame[..4].copy_from_slice(&size.to_be_bytes());
    frame
}

fn api_versions_request() -> Vec<u8> {
    let mut body = Vec::new();
    put_compact_string(&mut body, CLIENT_ID);
    put_compact_string(&mut body, "1.0");
    body.push(0);
    request_frame(API_VERSIONS, API_VERSIONS_VERSION, &body)
}

/// Metadata for no topics: the broker list only, which kshim rewrites on the way.
fn metadata_request() -> Vec<u8> {
    // topics: empty compact array (not null, which would mean every topic);
    // allow_auto_topic_creation, include_topic_authorized_operations; tags.
    request_frame(METADATA, METADATA_VERSION, &[1, 0, 0, 0])
}

fn set_correlation(frame: &mut [u8], id: i32) {
    frame[8..12].copy_from_slice(&id.to_be_bytes());
}

fn check_correlation(body: &[u8], want: i32) -> Result<(), String> {
    let got = body
        .get(..4)
        .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        .ok_or_else(|| format!("response of {} bytes is too short", body.len()))?;
    if got != want {
        return Err(format!("correlation id {got}, expected {want}"));
    }
    Ok(())
}

/// Connect, handshake, one ApiVersions exchange, close. Returns when the answer
/// was read; the close is not part of the latency.
async fn handshake_exchange(
    addr: &str,
    client: &Client,
    request: &[u8],
) -> Result<Instant, String> {
    handshake_exchange_from(addr, client, request, None).await
}

async fn handshake_exchange_from(
    addr: &str,
    client: &Client,
    request: &[u8],
    from: Option<std::net::IpAddr>,
) -> Result<Instant, String> {
    let mut stream = connect_from(addr, client, from).await?;
    stream
        .write_all(request)
        .await
        .map_err(|e| format!("write failed: {e}"))?;
    let mut buf = BytesMut::with_capacity(4096);
    let body = frames::read_frame(&mut stream, &mut buf, MAX_RESPONSE_BYTES).await?;
    check_correlation(&body, 1)?;
    // ApiVersions answers with response header v0, then the error code.
    match body.get(4..6) {
        Some(&[a, b]) if i16::from_be_bytes([a, b]) == 0 => {}
        Some(&[a, b]) => {
            return Err(format!(
                "ApiVersions error code {}",
                i16::from_be_bytes([a, b])
            ))
        }
        _ => return Err("ApiVersions response has no error code".into()),
    }
    let done = Instant::now();
    // A well-behaved client says close_notify; the server's reply is not awaited.
    let _ = stream.shutdown().await;
    Ok(done)
}

/// utime + stime of process `pid` (this process when `None`), in seconds.
fn cpu_seconds(pid: Option<&str>) -> Option<f64> {
    let path = format!("/proc/{}/stat", pid.unwrap_or("self"));
    let stat = std::fs::read_to_string(path).ok()?;
    // The command name may hold spaces and parentheses; what follows the last ')' does not.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / USER_HZ)
}

/// The value at quantile `q` of sorted microsecond samples, in milliseconds.
fn percentile_ms(sorted: &[u32], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    f64::from(sorted[rank - 1]) / 1_000.0
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

fn num(v: f64, decimals: usize) -> String {
    if v.is_finite() {
        format!("{v:.decimals$}")
    } else {
        "n/a".into()
    }
}

fn ratio(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.2}x")
    } else {
        "n/a".into()
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let threads = match &cli.mode {
        Mode::Handshakes(a) => {
            if a.concurrency.is_empty() || a.concurrency.contains(&0) {
                eprintln!("tls_bench: --concurrency needs levels of at least 1");
                return ExitCode::from(2);
            }
            if a.rounds == 0 || a.duration_secs == 0 {
                eprintln!("tls_bench: --rounds and --duration-secs must be at least 1");
                return ExitCode::from(2);
            }
            let mut names: Vec<&str> = a.targets.iter().map(|(n, _)| n.as_str()).collect();
            names.sort_unstable();
            if names.windows(2).any(|w| w[0] == w[1]) {
                eprintln!("tls_bench: target names must be distinct");
                return ExitCode::from(2);
            }
            a.tls.client_threads
        }
        Mode::Reload(a) => a.tls.client_threads,
        Mode::Storm(a) => a.tls.client_threads,
    };
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Some(n) = threads {
        builder.worker_threads(n.max(1));
    }
    let runtime = match builder.build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("tls_bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        match cli.mode {
            Mode::Handshakes(a) => handshakes(a).await,
            Mode::Reload(a) => reload(a).await,
            Mode::Storm(a) => storm(a).await,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use kafka_protocol::messages::{ApiVersionsRequest, MetadataRequest, RequestHeader};
    use kafka_protocol::protocol::Decodable;

    fn split(frame: &[u8], version: i16) -> (RequestHeader, Bytes) {
        let size = i32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(size, frame.len() - 4);
        let mut body = Bytes::copy_from_slice(&frame[4..]);
        let header = RequestHeader::decode(&mut body, version).unwrap();
        (header, body)
    }

    #[test]
    fn requests_decode_as_kafka_reads_them() {
        let (header, mut body) = split(&api_versions_request(), 2);
        assert_eq!(
            (header.request_api_key, header.request_api_version),
            (API_VERSIONS, API_VERSIONS_VERSION)
        );
        let req = ApiVersionsRequest::decode(&mut body, API_VERSIONS_VERSION).unwrap();
        assert_eq!(req.client_software_name.as_str(), CLIENT_ID);
        assert!(body.is_empty());

        let mut frame = metadata_request();
        set_correlation(&mut frame, 42);
        let (header, mut body) = split(&frame, 2);
        assert_eq!(header.correlation_id, 42);
        assert_eq!(header.request_api_key, METADATA);
        let req = MetadataRequest::decode(&mut body, METADATA_VERSION).unwrap();
        assert_eq!(req.topics.map(|t| t.len()), Some(0));
        assert!(!req.allow_auto_topic_creation);
        assert!(body.is_empty());
    }

    #[test]
    fn percentiles_and_medians() {
        let v: Vec<u32> = (1..=100).map(|i| i * 1000).collect();
        assert_eq!(percentile_ms(&v, 0.5), 50.0);
        assert_eq!(percentile_ms(&v, 0.99), 99.0);
        assert!(percentile_ms(&[], 0.5).is_nan());
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn own_cpu_time_is_readable() {
        assert!(cpu_seconds(None).is_some());
    }
}
