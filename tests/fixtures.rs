//! The golden frames of `protocol-fixtures/`, captured from real clients and a
//! Kafka 4.1.1 broker, checked three ways:
//!
//! 1. kafka-protocol decodes each frame and re-encodes it to the same bytes, so
//!    the fixtures and the library kshim builds on agree on the layout;
//! 2. kshim's own bounded decoders read every ApiVersions answer and every
//!    UpdateFeatures request, and agree with kafka-protocol on them;
//! 3. a standalone kshim configured like the captured broker answers the captured
//!    requests as the broker did.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, DescribeClusterRequest,
    DescribeClusterResponse, MetadataRequest, MetadataResponse, RequestHeader, ResponseHeader,
    UpdateFeaturesRequest, UpdateFeaturesResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable};
use kshim::config::Config;
use kshim::features::kafka::KafkaRelease;
use kshim::handlers::api_versions::Discovery;
use kshim::handlers::{dispatch, Action, Context, Peer, ANONYMOUS};
use kshim::protocol::api_versions::{self, ApiRange};
use kshim::protocol::draft_tags::{
    TAG_FINALIZED_EPOCH, TAG_FINALIZED_FEATURES, TAG_SUPPORTED_FEATURES,
};
use kshim::protocol::requests;
use kshim::protocol::wire::{put_compact_string, put_uvarint, Reader};
use kshim::standalone::Standalone;
use kshim::upstream::Route;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One manifest entry and its bytes.
#[derive(Debug, Clone)]
struct Fixture {
    file: String,
    request: bool,
    api_key: i16,
    api_version: i16,
    header_version: i16,
    correlation_id: i32,
    /// For an answer to a request of another version (UNSUPPORTED_VERSION).
    request_api_version: Option<i16>,
    /// The whole frame, size prefix included.
    raw: Bytes,
}

impl Fixture {
    /// The frame after its 4-byte size prefix.
    fn frame(&self) -> Bytes {
        self.raw.slice(4..)
    }

    /// A response body: after the size prefix and the response header.
    fn response_body(&self) -> Bytes {
        let header_len = if self.header_version >= 1 { 5 } else { 4 };
        self.raw.slice(4 + header_len..)
    }
}

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("protocol-fixtures")
}

fn fixtures() -> Vec<Fixture> {
    let dir = fixture_dir();
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).expect("manifest.json"))
            .expect("manifest parses");
    let int = |e: &serde_json::Value, k: &str| {
        e[k].as_i64()
            .unwrap_or_else(|| panic!("manifest entry lacks {k}: {e}"))
    };
    let list: Vec<Fixture> = manifest
        .as_array()
        .expect("manifest is a list")
        .iter()
        .map(|e| {
            let file = e["file"].as_str().expect("file").to_owned();
            let raw = Bytes::from(
                std::fs::read(dir.join(&file)).unwrap_or_else(|err| panic!("{file}: {err}")),
            );
            let f = Fixture {
                request: match e["direction"].as_str() {
                    Some("request") => true,
                    Some("response") => false,
                    other => panic!("{file}: direction {other:?}"),
                },
                api_key: int(e, "api_key") as i16,
                api_version: int(e, "api_version") as i16,
                header_version: int(e, "header_version") as i16,
                correlation_id: int(e, "correlation_id") as i32,
                request_api_version: e
                    .get("request_api_version")
                    .and_then(|v| v.as_i64())
                    .map(|v| v as i16),
                raw,
                file,
            };
            assert_eq!(
                f.raw.len() as i64,
                int(e, "size"),
                "{}: size in the manifest",
                f.file
            );
            let prefix = i32::from_be_bytes([f.raw[0], f.raw[1], f.raw[2], f.raw[3]]);
            assert_eq!(prefix as usize, f.raw.len() - 4, "{}: size prefix", f.file);
            f
        })
        .collect();
    // Every .bin in the directory is in the manifest, so none goes unchecked.
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .expect("fixture dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".bin"))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = list.iter().map(|f| f.file.clone()).collect();
    listed.sort();
    assert_eq!(
        on_disk, listed,
        "protocol-fixtures/*.bin and manifest.json disagree"
    );
    list
}

fn fixture(name: &str) -> Fixture {
    fixtures()
        .into_iter()
        .find(|f| f.file == name)
        .unwrap_or_else(|| panic!("no fixture {name}"))
}

