//! Hostile and broken input over real sockets: a standalone kshim on an ephemeral
//! port must answer each bad request with the protocol's error or close the
//! connection, promptly, and keep serving everyone else with its state intact.

use bytes::Bytes;
use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
use kafka_protocol::messages::{ApiKey, UpdateFeaturesRequest};
use kafka_protocol::protocol::StrBytes;
use kshim::client::{decode_update_features_response, KafkaClient};
use kshim::config::Config;
use kshim::handlers::Context;
use kshim::protocol::api_versions;
use kshim::protocol::draft_tags::DraftFeatures;
use kshim::protocol::errors::{self, ResponseError};
use kshim::protocol::wire::{put_compact_string, put_uvarint};
use kshim::standalone::Standalone;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How long kshim may take to answer or close; far above what it needs.
const PROMPT: Duration = Duration::from_secs(5);
/// Small enough that "oversized" is cheap to send, large enough for 5000 updates.
const MAX_FRAME_BYTES: usize = 256 * 1024;

/// A serving standalone kshim and what it looked like when it started.
struct Running {
    addr: String,
    context: Arc<Context>,
    dir: tempfile::TempDir,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
    baseline: DraftFeatures,
}

impl Running {
    async fn start() -> Running {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            listen: "127.0.0.1:0".into(),
            data_dir: dir.path().to_owned(),
            max_frame_bytes: MAX_FRAME_BYTES,
            draft_tags: true,
            ..Config::default()
        };
        let kshim = Standalone::bind(&config)
            .await
            .expect("standalone kshim starts");
        let addr = kshim.local_addr.to_string();
        let context = Arc::clone(&kshim.context);
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(kshim.serve(stopped));
        let mut running = Running {
            addr,
            context,
            dir,
            stop,
            task,
            baseline: DraftFeatures::default(),
        };
        running.baseline = running.discovered().await;
        assert_eq!(running.baseline.epoch, 0);
        assert!(!running.baseline.finalized.is_empty());
        running
    }

    /// The features a fresh client discovers, checked for consistency.
    async fn discovered(&self) -> DraftFeatures {
        let mut client = KafkaClient::connect(&self.addr, PROMPT)
            .await
            .expect("a fresh connection is accepted");
        let (version, answer) = client
            .api_versions()
            .await
            .expect("ApiVersions is answered");
        // kshim's own client asks at v4 (it names no node, so v5 adds nothing).
        assert_eq!(version, 4);
        assert_eq!(answer.error_code, errors::NONE);
        assert!(answer
            .apis
            .iter()
            .any(|a| a.api_key == ApiKey::UpdateFeatures as i16));
        assert_eq!(
            answer.draft.as_ref(),
            Some(&answer.features),
            "draft tags agree with tags 0-2"
        );
        answer.features
    }

    /// kshim still serves, reports the state it started with, and its store file
    /// still parses and says the same.
    async fn assert_unharmed(&self) {
        assert_eq!(
            self.discovered().await,
            self.baseline,
            "the finalized state changed"
        );
        let snapshot = self.context.controller.snapshot();
        assert_eq!(snapshot.finalized.epoch, self.baseline.epoch);
        let raw = std::fs::read(self.dir.path().join("state.json")).expect("state.json exists");
        let doc: serde_json::Value = serde_json::from_slice(&raw).expect("state.json parses");
        assert_eq!(doc["epoch"].as_i64(), Some(self.baseline.epoch));
        let stored = doc["features"].as_object().expect("features object");
        assert_eq!(stored.len(), self.baseline.finalized.len());
        for (name, &(min, max)) in &self.baseline.finalized {
            assert_eq!(
                stored[name]["min_version_level"].as_i64(),
                Some(i64::from(min)),
                "{name}"
            );
            assert_eq!(
                stored[name]["max_version_level"].as_i64(),
                Some(i64::from(max)),
                "{name}"
            );
        }
    }

    async fn finish(self) {
        self.assert_unharmed().await;
        self.stop.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("kshim shuts down")
            .expect("the serve task did not panic");
    }
}

/// A request frame with its size prefix and a v1 or v2 header.
fn request_frame(
    api_key: i16,
    version: i16,
    correlation_id: i32,
    flexible_header: bool,
    body: &[u8],
) -> Vec<u8> {
    let mut frame = Vec::new();
    frame.extend_from_slice(&api_key.to_be_bytes());
    frame.extend_from_slice(&version.to_be_bytes());
    frame.extend_from_slice(&correlation_id.to_be_bytes());
    let client_id = b"bad-input";
    frame.extend_from_slice(&(client_id.len() as i16).to_be_bytes());
    frame.extend_from_slice(client_id);
    if flexible_header {
        frame.push(0);
    }
    frame.extend_from_slice(body);
    prefixed(&frame)
}

