//! ApiVersions v4 throughput and latency of several Kafka endpoints, measured in
//! the same run so that machine noise hits all of them alike.
//!
//! ```text
//! cargo run --release --example api_versions_bench -- \
//!     --target kshim=127.0.0.1:9092 --target broker=127.0.0.1:9093 \
//!     --connections 1,16,256 --duration-secs 5 --warmup-secs 1
//! ```
//!
//! For every connection count, each target in turn (kshim 1, broker 1, kshim 16,
//! broker 16, ...) gets N TCP connections. Every connection keeps exactly one
//! ApiVersions v4 request outstanding (closed loop): it sends a request, reads the
//! whole response (size prefix and body), checks its correlation id and error
//! code, and sends the next one. Requests sent during the warm-up are not counted.
//! Each round lasts warm-up + duration seconds, so the run ends by itself after
//! targets x counts x (warm-up + duration) seconds plus connection set-up.
//!
//! Output: a markdown table of requests/s, p50 and p99 per (connections, target),
//! and a table of ratios of every target against the baseline (default: the
//! target named `broker`). Exits non-zero when any request failed.

use bytes::BytesMut;
use clap::Parser;
use kshim::protocol::api_versions::decode_response;
use kshim::protocol::wire::put_compact_string;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

#[path = "common/frames.rs"]
mod frames;
#[path = "common/target.rs"]
mod target;

use target::{parse_target, Target};

const API_VERSIONS: i16 = 18;
const VERSION: i16 = 4;
const CLIENT_ID: &str = "kshim-bench";
const SOFTWARE_NAME: &str = "kshim-bench";
const SOFTWARE_VERSION: &str = "1.0";
/// Responses larger than this are treated as a protocol error (an ApiVersions
/// answer is a few kilobytes at most).
const MAX_RESPONSE_BYTES: usize = 1 << 20;
/// Failures printed per round; the rest are only counted.
const MAX_REPORTED_FAILURES: usize = 5;

#[derive(Parser, Debug)]
#[command(about = "Closed-loop ApiVersions v4 benchmark of Kafka endpoints")]
struct Args {
    /// NAME=HOST:PORT; repeat for every endpoint. Targets run in the order given.
    #[arg(long = "target", required = true, value_parser = parse_target)]
    targets: Vec<Target>,
    /// Comma-separated connection counts, one round per count and target.
    #[arg(long, value_delimiter = ',', default_value = "1,16,256")]
    connections: Vec<usize>,
    /// Measured seconds per round.
    #[arg(long, default_value_t = 5)]
    duration_secs: u64,
    /// Seconds per round before measuring starts.
    #[arg(long, default_value_t = 1)]
    warmup_secs: u64,
    /// The target the others are compared with in the ratio table.
    #[arg(long, default_value = "broker")]
    baseline: String,
    /// A request without a full answer after this long counts as failed.
    #[arg(long, default_value_t = 5_000)]
    request_timeout_ms: u64,
    /// Worker threads of the load generator (default: one per CPU).
    #[arg(long)]
    client_threads: Option<usize>,
}

/// The whole request frame (size prefix included); the correlation id is at
/// bytes 8..12 and is patched in before every send.
fn request_frame() -> Vec<u8> {
    let mut frame = vec![0u8; 4];
    frame.extend_from_slice(&API_VERSIONS.to_be_bytes());
    frame.extend_from_slice(&VERSION.to_be_bytes());
    frame.extend_from_slice(&0i32.to_be_bytes());
    // Request header v2: client id is a (non-compact) nullable string, then tags.
    frame.extend_from_slice(&(CLIENT_ID.len() as i16).to_be_bytes());
    frame.extend_from_slice(CLIENT_ID.as_bytes());
    frame.push(0);
    put_compact_string(&mut frame, SOFTWARE_NAME);
    put_compact_string(&mut frame, SOFTWARE_VERSION);
    frame.push(0);
    let size = (frame.len() - 4) as i32;
    frame[..4].copy_from_slice(&size.to_be_bytes());
    frame
}

