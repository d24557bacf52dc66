//! A bounded, seeded mutation fuzzer that runs on stable Rust in every test run.
//! The coverage-guided targets under `fuzz/` go deeper; this one keeps the basic
//! promise checked: no bytes from the network make kshim panic, and no sequence of
//! requests leaves the controller in a state that valid updates cannot reach.
//!
//! `KSHIM_FUZZ_ITERATIONS` and `KSHIM_FUZZ_SEED` override the defaults, e.g. to
//! run longer locally or to replay a failure with the seed it printed.

use bytes::{Bytes, BytesMut};
use futures::FutureExt;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
use kafka_protocol::messages::TopicName;
use kafka_protocol::messages::{
    ApiKey, DescribeClusterRequest, MetadataRequest, RequestHeader, UpdateFeaturesRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kshim::config::Config;
use kshim::features::{kafka, FeatureSnapshot};
use kshim::handlers::{dispatch, Action, Context, Peer, ANONYMOUS};
use kshim::protocol::frame::FrameCodec;
use kshim::protocol::Incoming;
use kshim::protocol::{api_versions, requests, RequestFrame};
use kshim::standalone::Standalone;
use kshim::upstream::Route;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;
use tokio_util::codec::Decoder;

const DEFAULT_ITERATIONS: u64 = 50_000;
const DEFAULT_SEED: u64 = 0x6b73_6869_6d5f_6675; // "kshim_fu"
const CODEC_MAX_FRAME: usize = 4096;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

// ---------------------------------------------------------------------------
// Seeds
// ---------------------------------------------------------------------------

/// Captured answer bodies, with the ApiVersions version each answers.
type AnswerSeeds = Vec<(i16, Vec<u8>)>;

/// The captured request frames (size prefix stripped) and captured answer bodies.
fn fixture_seeds() -> (Vec<Vec<u8>>, AnswerSeeds) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("protocol-fixtures");
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    let mut requests = Vec::new();
    let mut answers = Vec::new();
    for e in manifest.as_array().unwrap() {
        let raw = std::fs::read(dir.join(e["file"].as_str().unwrap())).unwrap();
        if e["direction"] == "request" {
            requests.push(raw[4..].to_vec());
        } else if e["api_key"] == 18 {
            answers.push((e["api_version"].as_i64().unwrap() as i16, raw[8..].to_vec()));
        }
    }
    (requests, answers)
}

fn frame_of<M: Encodable>(api: ApiKey, version: i16, body: &M) -> Vec<u8> {
    let header_version = api.request_header_version(version);
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(42)
        .with_client_id(Some(StrBytes::from_static_str("fuzz")));
    let mut out = BytesMut::new();
    header.encode(&mut out, header_version).unwrap();
    body.encode(&mut out, version).unwrap();
    out.to_vec()
}

/// Valid requests the fixtures do not cover: every Metadata and DescribeCluster
/// version, and UpdateFeatures touching several features at once.
fn synthesized_seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for v in 0..=12i16 {
        let mut topic = MetadataRequestTopic::default()
            .with_name(Some(TopicName(StrBytes::from_static_str("t"))));
        if v >= 10 {
            topic.topic_id = uuid::Uuid::from_u128(7);
        }
        let mut req = MetadataRequest::default().with_topics(Some(vec![topic]));
        if v >= 4 {
            req.allow_auto_topic_creation = true;
        }
        if (8..=10).contains(&v) {
            req.include_cluster_authorized_operations = true;
        }
        out.push(frame_of(ApiKey::Metadata, v, &req));
        if v >= 1 {
            out.push(frame_of(
                ApiKey::Metadata,
                v,
                &MetadataRequest::default().with_topics(None),
            ));
        }
    }
    for v in 0..=2i16 {
        let mut req =
            DescribeClusterRequest::default().with_include_cluster_authorized_operations(true);
        if v >= 1 {
            req.endpoint_type = 2;
        }
        out.push(frame_of(ApiKey::DescribeCluster, v, &req));
    }
    let updates = [
        ("metadata.version", 26, 2),
        ("transaction.version", 1, 2),
        ("eligible.leader.replicas.version", 0, 2),
        ("share.version", 1, 1),
        ("kraft.version", 1, 1),
    ];
    for v in 0..=2i16 {
        let keys = updates
            .iter()
            .map(|&(name, level, t)| {
                let mut k = FeatureUpdateKey::default()
                    .with_feature(StrBytes::from_static_str(name))
                    .with_max_version_level(level);
                if v == 0 {
                    k.allow_downgrade = t == 2;
                } else {
                    k.upgrade_type = t;
                }
                k
            })
            .collect();
        let req = UpdateFeaturesRequest::default()
            .with_timeout_ms(1000)
            .with_feature_updates(keys);
        out.push(frame_of(ApiKey::UpdateFeatures, v, &req));
    }
    out
}

