//! The Metadata leg of docs/performance.md's scale model, simulated on one
//! machine: a fake upstream broker that answers Metadata for `--brokers`
//! brokers (default 1,000) and `--partitions` partitions (default 1,000,000,
//! over `--topics` topics, replication factor 3), a kshim started in front of
//! it, and the same request for every topic timed direct and through kshim.
//!
//! ```text
//! cargo build --release --bin kshim --example metadata_scale
//! target/release/examples/metadata_scale --kshim target/release/kshim --clients 1
//! target/release/examples/metadata_scale --brokers 10 --partitions 10000 --topics 100
//! ```
//!
//! (`bash scripts/bench-scale.sh` builds both and runs it.)
//!
//! The fake upstream runs in this process, on a thread of its own (one core at
//! most), on one listener at 127.0.0.1:0. Every broker it names is at that
//! address (kshim asks ApiVersions once per distinct address, and needs no
//! distinct ones). It advertises ApiVersions v0-v3 and Metadata v0-v12 and
//! nothing else: kshim's discovery asks ApiVersions (v4 first; answered
//! UNSUPPORTED_VERSION in the v0 layout, as a broker does) and Metadata with an
//! empty topic list, and reads the cluster's topic defaults only from brokers
//! that advertise DescribeConfigs. The answer for every topic is encoded once
//! per version with kafka-protocol and kept; each request gets those bytes
//! under a header carrying its correlation id. Requests for named topics are
//! answered for those topics (UNKNOWN_TOPIC_OR_PARTITION for names it does not
//! have). Any other request is logged and its connection closed.
//!
//! kshim is started as a child process (`--kshim`) with a config written to a
//! temporary directory: the fake as its upstream, ephemeral ports for its
//! bootstrap listener, its admin API and every broker listener
//! (`port_base = 0`), `max_brokers` at least `--brokers`, and
//! `upstream.max_response_bytes` and `max_queued_request_bytes` computed from
//! the size of the answer. Its open-file soft limit is raised to the hard limit
//! before it starts (or set to `--nofile`). It is ready once it has printed
//! its listening address and its admin API's /readyz answers 200.
//!
//! kshim is then watched idle for `--idle-s` seconds (its CPU for its own
//! refreshes of the cluster view, every 5 s), and the fake is asked once for
//! two topics by name (one unknown) as a check of its own answers.
//!
//! Then `--clients` connections to the fake (direct) and as many to kshim's
//! bootstrap listener are opened and kept. In every round, each target in turn
//! (the order reversed every other round) is asked by all of its connections at
//! once for Metadata v12 with topics null (every topic); a request's latency is
//! from the moment the round starts to the last byte of its answer. One
//! unmeasured round per target comes first. kshim's CPU time (utime + stime
//! from /proc/PID/stat, and the sum of its threads' schedstat run time) and its
//! minor page faults are read before and after each kshim round, and give its
//! cost per request. The CPU the whole machine spent during the rounds is split
//! into kshim's, this process's (clients and fake) and other processes' (a
//! build running beside the benchmark shows there).
//!
//! The first answer through kshim is decoded with kafka-protocol and checked:
//! every broker is named, each at a port kshim listens on (not the fake's), and
//! the topics and partitions are those of the direct answer.
//!
//! Output on stdout: a table, then one JSON line with every figure. The run
//! fails (non-zero exit) when a request fails, a check fails or kshim does not
//! come up; kshim is stopped by its PID whatever happens, and the whole run is
//! bounded by `--deadline-s`.
//!
//! The parts: fake.rs (the fake upstream and the cluster it describes),
//! kshim.rs (starting, configuring and stopping kshim), procfs.rs (what /proc
//! says of kshim and the machine), rounds.rs (the connections and the measured
//! rounds), check.rs (decoding and checking the answers) and report.rs (the
//! table); this file holds the arguments, the run's order and its figures.

