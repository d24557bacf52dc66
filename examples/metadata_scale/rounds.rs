//! The clients: connections kept open to a target, the Metadata request for
//! every topic, and the measured rounds, each target in turn, with kshim's CPU
//! and page faults read around each of its rounds. Nothing here checks what
//! the answers say (check.rs does).

use super::fake::Fake;
use super::kshim::log_tail;
use super::procfs::{cpu, machine_and_own_busy_s, Cpu};
use super::{frames, Args};
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{ApiKey, MetadataRequest, RequestHeader, TopicName};
use kafka_protocol::protocol::{Encodable, StrBytes};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;

const CLIENT_ID: &str = "kshim-metadata-scale";

/// A connection kept open, with the bytes read ahead of the next frame.
pub(super) struct Conn {
    pub(super) stream: TcpStream,
    pub(super) buf: BytesMut,
}

pub(super) async fn connect(addr: &str, clients: usize) -> Result<Vec<Conn>, String> {
    let mut conns = Vec::with_capacity(clients);
    for i in 0..clients {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("{addr}: connection {} of {clients}: {e}", i + 1))?;
        stream
            .set_nodelay(true)
            .map_err(|e| format!("{addr}: {e}"))?;
        conns.push(Conn {
            stream,
            buf: BytesMut::new(),
        });
    }
    Ok(conns)
}

/// Metadata for every topic (topics null), size prefix included.
fn metadata_request(version: i16, correlation_id: i32) -> Result<Vec<u8>, String> {
    metadata_request_for(version, correlation_id, None)
}

/// Metadata for `topics` (None: every topic), size prefix included.
pub(super) fn metadata_request_for(
    version: i16,
    correlation_id: i32,
    topics: Option<&[&str]>,
) -> Result<Vec<u8>, String> {
    let header = RequestHeader::default()
        .with_request_api_key(ApiKey::Metadata as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str(CLIENT_ID)));
    let body = MetadataRequest::default()
        .with_topics(topics.map(|names| {
            names
                .iter()
                .map(|n| {
                    MetadataRequestTopic::default()
                        .with_name(Some(TopicName(StrBytes::from_string((*n).to_owned()))))
                })
                .collect()
        }))
        .with_allow_auto_topic_creation(false);
    let mut out = BytesMut::new();
    out.put_i32(0);
    header
        .encode(&mut out, ApiKey::Metadata.request_header_version(version))
        .map_err(|e| e.to_string())?;
    body.encode(&mut out, version).map_err(|e| e.to_string())?;
    let size = (out.len() - 4) as i32;
    out[..4].copy_from_slice(&size.to_be_bytes());
    Ok(out.to_vec())
}

struct Round {
    latencies_us: Vec<u64>,
    sizes: Vec<usize>,
    /// The first connection's answer (size prefix excluded).
    first: Bytes,
    wall: Duration,
}

async fn round(
    conns: &mut [Conn],
    version: i16,
    correlation_id: i32,
    timeout: Duration,
) -> Result<Round, String> {
    let request = metadata_request(version, correlation_id)?;
    let start = Instant::now();
    let all = futures::future::join_all(conns.iter_mut().map(|c| {
        let request = &request;
        async move {
            c.stream
                .write_all(request)
                .await
                .map_err(|e| format!("write failed: {e}"))?;
            let body = frames::read_frame(&mut c.stream, &mut c.buf, i32::MAX as usize).await?;
            let elapsed = start.elapsed();
            if body.len() < 4 {
                return Err(format!("an answer of {} bytes", body.len()));
            }
            let got = i32::from_be_bytes([body[0], body[1], body[2], body[3]]);
            if got != correlation_id {
                return Err(format!("correlation id {got}, not {correlation_id}"));
            }
            Ok::<_, String>((elapsed.as_micros() as u64, body.freeze()))
        }
    }));
    let results = tokio::time::timeout(timeout, all)
        .await
        .map_err(|_| format!("not every answer came within {timeout:?}"))?;
    let wall = start.elapsed();
    let mut out = Round {
        latencies_us: Vec::new(),
        sizes: Vec::new(),
        first: Bytes::new(),
        wall,
    };
    for (i, r) in results.into_iter().enumerate() {
        let (latency, body) = r?;
        out.latencies_us.push(latency);
        out.sizes.push(body.len());
        if i == 0 {
            out.first = body;
        }
    }
    Ok(out)
}

