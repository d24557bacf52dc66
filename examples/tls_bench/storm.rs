//! A storm of new TLS connections against one listener, beside clients that
//! are already connected: what the connected clients wait, and what becomes of
//! every new connection.
//!
//! The connected clients (`--probe-clients`) each hold one TLS connection and
//! send ApiVersions every 5 ms from a thread of their own, so that the storm's
//! tasks in this process do not delay them. The storm opens `--connections`
//! connections, at most `--concurrency` at a time; each does a full handshake,
//! one ApiVersions and a close, and ends `completed`, `refused` (the server
//! closed or reset it before the answer) or `timed_out` (no outcome within
//! `--timeout-ms`). `--silent` more connections send nothing at all and wait to
//! be closed by the server. One JSON object on stdout says all of it.

use super::*;
use std::sync::atomic::AtomicU64;
use tokio::sync::Semaphore;

#[derive(ClapArgs, Debug)]
pub(super) struct StormArgs {
    #[command(flatten)]
    pub(super) tls: TlsArgs,
    /// HOST:PORT of the TLS listener.
    #[arg(long)]
    target: String,
    /// New connections in all.
    #[arg(long, default_value_t = 2_000)]
    connections: usize,
    /// New connections at once.
    #[arg(long, default_value_t = 500)]
    concurrency: usize,
    /// Connections that send nothing and wait to be closed (opened first).
    #[arg(long, default_value_t = 0)]
    silent: usize,
    /// How long a silent connection waits to be closed before it counts as
    /// left open.
    #[arg(long, default_value_t = 20_000)]
    silent_wait_ms: u64,
    /// Connected clients timing ApiVersions while the storm runs.
    #[arg(long, default_value_t = 2)]
    probe_clients: usize,
    /// Local addresses the storm's connections come from, in turn (default:
    /// the system's choice).
    #[arg(long, value_delimiter = ',')]
    storm_from: Vec<std::net::IpAddr>,
    /// The local address of the silent connections.
    #[arg(long)]
    silent_from: Option<std::net::IpAddr>,
}

#[derive(Default)]
struct Outcomes {
    completed: AtomicU64,
    refused: AtomicU64,
    timed_out: AtomicU64,
}

/// Every `PROBE_INTERVAL` one ApiVersions on an established connection.
const PROBE_INTERVAL: Duration = Duration::from_millis(5);

/// One connected client on a thread of its own, until `stop`: its latencies
/// in microseconds, and what broke it, if anything did.
fn probe(
    addr: String,
    client: Arc<Client>,
    stop: Arc<AtomicBool>,
    ready: std::sync::mpsc::Sender<Result<(), String>>,
) -> (Vec<u32>, Option<String>) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(format!("probe runtime: {e}")));
            return (Vec::new(), None);
        }
    };
    runtime.block_on(async move {
        let mut stream = match connect(&addr, &client).await {
            Ok(s) => s,
            Err(e) => {
                let _ = ready.send(Err(e));
                return (Vec::new(), None);
            }
        };
        let _ = ready.send(Ok(()));
        let mut request = api_versions_request();
        let mut buf = BytesMut::with_capacity(4096);
        let mut latencies = Vec::new();
        let mut id = 1;
        while !stop.load(Ordering::Relaxed) {
            id += 1;
            set_correlation(&mut request, id);
            let start = Instant::now();
            let exchange = async {
                stream
                    .write_all(&request)
                    .await
                    .map_err(|e| format!("write: {e}"))?;
                let body = frames::read_frame(&mut stream, &mut buf, MAX_RESPONSE_BYTES).await?;
                check_correlation(&body, id)
            };
            match tokio::time::timeout(client.timeout, exchange).await {
                Ok(Ok(())) => latencies.push(micros(start.elapsed())),
                Ok(Err(e)) => return (latencies, Some(e)),
                Err(_) => {
                    return (
                        latencies,
                        Some(format!("no answer within {:?}", client.timeout)),
                    )
                }
            }
            tokio::time::sleep(PROBE_INTERVAL).await;
        }
        (latencies, None)
    })
}