fn prefixed(frame: &[u8]) -> Vec<u8> {
    let mut out = (frame.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(frame);
    out
}

fn api_versions_v4() -> Vec<u8> {
    let mut body = Vec::new();
    put_compact_string(&mut body, "bad-input");
    put_compact_string(&mut body, "1.0");
    body.push(0);
    request_frame(18, 4, 1, true, &body)
}

/// An UpdateFeatures v1 body from (raw name, level, upgrade type).
fn update_features_v1_body(entries: &[(&[u8], i16, i8)]) -> Vec<u8> {
    let mut body = 30_000i32.to_be_bytes().to_vec();
    put_uvarint(&mut body, entries.len() as u32 + 1);
    for (name, level, upgrade_type) in entries {
        put_uvarint(&mut body, name.len() as u32 + 1);
        body.extend_from_slice(name);
        body.extend_from_slice(&level.to_be_bytes());
        body.push(*upgrade_type as u8);
        body.push(0);
    }
    body.push(0); // ValidateOnly
    body.push(0);
    body
}

/// What the peer saw after sending bad bytes.
#[derive(Debug)]
enum Outcome {
    /// The connection was closed (EOF or reset) with nothing written.
    Closed,
    /// One response frame (without its size prefix).
    Answered(Bytes),
}

async fn connect(addr: &str) -> TcpStream {
    tokio::time::timeout(PROMPT, TcpStream::connect(addr))
        .await
        .expect("connect in time")
        .expect("connect")
}

/// Sends `bytes`, optionally half-closes, then waits for one answer frame or the
/// close. Fails the test if neither comes within `PROMPT`.
async fn send(addr: &str, bytes: &[u8], half_close: bool) -> (Outcome, TcpStream) {
    let mut stream = connect(addr).await;
    // A server that closes early may reset the connection under the write.
    let _ = stream.write_all(bytes).await;
    if half_close {
        let _ = stream.shutdown().await;
    }
    let outcome = tokio::time::timeout(PROMPT, read_outcome(&mut stream))
        .await
        .unwrap_or_else(|_| panic!("kshim neither answered nor closed within {PROMPT:?}"));
    (outcome, stream)
}

async fn read_outcome(stream: &mut TcpStream) -> Outcome {
    let mut got = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        if got.len() >= 4 {
            let size = i32::from_be_bytes([got[0], got[1], got[2], got[3]]);
            assert!(size >= 4, "kshim wrote a frame of size {size}");
            if got.len() >= 4 + size as usize {
                return Outcome::Answered(Bytes::copy_from_slice(&got[4..4 + size as usize]));
            }
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => {
                assert!(
                    got.is_empty(),
                    "kshim closed in the middle of a response ({} bytes)",
                    got.len()
                );
                return Outcome::Closed;
            }
            Ok(n) => got.extend_from_slice(&chunk[..n]),
        }
    }
}

async fn expect_closed(addr: &str, bytes: &[u8], half_close: bool, what: &str) {
    match send(addr, bytes, half_close).await.0 {
        Outcome::Closed => {}
        Outcome::Answered(frame) => panic!(
            "{what}: expected the connection closed, got {:02x?}",
            &frame[..]
        ),
    }
}

#[tokio::test]
async fn truncated_frames_then_eof_are_dropped() {
    let kshim = Running::start().await;
    let whole = api_versions_v4();
    for cut in 1..whole.len() {
        expect_closed(
            &kshim.addr,
            &whole[..cut],
            true,
            &format!("first {cut} of {} bytes", whole.len()),
        )
        .await;
    }
    // A complete frame followed by a partial one: the first is answered.
    let mut two = whole.clone();
    two.extend_from_slice(&whole[..7]);
    let (outcome, mut stream) = send(&kshim.addr, &two, true).await;
    assert!(matches!(outcome, Outcome::Answered(_)), "{outcome:?}");
    let closed = tokio::time::timeout(PROMPT, read_outcome(&mut stream))
        .await
        .expect("closed in time");
    assert!(matches!(closed, Outcome::Closed), "{closed:?}");
    kshim.finish().await;
}