/// One target's figures over the rounds.
#[derive(Default)]
pub(super) struct Leg {
    pub(super) latencies_us: Vec<u64>,
    pub(super) answer_bytes: Option<usize>,
    pub(super) warmup_us: Vec<u64>,
    pub(super) first: Option<Bytes>,
    pub(super) wall: Duration,
    /// kshim's CPU during this leg's measured rounds (for the direct leg,
    /// what it spends meanwhile on its own).
    pub(super) kshim_cpu: Cpu,
}

/// What the rounds measured: per target, and for the whole machine.
pub(super) struct Rounds {
    /// Direct, then through kshim.
    pub(super) legs: [Leg; 2],
    pub(super) own_refreshes_in_kshim_rounds: u64,
    pub(super) wall_s: f64,
    pub(super) kshim_busy_s: f64,
    /// This process's CPU: the clients and the fake upstream.
    pub(super) own_busy_s: f64,
    pub(super) other_busy_s: f64,
}

/// One unmeasured round per target, then `--rounds` measured ones; each
/// target in turn, the order reversed every other round. `targets` are
/// (name, address), direct first; `conns` their connections, in that order.
/// `dir` is kshim's, whose log's last lines a failed round reports.
pub(super) async fn run(
    args: &Args,
    fake: &Fake,
    pid: u32,
    targets: &[(&str, String); 2],
    conns: &mut [Vec<Conn>],
    dir: &Path,
) -> Result<Rounds, String> {
    let timeout = Duration::from_secs(args.round_timeout_s);
    let mut legs = [Leg::default(), Leg::default()];
    let mut own_refreshes_in_kshim_rounds = 0u64;
    let mut correlation_id = 0;
    let (machine_before, own_before) = machine_and_own_busy_s();
    let kshim_before = cpu(pid).ticks_s;
    let rounds_started = Instant::now();
    for r in 0..=args.rounds {
        let order: [usize; 2] = if r % 2 == 1 { [1, 0] } else { [0, 1] };
        for i in order {
            correlation_id += 1;
            let before = cpu(pid);
            let refreshes_before = fake.own_metadata.load(Ordering::Relaxed);
            let got = round(&mut conns[i], args.version, correlation_id, timeout)
                .await
                .map_err(|e| {
                    format!(
                        "{} round {r}: {e}\n--- the last lines of kshim.log:\n{}",
                        targets[i].0,
                        log_tail(dir, 20)
                    )
                })?;
            let after = cpu(pid);
            let leg = &mut legs[i];
            for &size in &got.sizes {
                match leg.answer_bytes {
                    None => leg.answer_bytes = Some(size),
                    Some(first) if first != size => {
                        return Err(format!(
                            "{}: answers of {first} and {size} bytes",
                            targets[i].0
                        ))
                    }
                    Some(_) => {}
                }
            }
            if r == 0 {
                leg.warmup_us = got.latencies_us;
                leg.first = Some(got.first);
                continue;
            }
            leg.latencies_us.extend(&got.latencies_us);
            leg.wall += got.wall;
            leg.kshim_cpu.ticks_s += after.ticks_s - before.ticks_s;
            leg.kshim_cpu.sched_s += after.sched_s - before.sched_s;
            leg.kshim_cpu.minflt += after.minflt - before.minflt;
            if i == 1 {
                own_refreshes_in_kshim_rounds +=
                    fake.own_metadata.load(Ordering::Relaxed) - refreshes_before;
            }
        }
    }
    let (machine_after, own_after) = machine_and_own_busy_s();
    let wall_s = rounds_started.elapsed().as_secs_f64();
    let own_busy_s = own_after - own_before;
    let kshim_busy_s = cpu(pid).ticks_s - kshim_before;
    let other_busy_s = (machine_after - machine_before) - own_busy_s - kshim_busy_s;
    Ok(Rounds {
        legs,
        own_refreshes_in_kshim_rounds,
        wall_s,
        kshim_busy_s,
        own_busy_s,
        other_busy_s,
    })
}