fn encode<M: Encodable>(m: &M, version: i16, out: &mut BytesMut) {
    m.encode(out, version)
        .unwrap_or_else(|e| panic!("encode v{version}: {e}"));
}

/// Decodes a body of type `M` at `version` and re-encodes it into `out`; the
/// decoder must consume the whole body.
fn body_round_trip<M: Decodable + Encodable>(
    body: &mut Bytes,
    version: i16,
    out: &mut BytesMut,
    file: &str,
) {
    let decoded = M::decode(body, version)
        .unwrap_or_else(|e| panic!("{file}: body v{version} does not decode: {e}"));
    assert!(
        !body.has_remaining(),
        "{file}: {} byte(s) left after the v{version} body",
        body.remaining()
    );
    encode(&decoded, version, out);
}

/// The ApiVersions v5 request body (KIP-1242): v4's ClientSoftwareName and
/// ClientSoftwareVersion, then ClusterId (compact nullable string) and NodeId
/// (int32), then tags. kafka-protocol 0.18 knows ApiVersions up to v4 only, so the
/// v5 body is read and rewritten field by field here.
fn api_versions_v5_request_round_trip(body: &[u8], out: &mut BytesMut, file: &str) {
    let mut r = Reader::new(body);
    let name = r
        .string(true, "ClientSoftwareName")
        .unwrap_or_else(|e| panic!("{file}: {e}"));
    let version = r
        .string(true, "ClientSoftwareVersion")
        .unwrap_or_else(|e| panic!("{file}: {e}"));
    let cluster_id = r
        .compact_nullable_string("ClusterId")
        .unwrap_or_else(|e| panic!("{file}: {e}"));
    let node_id = r.i32("NodeId").unwrap_or_else(|e| panic!("{file}: {e}"));
    let tags = r
        .tagged_fields("ApiVersionsRequest")
        .unwrap_or_else(|e| panic!("{file}: {e}"));
    r.expect_end("ApiVersionsRequest")
        .unwrap_or_else(|e| panic!("{file}: {e}"));
    // What the manifest says the capturing clients sent before knowing the cluster.
    assert_eq!((cluster_id, node_id), (None, -1), "{file}");
    assert!(tags.is_empty(), "{file}: unexpected request tags {tags:?}");
    let mut raw = Vec::new();
    put_compact_string(&mut raw, name);
    put_compact_string(&mut raw, version);
    raw.push(0); // null ClusterId
    raw.extend_from_slice(&node_id.to_be_bytes());
    put_uvarint(&mut raw, 0);
    out.put_slice(&raw);
}

/// Decodes header and body with kafka-protocol and encodes them again, with the
/// size prefix.
fn kafka_protocol_round_trip(f: &Fixture) -> Vec<u8> {
    let mut buf = f.frame();
    let mut out = BytesMut::new();
    if f.request {
        let header = RequestHeader::decode(&mut buf, f.header_version)
            .unwrap_or_else(|e| panic!("{}: request header v{}: {e}", f.file, f.header_version));
        assert_eq!(
            (
                header.request_api_key,
                header.request_api_version,
                header.correlation_id
            ),
            (f.api_key, f.api_version, f.correlation_id),
            "{}: header against the manifest",
            f.file
        );
        let api = ApiKey::try_from(f.api_key)
            .unwrap_or_else(|_| panic!("{}: api key {}", f.file, f.api_key));
        let expected_header = match api {
            ApiKey::ApiVersions if f.api_version > 4 => 2,
            _ => api.request_header_version(f.api_version),
        };
        assert_eq!(
            f.header_version, expected_header,
            "{}: header version",
            f.file
        );
        encode(&header, f.header_version, &mut out);
        let v = f.api_version;
        match api {
            ApiKey::ApiVersions if v == 5 => {
                api_versions_v5_request_round_trip(&buf, &mut out, &f.file);
            }
            ApiKey::ApiVersions => {
                body_round_trip::<ApiVersionsRequest>(&mut buf, v, &mut out, &f.file)
            }
            ApiKey::UpdateFeatures => {
                body_round_trip::<UpdateFeaturesRequest>(&mut buf, v, &mut out, &f.file)
            }
            ApiKey::Metadata => body_round_trip::<MetadataRequest>(&mut buf, v, &mut out, &f.file),
            ApiKey::DescribeCluster => {
                body_round_trip::<DescribeClusterRequest>(&mut buf, v, &mut out, &f.file)
            }
            other => panic!("{}: no decoder wired for {other:?} requests", f.file),
        }
    } else {
        let header = ResponseHeader::decode(&mut buf, f.header_version)
            .unwrap_or_else(|e| panic!("{}: response header v{}: {e}", f.file, f.header_version));
        assert_eq!(
            header.correlation_id, f.correlation_id,
            "{}: correlation id",
            f.file
        );
        encode(&header, f.header_version, &mut out);
        let v = f.api_version;
        match ApiKey::try_from(f.api_key) {
            Ok(ApiKey::ApiVersions) => {
                body_round_trip::<ApiVersionsResponse>(&mut buf, v, &mut out, &f.file)
            }
            Ok(ApiKey::UpdateFeatures) => {
                body_round_trip::<UpdateFeaturesResponse>(&mut buf, v, &mut out, &f.file)
            }
            Ok(ApiKey::Metadata) => {
                body_round_trip::<MetadataResponse>(&mut buf, v, &mut out, &f.file)
            }
            Ok(ApiKey::DescribeCluster) => {
                body_round_trip::<DescribeClusterResponse>(&mut buf, v, &mut out, &f.file)
            }
            other => panic!("{}: no decoder wired for {other:?} responses", f.file),
        }
    }
    let mut framed = (out.len() as i32).to_be_bytes().to_vec();
    framed.extend_from_slice(&out);
    framed
}

