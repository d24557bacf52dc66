//! The cost of kshim's policy checks, two ways, each against a baseline measured
//! in the same run.
//!
//! ```text
//! cargo run --release --example policy_bench -- \
//!     --target direct=127.0.0.1:9092 --target kshim=127.0.0.1:19092 \
//!     --target kshim-checked=127.0.0.1:29092 --rounds 3
//! cargo run --release --example policy_bench -- --in-process-only
//! ```
//!
//! **On the wire** (one connection per target, one request in flight, requests
//! interleaved across the targets in rotating order so that noise does not always
//! hit the same one), for each kind of request:
//! - `create`: CreateTopics v7 creating one new topic (1 partition, RF 1, two
//!   configs), so the broker does its whole work: controller write, log creation;
//! - `create-validate`: the same with ValidateOnly, where the broker does little;
//! - `alter`: IncrementalAlterConfigs v1 setting retention.ms on one topic.
//!
//! It prints p50 / p99 per target and the latency each target adds over the first
//! one (the baseline, normally the broker itself). Every answer is checked: a
//! non-zero error code stops the run with a failure.
//!
//! **In process**: kshim's CreateTopics and IncrementalAlterConfigs handlers, with
//! a policy and a validator in force, timed on requests of 1, 1,000 and 10,000
//! items (half refused in the larger ones), so that the cost per item shows
//! whether it grows linearly. Compared with the broker's own p50 for the same
//! request when the wire legs ran.

use bytes::{BufMut, Bytes, BytesMut};
use clap::Parser;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kshim::client::KafkaClient;
use kshim::config::Config;
use kshim::handlers::{create_topics, incremental_alter_configs, Action};
use kshim::standalone::Standalone;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Parser, Debug)]
struct Args {
    /// NAME=HOST:PORT; the first is the baseline.
    #[arg(long = "target")]
    targets: Vec<String>,
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Topic creations per target per round.
    #[arg(long, default_value_t = 40)]
    creates: usize,
    /// Validate-only creations and config changes per target per round.
    #[arg(long, default_value_t = 200)]
    requests: usize,
    /// Only the in-process measurement.
    #[arg(long)]
    in_process_only: bool,
}

/// The policy the checked kshim runs with (and the in-process handlers).
pub const POLICY: &str = r#"
[policy.create_topic]
min_partitions = 1
max_partitions = 10
max_replication_factor = 3
allowed_names = ["[a-z][a-z0-9._-]*"]
denied_names = ["tmp\\..*"]
forbidden_configs = ["unclean.leader.election.enable"]
[policy.create_topic.configs."retention.ms"]
min = 3600000
max = 604800000
[[policy.validators]]
key = "log.segment.bytes"
feature = "metadata.version"
level = 1
min = 3145728
"#;

fn encode<M: Encodable>(m: &M, v: i16) -> Bytes {
    let mut b = BytesMut::new();
    m.encode(&mut b, v).expect("encodable");
    b.freeze()
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_owned())
}

fn topic(name: &str, partitions: i32) -> CreatableTopic {
    CreatableTopic::default()
        .with_name(TopicName(s(name)))
        .with_num_partitions(partitions)
        .with_replication_factor(1)
        .with_configs(vec![
            CreatableTopicConfig::default()
                .with_name(s("retention.ms"))
                .with_value(Some(s("86400000"))),
            CreatableTopicConfig::default()
                .with_name(s("segment.bytes"))
                .with_value(Some(s("4194304"))),
        ])
}

fn create_request(topics: Vec<CreatableTopic>, validate_only: bool) -> CreateTopicsRequest {
    CreateTopicsRequest::default()
        .with_timeout_ms(30_000)
        .with_validate_only(validate_only)
        .with_topics(topics)
}

fn alter_request(names: &[String], value: &str) -> IncrementalAlterConfigsRequest {
    IncrementalAlterConfigsRequest::default().with_resources(
        names
            .iter()
            .map(|n| {
                AlterConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(s(n))
                    .with_configs(vec![AlterableConfig::default()
                        .with_name(s("retention.ms"))
                        .with_config_operation(0)
                        .with_value(Some(s(value)))])
            })
            .collect(),
    )
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Create,
    CreateValidate,
    Alter,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Create => "create",
            Kind::CreateValidate => "create-validate",
            Kind::Alter => "alter",
        }
    }
}

