//! What a kshim cluster member reads from the brokers that hold its shared state
//! (`protocol::apis`, `protocol::records`): the answers to Metadata, CreateTopics, FindCoordinator,
//! InitProducerId, AddPartitionsToTxn, Produce, EndTxn, ListOffsets and Fetch,
//! the record batches a Fetch carries, and the records in them
//! (`cluster::records::Codec::read`).
//!
//! Input: a selector byte, then:
//! - 0-7: an answer body for one of the decoders above (Fetch excepted);
//! - 8: a Fetch answer body; its records are decoded as batches, and each record read;
//! - 9: record batches, decoded as they are;
//! - 10: record batches whose CRCs the harness recomputes first, so that the
//!   fuzzer reaches the records inside instead of stopping at the checksum;
//! - 11: one record: the key as a chunk (u16 length first), then the value
//!   (null when the selector's bit 0x80 is set);
//! - 12: records to encode as a batch: a flags byte, then per record a byte
//!   (bit 0 null key, bit 1 null value), the key chunk and the value chunk.
//!
//! Checked beyond "no panic" (selector 12): an encoded batch decodes to the
//! records it was given, and a config record written by `Codec::config` reads
//! back with the same key and the same value, spelled the same.

#![no_main]

mod common;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{
    AddPartitionsToTxnResponse, BrokerId, CreateTopicsResponse, EndTxnResponse, FetchResponse,
    FindCoordinatorResponse, InitProducerIdResponse, ListOffsetsResponse, MetadataResponse,
    ProduceResponse, ProducerId, TopicName,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use kshim::cluster::records::{Read, StateRecord};
use kshim::cluster::{Codec, InstanceStatus, Registration, SharedFeatures};
use kshim::protocol::apis::{self as wire, ProducerIdentity};
use kshim::protocol::records;
use libfuzzer_sys::fuzz_target;

#[global_allocator]
static ALLOCATOR: common::BoundedAllocator = common::BoundedAllocator;

const FETCH: u8 = 8;
const BATCHES: u8 = 9;
const RESEALED_BATCHES: u8 = 10;
const RECORD: u8 = 11;
const ROUND_TRIP: u8 = 12;
const SELECTORS: u8 = 13;

const NULL_VALUE: u8 = 0x80;
const MAX_RECORDS: usize = 32;

const CLUSTER_ID: &str = "fuzz";

fn codec() -> Codec {
    Codec::new(CLUSTER_ID)
}

fn read_batches(codec: &Codec, records: &Bytes) {
    let Ok(batches) = records::decode_batches(records) else {
        return;
    };
    for batch in &batches {
        for record in &batch.records {
            let _ = codec.read(record.key.as_deref(), record.value.as_deref());
        }
    }
}

/// CRC-32C, as v2 record batches carry it.
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A copy of `raw` with the CRC of every whole batch recomputed: base offset
/// (8) and length (4), then leader epoch (4), magic (1), CRC (4), and the part
/// the CRC covers.
fn resealed(raw: &[u8]) -> Bytes {
    let mut v = raw.to_vec();
    let mut at = 0usize;
    while v.len() - at >= 12 {
        let length = i32::from_be_bytes([v[at + 8], v[at + 9], v[at + 10], v[at + 11]]);
        let Ok(length) = usize::try_from(length) else {
            break;
        };
        let Some(end) = (at + 12).checked_add(length).filter(|&e| e <= v.len()) else {
            break;
        };
        if length >= 9 {
            let crc = crc32c(&v[at + 21..end]);
            v[at + 17..at + 21].copy_from_slice(&crc.to_be_bytes());
        }
        at = end;
    }
    Bytes::from(v)
}

fn round_trip(codec: &Codec, input: &mut common::Input<'_>) {
    let flags = input.byte();
    let mut records = Vec::new();
    while !input.is_empty() && records.len() < MAX_RECORDS {
        let nulls = input.byte();
        let key = Bytes::copy_from_slice(input.chunk());
        let value = Bytes::copy_from_slice(input.chunk());
        records.push((
            (nulls & 1 == 0).then_some(key),
            (nulls & 2 == 0).then_some(value),
        ));
    }
    let producer = (flags & 2 != 0).then_some(ProducerIdentity {
        producer_id: 4242,
        epoch: 7,
    });
    let transactional = flags & 1 != 0 && producer.is_some();
    let encoded = records::encode_batch(producer, 0, transactional, 1_700_000_000_000, &records);
    let batches = records::decode_batches(&encoded).expect("an encoded batch decodes");
    if records.is_empty() {
        assert!(batches.is_empty(), "no records make no batch");
    } else {
        assert_eq!(batches.len(), 1, "one batch for {} records", records.len());
        let got: Vec<(Option<Bytes>, Option<Bytes>)> = batches[0]
            .records
            .iter()
            .map(|r| (r.key.clone(), r.value.clone()))
            .collect();
        assert_eq!(got, records, "the records changed in a batch");
        assert_eq!(batches[0].transactional, transactional);
        let offsets: Vec<i64> = batches[0].records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, (0..records.len() as i64).collect::<Vec<_>>());
    }