// ---------------------------------------------------------------------------
// Mutation
// ---------------------------------------------------------------------------

const INTERESTING_I16: &[i16] = &[-1, 0, 1, 2, 0x7f, 0x80, 0xff, i16::MAX, i16::MIN];
const INTERESTING_I32: &[i32] = &[-1, 0, 1, 0x7f, 0x80, 0xffff, 0x7fff_ffff, i32::MIN];

/// A position, more often past the 8-byte header peek so that bodies get mutated.
fn position(rng: &mut StdRng, len: usize) -> usize {
    if len > 8 && rng.gen_bool(0.7) {
        rng.gen_range(8..len)
    } else {
        rng.gen_range(0..len)
    }
}

fn mutate(rng: &mut StdRng, input: &mut Vec<u8>) {
    for _ in 0..rng.gen_range(1..=4) {
        if input.is_empty() {
            input.push(rng.gen());
            continue;
        }
        let len = input.len();
        match rng.gen_range(0..10) {
            0 | 1 => {
                let i = position(rng, len);
                input[i] ^= 1 << rng.gen_range(0..8);
            }
            2 => {
                let i = position(rng, len);
                input[i] = *[0u8, 1, 0x7f, 0x80, 0xfe, 0xff]
                    .get(rng.gen_range(0..6))
                    .unwrap_or(&0);
            }
            3 => {
                let i = rng.gen_range(0..=len);
                for _ in 0..rng.gen_range(1..=8) {
                    input.insert(i, rng.gen());
                }
            }
            4 => {
                let i = position(rng, len);
                let n = rng.gen_range(1..=8).min(len - i);
                input.drain(i..i + n);
            }
            5 => {
                // A length field: int16 or int32 at a random spot.
                let i = position(rng, len);
                if rng.gen_bool(0.5) && i + 2 <= len {
                    let v = INTERESTING_I16[rng.gen_range(0..INTERESTING_I16.len())];
                    input[i..i + 2].copy_from_slice(&v.to_be_bytes());
                } else if i + 4 <= len {
                    let v = INTERESTING_I32[rng.gen_range(0..INTERESTING_I32.len())];
                    input[i..i + 4].copy_from_slice(&v.to_be_bytes());
                }
            }
            6 => {
                // A compact length or count: nudge a byte by one, or write a long uvarint.
                let i = position(rng, len);
                if rng.gen_bool(0.6) {
                    input[i] = input[i].wrapping_add(if rng.gen() { 1 } else { 0xff });
                } else {
                    let v: u32 = *[0x7fff_ffffu32, 0x8000_0000, u32::MAX, 300, 1 << 21]
                        .get(rng.gen_range(0..5))
                        .unwrap_or(&0);
                    let mut varint = Vec::new();
                    kshim::protocol::wire::put_uvarint(&mut varint, v);
                    input.splice(i..(i + 1).min(len), varint);
                }
            }
            7 => {
                input.truncate(rng.gen_range(0..len));
            }
            8 => {
                // Duplicate a chunk (repeated array entries, tags, ...).
                let i = rng.gen_range(0..len);
                let n = rng.gen_range(1..=16).min(len - i);
                let chunk: Vec<u8> = input[i..i + n].to_vec();
                let at = rng.gen_range(0..=len);
                input.splice(at..at, chunk);
            }
            _ => {
                // Keep the header, change the version.
                if len >= 4 {
                    let v: i16 = rng.gen_range(-2..=16);
                    input[2..4].copy_from_slice(&v.to_be_bytes());
                }
            }
        }
    }
}