use clap::Parser;
use serde_json::json;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

#[path = "../common/frames.rs"]
mod frames;

mod check;
mod fake;
mod kshim;
mod procfs;
mod report;
mod rounds;

use fake::{start_fake, Fake, Model};
use kshim::{raise_nofile, write_config, Kshim, KshimLimits};
use procfs::{cpu, fd_count, listening_ports, soft_nofile, status_kib};
use report::{mib, num, print_table, stats};

const HOST: &str = "127.0.0.1";
const MIB: usize = 1 << 20;

#[derive(Parser, Debug, Clone)]
#[command(
    about = "Metadata for every topic at scale, direct and through kshim, against a fake upstream"
)]
struct Args {
    /// The kshim binary.
    #[arg(long, default_value = "target/release/kshim")]
    kshim: PathBuf,
    /// Brokers the fake upstream names (node ids 1..=N).
    #[arg(long, default_value_t = 1000)]
    brokers: i32,
    /// Partitions over all topics.
    #[arg(long, default_value_t = 1_000_000)]
    partitions: usize,
    /// Topics the partitions are spread over.
    #[arg(long, default_value_t = 10_000)]
    topics: usize,
    /// Replicas per partition (at most --brokers).
    #[arg(long, default_value_t = 3)]
    replication: usize,
    /// Connections per target, each sending one request per round.
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// Measured rounds per target (after one unmeasured round each).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Metadata version the clients ask with (9-12: topics null means all).
    #[arg(long, default_value_t = 12)]
    version: i16,
    /// kshim's log filter ([log] level).
    #[arg(long, default_value = "info")]
    log_level: String,
    /// The open-file soft limit kshim starts with (default: the hard limit).
    #[arg(long)]
    nofile: Option<u64>,
    /// How long kshim may take to print its address and answer /readyz 200.
    #[arg(long, default_value_t = 120)]
    start_timeout_s: u64,
    /// A round without every answer after this long fails the run.
    #[arg(long, default_value_t = 60)]
    round_timeout_s: u64,
    /// The whole run, kshim stopped included, ends after this long at most.
    #[arg(long, default_value_t = 300)]
    deadline_s: u64,
    /// Seconds kshim is watched idle after it is ready, before the clients
    /// connect: its CPU while it only refreshes its view of the cluster
    /// (every 5 s by default, so at least one refresh falls in 6 s).
    #[arg(long, default_value_t = 6)]
    idle_s: u64,
    /// Keep kshim's directory (config, data, kshim.log) and print its path.
    #[arg(long)]
    keep_dir: bool,
}