/// One timed request; the answer's error code must be 0.
async fn timed(
    client: &mut KafkaClient,
    kind: Kind,
    target: &str,
    n: usize,
) -> Result<Duration, String> {
    let (api, version, body) = match kind {
        Kind::Create => (
            ApiKey::CreateTopics,
            7,
            encode(
                &create_request(vec![topic(&format!("bench-{target}-{n}"), 1)], false),
                7,
            ),
        ),
        Kind::CreateValidate => (
            ApiKey::CreateTopics,
            7,
            encode(
                &create_request(vec![topic(&format!("bench-validate-{n}"), 1)], true),
                7,
            ),
        ),
        Kind::Alter => {
            let value = if n.is_multiple_of(2) {
                "86400000"
            } else {
                "90000000"
            };
            (
                ApiKey::IncrementalAlterConfigs,
                1,
                encode(&alter_request(&["bench-alter".into()], value), 1),
            )
        }
    };
    let start = Instant::now();
    let raw = client
        .request(api, version, &body)
        .await
        .map_err(|e| e.to_string())?;
    let took = start.elapsed();
    let code = match kind {
        Kind::Alter => IncrementalAlterConfigsResponse::decode(&mut raw.clone(), version)
            .map_err(|e| e.to_string())?
            .responses
            .first()
            .map(|r| {
                (
                    r.error_code,
                    r.error_message.as_ref().map(|m| m.to_string()),
                )
            }),
        _ => CreateTopicsResponse::decode(&mut raw.clone(), version)
            .map_err(|e| e.to_string())?
            .topics
            .first()
            .map(|t| {
                (
                    t.error_code,
                    t.error_message.as_ref().map(|m| m.to_string()),
                )
            }),
    };
    match code {
        Some((0, _)) => Ok(took),
        other => Err(format!("{target}: {} answered {other:?}", kind.name())),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

async fn wire(args: &Args) -> Result<Vec<(Kind, Duration)>, String> {
    let targets: Vec<(String, String)> = args
        .targets
        .iter()
        .map(|t| {
            t.split_once('=')
                .map(|(n, a)| (n.to_owned(), a.to_owned()))
                .ok_or(format!("--target {t}: expected NAME=HOST:PORT"))
        })
        .collect::<Result<_, _>>()?;
    if targets.is_empty() {
        return Ok(Vec::new());
    }
    let mut clients = Vec::new();
    for (name, addr) in &targets {
        let c = KafkaClient::connect(addr, Duration::from_secs(60))
            .await
            .map_err(|e| format!("{name}: {e}"))?;
        clients.push(c);
    }
    // The topic the alter leg changes.
    let setup = create_request(vec![topic("bench-alter", 1)], false);
    clients[0]
        .request(ApiKey::CreateTopics, 7, &encode(&setup, 7))
        .await
        .map_err(|e| e.to_string())?;
    tokio::time::sleep(Duration::from_secs(1)).await;

    let kinds = [Kind::Create, Kind::CreateValidate, Kind::Alter];
    let mut samples: Vec<Vec<Vec<Duration>>> = vec![vec![Vec::new(); targets.len()]; kinds.len()];
    let mut seq = 0usize;
    for round in 0..args.rounds {
        for (k, &kind) in kinds.iter().enumerate() {
            let count = if kind == Kind::Create {
                args.creates
            } else {
                args.requests
            };
            // Warm every connection up on this kind before timing it.
            for t in 0..targets.len() {
                for _ in 0..3.min(count) {
                    seq += 1;
                    timed(&mut clients[t], kind, &targets[t].0, seq).await?;
                }
            }
            // Requests interleave across the targets, and the order rotates each
            // time, so that the broker's background work (log flushes, the
            // controller's writes) is spread over all of them alike.
            for i in 0..count {
                for j in 0..targets.len() {
                    let t = (i + j) % targets.len();
                    seq += 1;
                    let took = timed(&mut clients[t], kind, &targets[t].0, seq).await?;
                    samples[k][t].push(took);
                }
            }
        }
        eprintln!("round {} of {} done", round + 1, args.rounds);
    }
    println!(
        "\n## On the wire: one request in flight, {} rounds\n",
        args.rounds
    );
    println!("| request | target | n | p50 ms | p99 ms | added p50 ms | added p99 ms |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    let mut baseline_p50 = Vec::new();
    for (k, kind) in kinds.iter().enumerate() {
        let mut base = (Duration::ZERO, Duration::ZERO);
        for (t, (name, _)) in targets.iter().enumerate() {
            let mut v = samples[k][t].clone();
            v.sort();
            let (p50, p99) = (percentile(&v, 0.5), percentile(&v, 0.99));
            if t == 0 {
                base = (p50, p99);
                baseline_p50.push((*kind, p50));
            }
            println!(
                "| {} | {name} | {} | {:.3} | {:.3} | {:+.3} | {:+.3} |",
                kind.name(),
                v.len(),
                ms(p50),
                ms(p99),
                ms(p50) - ms(base.0),
                ms(p99) - ms(base.1)
            );
        }
    }
    Ok(baseline_p50)
}

/// Median time of `f` over `runs` runs.
fn median_of(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut v: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    v.sort();
    v[v.len() / 2]
}

fn request_frame(api: ApiKey, version: i16, body: &Bytes) -> Bytes {
    let flexible = api.request_header_version(version) >= 2;
    let mut b = BytesMut::new();
    b.put_i16(api as i16);
    b.put_i16(version);
    b.put_i32(1);
    b.put_i16(5);
    b.put_slice(b"bench");
    if flexible {
        b.put_u8(0);
    }
    b.put_slice(body);
    b.freeze()
}

async fn in_process(broker: &[(Kind, Duration)]) -> Result<(), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut config = Config::from_toml(POLICY).map_err(|e| e.to_string())?;
    config.listen = "127.0.0.1:0".into();
    config.data_dir = dir.path().to_owned();
    let kshim = Standalone::bind(&config).await.map_err(|e| e.to_string())?;
    let ctx = kshim.context;
    let policies = ctx.policies.load();
    let defaults = Default::default();
    println!("\n## In process: the handler alone (decode, check, build the answer or the narrowed request)\n");
    println!("| request | items | median per request | per item |");
    println!("|---|---:|---:|---:|");
    for items in [1usize, 1_000, 10_000] {
        let topics: Vec<CreatableTopic> = (0..items)
            .map(|i| {
                topic(
                    &format!("t{i}"),
                    if items > 1 && i % 2 == 1 { 11 } else { 1 },
                )
            })
            .collect();
        let frame = request_frame(
            ApiKey::CreateTopics,
            7,
            &encode(&create_request(topics, false), 7),
        );
        let runs = if items == 1 {
            20_000
        } else {
            2_000_000 / items.max(1) / 10 + 5
        };
        let mut ok = true;
        let took = median_of(runs, || {
            ok &= !matches!(
                create_topics::handle(
                    &policies,
                    &[&ctx.controller.snapshot().finalized],
                    kshim::protocol::Incoming::parse(frame.clone()).expect("a request header"),
                    defaults
                ),
                Ok(Action::Close(_)) | Err(_)
            );
        });
        if !ok {
            return Err("the CreateTopics handler refused the benchmark request".into());
        }
        println!(
            "| CreateTopics v7 | {items} | {:.2} µs | {:.0} ns |",
            took.as_secs_f64() * 1e6,
            took.as_secs_f64() * 1e9 / items as f64
        );

        let names: Vec<String> = (0..items).map(|i| format!("t{i}")).collect();
        let mut request = alter_request(&names, "86400000");
        if items > 1 {
            for (i, r) in request.resources.iter_mut().enumerate() {
                if i % 2 == 1 {
                    r.configs[0].value = Some(s("1000"));
                }
            }
        }
        let frame = request_frame(ApiKey::IncrementalAlterConfigs, 1, &encode(&request, 1));
        let took = median_of(runs, || {
            ok &= !matches!(
                incremental_alter_configs::handle(
                    &policies,
                    &[&ctx.controller.snapshot().finalized],
                    kshim::protocol::Incoming::parse(frame.clone()).expect("a request header")
                ),
                Ok(Action::Close(_)) | Err(_)
            );
        });
        if !ok {
            return Err("the IncrementalAlterConfigs handler refused the benchmark request".into());
        }
        println!(
            "| IncrementalAlterConfigs v1 | {items} | {:.2} µs | {:.0} ns |",
            took.as_secs_f64() * 1e6,
            took.as_secs_f64() * 1e9 / items as f64
        );
    }
    if !broker.is_empty() {
        // One accepted item: the case the wire legs measure.
        let frame = request_frame(
            ApiKey::CreateTopics,
            7,
            &encode(&create_request(vec![topic("t", 1)], false), 7),
        );
        let create = median_of(20_000, || {
            let _ = create_topics::handle(
                &policies,
                &[&ctx.controller.snapshot().finalized],
                kshim::protocol::Incoming::parse(frame.clone()).expect("a request header"),
                defaults,
            );
        });
        let frame = request_frame(
            ApiKey::IncrementalAlterConfigs,
            1,
            &encode(&alter_request(&["t".into()], "86400000"), 1),
        );
        let alter = median_of(20_000, || {
            let _ = incremental_alter_configs::handle(
                &policies,
                &[&ctx.controller.snapshot().finalized],
                kshim::protocol::Incoming::parse(frame.clone()).expect("a request header"),
            );
        });
        println!("\n## The check next to the broker's own work (baseline p50)\n");
        println!("| request | check | broker p50 | check / broker |");
        println!("|---|---:|---:|---:|");
        for (kind, p50) in broker {
            let check = if *kind == Kind::Alter { alter } else { create };
            println!(
                "| {} | {:.2} µs | {:.3} ms | {:.4}% |",
                kind.name(),
                check.as_secs_f64() * 1e6,
                ms(*p50),
                100.0 * check.as_secs_f64() / p50.as_secs_f64()
            );
        }
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = Args::parse();
    let broker = if args.in_process_only {
        Vec::new()
    } else {
        match wire(&args).await {
            Ok(b) => b,
            Err(e) => {
                eprintln!("policy_bench: FAILED: {e}");
                return ExitCode::FAILURE;
            }
        }
    };
    if let Err(e) = in_process(&broker).await {
        eprintln!("policy_bench: FAILED: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