#[test]
fn every_fixture_round_trips_through_kafka_protocol() {
    let all = fixtures();
    assert!(all.len() >= 30, "only {} fixtures", all.len());
    for f in &all {
        let again = kafka_protocol_round_trip(f);
        assert!(
            again == f.raw[..],
            "{}: re-encoded frame differs\n  captured {:02x?}\n  re-encoded {:02x?}",
            f.file,
            &f.raw[..],
            again
        );
    }
}

#[test]
fn kshim_decodes_every_api_versions_answer() {
    let mut seen = 0;
    for f in fixtures()
        .iter()
        .filter(|f| !f.request && f.api_key == ApiKey::ApiVersions as i16)
    {
        seen += 1;
        let body = f.response_body();
        let ours = api_versions::decode_response(f.api_version, &body)
            .unwrap_or_else(|e| panic!("{}: {e}", f.file));
        let theirs = ApiVersionsResponse::decode(&mut body.clone(), f.api_version).unwrap();
        assert_eq!(ours.error_code, theirs.error_code, "{}", f.file);
        assert_eq!(ours.throttle_time_ms, theirs.throttle_time_ms, "{}", f.file);
        let apis: Vec<ApiRange> = theirs
            .api_keys
            .iter()
            .map(|a| ApiRange {
                api_key: a.api_key,
                min: a.min_version,
                max: a.max_version,
            })
            .collect();
        assert_eq!(ours.apis, apis, "{}", f.file);
        assert_eq!(
            ours.draft, None,
            "{}: a real broker sends no draft tags",
            f.file
        );
        assert_eq!(
            ours.zk_migration_ready, theirs.zk_migration_ready,
            "{}",
            f.file
        );
        if f.api_version >= 3 {
            let supported: BTreeMap<String, (i16, i16)> = theirs
                .supported_features
                .iter()
                .map(|s| (s.name.to_string(), (s.min_version, s.max_version)))
                .collect();
            let finalized: BTreeMap<String, (i16, i16)> = theirs
                .finalized_features
                .iter()
                .map(|s| {
                    (
                        s.name.to_string(),
                        (s.min_version_level, s.max_version_level),
                    )
                })
                .collect();
            assert_eq!(ours.features.supported, supported, "{}", f.file);
            assert_eq!(ours.features.finalized, finalized, "{}", f.file);
            assert_eq!(
                ours.features.epoch, theirs.finalized_features_epoch,
                "{}",
                f.file
            );
            assert!(ours.features.epoch >= 0, "{}", f.file);
        }
        if let Some(asked) = f.request_api_version {
            // Kafka 4.1.1's refusal of v5, which it did not know.
            assert_eq!(asked, 5, "{}", f.file);
            assert_eq!(
                ours.error_code,
                kshim::protocol::errors::ResponseError::UnsupportedVersion.code(),
                "{}",
                f.file
            );
            assert_eq!(
                ours.apis,
                vec![ApiRange {
                    api_key: 18,
                    min: 0,
                    max: 4
                }],
                "{}",
                f.file
            );
        }
    }
    assert_eq!(seen, 4);
}

