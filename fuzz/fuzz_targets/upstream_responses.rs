//! What kshim reads from a broker's answers in front of a cluster: the address
//! rewriting of every response that names brokers (`protocol::rewrite`), the
//! response header it skips to reach a body, the discovery decoders
//! (`upstream::cluster` Metadata brokers, `upstream::configs` DescribeConfigs and
//! Metadata topics, the audit's DescribeQuorum), the ApiVersions answer decoder, and the CLI client's
//! UpdateFeatures answer decoder.
//!
//! Input: a selector byte, a version byte (read as a signed number), then the
//! body. For the rewriters, selector bit 0x40 makes the rest a response frame
//! (correlation id and header) instead of a bare body, and bit 0x80 picks the
//! address book: kshim's own per-broker `Listeners` (at most three brokers, as
//! its unit tests build it) or a book that answers for every node.
//!
//! Checked beyond "no panic": a rewritten body is one the same rewriter reads
//! again, and rewriting it again changes nothing.

#![no_main]

mod common;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    fetch_response, produce_response, share_acknowledge_response, share_fetch_response, ApiKey,
    BrokerId, DescribeClusterResponse, DescribeConfigsResponse, FetchResponse,
    FindCoordinatorResponse, MetadataResponse, ProduceResponse, ShareAcknowledgeResponse,
    ShareFetchResponse, TopicName,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use kshim::protocol::api_versions;
use kshim::protocol::response::response_body_offset;
use kshim::protocol::rewrite::{rewrite_body, AddressBook};
use kshim::upstream::listeners::{BoundListener, ListenerLayout, Listeners};
use kshim::upstream::{cluster, configs};
use libfuzzer_sys::fuzz_target;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::mpsc;

#[global_allocator]
static ALLOCATOR: common::BoundedAllocator = common::BoundedAllocator;

/// The APIs whose answers name brokers, as `rewrite` lays them out.
const REWRITTEN: [ApiKey; 7] = [
    ApiKey::Produce,
    ApiKey::Fetch,
    ApiKey::Metadata,
    ApiKey::FindCoordinator,
    ApiKey::DescribeCluster,
    ApiKey::ShareFetch,
    ApiKey::ShareAcknowledge,
];

/// Selectors past the rewriters.
const HEADER: u8 = 7;
const METADATA_DISCOVERY: u8 = 8;
const DESCRIBE_CONFIGS: u8 = 9;
const API_VERSIONS: u8 = 10;
const UPDATE_FEATURES: u8 = 11;
const DESCRIBE_QUORUM: u8 = 12;

const FRAME: u8 = 0x40;
const EVERY_NODE: u8 = 0x80;

/// Sends node N to fuzz.test:30000+N, whatever the upstream said.
struct EveryNode;

impl AddressBook for EveryNode {
    fn client_address(
        &self,
        node_id: i32,
        _: &str,
        _: i32,
    ) -> Result<(std::sync::Arc<str>, i32), String> {
        Ok(("fuzz.test".into(), 30_000i32.wrapping_add(node_id)))
    }
}

struct Book {
    listeners: Listeners,
    /// Keeps the channel open: a closed one reads as kshim shutting down.
    _bound: Mutex<mpsc::UnboundedReceiver<BoundListener>>,
}

/// The per-broker listeners, laid out as `upstream::listeners`' tests lay them
/// out: ephemeral ports on loopback, node 7 pinned to an ephemeral port, node 8
/// to the bootstrap port (refused), at most three brokers. Bound once per
/// process; the first three node ids an input names get the listeners.
fn listeners() -> &'static Listeners {
    static BOOK: OnceLock<Book> = OnceLock::new();
    &BOOK
        .get_or_init(|| {
            let layout = ListenerLayout {
                bind_host: "127.0.0.1".into(),
                advertised_host: "kshim.example".into(),
                port_base: 0,
                ports: [(7, 0), (8, 9092)].into(),
                bootstrap_port: 9092,
                reserved: vec![("admin.listen", 9880)],
                max_brokers: 3,
                grace: Duration::from_millis(50),
                server_names: None,
            };
            let (tx, rx) = mpsc::unbounded_channel();
            Book {
                listeners: Listeners::new(layout, tx),
                _bound: Mutex::new(rx),
            }
        })
        .listeners
}

fn rewrite(api: ApiKey, version: i16, input: &[u8], as_frame: bool, book: &dyn AddressBook) {
    let body = if as_frame {
        match response_body_offset(api, version, input) {
            Ok(offset) => Bytes::copy_from_slice(&input[offset..]),
            Err(_) => return,
        }
    } else {
        Bytes::copy_from_slice(input)
    };
    let Ok(Some(rewritten)) = rewrite_body(api, version, &body, book) else {
        return;
    };
    match rewrite_body(api, version, &rewritten, book) {
        Ok(None) => {}
        Ok(Some(again)) => assert_eq!(
            again, rewritten,
            "{api:?} v{version}: a second rewrite changed the body again"
        ),
        Err(e) => panic!("{api:?} v{version}: the rewritten body does not walk again: {e}"),
    }
}

