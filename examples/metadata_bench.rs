//! Metadata for every topic, asked by many clients at once, against several
//! Kafka endpoints measured in the same run: what a forwarder adds to the
//! answer a client waits for when the cluster holds many partitions.
//!
//! ```text
//! cargo run --release --example metadata_bench -- \
//!     --target direct=127.0.0.1:9092 --target kshim=127.0.0.1:9192 \
//!     --clients 200 --rounds 10 --version 12
//! ```
//!
//! Each target gets `--clients` TCP connections, opened at the start and kept.
//! In every round, each target in turn (the order reversed every other round)
//! is asked by all of its connections: every connection sends one
//! Metadata request for all topics (`topics` null) at the same moment, the way
//! a fleet of clients refreshes after a leader moves, and reads the whole
//! answer; a round ends when every connection has its answer. The latency of a
//! request is from the moment the round starts to the last byte of its answer.
//! One unmeasured round per target comes first.
//!
//! The load generator runs on one thread, so that it takes at most one core
//! from the servers it measures.
//!
//! Output, on stdout: one JSON object per target, `{"target", "clients",
//! "rounds", "latencies_us": [...], "response_bytes", "wall_s"}`, where
//! `response_bytes` is the size of the first answer (size prefix excluded).
//! Exits non-zero when any request failed or two answers of one target differ
//! in size (the cluster changed under the benchmark).

use bytes::BytesMut;
use clap::Parser;
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

const METADATA: i16 = 3;
const CLIENT_ID: &str = "kshim-metadata-bench";
/// Answers larger than this are a protocol error (10,000 partitions on three
/// brokers answer in well under a MiB).
const MAX_RESPONSE_BYTES: usize = 64 << 20;

#[derive(Parser, Debug)]
#[command(about = "Metadata (all topics) from many clients at once, against Kafka endpoints")]
struct Args {
    /// NAME=HOST:PORT; repeat for every endpoint.
    #[arg(long = "target", required = true, value_parser = parse_target)]
    targets: Vec<Target>,
    /// Connections per target, each sending one request per round.
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// Measured rounds per target.
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    /// Metadata version (9-12: flexible versions, topics null means all).
    #[arg(long, default_value_t = 12)]
    version: i16,
    /// A round without every answer after this long fails the run.
    #[arg(long, default_value_t = 60_000)]
    timeout_ms: u64,
}

/// The whole request frame, size prefix included: request header v2 and a
/// flexible Metadata body asking for every topic.
fn request_frame(version: i16, correlation_id: i32) -> Vec<u8> {
    let mut frame = vec![0u8; 4];
    frame.extend_from_slice(&METADATA.to_be_bytes());
    frame.extend_from_slice(&version.to_be_bytes());
    frame.extend_from_slice(&correlation_id.to_be_bytes());
    frame.extend_from_slice(&(CLIENT_ID.len() as i16).to_be_bytes());
    frame.extend_from_slice(CLIENT_ID.as_bytes());
    frame.push(0); // header tags
    frame.push(0); // topics: null (compact array length 0)
    frame.push(0); // allow_auto_topic_creation
    if version <= 10 {
        frame.push(0); // include_cluster_authorized_operations (v8-v10)
    }
    frame.push(0); // include_topic_authorized_operations
    frame.push(0); // body tags
    let size = (frame.len() - 4) as i32;
    frame[..4].copy_from_slice(&size.to_be_bytes());
    frame
}

struct Conn {
    stream: TcpStream,
    buf: BytesMut,
}

/// One request on one connection: the answer's size, or why there was none.
async fn exchange(conn: &mut Conn, request: &[u8], correlation_id: i32) -> Result<usize, String> {
    conn.stream
        .write_all(request)
        .await
        .map_err(|e| format!("write failed: {e}"))?;
    let body = frames::read_frame(&mut conn.stream, &mut conn.buf, MAX_RESPONSE_BYTES).await?;
    if body.len() < 5 {
        return Err(format!("answer of {} bytes is too short", body.len()));
    }
    let got = i32::from_be_bytes([body[0], body[1], body[2], body[3]]);
    if got != correlation_id {
        return Err(format!(
            "correlation id {got} does not match the request's {correlation_id}"
        ));
    }
    Ok(body.len())
}