#[test]
fn kshim_decodes_every_update_features_request_as_kafka_protocol_does() {
    let mut seen = 0;
    for f in fixtures()
        .iter()
        .filter(|f| f.request && f.api_key == ApiKey::UpdateFeatures as i16)
    {
        seen += 1;
        let frame = f.frame();
        let parsed = kshim::protocol::RequestFrame::parse(frame.clone())
            .unwrap_or_else(|e| panic!("{}: {e}", f.file));
        assert!(parsed.flexible, "{}", f.file);
        let ours = requests::update_features(f.api_version, parsed.body())
            .unwrap_or_else(|e| panic!("{}: {e}", f.file));
        let theirs =
            UpdateFeaturesRequest::decode(&mut parsed.body_bytes(), f.api_version).unwrap();
        assert_eq!(ours, theirs, "{}", f.file);
        assert_eq!(ours.feature_updates.len(), 1, "{}", f.file);
        assert_eq!(
            ours.feature_updates[0].feature.as_str(),
            "group.version",
            "{}",
            f.file
        );
    }
    assert_eq!(seen, 12);
}

#[test]
fn kshim_decodes_every_update_features_answer() {
    for f in fixtures()
        .iter()
        .filter(|f| !f.request && f.api_key == ApiKey::UpdateFeatures as i16)
    {
        let body = f.response_body();
        let ours = kshim::client::decode_update_features_response(f.api_version, &body)
            .unwrap_or_else(|e| panic!("{}: {e}", f.file));
        let theirs = UpdateFeaturesResponse::decode(&mut body.clone(), f.api_version).unwrap();
        assert_eq!(ours.error_code, theirs.error_code, "{}", f.file);
        assert_eq!(
            ours.error_message.as_deref(),
            theirs.error_message.as_deref(),
            "{}",
            f.file
        );
        assert_eq!(ours.results.len(), theirs.results.len(), "{}", f.file);
    }
}

// ---------------------------------------------------------------------------
// kshim against the captured broker
// ---------------------------------------------------------------------------

/// The finalized levels of the broker that answered the fixtures (see the
/// FinalizedFeatures tag of `apiversions-v4-resp-kafka-4.1.1.bin`).
fn broker_levels() -> BTreeMap<String, i16> {
    [
        ("metadata.version", 27),
        ("group.version", 1),
        ("transaction.version", 2),
        ("eligible.leader.replicas.version", 1),
    ]
    .into_iter()
    .map(|(n, l)| (n.to_owned(), l))
    .collect()
}

/// A bound (not serving) standalone kshim with Kafka 4.1's supported ranges and
/// the given bootstrap levels. The tempdir must outlive it.
async fn standalone(
    levels: BTreeMap<String, i16>,
    draft_tags: bool,
) -> (Standalone, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        listen: "127.0.0.1:0".into(),
        data_dir: dir.path().to_owned(),
        draft_tags,
        kafka_release: KafkaRelease::named("4.1").unwrap(),
        bootstrap: Some(levels),
        ..Config::default()
    };
    (
        Standalone::bind(&config)
            .await
            .expect("standalone kshim starts"),
        dir,
    )
}

fn peer() -> Arc<Peer> {
    Arc::new(Peer {
        addr: "127.0.0.1:40000".parse().unwrap(),
        principal: ANONYMOUS.to_owned(),
        route: Route::Bootstrap,
        tls: false,
    })
}

async fn answer(ctx: &Arc<Context>, request: &Fixture) -> Bytes {
    let incoming = kshim::protocol::Incoming::parse(request.frame()).expect("a request header");
    match dispatch(ctx, &peer(), None, incoming).settle().await {
        Action::Respond(frame) => frame,
        other => panic!("{}: kshim did not answer: {other:?}", request.file),
    }
}

/// (correlation id, body) of an ApiVersions answer frame (header v0).
fn split_api_versions_answer(frame: &Bytes) -> (i32, Bytes) {
    let size = i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]]);
    assert_eq!(size as usize, frame.len() - 4, "size prefix");
    (
        i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]),
        frame.slice(8..),
    )
}

/// Feature lists sorted by name: Kafka writes them in Java hash order, kshim in
/// name order, and clients read them as maps.
fn sort_features(r: &mut ApiVersionsResponse) {
    r.supported_features.sort_by(|a, b| a.name.cmp(&b.name));
    r.finalized_features.sort_by(|a, b| a.name.cmp(&b.name));
}