const CORRELATION_AT: std::ops::Range<usize> = 8..12;

/// One connection's results for a round.
#[derive(Default)]
struct ConnResult {
    /// Latencies in nanoseconds of the requests sent after the warm-up.
    latencies: Vec<u64>,
    /// When the last counted response arrived.
    last_done: Option<Instant>,
    failure: Option<String>,
}

/// Checks a response body: correlation id, error code and, for the first answer
/// of a connection, the whole ApiVersions v4 layout.
fn check_response(body: &[u8], correlation_id: i32, full_decode: bool) -> Result<(), String> {
    // ApiVersions answers with response header v0: just the correlation id.
    if body.len() < 6 {
        return Err(format!("response of {} bytes is too short", body.len()));
    }
    let got = i32::from_be_bytes([body[0], body[1], body[2], body[3]]);
    if got != correlation_id {
        return Err(format!(
            "correlation id {got} does not match the request's {correlation_id}"
        ));
    }
    let error_code = i16::from_be_bytes([body[4], body[5]]);
    if error_code != 0 {
        return Err(format!("ApiVersions error code {error_code}"));
    }
    if full_decode {
        let decoded = decode_response(VERSION, &body[4..])
            .map_err(|e| format!("undecodable ApiVersions v4 response: {e}"))?;
        if !decoded
            .apis
            .iter()
            .any(|a| a.api_key == API_VERSIONS && a.min <= VERSION && VERSION <= a.max)
        {
            return Err("the response does not list ApiVersions v4".into());
        }
    }
    Ok(())
}

async fn run_connection(
    mut stream: TcpStream,
    measure_from: Instant,
    end: Instant,
    request_timeout: Duration,
    expected: usize,
) -> ConnResult {
    let mut result = ConnResult {
        latencies: Vec::with_capacity(expected),
        ..ConnResult::default()
    };
    let mut request = request_frame();
    let mut buf = BytesMut::with_capacity(8192);
    let mut correlation_id: i32 = 0;
    loop {
        let start = Instant::now();
        if start >= end {
            break;
        }
        correlation_id = correlation_id.wrapping_add(1);
        request[CORRELATION_AT].copy_from_slice(&correlation_id.to_be_bytes());
        let exchange = async {
            stream
                .write_all(&request)
                .await
                .map_err(|e| format!("write failed: {e}"))?;
            frames::read_frame(&mut stream, &mut buf, MAX_RESPONSE_BYTES).await
        };
        let body = match tokio::time::timeout(request_timeout, exchange).await {
            Ok(Ok(body)) => body,
            Ok(Err(e)) => {
                result.failure = Some(e);
                break;
            }
            Err(_) => {
                result.failure = Some(format!("no response within {request_timeout:?}"));
                break;
            }
        };
        let done = Instant::now();
        if let Err(e) = check_response(&body, correlation_id, correlation_id == 1) {
            result.failure = Some(e);
            break;
        }
        if !buf.is_empty() {
            result.failure = Some(format!(
                "{} unexpected byte(s) after the response",
                buf.len()
            ));
            break;
        }
        if start >= measure_from {
            result.latencies.push((done - start).as_nanos() as u64);
            result.last_done = Some(done);
        }
    }
    result
}

async fn connect(addr: &str, timeout: Duration) -> Result<TcpStream, String> {
    let stream = tokio::time::timeout(timeout, TcpStream::connect(addr))
        .await
        .map_err(|_| format!("connect to {addr} timed out after {timeout:?}"))?
        .map_err(|e| format!("connect to {addr}: {e}"))?;
    stream
        .set_nodelay(true)
        .map_err(|e| format!("TCP_NODELAY on {addr}: {e}"))?;
    Ok(stream)
}

struct RoundResult {
    target: String,
    connections: usize,
    requests: usize,
    throughput: f64,
    p50_us: f64,
    p99_us: f64,
    failures: Vec<String>,
    failed: usize,
}