/// A connection that sends nothing: how long until the server closed it, or
/// `None` when it was still open after `wait`.
async fn silent(addr: String, from: Option<std::net::IpAddr>, wait: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut tcp = tcp_from(&addr, from).await.ok()?;
    let mut byte = [0u8; 1];
    match tokio::time::timeout(wait, tcp.read(&mut byte)).await {
        Ok(_) => Some(start.elapsed()),
        Err(_) => None,
    }
}

pub(super) async fn storm(args: StormArgs) -> ExitCode {
    let client = match client(&args.tls) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            eprintln!("tls_bench: {e}");
            return ExitCode::from(2);
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    let mut probes = Vec::new();
    for _ in 0..args.probe_clients {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (addr, client, stop) = (args.target.clone(), Arc::clone(&client), Arc::clone(&stop));
        probes.push(std::thread::spawn(move || {
            probe(addr, client, stop, ready_tx)
        }));
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                eprintln!("tls_bench: a connected client could not connect: {e}");
                return ExitCode::FAILURE;
            }
            Err(_) => return ExitCode::FAILURE,
        }
    }
    let wait = Duration::from_millis(args.silent_wait_ms);
    let silent: Vec<_> = (0..args.silent)
        .map(|_| tokio::spawn(silent(args.target.clone(), args.silent_from, wait)))
        .collect();
    let started = Instant::now();
    let outcomes = Arc::new(Outcomes::default());
    let errors = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let gate = Arc::new(Semaphore::new(args.concurrency.max(1)));
    let request = Arc::new(api_versions_request());
    let mut storm = Vec::with_capacity(args.connections);
    for n in 0..args.connections {
        let Ok(permit) = Arc::clone(&gate).acquire_owned().await else {
            break;
        };
        let from =
            (!args.storm_from.is_empty()).then(|| args.storm_from[n % args.storm_from.len()]);
        let (addr, client, request) = (
            args.target.clone(),
            Arc::clone(&client),
            Arc::clone(&request),
        );
        let (outcomes, errors) = (Arc::clone(&outcomes), Arc::clone(&errors));
        storm.push(tokio::spawn(async move {
            let _permit = permit;
            let outcome = tokio::time::timeout(
                client.timeout,
                handshake_exchange_from(&addr, &client, &request, from),
            )
            .await;
            let counter = match outcome {
                Ok(Ok(_)) => &outcomes.completed,
                Ok(Err(e)) => {
                    let mut errors = errors.lock().unwrap_or_else(|e| e.into_inner());
                    if errors.len() < MAX_REPORTED_FAILURES {
                        errors.push(e);
                    }
                    &outcomes.refused
                }
                Err(_) => &outcomes.timed_out,
            };
            counter.fetch_add(1, Ordering::Relaxed);
        }));
    }
    for task in storm {
        let _ = task.await;
    }
    let storm_secs = started.elapsed().as_secs_f64();
    let mut silent_closed = 0;
    let mut silent_slowest_ms = 0.0f64;
    for task in silent {
        if let Ok(Some(after)) = task.await {
            silent_closed += 1;
            silent_slowest_ms = silent_slowest_ms.max(after.as_secs_f64() * 1_000.0);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    let mut probe_errors = Vec::new();
    for p in probes {
        if let Ok((l, e)) = p.join() {
            latencies.extend(l);
            probe_errors.extend(e);
        }
    }
    latencies.sort_unstable();
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let report = serde_json::json!({
        "connections": args.connections,
        "concurrency": args.concurrency,
        "completed": load(&outcomes.completed),
        "refused": load(&outcomes.refused),
        "timed_out": load(&outcomes.timed_out),
        "errors": *errors.lock().unwrap_or_else(|e| e.into_inner()),
        "storm_seconds": storm_secs,
        "silent": args.silent,
        "silent_closed_by_server": silent_closed,
        "silent_slowest_close_ms": silent_slowest_ms,
        "probe": {
            "answers": latencies.len(),
            "p50_ms": percentile_ms(&latencies, 0.50),
            "p99_ms": percentile_ms(&latencies, 0.99),
            "max_ms": percentile_ms(&latencies, 1.0),
            "errors": probe_errors,
        },
    });
    println!("{report}");
    ExitCode::SUCCESS
}