fn reencode(r: &ApiVersionsResponse, version: i16) -> Vec<u8> {
    let mut out = BytesMut::new();
    encode(r, version, &mut out);
    out.to_vec()
}

/// The ApiVersions answers of the broker, by version.
fn broker_api_versions_answers() -> BTreeMap<i16, Fixture> {
    fixtures()
        .into_iter()
        .filter(|f| {
            !f.request && f.api_key == ApiKey::ApiVersions as i16 && f.request_api_version.is_none()
        })
        .map(|f| (f.api_version, f))
        .collect()
}

fn api_versions_requests() -> Vec<Fixture> {
    fixtures()
        .into_iter()
        .filter(|f| f.request && f.api_key == ApiKey::ApiVersions as i16)
        .collect()
}

/// A context that advertises the broker's whole API table, so that the complete
/// answer body can be compared with the broker's.
fn with_api_table(ctx: &Context, apis: Vec<ApiRange>, draft_tags: bool) -> Arc<Context> {
    Arc::new(Context {
        controller: Arc::clone(&ctx.controller),
        discovery: Discovery::new(apis, draft_tags, ctx.controller.snapshot()).unwrap(),
        node: ctx.node.clone(),
        authorizer: Arc::clone(&ctx.authorizer),
        upstream: None,
        policies: Arc::clone(&ctx.policies),
        metrics: Arc::clone(&ctx.metrics),
        census: Arc::clone(&ctx.census),
        lab: Arc::clone(&ctx.lab),
    })
}

#[tokio::test]
async fn api_versions_answers_match_the_broker_but_for_the_epoch() {
    let (kshim, _dir) = standalone(broker_levels(), false).await;
    let answers = broker_api_versions_answers();
    let mut compared = 0;
    for request in api_versions_requests()
        .iter()
        .filter(|r| r.api_version <= api_versions::MAX_VERSION)
    {
        let Some(broker) = answers.get(&request.api_version) else {
            continue;
        };
        let version = request.api_version;
        let mut theirs = ApiVersionsResponse::decode(&mut broker.response_body(), version).unwrap();

        // The standalone answer: the broker's feature fields; of the API table only
        // the four APIs a standalone kshim serves, at the broker's ranges.
        let frame = answer(&kshim.context, request).await;
        let (correlation_id, body) = split_api_versions_answer(&frame);
        assert_eq!(correlation_id, request.correlation_id, "{}", request.file);
        let mut ours = ApiVersionsResponse::decode(&mut body.clone(), version).unwrap();
        // The fixtures are Kafka 4.1.1's, whose ApiVersions goes to v4; kshim
        // answers v5 (KIP-1242) as Kafka 4.4 does.
        for a in theirs.api_keys.iter_mut().filter(|a| a.api_key == 18) {
            a.max_version = api_versions::MAX_VERSION;
        }
        assert_eq!(ours.error_code, theirs.error_code, "{}", request.file);
        assert_eq!(
            ours.throttle_time_ms, theirs.throttle_time_ms,
            "{}",
            request.file
        );
        for a in &ours.api_keys {
            let b = theirs.api_keys.iter().find(|b| b.api_key == a.api_key);
            assert_eq!(
                b,
                Some(a),
                "{}: api key {} range differs from the broker's",
                request.file,
                a.api_key
            );
        }
        assert_eq!(
            ours.finalized_features_epoch, 0,
            "a fresh kshim is at epoch 0"
        );
        assert!(theirs.finalized_features_epoch > 0);
        sort_features(&mut ours);
        sort_features(&mut theirs);
        assert_eq!(
            ours.supported_features, theirs.supported_features,
            "{}",
            request.file
        );
        assert_eq!(
            ours.finalized_features, theirs.finalized_features,
            "{}",
            request.file
        );
        assert_eq!(
            ours.zk_migration_ready, theirs.zk_migration_ready,
            "{}",
            request.file
        );
        assert!(
            ours.unknown_tagged_fields.is_empty(),
            "{}: tags with draft_tags off",
            request.file
        );

        // With the broker's API table the answers are the same bytes but for the
        // epoch's value and the order of feature entries.
        let table = theirs
            .api_keys
            .iter()
            .map(|a| ApiRange {
                api_key: a.api_key,
                min: a.min_version,
                max: a.max_version,
            })
            .collect();
        let full = with_api_table(&kshim.context, table, false);
        let frame = answer(&full, request).await;
        assert_eq!(
            frame.len() - 4,
            broker.raw.len() - 4,
            "{}: answer size",
            request.file
        );
        let (_, body) = split_api_versions_answer(&frame);
        let mut ours = ApiVersionsResponse::decode(&mut body.clone(), version).unwrap();
        ours.finalized_features_epoch = theirs.finalized_features_epoch;
        sort_features(&mut ours);
        assert_eq!(ours, theirs, "{}", request.file);
        assert_eq!(
            reencode(&ours, version),
            reencode(&theirs, version),
            "{}",
            request.file
        );
        compared += 1;
    }
    assert_eq!(compared, 7, "every v3 and v4 request fixture");
}