fn random_bytes(rng: &mut StdRng) -> Vec<u8> {
    let n = rng.gen_range(0..96);
    let mut out: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
    // Often a plausible header, so that dispatch reaches the handlers.
    if n >= 4 && rng.gen_bool(0.5) {
        let key = [3i16, 18, 57, 60][rng.gen_range(0..4)];
        out[0..2].copy_from_slice(&key.to_be_bytes());
        out[2..4].copy_from_slice(&rng.gen_range(0i16..=13).to_be_bytes());
    }
    out
}

// ---------------------------------------------------------------------------
// Targets
// ---------------------------------------------------------------------------

/// Where kshim's bounded decoder accepted bytes that kafka-protocol refuses (for
/// example a null FeatureUpdates array, which kshim reads as empty): counted and
/// reported, not failed, since a lenient reader is not unsafe.
#[derive(Default)]
struct Leniency {
    /// kafka-protocol's complaint -> (how often, the first input).
    by_reason: std::collections::BTreeMap<String, (u64, String)>,
}

/// Every bounded body decoder, at every version it knows. Where both kshim's
/// decoder and kafka-protocol's accept the bytes, they must read the same request.
fn body_decoders(body: &[u8], leniency: &mut Leniency) {
    let mut note = |api: &str, v: i16, e: anyhow::Error| {
        let entry = leniency
            .by_reason
            .entry(format!("{api} v{v}: {e}"))
            .or_insert_with(|| (0, hex(body)));
        entry.0 += 1;
    };
    for v in 0..=2 {
        if let Ok(ours) = requests::update_features(v, body) {
            match UpdateFeaturesRequest::decode(&mut Bytes::copy_from_slice(body), v) {
                // kshim's typed views keep no unknown tagged fields (it never
                // encodes these requests again); everything else must agree.
                Ok(mut theirs) => {
                    theirs.unknown_tagged_fields.clear();
                    for u in &mut theirs.feature_updates {
                        u.unknown_tagged_fields.clear();
                    }
                    assert_eq!(theirs, ours, "UpdateFeatures v{v} {body:02x?}")
                }
                Err(e) => note("UpdateFeatures", v, e),
            }
        }
        if let Ok(ours) = requests::describe_cluster(v, body) {
            match DescribeClusterRequest::decode(&mut Bytes::copy_from_slice(body), v) {
                Ok(mut theirs) => {
                    theirs.unknown_tagged_fields.clear();
                    assert_eq!(theirs, ours, "DescribeCluster v{v} {body:02x?}")
                }
                Err(e) => note("DescribeCluster", v, e),
            }
        }
    }
    for v in 0..=13 {
        let _ = requests::metadata(v, body);
    }
    for v in 0..=api_versions::MAX_VERSION {
        let _ = api_versions::decode_response(v, body);
        let _ = api_versions::parse_request(v, body);
    }
}