/// Sets up the fake upstream and kshim in front of it, measures, and stops
/// kshim whatever happened: the figures, and whether every check passed.
/// kshim sits in `kshim_slot` while it runs, for `main` to stop it should the
/// deadline end this future first.
async fn run(
    args: Args,
    kshim_slot: &mut Option<Kshim>,
) -> Result<(serde_json::Value, bool), String> {
    if args.brokers < 1 || args.topics < 1 || args.partitions < args.topics {
        return Err(
            "--brokers and --topics must be at least 1, --partitions at least --topics".into(),
        );
    }
    if args.replication < 1 || args.replication > args.brokers as usize {
        return Err("--replication must be 1 to --brokers".into());
    }
    if !(9..=12).contains(&args.version) {
        return Err("--version must be 9-12 (topics null means every topic)".into());
    }
    if args.clients == 0 || args.rounds == 0 {
        return Err("--clients and --rounds must be at least 1".into());
    }
    if !args.kshim.is_file() {
        return Err(format!(
            "no kshim binary at {} (cargo build --release --bin kshim, or --kshim PATH)",
            args.kshim.display()
        ));
    }
    let (nofile_before, nofile) = raise_nofile(args.nofile)?;

    // The fake upstream, with its answer for every topic encoded before it serves.
    let listener = std::net::TcpListener::bind((HOST, 0)).map_err(|e| format!("bind: {e}"))?;
    let port = listener.local_addr().map_err(|e| e.to_string())?.port();
    let upstream = format!("{HOST}:{port}");
    let model = Model {
        port,
        brokers: args.brokers,
        topics: args.topics,
        partitions: args.partitions,
        replication: args.replication,
    };
    let fake = Arc::new(Fake::new(model.clone()));
    let encoding = Instant::now();
    let body = fake.full_answer(args.version)?;
    let encode_s = encoding.elapsed().as_secs_f64();
    // The answer's frame as a client reads it: size prefix, correlation id,
    // the header's tag section, the body.
    let answer_frame = 4 + 4 + 1 + body.len();
    eprintln!(
        "metadata_scale: the fake upstream at {upstream} answers Metadata v{} for every topic in {} bytes (encoded in {encode_s:.2} s)",
        args.version,
        body.len() + 5
    );
    drop(body);
    start_fake(listener, Arc::clone(&fake))?;

    // kshim, in front of it.
    let limits = KshimLimits {
        max_response_bytes: (answer_frame + answer_frame / 4 + MIB).next_multiple_of(MIB),
        max_queued_request_bytes: (2 * args.clients * answer_frame + 64 * MIB)
            .max(256 * MIB)
            .next_multiple_of(MIB),
    };
    let dir = tempfile::Builder::new()
        .prefix("kshim-scale-")
        .tempdir()
        .map_err(|e| format!("temporary directory: {e}"))?;
    let config = write_config(
        dir.path(),
        &upstream,
        args.brokers,
        &args.log_level,
        &limits,
    )?;
    let start_timeout = Duration::from_secs(args.start_timeout_s);
    let result = async {
        // kshim runs in its directory: its path must not be relative.
        let binary = args
            .kshim
            .canonicalize()
            .map_err(|e| format!("{}: {e}", args.kshim.display()))?;
        let k = Kshim::start(&binary, &config, dir.path(), start_timeout).await?;
        let pid = k.pid;
        *kshim_slot = Some(k);
        measure(&args, &fake, &model, pid, kshim_slot, &limits).await
    }
    .await;
    let stopped = match kshim_slot.take() {
        Some(k) => k.stop().await,
        None => "not started".into(),
    };
    let log_path = dir.path().join("kshim.log");
    let log_lines = std::fs::read_to_string(&log_path)
        .map(|t| t.lines().count())
        .unwrap_or(0);
    let warnings: Vec<String> = std::fs::read_to_string(&log_path)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .take(20)
        .map(str::to_owned)
        .collect();
    let kept = if args.keep_dir {
        let path = dir.keep();
        eprintln!(
            "metadata_scale: kshim's directory is kept at {}",
            path.display()
        );
        Some(path.display().to_string())
    } else {
        None
    };
    let (mut figures, ok) = result.map_err(|e| {
        format!(
            "{e}\n(kshim: {stopped}; the fake upstream was asked: {:?})",
            fake.asked_summary()
        )
    })?;
    figures["kshim"]["stopped"] = json!(stopped);
    figures["kshim"]["log_lines"] = json!(log_lines);
    figures["kshim"]["log_warnings_and_errors"] = json!(warnings);
    figures["kshim"]["dir"] = json!(kept);
    figures["fake_upstream"] = json!({
        "address": upstream,
        "encode_s": encode_s,
        "asked": fake.asked_summary(),
        "refused": fake.refused.load(Ordering::Relaxed),
    });
    figures["open_file_soft_limit"] =
        json!({"before": nofile_before, "kshim_started_with": nofile});
    Ok((figures, ok))
}