#[tokio::test]
async fn draft_tags_add_10000_to_10002_and_leave_tags_0_to_2_alone() {
    let (plain, _d1) = standalone(broker_levels(), false).await;
    let (draft, _d2) = standalone(broker_levels(), true).await;
    for request in api_versions_requests()
        .iter()
        .filter(|r| r.api_version <= api_versions::MAX_VERSION)
    {
        let version = api_versions::answer_layout(request.api_version);
        let (_, without) = split_api_versions_answer(&answer(&plain.context, request).await);
        let (_, with) = split_api_versions_answer(&answer(&draft.context, request).await);
        let without = ApiVersionsResponse::decode(&mut without.clone(), version).unwrap();
        let mut with_decoded = ApiVersionsResponse::decode(&mut with.clone(), version).unwrap();
        let tags = std::mem::take(&mut with_decoded.unknown_tagged_fields);
        assert_eq!(
            with_decoded, without,
            "{}: tags 0-2 and the rest must not change",
            request.file
        );

        // librdkafka before 2.2.0 misreads unknown tags and is sent none.
        let old_librdkafka = request.file.contains("librdkafka-2.0.2");
        let keys: Vec<i32> = tags.keys().copied().collect();
        if old_librdkafka {
            assert!(keys.is_empty(), "{}: {keys:?}", request.file);
        } else {
            assert_eq!(
                keys,
                [
                    TAG_SUPPORTED_FEATURES,
                    TAG_FINALIZED_EPOCH,
                    TAG_FINALIZED_FEATURES
                ],
                "{}",
                request.file
            );
            let decoded = api_versions::decode_response(version, &with).unwrap();
            assert_eq!(
                decoded.draft.as_ref(),
                Some(&decoded.features),
                "{}",
                request.file
            );
        }
    }
}

/// kshim answers ApiVersions v5 (KIP-1242) as Kafka 4.4 does: the requests
/// Java 4.4 and franz-go send (ClusterId null, NodeId -1: a bootstrap) get a
/// full answer. A version past v5 gets what Kafka 4.1.1 gave these v5 requests
/// (the v0 layout, UNSUPPORTED_VERSION, ApiVersions' own range), byte for byte
/// but for that range, which is now 0-5.
#[tokio::test]
async fn v5_is_answered_and_newer_versions_match_the_brokers_refusal() {
    let (kshim, _dir) = standalone(broker_levels(), true).await;
    let pairs = [
        (
            "apiversions-v5-req-java-4.4.0.bin",
            "apiversions-v0-resp-unsupported-to-v5-kafka-4.1.1.bin",
        ),
        (
            "apiversions-v5-req-franz-go-1.22.3.bin",
            "apiversions-v0-resp-unsupported-to-v5-franz-kafka-4.1.1.bin",
        ),
    ];
    for (request, broker) in pairs {
        let request = fixture(request);
        let broker = fixture(broker);
        assert_eq!(broker.request_api_version, Some(request.api_version));

        let ours = answer(&kshim.context, &request).await;
        let (correlation_id, body) = split_api_versions_answer(&ours);
        assert_eq!(correlation_id, request.correlation_id, "{}", request.file);
        let decoded = api_versions::decode_response(5, &body).unwrap();
        assert_eq!(decoded.error_code, 0, "{}", request.file);
        assert!(
            decoded
                .apis
                .iter()
                .any(|a| (a.api_key, a.min, a.max) == (18, 0, 5)),
            "{}: {:?}",
            request.file,
            decoded.apis
        );

        // The same request at v6.
        let mut v6 = request.raw.to_vec();
        v6[6..8].copy_from_slice(&6i16.to_be_bytes());
        let v6 = Fixture {
            raw: Bytes::from(v6),
            api_version: 6,
            file: format!("{} at v6", request.file),
            ..request
        };
        let mut expected = broker.raw.to_vec();
        // size, correlation id, ErrorCode, ApiKeys count, ApiKey, MinVersion: MaxVersion.
        expected[18..20].copy_from_slice(&5i16.to_be_bytes());
        let ours = answer(&kshim.context, &v6).await;
        assert!(
            ours[..] == expected[..],
            "{}\n  kshim  {:02x?}\n  broker {:02x?}",
            v6.file,
            &ours[..],
            &expected[..]
        );
    }
}