/// One round on every connection at once: each request's latency in
/// microseconds, and the answers' sizes.
async fn round(
    conns: &mut [Conn],
    version: i16,
    correlation_id: i32,
    timeout: Duration,
) -> Result<(Vec<u64>, Vec<usize>), String> {
    let request = request_frame(version, correlation_id);
    let start = Instant::now();
    let all = futures::future::join_all(conns.iter_mut().map(|c| {
        let request = &request;
        async move {
            let size = exchange(c, request, correlation_id).await?;
            Ok::<_, String>((start.elapsed().as_micros() as u64, size))
        }
    }));
    let results = tokio::time::timeout(timeout, all)
        .await
        .map_err(|_| format!("the round had no answer on every connection within {timeout:?}"))?;
    let mut latencies = Vec::with_capacity(results.len());
    let mut sizes = Vec::with_capacity(results.len());
    for r in results {
        let (latency, size) = r?;
        latencies.push(latency);
        sizes.push(size);
    }
    Ok((latencies, sizes))
}

struct Outcome {
    latencies: Vec<u64>,
    response_bytes: Option<usize>,
    wall: Duration,
}

async fn connect(target: &Target, clients: usize) -> Result<Vec<Conn>, String> {
    let mut conns = Vec::with_capacity(clients);
    for i in 0..clients {
        let stream = TcpStream::connect(&target.addr)
            .await
            .map_err(|e| format!("{}: connection {} of {clients}: {e}", target.name, i + 1))?;
        stream
            .set_nodelay(true)
            .map_err(|e| format!("{}: TCP_NODELAY: {e}", target.name))?;
        conns.push(Conn {
            stream,
            buf: BytesMut::with_capacity(64 << 10),
        });
    }
    Ok(conns)
}

async fn run(args: Args) -> Result<(), String> {
    let timeout = Duration::from_millis(args.timeout_ms);
    let mut outcomes: Vec<Outcome> = args
        .targets
        .iter()
        .map(|_| Outcome {
            latencies: Vec::with_capacity(args.rounds * args.clients),
            response_bytes: None,
            wall: Duration::ZERO,
        })
        .collect();
    // Every target's connections stay open for the whole run: the clients are
    // already connected when they refresh, and a forwarder's upstream side is
    // opened in the unmeasured round.
    let mut conns = Vec::with_capacity(args.targets.len());
    for target in &args.targets {
        conns.push(connect(target, args.clients).await?);
    }
    let mut correlation_id = 0;
    // Round 0 is the unmeasured one.
    for r in 0..=args.rounds {
        let mut order: Vec<usize> = (0..args.targets.len()).collect();
        if r % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let target = &args.targets[i];
            correlation_id += 1;
            let started = Instant::now();
            let (latencies, sizes) = round(&mut conns[i], args.version, correlation_id, timeout)
                .await
                .map_err(|e| format!("{} round {r}: {e}", target.name))?;
            let wall = started.elapsed();
            let out = &mut outcomes[i];
            for size in sizes {
                match out.response_bytes {
                    None => out.response_bytes = Some(size),
                    Some(first) if first != size => {
                        return Err(format!(
                            "{}: answers of {first} and {size} bytes: the cluster changed during the run",
                            target.name
                        ))
                    }
                    Some(_) => {}
                }
            }
            if r > 0 {
                out.latencies.extend(latencies);
                out.wall += wall;
            }
        }
    }
    for (target, out) in args.targets.iter().zip(outcomes) {
        let line = serde_json::json!({
            "target": target.name,
            "clients": args.clients,
            "rounds": args.rounds,
            "version": args.version,
            "latencies_us": out.latencies,
            "response_bytes": out.response_bytes,
            "wall_s": out.wall.as_secs_f64(),
        });
        println!("{line}");
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    if !(9..=12).contains(&args.version) {
        eprintln!("metadata_bench: --version must be 9-12 (the flexible versions whose null topics mean all)");
        return ExitCode::from(2);
    }
    if args.clients == 0 || args.rounds == 0 {
        eprintln!("metadata_bench: --clients and --rounds must be at least 1");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("metadata_bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("metadata_bench: {e}");
            ExitCode::FAILURE
        }
    }
}