/// The frame codec fed in random chunks, then EOF.
fn frame_codec(rng: &mut StdRng, stream: &[u8]) {
    let mut codec = FrameCodec::new(CODEC_MAX_FRAME);
    let mut buf = BytesMut::new();
    let mut fed = 0;
    let mut taken = 0;
    loop {
        if fed < stream.len() {
            let n = rng.gen_range(1..=stream.len() - fed);
            buf.extend_from_slice(&stream[fed..fed + n]);
            fed += n;
        }
        let at_eof = fed == stream.len();
        let result = if at_eof {
            codec.decode_eof(&mut buf)
        } else {
            codec.decode(&mut buf)
        };
        match result {
            Ok(Some(frame)) => {
                assert!(frame.len() <= CODEC_MAX_FRAME);
                taken += 4 + frame.len();
                assert_eq!(
                    &stream[taken - frame.len()..taken],
                    &frame[..],
                    "frame contents"
                );
            }
            Ok(None) if at_eof => {
                assert!(
                    buf.is_empty(),
                    "decode_eof returned None with {} byte(s) left",
                    buf.len()
                );
                assert_eq!(taken, stream.len());
                return;
            }
            Ok(None) => {}
            Err(_) => return,
        }
        // Growth ahead of a frame stays bounded whatever the size prefix says.
        assert!(
            buf.capacity() <= stream.len() + CODEC_MAX_FRAME + 128 * 1024,
            "capacity {}",
            buf.capacity()
        );
    }
}

/// A snapshot valid updates can reach: every finalized level inside its supported
/// range, Kafka 4.1's dependency honoured, metadata.version never disabled.
fn assert_reachable(snapshot: &FeatureSnapshot) {
    let finalized = &snapshot.finalized;
    assert!(finalized.epoch >= 0, "epoch {}", finalized.epoch);
    for (name, &level) in &finalized.levels {
        let range = snapshot
            .supported
            .get(name)
            .unwrap_or_else(|| panic!("{name} is finalized but not supported"));
        assert!(
            level > 0 && range.contains(level),
            "{name}={level} outside {range}"
        );
    }
    assert!(
        finalized.level(kafka::METADATA_VERSION)
            >= kafka::KafkaRelease::newest().metadata_version_min(),
        "{finalized:?}"
    );
    if finalized.level("eligible.leader.replicas.version") >= 1 {
        assert!(
            finalized.level(kafka::METADATA_VERSION) >= 23,
            "{finalized:?}"
        );
    }
}