#[tokio::test]
async fn negative_and_oversized_lengths_close_the_connection() {
    let kshim = Running::start().await;
    for size in [-1i32, -2, i32::MIN] {
        let mut bytes = size.to_be_bytes().to_vec();
        bytes.extend_from_slice(&[0, 18, 0, 4]);
        expect_closed(&kshim.addr, &bytes, false, &format!("size {size}")).await;
    }
    // Announced but never sent: kshim must not wait for the body.
    for size in [MAX_FRAME_BYTES as i32 + 1, i32::MAX] {
        expect_closed(
            &kshim.addr,
            &size.to_be_bytes(),
            false,
            &format!("size {size}"),
        )
        .await;
    }
    // Announced and sent in full: still refused, without reading it all first.
    let mut big = (MAX_FRAME_BYTES as i32 + 1).to_be_bytes().to_vec();
    big.extend_from_slice(&api_versions_v4()[4..]);
    big.resize(4 + MAX_FRAME_BYTES + 1, 0);
    expect_closed(&kshim.addr, &big, false, "oversized frame sent in full").await;
    kshim.finish().await;
}

#[tokio::test]
async fn unknown_and_unserved_api_keys_close_the_connection() {
    let kshim = Running::start().await;
    for api_key in [
        9999i16,
        -1,
        i16::MAX,
        ApiKey::Produce as i16,
        ApiKey::Fetch as i16,
    ] {
        expect_closed(
            &kshim.addr,
            &request_frame(api_key, 0, 5, false, &[]),
            false,
            &format!("api key {api_key}"),
        )
        .await;
    }
    // UpdateFeatures at a version kshim does not speak.
    let body = update_features_v1_body(&[(b"group.version", 1, 1)]);
    expect_closed(
        &kshim.addr,
        &request_frame(57, 3, 5, true, &body),
        false,
        "UpdateFeatures v3",
    )
    .await;
    kshim.finish().await;
}

#[tokio::test]
async fn garbage_headers_close_the_connection() {
    let kshim = Running::start().await;
    for frame in [
        &[][..],
        &[0],
        &[0, 18, 0],
        &[0, 18, 0, 4, 0, 0, 0],
        &[0, 57, 0, 1, 0, 0, 0, 1, 0],
    ] {
        expect_closed(
            &kshim.addr,
            &prefixed(frame),
            false,
            &format!("frame {frame:02x?}"),
        )
        .await;
    }
    kshim.finish().await;
}

#[tokio::test]
async fn strings_longer_than_the_frame_close_the_connection() {
    let kshim = Running::start().await;
    // Client id claiming 32767 bytes.
    let header = [0, 18, 0, 4, 0, 0, 0, 1, 0x7f, 0xff, b'a', b'b'];
    expect_closed(&kshim.addr, &prefixed(&header), false, "client id").await;
    // ClientSoftwareName claiming 200 bytes.
    let mut body = Vec::new();
    put_uvarint(&mut body, 201);
    body.extend_from_slice(b"abc");
    expect_closed(
        &kshim.addr,
        &request_frame(18, 4, 1, true, &body),
        false,
        "ClientSoftwareName",
    )
    .await;
    // An UpdateFeatures feature name claiming 200 bytes.
    let mut body = 30_000i32.to_be_bytes().to_vec();
    put_uvarint(&mut body, 2);
    put_uvarint(&mut body, 201);
    body.extend_from_slice(b"group.version");
    body.extend_from_slice(&[0, 1, 1, 0, 0, 0]);
    expect_closed(
        &kshim.addr,
        &request_frame(57, 1, 1, true, &body),
        false,
        "feature name",
    )
    .await;
    kshim.finish().await;
}

#[tokio::test]
async fn invalid_utf8_in_a_feature_name_is_refused() {
    let kshim = Running::start().await;
    let body = update_features_v1_body(&[(b"group.\xff\xfeversion", 0, 2)]);
    let (outcome, _) = send(&kshim.addr, &request_frame(57, 1, 9, true, &body), false).await;
    match outcome {
        Outcome::Closed => {}
        Outcome::Answered(frame) => {
            assert_eq!(&frame[..4], &9i32.to_be_bytes());
            let answer =
                decode_update_features_response(1, &frame[5..]).expect("a readable answer");
            assert_ne!(answer.error_code, errors::NONE, "{answer:?}");
        }
    }
    kshim.finish().await;
}