    // Config records: the record's key names the override, its value is JSON.
    for (key, value) in &records {
        let (Some(key), Some(value)) = (key, value) else {
            continue;
        };
        let (Ok(key), Ok(value)) = (
            std::str::from_utf8(key),
            serde_json::from_slice::<serde_json::Value>(value),
        ) else {
            continue;
        };
        let (k, v) = codec.config(key, Some(&value));
        match codec.read(Some(&k), v.as_deref()) {
            Read::Record(StateRecord::Config {
                key: read_key,
                value: Some(read_value),
            }) => {
                assert_eq!(read_key, key);
                assert_eq!(
                    read_value.to_string(),
                    value.to_string(),
                    "the value is spelled differently"
                );
            }
            other => panic!("config record {key:?} read back as {other:?}"),
        }
    }
}

fuzz_target!(
    init: common::write_seeds_if_asked(seeds),
    |data: &[u8]| {
        let mut input = common::Input::new(data);
        let selector = input.byte();
        let codec = codec();
        match (selector & 0x7f) % SELECTORS {
            0 => {
                let _ = wire::decode_metadata(wire::METADATA_VERSION, input.rest());
            }
            1 => {
                let _ = wire::decode_create_topics(input.rest());
            }
            2 => {
                let _ = wire::decode_find_coordinator(input.rest());
            }
            3 => {
                let _ = wire::decode_init_producer_id(input.rest());
            }
            4 => {
                let _ = wire::decode_add_partitions_to_txn(input.rest());
            }
            5 => {
                let _ = wire::decode_produce(input.rest());
            }
            6 => {
                let _ = wire::decode_end_txn(input.rest());
            }
            7 => {
                let _ = wire::decode_list_offsets(input.rest());
            }
            FETCH => {
                if let Ok(answer) = wire::decode_fetch(&Bytes::copy_from_slice(input.rest())) {
                    read_batches(&codec, &answer.records);
                }
            }
            BATCHES => read_batches(&codec, &Bytes::copy_from_slice(input.rest())),
            RESEALED_BATCHES => read_batches(&codec, &resealed(input.rest())),
            RECORD => {
                let key = input.chunk();
                let value = input.rest();
                let value = (selector & NULL_VALUE == 0).then_some(value);
                let _ = codec.read(Some(key), value);
            }
            _ => round_trip(&codec, &mut input),
        }
    }
);

// ---------------------------------------------------------------------------
// Seeds: each answer at the version kshim asks for, and batches of the
// records a kshim cluster writes.
// ---------------------------------------------------------------------------

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn encode<M: Encodable>(message: &M, version: i16) -> Vec<u8> {
    let mut out = BytesMut::new();
    message.encode(&mut out, version).unwrap();
    out.to_vec()
}

fn seed(selector: u8, body: &[u8]) -> Vec<u8> {
    common::Seed::new().byte(selector).bytes(body).done()
}

fn state_records() -> Vec<(Option<Bytes>, Option<Bytes>)> {
    let c = codec();
    let features = SharedFeatures {
        version: 0,
        epoch: 7,
        levels: [("kshim.a".to_owned(), 3)].into(),
        upstream_levels: [("metadata.version".to_owned(), 27)].into(),
        writer: "kshim-1".into(),
    };
    let registration = Registration {
        version: 0,
        supported: [("kshim.a".to_owned(), [1, 3])].into(),
        listeners: vec!["127.0.0.1:9092".into()],
        kshim_version: "0.1.0".into(),
        status: InstanceStatus::default(),
    };
    let value: serde_json::Value = serde_json::from_str("222601422095.333222").unwrap();
    let records = [
        c.features(&features),
        c.config("policy.create_topic.max_partitions", Some(&value)),
        c.config("log.level", None),
        c.commit(vec!["policy.create_topic.max_partitions".into()]),
        c.instance("kshim-2", Some(&registration)),
        c.instance("kshim-3", None),
    ];
    records.into_iter().map(|(k, v)| (Some(k), v)).collect()
}

fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let metadata = MetadataResponse::default()
        .with_brokers(vec![MetadataResponseBroker::default()
            .with_node_id(BrokerId(1))
            .with_host(text("b1.internal"))
            .with_port(9092)])
        .with_cluster_id(Some(text("cluster-a")))
        .with_controller_id(BrokerId(1))
        .with_topics(vec![MetadataResponseTopic::default()
            .with_name(Some(TopicName(text("__kshim_state"))))
            .with_partitions(vec![MetadataResponsePartition::default()
                .with_leader_id(BrokerId(1))
                .with_replica_nodes(vec![BrokerId(1)])
                .with_isr_nodes(vec![BrokerId(1)])])]);
    out.push((
        "metadata".into(),
        seed(0, &encode(&metadata, wire::METADATA_VERSION)),
    ));
    let create = CreateTopicsResponse::default().with_topics(vec![CreatableTopicResult::default()
        .with_name(TopicName(text("__kshim_state")))
        .with_num_partitions(1)
        .with_replication_factor(3)
        .with_configs(Some(vec![CreatableTopicConfigs::default()
            .with_name(text("cleanup.policy"))
            .with_value(Some(text("compact")))]))]);
    out.push((
        "createtopics".into(),
        seed(1, &encode(&create, wire::CREATE_TOPICS_VERSION)),
    ));
    let coordinator =
        FindCoordinatorResponse::default().with_coordinators(vec![Coordinator::default()
            .with_key(text("kshim-fuzz"))
            .with_node_id(BrokerId(1))
            .with_host(text("b1.internal"))
            .with_port(9092)]);
    out.push((
        "findcoordinator".into(),
        seed(2, &encode(&coordinator, wire::FIND_COORDINATOR_VERSION)),
    ));
    let init = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(4242))
        .with_producer_epoch(7);
    out.push((
        "initproducerid".into(),
        seed(3, &encode(&init, wire::INIT_PRODUCER_ID_VERSION)),
    ));
    out.push((
        "addpartitionstotxn".into(),
        seed(
            4,
            &encode(
                &AddPartitionsToTxnResponse::default(),
                wire::ADD_PARTITIONS_TO_TXN_VERSION,
            ),
        ),
    ));
    let produce = ProduceResponse::default().with_responses(vec![TopicProduceResponse::default()
        .with_name(TopicName(text("__kshim_state")))
        .with_partition_responses(vec![
            PartitionProduceResponse::default().with_base_offset(42)
        ])]);
    out.push((
        "produce".into(),
        seed(5, &encode(&produce, wire::PRODUCE_VERSION)),
    ));
    out.push((
        "endtxn".into(),
        seed(
            6,
            &encode(&EndTxnResponse::default(), wire::END_TXN_VERSION),
        ),
    ));
    let offsets =
        ListOffsetsResponse::default().with_topics(vec![ListOffsetsTopicResponse::default()
            .with_name(TopicName(text("__kshim_state")))
            .with_partitions(vec![ListOffsetsPartitionResponse::default().with_offset(42)])]);
    out.push((
        "listoffsets".into(),
        seed(7, &encode(&offsets, wire::LIST_OFFSETS_VERSION)),
    ));

    let batch = records::encode_batch(
        Some(ProducerIdentity {
            producer_id: 4242,
            epoch: 7,
        }),
        0,
        true,
        1_700_000_000_000,
        &state_records(),
    );
    let plain = records::encode_batch(None, -1, false, 1_700_000_000_000, &state_records()[..2]);
    let mut two = batch.to_vec();
    two.extend_from_slice(&plain);
    let fetch = FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
        .with_topic(TopicName(text("__kshim_state")))
        .with_partitions(vec![PartitionData::default()
            .with_high_watermark(8)
            .with_last_stable_offset(8)
            .with_records(Some(Bytes::from(two.clone())))])]);
    out.push((
        "fetch".into(),
        seed(FETCH, &encode(&fetch, wire::FETCH_VERSION)),
    ));
    out.push(("batches".into(), seed(BATCHES, &two)));
    out.push(("resealed-batches".into(), seed(RESEALED_BATCHES, &two)));
    for (i, (key, value)) in state_records().into_iter().enumerate() {
        let key = key.unwrap_or_default();
        let mut s = common::Seed::new().byte(if value.is_some() {
            RECORD
        } else {
            RECORD | NULL_VALUE
        });
        s = s.chunk(&key).bytes(value.as_deref().unwrap_or_default());
        out.push((format!("record-{i}"), s.done()));
    }
    let mut s = common::Seed::new().byte(ROUND_TRIP).byte(3);
    for (key, value) in [
        ("policy.create_topic.max_partitions", "222601422095.333222"),
        ("log.level", "\"debug\""),
        (
            "policy.exempt_principals",
            "[\"User:ops\", 1e-300, {\"a\": -0.0}]",
        ),
    ] {
        s = s.byte(0).chunk(key.as_bytes()).chunk(value.as_bytes());
    }
    out.push((
        "round-trip".into(),
        s.byte(2).chunk(b"tombstone").chunk(b"").done(),
    ));
    out
}