fuzz_target!(
    init: common::write_seeds_if_asked(seeds),
    |data: &[u8]| {
        let mut input = common::Input::new(data);
        let selector = input.byte();
        let version = i16::from(input.byte() as i8);
        let rest = input.rest();
        match selector & 0x3f {
            s if usize::from(s) < REWRITTEN.len() => {
                let api = REWRITTEN[usize::from(s)];
                let book: &dyn AddressBook = if selector & EVERY_NODE != 0 {
                    &EveryNode
                } else {
                    listeners()
                };
                rewrite(api, version, rest, selector & FRAME != 0, book);
            }
            HEADER => {
                for api in REWRITTEN.iter().chain(&[ApiKey::ApiVersions, ApiKey::SaslAuthenticate]) {
                    let _ = response_body_offset(*api, version, rest);
                }
            }
            METADATA_DISCOVERY => {
                let _ = cluster::decode_metadata_brokers(version, rest);
                let _ = configs::decode_metadata_topics(version, rest);
            }
            DESCRIBE_CONFIGS => {
                let _ = configs::decode_describe_configs(version, rest);
            }
            API_VERSIONS => {
                let _ = api_versions::decode_response(version, rest);
            }
            UPDATE_FEATURES => {
                let _ = kshim::client::decode_update_features_response(version, rest);
            }
            DESCRIBE_QUORUM => {
                let _ = kshim::protocol::apis::decode_describe_quorum(rest);
            }
            _ => {}
        }
    }
);

// ---------------------------------------------------------------------------
// Seeds: answers naming brokers at every version, discovery answers, and the
// captured ApiVersions and UpdateFeatures answers.
// ---------------------------------------------------------------------------

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn encode<M: Encodable>(message: &M, version: i16) -> Option<Vec<u8>> {
    let mut out = BytesMut::new();
    message.encode(&mut out, version).ok()?;
    Some(out.to_vec())
}