fn many_updates(
    n: usize,
    name: impl Fn(usize) -> String,
    level: i16,
    upgrade_type: i8,
) -> UpdateFeaturesRequest {
    UpdateFeaturesRequest::default()
        .with_timeout_ms(30_000)
        .with_feature_updates(
            (0..n)
                .map(|i| {
                    FeatureUpdateKey::default()
                        .with_feature(StrBytes::from_string(name(i)))
                        .with_max_version_level(level)
                        .with_upgrade_type(upgrade_type)
                })
                .collect(),
        )
}

#[tokio::test]
async fn five_thousand_updates_get_a_prompt_answer() {
    let kshim = Running::start().await;
    let cases = [
        // Unknown features: refused as a whole.
        (
            "5000 unknown features at level 1",
            many_updates(5000, |i| format!("x.feature.{i}"), 1, 1),
            &[ResponseError::InvalidUpdateVersion.code()][..],
        ),
        // Disabling features that are not there: a no-op or refused, never applied.
        (
            "5000 unknown features at level 0",
            many_updates(5000, |i| format!("x.feature.{i}"), 0, 2),
            &[errors::NONE, ResponseError::InvalidUpdateVersion.code()][..],
        ),
        // The same feature 5000 times.
        (
            "group.version 5000 times",
            many_updates(5000, |_| "group.version".to_owned(), 1, 1),
            &[ResponseError::InvalidRequest.code()][..],
        ),
    ];
    for (what, request, accepted) in cases {
        let started = Instant::now();
        let mut client = KafkaClient::connect(&kshim.addr, PROMPT).await.unwrap();
        let answer = tokio::time::timeout(PROMPT, client.update_features(1, &request))
            .await
            .unwrap_or_else(|_| panic!("{what}: no answer within {PROMPT:?}"))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(
            accepted.contains(&answer.error_code),
            "{what}: code {} {:?}",
            answer.error_code,
            answer.error_message
        );
        if answer.error_code == errors::NONE {
            assert_eq!(answer.results.len(), 5000, "{what}");
            assert!(
                answer
                    .results
                    .iter()
                    .all(|(_, code, _)| *code == errors::NONE),
                "{what}"
            );
        } else {
            assert!(answer.results.is_empty(), "{what}");
        }
        println!("{what}: answered in {:?}", started.elapsed());
        kshim.assert_unharmed().await;
    }
    kshim.finish().await;
}

#[tokio::test]
async fn huge_array_counts_close_the_connection_without_allocating() {
    let kshim = Running::start().await;
    // UpdateFeatures: compact array of 2^31 - 1 entries (uvarint 2^31).
    let mut body = 30_000i32.to_be_bytes().to_vec();
    put_uvarint(&mut body, 1 << 31);
    body.extend_from_slice(&[0, 0]);
    expect_closed(
        &kshim.addr,
        &request_frame(57, 1, 3, true, &body),
        false,
        "UpdateFeatures 2^31-1",
    )
    .await;
    // The largest uvarint: u32::MAX - 1 entries.
    let mut body = 30_000i32.to_be_bytes().to_vec();
    put_uvarint(&mut body, u32::MAX);
    body.push(0);
    expect_closed(
        &kshim.addr,
        &request_frame(57, 2, 3, true, &body),
        false,
        "UpdateFeatures u32::MAX",
    )
    .await;
    // Metadata v1: classic array of 2^31 - 1 topics.
    expect_closed(
        &kshim.addr,
        &request_frame(3, 1, 3, false, &i32::MAX.to_be_bytes()),
        false,
        "Metadata 2^31-1",
    )
    .await;
    kshim.finish().await;
}

/// A v3 ApiVersions answer body whose draft SupportedFeatures tag carries `level`.
fn api_versions_answer_with_draft_level(level: i64) -> Vec<u8> {
    let mut tag = Vec::new();
    put_uvarint(&mut tag, 2);
    put_compact_string(&mut tag, "group.version");
    tag.extend_from_slice(&0i64.to_be_bytes());
    tag.extend_from_slice(&level.to_be_bytes());
    tag.push(0);
    let mut body = vec![0, 0]; // ErrorCode
    put_uvarint(&mut body, 1); // no ApiKeys
    body.extend_from_slice(&0i32.to_be_bytes()); // ThrottleTimeMs
    put_uvarint(&mut body, 1); // one tagged field
    put_uvarint(&mut body, 10_000);
    put_uvarint(&mut body, tag.len() as u32);
    body.extend_from_slice(&tag);
    body
}