/// kshim (`pid`) measured once ready: at rest, idle, through the rounds; then
/// the answers checked. The figures, and whether every check passed.
async fn measure(
    args: &Args,
    fake: &Fake,
    model: &Model,
    pid: u32,
    kshim_slot: &Option<Kshim>,
    limits: &KshimLimits,
) -> Result<(serde_json::Value, bool), String> {
    let k = kshim_slot.as_ref().ok_or("kshim is not running")?;
    let (listening_after, ready_after, bootstrap) =
        (k.listening_after, k.ready_after, k.bootstrap.clone());
    let dir = k.dir.clone();
    let startup_cpu = cpu(pid);
    let ports_ready = listening_ports(pid);
    let fds_ready = fd_count(pid);
    let rss_ready = status_kib(pid, "VmRSS:");
    let hwm_ready = status_kib(pid, "VmHWM:");
    let kshim_nofile = soft_nofile(pid);
    eprintln!(
        "metadata_scale: kshim (pid {pid}) ready in {:.2} s at {bootstrap}, listening on {} ports",
        ready_after.as_secs_f64(),
        ports_ready.len()
    );

    // Idle: what its refreshes of the cluster view cost.
    let idle_before = cpu(pid);
    let refreshes_before = fake.own_metadata.load(Ordering::Relaxed);
    let idle_started = Instant::now();
    tokio::time::sleep(Duration::from_secs(args.idle_s)).await;
    let idle_wall = idle_started.elapsed();
    let idle_cpu_s = cpu(pid).sched_s - idle_before.sched_s;
    let idle_refreshes = fake.own_metadata.load(Ordering::Relaxed) - refreshes_before;

    let upstream = format!("{HOST}:{}", model.port);
    check::named_topics(&upstream, model, args.version).await?;
    let targets = [("direct", upstream.clone()), ("kshim", bootstrap.clone())];
    let mut conns = Vec::new();
    for (_, addr) in &targets {
        conns.push(rounds::connect(addr, args.clients).await?);
    }
    let timed = rounds::run(args, fake, pid, &targets, &mut conns, &dir).await?;
    let legs = &timed.legs;
    let fds_loaded = fd_count(pid);
    let rss_after = status_kib(pid, "VmRSS:");
    let hwm_after = status_kib(pid, "VmHWM:");

    // The checks, outside the measured rounds.
    let direct_first = legs[0].first.clone().unwrap_or_default();
    let kshim_first = legs[1].first.clone().unwrap_or_default();
    let checks = check::answers(
        &direct_first,
        &kshim_first,
        args.version,
        model,
        pid,
        &bootstrap,
    )?;

    let measured = (args.rounds * args.clients) as f64;
    let cpu_ms_per_request = legs[1].kshim_cpu.ticks_s * 1e3 / measured;
    let sched_ms_per_request = legs[1].kshim_cpu.sched_s * 1e3 / measured;
    let idle_ms_per_s = idle_cpu_s * 1e3 / idle_wall.as_secs_f64().max(1e-9);
    let direct_stats = stats(&legs[0].latencies_us);
    let kshim_stats = stats(&legs[1].latencies_us);
    let ratio = |key: &str| num(&kshim_stats, key) / num(&direct_stats, key);
    let bytes_ratio =
        legs[1].answer_bytes.unwrap_or(0) as f64 / legs[0].answer_bytes.unwrap_or(1).max(1) as f64;
    let broker_listeners = ports_ready.len().saturating_sub(2);
    let leg_figures = |i: usize, latency: &serde_json::Value| {
        json!({
            "answer_bytes": legs[i].answer_bytes,
            "latency": latency,
            "latencies_us": legs[i].latencies_us,
            "warmup_us": legs[i].warmup_us,
            "wall_s": legs[i].wall.as_secs_f64(),
        })
    };
    let figures = json!({
        "brokers": model.brokers,
        "topics": model.topics,
        "partitions": model.partitions,
        "replication": model.replication,
        "version": args.version,
        "clients": args.clients,
        "rounds": args.rounds,
        "direct": leg_figures(0, &direct_stats),
        "through_kshim": leg_figures(1, &kshim_stats),
        "ratios_kshim_over_direct": {
            "p50": ratio("p50_ms"),
            "mean": ratio("mean_ms"),
            "min": ratio("min_ms"),
            "max": ratio("max_ms"),
            "answer_bytes": bytes_ratio,
        },
        "added_ms": {
            "p50": num(&kshim_stats, "p50_ms") - num(&direct_stats, "p50_ms"),
            "mean": num(&kshim_stats, "mean_ms") - num(&direct_stats, "mean_ms"),
        },
        "kshim": {
            "pid": pid,
            "start_to_listening_s": listening_after.as_secs_f64(),
            "start_to_ready_s": ready_after.as_secs_f64(),
            "cpu_to_ready_s": startup_cpu.sched_s,
            "cpu_to_ready_ticks_s": startup_cpu.ticks_s,
            "open_file_soft_limit": kshim_nofile,
            "listening_ports": ports_ready.len(),
            "broker_listeners": broker_listeners,
            "fds_ready": fds_ready,
            "fds_with_clients": fds_loaded,
            "rss_ready_mib": mib(rss_ready),
            "peak_rss_ready_mib": mib(hwm_ready),
            "rss_after_mib": mib(rss_after),
            "peak_rss_mib": mib(hwm_after),
            "cpu_ms_per_request": cpu_ms_per_request,
            "cpu_ms_per_request_schedstat": sched_ms_per_request,
            "minor_faults_per_request": legs[1].kshim_cpu.minflt / measured,
            "cpu_ns_per_partition": sched_ms_per_request * 1e6 / model.partitions as f64,
            "idle_s": idle_wall.as_secs_f64(),
            "idle_cpu_ms_per_s": idle_ms_per_s,
            "idle_refreshes": idle_refreshes,
            "cpu_ms_per_idle_refresh": if idle_refreshes > 0 { idle_cpu_s * 1e3 / idle_refreshes as f64 } else { f64::NAN },
            "cpu_ms_during_direct_rounds": legs[0].kshim_cpu.sched_s * 1e3,
            "own_metadata_refreshes_during_kshim_rounds": timed.own_refreshes_in_kshim_rounds,
            "max_response_bytes": limits.max_response_bytes,
            "max_queued_request_bytes": limits.max_queued_request_bytes,
        },
        "machine_during_rounds": {
            "wall_s": timed.wall_s,
            "kshim_cpu_s": timed.kshim_busy_s,
            "clients_and_fake_cpu_s": timed.own_busy_s,
            "other_processes_cpu_s": timed.other_busy_s,
        },
        "checks": {
            "brokers_named": checks.brokers_named,
            "brokers_at_kshim_listeners": checks.brokers_at_kshim_listeners,
            "distinct_broker_ports": checks.distinct_broker_ports,
            "partitions_through_kshim": checks.partitions_through_kshim,
            "topics_equal_direct": checks.topics_equal_direct,
            "problems": checks.problems,
        },
    });
    Ok((figures, checks.problems.is_empty()))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("metadata_scale: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let deadline = Duration::from_secs(args.deadline_s);
    let outcome = runtime.block_on(async {
        let mut kshim = None;
        let outcome = tokio::time::timeout(deadline, run(args, &mut kshim)).await;
        if let Some(k) = kshim.take() {
            // The deadline passed with kshim running.
            eprintln!("metadata_scale: kshim {}", k.stop().await);
        }
        outcome
    });
    match outcome {
        Err(_) => {
            eprintln!(
                "metadata_scale: the run did not end within --deadline-s {}",
                deadline.as_secs()
            );
            ExitCode::FAILURE
        }
        Ok(Err(e)) => {
            eprintln!("metadata_scale: {e}");
            ExitCode::FAILURE
        }
        Ok(Ok((figures, ok))) => {
            print_table(&figures);
            println!("{figures}");
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
    }
}