/// Where the data directory goes: memory when the system has it, so that the
/// fsyncs of accepted updates cost little.
fn data_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().unwrap()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn mutated_frames_never_panic_or_corrupt_the_state() {
    let iterations = env_u64("KSHIM_FUZZ_ITERATIONS", DEFAULT_ITERATIONS);
    let seed = env_u64("KSHIM_FUZZ_SEED", DEFAULT_SEED);
    let mut rng = StdRng::seed_from_u64(seed);

    let dir = data_dir();
    let config = Config {
        listen: "127.0.0.1:0".into(),
        data_dir: dir.path().to_owned(),
        ..Config::default()
    };
    let kshim = Standalone::bind(&config)
        .await
        .expect("standalone kshim starts");
    let ctx: Arc<Context> = Arc::clone(&kshim.context);
    let peer = Arc::new(Peer {
        addr: "127.0.0.1:40000".parse().unwrap(),
        principal: ANONYMOUS.to_owned(),
        route: Route::Bootstrap,
        tls: false,
    });

    let (mut corpus, answers) = fixture_seeds();
    corpus.extend(synthesized_seeds());
    let mut answer_bodies: Vec<Vec<u8>> = answers.into_iter().map(|(_, b)| b).collect();
    // kshim's own answers, draft tags included, as seeds for decode_response.
    for seed_frame in corpus.clone() {
        let Ok(incoming) = Incoming::parse(Bytes::from(seed_frame)) else {
            continue;
        };
        if let Action::Respond(frame) = dispatch(&ctx, &peer, None, incoming).settle().await {
            answer_bodies.push(frame[8..].to_vec());
        }
    }

    let started = Instant::now();
    let mut snapshot = ctx.controller.snapshot();
    assert_reachable(&snapshot);
    let (mut answered, mut closed, mut state_changes) = (0u64, 0u64, 0u64);
    let mut leniency = Leniency::default();
    for iteration in 0..iterations {
        let mut input = match rng.gen_range(0..10) {
            0 => random_bytes(&mut rng),
            1 => answer_bodies[rng.gen_range(0..answer_bodies.len())].clone(),
            _ => corpus[rng.gen_range(0..corpus.len())].clone(),
        };
        mutate(&mut rng, &mut input);
        let context = || {
            format!(
                "iteration {iteration} (seed {seed:#x}), input {}",
                hex(&input)
            )
        };

        // The connection reads the header before anything is dispatched, and
        // closes the connection on a frame too short to hold one.
        let Ok(incoming) = Incoming::parse(Bytes::from(input.clone())) else {
            closed += 1;
            continue;
        };
        let action = AssertUnwindSafe(dispatch(&ctx, &peer, None, incoming).settle())
            .catch_unwind()
            .await;
        match action {
            Err(_) => panic!("dispatch panicked at {}", context()),
            Ok(Action::Respond(frame)) => {
                answered += 1;
                let size = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
                assert_eq!(
                    size as usize,
                    frame.len() - 4,
                    "size prefix at {}",
                    context()
                );
                assert_eq!(frame[4..8], input[4..8], "correlation id at {}", context());
            }
            Ok(Action::Close(_)) => closed += 1,
            Ok(other) => panic!(
                "a standalone kshim must answer or close, not {other:?}, at {}",
                context()
            ),
        }
        let now = ctx.controller.snapshot();
        if !Arc::ptr_eq(&now, &snapshot) {
            state_changes += 1;
            assert_eq!(
                now.finalized.epoch,
                snapshot.finalized.epoch + 1,
                "epoch step at {}",
                context()
            );
            assert_reachable(&now);
            snapshot = now;
        }

        let decoded = std::panic::catch_unwind(AssertUnwindSafe(|| {
            body_decoders(&input, &mut leniency);
            if let Ok(request) = RequestFrame::parse(Bytes::from(input.clone())) {
                body_decoders(request.body(), &mut leniency);
            }
        }));
        if decoded.is_err() {
            panic!("a body decoder failed at {}", context());
        }
        let mut stream = input.clone();
        if rng.gen_bool(0.5) {
            // Mostly well-formed frames, so that the codec also splits and reassembles.
            stream = (input.len() as i32).to_be_bytes().to_vec();
            stream.extend_from_slice(&input);
            if rng.gen_bool(0.5) {
                stream.extend_from_within(..);
            }
        }
        if std::panic::catch_unwind(AssertUnwindSafe(|| frame_codec(&mut rng, &stream))).is_err() {
            panic!(
                "the frame codec failed at {}, stream {}",
                context(),
                hex(&stream)
            );
        }
    }

    let final_snapshot = ctx.controller.snapshot();
    assert_reachable(&final_snapshot);
    let raw = std::fs::read(dir.path().join("state.json")).expect("state.json");
    let doc: serde_json::Value =
        serde_json::from_slice(&raw).expect("state.json parses after the run");
    assert_eq!(doc["epoch"].as_i64(), Some(final_snapshot.finalized.epoch));
    let stored = doc["features"].as_object().unwrap();
    assert_eq!(stored.len(), final_snapshot.finalized.levels.len());
    for (name, &level) in &final_snapshot.finalized.levels {
        assert_eq!(
            stored[name]["max_version_level"].as_i64(),
            Some(i64::from(level)),
            "{name}"
        );
    }
    println!(
        "fuzz_smoke: {iterations} iterations (seed {seed:#x}) in {:.1?}: {answered} answered, {closed} closed, \
         {state_changes} state changes, final epoch {}",
        started.elapsed(),
        final_snapshot.finalized.epoch
    );
    for (reason, (count, first)) in &leniency.by_reason {
        println!("fuzz_smoke: read by kshim, refused by kafka-protocol ({reason}): {count} time(s), e.g. {first}");
    }
    drop(kshim);
}