#[test]
fn draft_levels_outside_int16_are_an_error_not_a_panic() {
    for level in [
        i64::from(i16::MAX) + 1,
        40_000,
        i64::MAX,
        i64::from(i16::MIN) - 1,
        i64::MIN,
    ] {
        for version in [3, 4] {
            let body = api_versions_answer_with_draft_level(level);
            let result = std::panic::catch_unwind(|| api_versions::decode_response(version, &body));
            let err = result
                .expect("decode_response must not panic")
                .expect_err("a level outside int16 is refused");
            assert!(err.to_string().contains("int16"), "{err}");
        }
    }
    // The same answer with an int16 level decodes (it disagrees with tags 0-2,
    // which are absent, so it is refused for that reason instead).
    let err =
        api_versions::decode_response(3, &api_versions_answer_with_draft_level(1)).unwrap_err();
    assert!(err.to_string().contains("disagree"), "{err}");
}

/// FeatureUpdates is not nullable. Kafka's generated reader throws on a null
/// array ("non-nullable field featureUpdates was serialized as null") and the
/// broker drops the request; kshim must not read it as an empty list and answer
/// success.
#[tokio::test]
async fn a_null_feature_updates_array_is_refused() {
    let kshim = Running::start().await;
    for version in 0..=2i16 {
        let mut body = 30_000i32.to_be_bytes().to_vec();
        put_uvarint(&mut body, 0); // null compact array
        if version >= 1 {
            body.push(0); // ValidateOnly
        }
        body.push(0);
        let (outcome, _) = send(
            &kshim.addr,
            &request_frame(57, version, 4, true, &body),
            false,
        )
        .await;
        match outcome {
            Outcome::Closed => {}
            Outcome::Answered(frame) => {
                let answer = decode_update_features_response(version, &frame[5..])
                    .expect("a readable answer");
                assert_ne!(
                    answer.error_code,
                    errors::NONE,
                    "UpdateFeatures v{version} with a null array: {answer:?}"
                );
            }
        }
    }
    kshim.finish().await;
}

/// Behind a load balancer (`proxy_protocol`): a missing, malformed, oversized or
/// truncated PROXY header closes the connection promptly, before any request is
/// read, and a good header before a request still gets it answered.
#[tokio::test]
async fn bad_proxy_protocol_headers_close_the_connection() {
    use kshim::server::proxy_protocol::{Cidr, Mode};
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        listen: "127.0.0.1:0".into(),
        data_dir: dir.path().to_owned(),
        proxy_protocol: Mode::Any,
        proxy_protocol_trusted: vec![Cidr::parse("127.0.0.1").unwrap()],
        ..Config::default()
    };
    let kshim = Standalone::bind(&config)
        .await
        .expect("standalone kshim starts");
    let addr = kshim.local_addr.to_string();
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(kshim.serve(stopped));

    let request = api_versions_v4();
    let good = [
        b"PROXY TCP4 192.0.2.1 127.0.0.1 1000 9092\r\n".as_slice(),
        &request,
    ]
    .concat();
    let answered = |outcome: Outcome, what: &str| match outcome {
        Outcome::Answered(_) => {}
        Outcome::Closed => panic!("{what}: the request after a good header was not answered"),
    };
    answered(send(&addr, &good, false).await.0, "first");

    let mut endless_v1 = b"PROXY TCP4 ".to_vec();
    endless_v1.extend_from_slice(&[b'1'; 500]);
    let signature = b"\r\n\r\n\0\r\nQUIT\n".as_slice();
    let huge_v2 = [signature, b"\x21\x11\xff\xff", &[0u8; 64]].concat();
    let unknown_command = [signature, b"\x2f\x11\x00\x0c", &[0u8; 12], &request].concat();
    let short_v2_address = [signature, b"\x21\x11\x00\x04", &[0u8; 4], &request].concat();
    let cases: [(&str, Vec<u8>); 7] = [
        ("no header", request.clone()),
        ("a version 1 line past 107 bytes", endless_v1),
        (
            "a malformed version 1 line",
            [b"PROXY TCP4 x y z w\r\n".as_slice(), &request].concat(),
        ),
        ("a version 2 length past the cap", huge_v2),
        (
            "a version 2 header with an unknown command",
            unknown_command,
        ),
        ("a version 2 IPv4 block of 4 bytes", short_v2_address),
        ("garbage", vec![0xff; 300]),
    ];
    for (what, bytes) in cases {
        expect_closed(&addr, &bytes, false, what).await;
    }
    expect_closed(&addr, b"PROXY TCP4 192.0.2.1", true, "a header cut short").await;
    answered(send(&addr, &good, false).await.0, "last");
    let _ = stop.send(true);
    let _ = task.await;
}