/// The value at quantile `q` of sorted nanosecond latencies, in microseconds.
fn percentile_us(sorted: &[u64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64 / 1_000.0
}

async fn run_round(target: &Target, connections: usize, args: &Args) -> RoundResult {
    let request_timeout = Duration::from_millis(args.request_timeout_ms);
    let mut failures = Vec::new();
    let mut failed = 0usize;

    // All connections are open before the clock starts.
    let connects =
        futures::future::join_all((0..connections).map(|_| connect(&target.addr, request_timeout)))
            .await;
    let mut streams = Vec::with_capacity(connections);
    for c in connects {
        match c {
            Ok(s) => streams.push(s),
            Err(e) => {
                failed += 1;
                if failures.len() < MAX_REPORTED_FAILURES {
                    failures.push(e);
                }
            }
        }
    }

    let warmup = Duration::from_secs(args.warmup_secs);
    let duration = Duration::from_secs(args.duration_secs);
    let begin = Instant::now();
    let measure_from = begin + warmup;
    let end = measure_from + duration;
    // Room for ~200k requests/s in total without regrowing, capped per connection.
    let expected =
        (200_000 * args.duration_secs as usize / connections.max(1)).clamp(1024, 1 << 20);
    let tasks: Vec<_> = streams
        .into_iter()
        .map(|s| {
            tokio::spawn(run_connection(
                s,
                measure_from,
                end,
                request_timeout,
                expected,
            ))
        })
        .collect();

    let mut latencies = Vec::new();
    let mut last_done = measure_from;
    for task in tasks {
        match task.await {
            Ok(r) => {
                latencies.extend_from_slice(&r.latencies);
                if let Some(t) = r.last_done {
                    last_done = last_done.max(t);
                }
                if let Some(e) = r.failure {
                    failed += 1;
                    if failures.len() < MAX_REPORTED_FAILURES {
                        failures.push(e);
                    }
                }
            }
            Err(e) => {
                failed += 1;
                if failures.len() < MAX_REPORTED_FAILURES {
                    failures.push(format!("connection task failed: {e}"));
                }
            }
        }
    }
    latencies.sort_unstable();
    // Requests sent before `end` may finish a little after it; count their time.
    let elapsed = (last_done - measure_from).max(duration).as_secs_f64();
    RoundResult {
        target: target.name.clone(),
        connections,
        requests: latencies.len(),
        throughput: latencies.len() as f64 / elapsed,
        p50_us: percentile_us(&latencies, 0.50),
        p99_us: percentile_us(&latencies, 0.99),
        failures,
        failed,
    }
}

fn fmt_num(v: f64, decimals: usize) -> String {
    if v.is_finite() {
        format!("{v:.decimals$}")
    } else {
        "n/a".into()
    }
}

fn results_table(results: &[RoundResult]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| connections | target | requests/s | p50 µs | p99 µs |"
    );
    let _ = writeln!(out, "|---:|---|---:|---:|---:|");
    for r in results {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            r.connections,
            r.target,
            fmt_num(r.throughput, 0),
            fmt_num(r.p50_us, 1),
            fmt_num(r.p99_us, 1)
        );
    }
    out
}

fn ratio_table(
    results: &[RoundResult],
    targets: &[Target],
    counts: &[usize],
    baseline: &str,
) -> Option<String> {
    let others: Vec<&str> = targets
        .iter()
        .map(|t| t.name.as_str())
        .filter(|n| *n != baseline)
        .collect();
    if others.is_empty() || !targets.iter().any(|t| t.name == baseline) {
        return None;
    }
    let find = |count: usize, name: &str| {
        results
            .iter()
            .find(|r| r.connections == count && r.target == name)
    };
    let mut out = String::new();
    let mut header = String::from("| connections |");
    let mut rule = String::from("|---:|");
    for o in &others {
        let _ = write!(header, " throughput {o}/{baseline} | p99 {baseline}/{o} |");
        rule.push_str("---:|---:|");
    }
    let _ = writeln!(out, "{header}\n{rule}");
    for &count in counts {
        let _ = write!(out, "| {count} |");
        let base = find(count, baseline);
        for o in &others {
            let (tput, p99) = match (base, find(count, o)) {
                (Some(b), Some(r)) => (r.throughput / b.throughput, b.p99_us / r.p99_us),
                _ => (f64::NAN, f64::NAN),
            };
            let _ = write!(out, " {} | {} |", fmt_ratio(tput), fmt_ratio(p99));
        }
        out.push('\n');
    }
    Some(out)
}