fn seed(selector: u8, version: i16, body: &[u8]) -> Vec<u8> {
    let mut out = vec![selector, version as u8];
    out.extend_from_slice(body);
    out
}

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/../protocol-fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    let mut add = |name: String, selector: u8, version: i16, body: Option<Vec<u8>>| {
        if let Some(body) = body {
            out.push((name, seed(selector, version, &body)));
        }
    };
    let brokers = [(1, "b1.internal", 9092), (2, "b2.internal", 9093)];

    for v in 0..=13 {
        let mut m = MetadataResponse::default()
            .with_brokers(
                brokers
                    .iter()
                    .map(|&(id, host, port)| {
                        MetadataResponseBroker::default()
                            .with_node_id(BrokerId(id))
                            .with_host(text(host))
                            .with_port(port)
                    })
                    .collect(),
            )
            .with_controller_id(BrokerId(if v >= 1 { 2 } else { -1 }))
            .with_topics(vec![MetadataResponseTopic::default()
                .with_name(Some(TopicName(text("orders"))))
                .with_partitions(vec![MetadataResponsePartition::default()
                    .with_leader_id(BrokerId(1))
                    .with_replica_nodes(vec![BrokerId(1), BrokerId(2)])
                    .with_isr_nodes(vec![BrokerId(1)])])]);
        if v >= 2 {
            m.cluster_id = Some(text("cluster-a"));
        }
        let body = encode(&m, v);
        add(format!("metadata-v{v}"), 2, v, body.clone());
        add(
            format!("metadata-v{v}-every-node"),
            2 | EVERY_NODE,
            v,
            body.clone(),
        );
        add(
            format!("discovery-metadata-v{v}"),
            METADATA_DISCOVERY,
            v,
            body,
        );
    }
    for v in 0..=2 {
        let mut d = DescribeClusterResponse::default()
            .with_cluster_id(text("cluster-a"))
            .with_controller_id(BrokerId(1))
            .with_brokers(
                brokers
                    .iter()
                    .map(|&(id, host, port)| {
                        DescribeClusterBroker::default()
                            .with_broker_id(BrokerId(id))
                            .with_host(text(host))
                            .with_port(port)
                    })
                    .collect(),
            );
        if v >= 1 {
            d.endpoint_type = 1;
        }
        add(
            format!("describecluster-v{v}"),
            4 | EVERY_NODE,
            v,
            encode(&d, v),
        );
    }
    for v in 0..=6 {
        let f = if v < 4 {
            FindCoordinatorResponse::default()
                .with_node_id(BrokerId(2))
                .with_host(text("b2.internal"))
                .with_port(9093)
        } else {
            FindCoordinatorResponse::default().with_coordinators(vec![
                Coordinator::default()
                    .with_key(text("group-a"))
                    .with_node_id(BrokerId(2))
                    .with_host(text("b2.internal"))
                    .with_port(9093),
                Coordinator::default()
                    .with_key(text("group-b"))
                    .with_node_id(BrokerId(-1))
                    .with_error_code(15),
            ])
        };
        add(
            format!("findcoordinator-v{v}"),
            3 | EVERY_NODE,
            v,
            encode(&f, v),
        );
    }
    for v in [3, 9, 10, 11, 12, 13] {
        let mut p = ProduceResponse::default()
            .with_responses(vec![TopicProduceResponse::default()
                .with_name(TopicName(text(if v >= 13 { "" } else { "orders" })))
                .with_partition_responses(vec![PartitionProduceResponse::default()])]);
        if v >= 10 {
            p.node_endpoints = vec![produce_response::NodeEndpoint::default()
                .with_node_id(BrokerId(1))
                .with_host(text("b1.internal"))
                .with_port(9092)];
        }
        add(format!("produce-v{v}"), EVERY_NODE, v, encode(&p, v));
    }
    for v in [4, 12, 15, 16, 17, 18] {
        let mut f =
            FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
                .with_topic(TopicName(text(if v >= 13 { "" } else { "orders" })))
                .with_partitions(vec![
                    PartitionData::default().with_records(Some(Bytes::new()))
                ])]);
        if v >= 16 {
            f.node_endpoints = vec![fetch_response::NodeEndpoint::default()
                .with_node_id(BrokerId(2))
                .with_host(text("b2.internal"))
                .with_port(9093)];
        }
        add(format!("fetch-v{v}"), 1 | EVERY_NODE, v, encode(&f, v));
    }
    let share_fetch = ShareFetchResponse::default().with_node_endpoints(vec![
        share_fetch_response::NodeEndpoint::default()
            .with_node_id(BrokerId(1))
            .with_host(text("b1.internal"))
            .with_port(9092),
    ]);
    add(
        "sharefetch-v1".into(),
        5 | EVERY_NODE,
        1,
        encode(&share_fetch, 1),
    );
    let share_ack = ShareAcknowledgeResponse::default().with_node_endpoints(vec![
        share_acknowledge_response::NodeEndpoint::default()
            .with_node_id(BrokerId(2))
            .with_host(text("b2.internal"))
            .with_port(9093),
    ]);
    add(
        "shareacknowledge-v1".into(),
        6 | EVERY_NODE,
        1,
        encode(&share_ack, 1),
    );
    for v in 1..=4 {
        let mut entry = DescribeConfigsResourceResult::default()
            .with_name(text("retention.ms"))
            .with_value(Some(text("604800000")))
            .with_config_source(5);
        if v >= 3 {
            entry.config_type = 5;
        }
        let d =
            DescribeConfigsResponse::default().with_results(vec![DescribeConfigsResult::default()
                .with_resource_type(2)
                .with_resource_name(text("orders"))
                .with_configs(vec![entry])]);
        add(
            format!("describeconfigs-v{v}"),
            DESCRIBE_CONFIGS,
            v,
            encode(&d, v),
        );
    }
    {
        use kafka_protocol::messages::describe_quorum_response::{
            PartitionData as QuorumPartition, ReplicaState, TopicData,
        };
        let replica = |id: i32| {
            ReplicaState::default()
                .with_replica_id(BrokerId(id))
                .with_log_end_offset(41)
        };
        let quorum = kafka_protocol::messages::DescribeQuorumResponse::default().with_topics(vec![
            TopicData::default()
                .with_topic_name(TopicName(text("__cluster_metadata")))
                .with_partitions(vec![QuorumPartition::default()
                    .with_high_watermark(42)
                    .with_current_voters(vec![replica(3000)])
                    .with_observers(vec![replica(1), replica(2)])]),
        ]);
        add(
            "describequorum-v0".into(),
            DESCRIBE_QUORUM,
            0,
            encode(&quorum, 0),
        );
    }
    // A response frame: correlation id, empty header tags, then the body.
    if let Some(body) = encode(
        &MetadataResponse::default().with_brokers(vec![MetadataResponseBroker::default()
            .with_node_id(BrokerId(1))
            .with_host(text("b1.internal"))
            .with_port(9092)]),
        12,
    ) {
        let mut frame = 9i32.to_be_bytes().to_vec();
        frame.push(0);
        frame.extend_from_slice(&body);
        add(
            "metadata-v12-frame".into(),
            2 | FRAME | EVERY_NODE,
            12,
            Some(frame.clone()),
        );
        add("header-metadata-v12".into(), HEADER, 12, Some(frame));
    }
    // Captured answers: ApiVersions after its v0 header, UpdateFeatures after its v1 one.
    for (file, v) in [
        ("apiversions-v3-resp-kafka-4.1.1.bin", 3),
        ("apiversions-v4-resp-kafka-4.1.1.bin", 4),
        ("apiversions-v0-resp-unsupported-to-v5-kafka-4.1.1.bin", 0),
    ] {
        add(
            file.to_owned(),
            API_VERSIONS,
            v,
            Some(fixture(file)[8..].to_vec()),
        );
    }
    for (file, v) in [
        ("updatefeatures-v0-resp-kafka-4.1.1-success.bin", 0),
        (
            "updatefeatures-v1-resp-kafka-4.1.1-invalid-update-version.bin",
            1,
        ),
        ("updatefeatures-v2-resp-kafka-4.1.1-success.bin", 2),
    ] {
        add(
            file.to_owned(),
            UPDATE_FEATURES,
            v,
            Some(fixture(file)[9..].to_vec()),
        );
    }
    out
}