/// UpdateFeatures requests and the broker's answers to them, with the
/// group.version level the broker had when it answered.
const UPDATE_FEATURES_EXCHANGES: &[(&str, &str, i16)] = &[
    (
        "updatefeatures-v2-req-java-4.1.1-safe-downgrade.bin",
        "updatefeatures-v2-resp-kafka-4.1.1-success.bin",
        1,
    ),
    (
        "updatefeatures-v2-req-java-4.1.1-invalid-level.bin",
        "updatefeatures-v2-resp-kafka-4.1.1-invalid-update-version.bin",
        1,
    ),
    (
        "updatefeatures-v1-req-kafka-python-3.0.12-safe-downgrade.bin",
        "updatefeatures-v1-resp-kafka-4.1.1-success.bin",
        1,
    ),
    (
        "updatefeatures-v1-req-kafka-python-3.0.12-validate-only-downgrade.bin",
        "updatefeatures-v1-resp-kafka-4.1.1-validate-only-success.bin",
        1,
    ),
    (
        "updatefeatures-v1-req-kafka-python-3.0.12-invalid-level.bin",
        "updatefeatures-v1-resp-kafka-4.1.1-invalid-update-version.bin",
        1,
    ),
    (
        "updatefeatures-v0-req-kafka-python-3.0.12-upgrade.bin",
        "updatefeatures-v0-resp-kafka-4.1.1-success.bin",
        0,
    ),
    (
        "updatefeatures-v0-req-kafka-python-3.0.12-invalid-level.bin",
        "updatefeatures-v0-resp-kafka-4.1.1-invalid-update-version.bin",
        0,
    ),
];

/// The one UpdateFeatures exchange where kshim answers differently on purpose
/// (README, "Deliberate differences"): Kafka 4.1.1 ignores v0's AllowDowngrade and
/// refuses the downgrade; kshim applies it as the KIP defines the flag.
#[tokio::test]
async fn v0_allow_downgrade_is_honoured_unlike_kafka_4_1() {
    let mut levels = broker_levels();
    levels.insert("group.version".into(), 1);
    let (kshim, _dir) = standalone(levels, true).await;
    let request = fixture("updatefeatures-v0-req-kafka-python-3.0.12-allow-downgrade.bin");
    let broker = fixture("updatefeatures-v0-resp-kafka-4.1.1-allow-downgrade-rejected.bin");
    let decode =
        |raw: &Bytes| kshim::client::decode_update_features_response(0, &raw[9..]).unwrap();
    assert_eq!(decode(&broker.raw).error_code, 95);
    let ours = decode(&answer(&kshim.context, &request).await);
    assert_eq!(ours.error_code, 0, "{ours:?}");
    assert_eq!(
        kshim
            .context
            .controller
            .snapshot()
            .finalized
            .level("group.version"),
        0
    );
}

#[tokio::test]
async fn update_features_answers_match_the_broker_byte_for_byte() {
    let mut mismatches = Vec::new();
    for &(request, broker, group_version) in UPDATE_FEATURES_EXCHANGES {
        let mut levels = broker_levels();
        levels.insert("group.version".into(), group_version);
        let (kshim, _dir) = standalone(levels, true).await;
        let request = fixture(request);
        let broker = fixture(broker);
        let ours = answer(&kshim.context, &request).await;
        if ours != broker.raw {
            let decode = |raw: &Bytes| {
                kshim::client::decode_update_features_response(request.api_version, &raw[9..])
                    .map(|a| format!("{a:?}"))
                    .unwrap_or_else(|e| format!("undecodable: {e}"))
            };
            mismatches.push(format!(
                "{}:\n    kshim  {}\n    broker {}",
                request.file,
                decode(&ours),
                decode(&broker.raw)
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "kshim answers UpdateFeatures unlike Kafka 4.1.1:\n  {}",
        mismatches.join("\n  ")
    );
}