fn fmt_ratio(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.2}x")
    } else {
        "n/a".into()
    }
}

async fn run(args: Args) -> ExitCode {
    let rounds = args.targets.len() * args.connections.len();
    let per_round = args.warmup_secs + args.duration_secs;
    eprintln!(
        "api_versions_bench: {} target(s) x {} connection count(s) x ({}s warm-up + {}s measured) = {}s",
        args.targets.len(),
        args.connections.len(),
        args.warmup_secs,
        args.duration_secs,
        rounds as u64 * per_round
    );
    let mut results = Vec::new();
    for &count in &args.connections {
        for target in &args.targets {
            let r = run_round(target, count, &args).await;
            eprintln!(
                "  {:>5} conn  {:<12} {:>10} req/s  p50 {:>9} µs  p99 {:>9} µs  ({} requests, {} failed)",
                count,
                r.target,
                fmt_num(r.throughput, 0),
                fmt_num(r.p50_us, 1),
                fmt_num(r.p99_us, 1),
                r.requests,
                r.failed
            );
            for f in &r.failures {
                eprintln!("      failure: {f}");
            }
            results.push(r);
        }
    }

    println!("{}", results_table(&results));
    if let Some(table) = ratio_table(&results, &args.targets, &args.connections, &args.baseline) {
        println!("{table}");
    }
    let failed: usize = results.iter().map(|r| r.failed).sum();
    let empty = results.iter().filter(|r| r.requests == 0).count();
    if failed > 0 || empty > 0 {
        eprintln!("api_versions_bench: FAILED: {failed} connection(s) had a failed request, {empty} round(s) measured nothing");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.connections.is_empty() || args.connections.contains(&0) {
        eprintln!("api_versions_bench: --connections needs counts of at least 1");
        return ExitCode::from(2);
    }
    if args.duration_secs == 0 {
        eprintln!("api_versions_bench: --duration-secs must be at least 1");
        return ExitCode::from(2);
    }
    let mut names: Vec<&str> = args.targets.iter().map(|t| t.name.as_str()).collect();
    names.sort_unstable();
    if names.windows(2).any(|w| w[0] == w[1]) {
        eprintln!("api_versions_bench: target names must be distinct");
        return ExitCode::from(2);
    }
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Some(n) = args.client_threads {
        builder.worker_threads(n.max(1));
    }
    let runtime = match builder.build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("api_versions_bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(args))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_is_a_valid_v4_frame() {
        let frame = request_frame();
        let size = i32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
        assert_eq!(size, frame.len() - 4);
        let peek = kshim::protocol::HeaderPeek::parse(&frame[4..]).unwrap();
        assert_eq!((peek.api_key, peek.api_version), (API_VERSIONS, VERSION));
        let parsed =
            kshim::protocol::RequestFrame::parse(bytes::Bytes::copy_from_slice(&frame[4..]))
                .unwrap();
        assert_eq!(parsed.client_id.as_deref(), Some(CLIENT_ID));
        let software = kshim::protocol::api_versions::parse_request(VERSION, parsed.body())
            .unwrap()
            .unwrap();
        assert_eq!(
            (software.name.as_str(), software.version.as_str()),
            (SOFTWARE_NAME, SOFTWARE_VERSION)
        );
    }

    #[test]
    fn percentiles() {
        let v: Vec<u64> = (1..=100).map(|i| i * 1000).collect();
        assert_eq!(percentile_us(&v, 0.5), 50.0);
        assert_eq!(percentile_us(&v, 0.99), 99.0);
        assert!(percentile_us(&[], 0.5).is_nan());
    }
}
