//! The Kafka messages a kshim cluster exchanges to keep its state topic:
//! request encoders (kafka-protocol, at the fixed versions below), bounded
//! response decoders, and magic-v2 record batches. Bytes only, no I/O.
//!
//! Responses come from the network, so they are read with
//! `protocol::Reader`, never kafka-protocol's decoders: those reserve capacity
//! straight from counts on the wire. Every version here is flexible (compact
//! strings and arrays, tagged fields), so one reader style covers them all.

use crate::protocol::{CodecError, Reader};
use crate::upstream::cluster::BrokerInfo;
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, BrokerId, CreateTopicsRequest, EndTxnRequest, FetchRequest,
    FindCoordinatorRequest, InitProducerIdRequest, ListOffsetsRequest, MetadataRequest,
    ProduceRequest, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID,
};
use std::collections::BTreeMap;

pub const METADATA_VERSION: i16 = 12;
pub const CREATE_TOPICS_VERSION: i16 = 7;
pub const FIND_COORDINATOR_VERSION: i16 = 4;
pub const INIT_PRODUCER_ID_VERSION: i16 = 4;
pub const ADD_PARTITIONS_TO_TXN_VERSION: i16 = 3;
pub const PRODUCE_VERSION: i16 = 9;
pub const END_TXN_VERSION: i16 = 3;
pub const LIST_OFFSETS_VERSION: i16 = 7;
pub const FETCH_VERSION: i16 = 12;

pub const COORDINATOR_TRANSACTION: i8 = 1;
pub const READ_UNCOMMITTED: i8 = 0;
pub const READ_COMMITTED: i8 = 1;
pub const LATEST_TIMESTAMP: i64 = -1;
pub const EARLIEST_TIMESTAMP: i64 = -2;

// ---------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------

/// kafka-protocol fails to encode only a field the version cannot carry or a
/// length the format cannot express; the versions here are fixed and tested,
/// so that is a bug, not an input. An empty body then makes the broker refuse
/// the request, which the caller sees as an error rather than a panic.
fn encode<M: Encodable>(message: &M, version: i16, api: &str) -> Bytes {
    let mut buf = BytesMut::new();
    match message.encode(&mut buf, version) {
        Ok(()) => buf.freeze(),
        Err(e) => {
            tracing::error!("cannot encode {api} v{version}: {e}");
            Bytes::new()
        }
    }
}

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn topic_name(s: &str) -> TopicName {
    TopicName(text(s))
}

/// Named topics only; no automatic creation, which would make a state topic
/// with the broker's defaults instead of a compacted single partition.
pub fn metadata_request(topics: &[&str]) -> Bytes {
    let topics = topics
        .iter()
        .map(|t| MetadataRequestTopic::default().with_name(Some(topic_name(t))))
        .collect();
    let req = MetadataRequest::default()
        .with_topics(Some(topics))
        .with_allow_auto_topic_creation(false);
    encode(&req, METADATA_VERSION, "Metadata")
}

pub fn create_topic_request(
    name: &str,
    partitions: i32,
    replication_factor: i16,
    configs: &[(&str, &str)],
    timeout_ms: i32,
) -> Bytes {
    let configs = configs
        .iter()
        .map(|(k, v)| {
            CreatableTopicConfig::default()
                .with_name(text(k))
                .with_value(Some(text(v)))
        })
        .collect();
    let topic = CreatableTopic::default()
        .with_name(topic_name(name))
        .with_num_partitions(partitions)
        .with_replication_factor(replication_factor)
        .with_configs(configs);
    let req = CreateTopicsRequest::default()
        .with_topics(vec![topic])
        .with_timeout_ms(timeout_ms)
        .with_validate_only(false);
    encode(&req, CREATE_TOPICS_VERSION, "CreateTopics")
}

pub fn find_coordinator_request(key_type: i8, key: &str) -> Bytes {
    let req = FindCoordinatorRequest::default()
        .with_key_type(key_type)
        .with_coordinator_keys(vec![text(key)]);
    encode(&req, FIND_COORDINATOR_VERSION, "FindCoordinator")
}

/// (Producer id, epoch) as the broker assigned them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdentity {
    pub producer_id: i64,
    pub epoch: i16,
}

/// `transactional_id` None is an idempotent producer. `current` lets a
/// producer that still holds an identity bump its epoch (KIP-360) instead of
/// being fenced by a fresh one.
pub fn init_producer_id_request(
    transactional_id: Option<&str>,
    transaction_timeout_ms: i32,
    current: Option<ProducerIdentity>,
) -> Bytes {
    let (id, epoch) = current.map_or((NO_PRODUCER_ID, NO_PRODUCER_EPOCH), |c| {
        (c.producer_id, c.epoch)
    });
    // Set explicitly: kafka-protocol's default is Some(""), not null.
    let req = InitProducerIdRequest::default()
        .with_transactional_id(transactional_id.map(|t| TransactionalId(text(t))))
        .with_transaction_timeout_ms(transaction_timeout_ms)
        .with_producer_id(ProducerId(id))
        .with_producer_epoch(epoch);
    encode(&req, INIT_PRODUCER_ID_VERSION, "InitProducerId")
}

pub fn add_partitions_to_txn_request(
    transactional_id: &str,
    producer: ProducerIdentity,
    topic: &str,
    partition: i32,
) -> Bytes {
    // v3 is the last version a client sends: v4+ is the broker-to-coordinator
    // batched form.
    let req = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(text(transactional_id)))
        .with_v3_and_below_producer_id(ProducerId(producer.producer_id))
        .with_v3_and_below_producer_epoch(producer.epoch)
        .with_v3_and_below_topics(vec![AddPartitionsToTxnTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(vec![partition])]);
    encode(&req, ADD_PARTITIONS_TO_TXN_VERSION, "AddPartitionsToTxn")
}

pub fn produce_request(
    transactional_id: Option<&str>,
    acks: i16,
    timeout_ms: i32,
    topic: &str,
    partition: i32,
    records: Bytes,
) -> Bytes {
    let data = TopicProduceData::default()
        .with_name(topic_name(topic))
        .with_partition_data(vec![PartitionProduceData::default()
            .with_index(partition)
            .with_records(Some(records))]);
    let req = ProduceRequest::default()
        .with_transactional_id(transactional_id.map(|t| TransactionalId(text(t))))
        .with_acks(acks)
        .with_timeout_ms(timeout_ms)
        .with_topic_data(vec![data]);
    encode(&req, PRODUCE_VERSION, "Produce")
}

pub fn end_txn_request(transactional_id: &str, producer: ProducerIdentity, commit: bool) -> Bytes {
    let req = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(text(transactional_id)))
        .with_producer_id(ProducerId(producer.producer_id))
        .with_producer_epoch(producer.epoch)
        .with_committed(commit);
    encode(&req, END_TXN_VERSION, "EndTxn")
}

pub fn list_offsets_request(
    isolation_level: i8,
    topic: &str,
    partition: i32,
    timestamp: i64,
) -> Bytes {
    let req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_isolation_level(isolation_level)
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(partition)
                .with_current_leader_epoch(-1)
                .with_timestamp(timestamp)])]);
    encode(&req, LIST_OFFSETS_VERSION, "ListOffsets")
}

pub struct FetchSpec<'a> {
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    pub max_wait_ms: i32,
    pub min_bytes: i32,
    pub max_bytes: i32,
    pub isolation_level: i8,
}

/// A sessionless fetch (session epoch -1): one partition, read whole each
/// time, so no session state can go stale between fetches.
pub fn fetch_request(spec: &FetchSpec<'_>) -> Bytes {
    let partition = FetchPartition::default()
        .with_partition(spec.partition)
        .with_current_leader_epoch(-1)
        .with_fetch_offset(spec.offset)
        .with_last_fetched_epoch(-1)
        .with_log_start_offset(-1)
        .with_partition_max_bytes(spec.max_bytes);
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(spec.max_wait_ms)
        .with_min_bytes(spec.min_bytes)
        .with_max_bytes(spec.max_bytes)
        .with_isolation_level(spec.isolation_level)
        .with_session_id(0)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(topic_name(spec.topic))
            .with_partitions(vec![partition])])
        .with_rack_id(StrBytes::from_static_str(""));
    encode(&req, FETCH_VERSION, "Fetch")
}

// ---------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------

/// An array's element count. A null array reads as empty: no caller here
/// tells the two apart.
fn count(
    r: &mut Reader<'_>,
    min_element_bytes: usize,
    what: &'static str,
) -> Result<usize, CodecError> {
    Ok(r.array_len(true, min_element_bytes, what)?.unwrap_or(0))
}

fn string(r: &mut Reader<'_>, what: &'static str) -> Result<String, CodecError> {
    Ok(r.string(true, what)?.to_owned())
}

fn opt_string(r: &mut Reader<'_>, what: &'static str) -> Result<Option<String>, CodecError> {
    Ok(r.compact_nullable_string(what)?.map(str::to_owned))
}

fn skip_tags(r: &mut Reader<'_>, what: &'static str) -> Result<(), CodecError> {
    r.tagged_fields(what).map(|_| ())
}

/// The top-level tagged fields, then nothing: trailing bytes mean the layout
/// read is not the one the broker wrote, and nothing read can be trusted.
fn finish(mut r: Reader<'_>, what: &'static str) -> Result<(), CodecError> {
    skip_tags(&mut r, what)?;
    r.expect_end(what)
}

fn missing(what: &str) -> CodecError {
    CodecError::Invalid(format!("{what} response holds no partition"))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMeta {
    pub partition: i32,
    pub error_code: i16,
    pub leader: i32,
    pub replicas: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMeta {
    /// Empty when the broker answered by topic id only.
    pub name: String,
    pub error_code: i16,
    pub partitions: Vec<PartitionMeta>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataAnswer {
    pub cluster_id: Option<String>,
    pub brokers: BTreeMap<i32, BrokerInfo>,
    pub topics: Vec<TopicMeta>,
}

pub fn decode_metadata(body: &[u8]) -> Result<MetadataAnswer, CodecError> {
    let mut r = Reader::new(body);
    r.i32("throttle_time_ms")?;
    let mut brokers = BTreeMap::new();
    // node_id, host, port, rack, tags
    for _ in 0..count(&mut r, 11, "brokers")? {
        let id = r.i32("node_id")?;
        let host = string(&mut r, "broker host")?;
        let port = r.i32("broker port")?;
        let rack = opt_string(&mut r, "broker rack")?;
        skip_tags(&mut r, "broker tags")?;
        brokers.insert(id, BrokerInfo { host, port, rack });
    }
    let cluster_id = opt_string(&mut r, "cluster_id")?;
    r.i32("controller_id")?;
    let mut topics = Vec::new();
    // error, name, topic id, is_internal, partitions, authorized ops, tags
    for _ in 0..count(&mut r, 26, "topics")? {
        let error_code = r.i16("topic error_code")?;
        let name = opt_string(&mut r, "topic name")?.unwrap_or_default();
        r.uuid("topic_id")?;
        r.bool("is_internal")?;
        let mut partitions = Vec::new();
        // error, index, leader, leader epoch, three arrays, tags
        for _ in 0..count(&mut r, 18, "partitions")? {
            let error_code = r.i16("partition error_code")?;
            let partition = r.i32("partition_index")?;
            let leader = r.i32("leader_id")?;
            r.i32("leader_epoch")?;
            let replicas = skip_ids(&mut r, "replica_nodes")?;
            skip_ids(&mut r, "isr_nodes")?;
            skip_ids(&mut r, "offline_replicas")?;
            skip_tags(&mut r, "partition tags")?;
            partitions.push(PartitionMeta {
                partition,
                error_code,
                leader,
                replicas,
            });
        }
        r.i32("topic_authorized_operations")?;
        skip_tags(&mut r, "topic tags")?;
        topics.push(TopicMeta {
            name,
            error_code,
            partitions,
        });
    }
    finish(r, "Metadata response")?;
    Ok(MetadataAnswer {
        cluster_id,
        brokers,
        topics,
    })
}

/// Skips an array of broker ids and says how many there were.
fn skip_ids(r: &mut Reader<'_>, what: &'static str) -> Result<usize, CodecError> {
    let n = count(r, 4, what)?;
    for _ in 0..n {
        r.i32(what)?;
    }
    Ok(n)
}

/// (topic name, error code, error message) per topic.
pub fn decode_create_topics(body: &[u8]) -> Result<Vec<(String, i16, Option<String>)>, CodecError> {
    let mut r = Reader::new(body);
    r.i32("throttle_time_ms")?;
    let mut out = Vec::new();
    // name, topic id, error, message, partitions, replication, configs, tags
    for _ in 0..count(&mut r, 28, "topics")? {
        let name = string(&mut r, "topic name")?;
        r.uuid("topic_id")?;
        let error_code = r.i16("error_code")?;
        let message = opt_string(&mut r, "error_message")?;
        r.i32("num_partitions")?;
        r.i16("replication_factor")?;
        // name, value, read_only, source, sensitive, tags
        for _ in 0..count(&mut r, 6, "configs")? {
            string(&mut r, "config name")?;
            opt_string(&mut r, "config value")?;
            r.bool("read_only")?;
            r.i8("config_source")?;
            r.bool("is_sensitive")?;
            skip_tags(&mut r, "config tags")?;
        }
        skip_tags(&mut r, "topic tags")?;
        out.push((name, error_code, message));
    }
    finish(r, "CreateTopics response")?;
    Ok(out)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coordinator {
    pub error_code: i16,
    pub error_message: Option<String>,
    pub node_id: i32,
    pub host: String,
    pub port: i32,
}

/// The first coordinator of the batched (v4) answer: the request asks for one.
pub fn decode_find_coordinator(body: &[u8]) -> Result<Coordinator, CodecError> {
    let mut r = Reader::new(body);
    r.i32("throttle_time_ms")?;
    let mut first = None;
    // key, node, host, port, error, message, tags
    for _ in 0..count(&mut r, 14, "coordinators")? {
        string(&mut r, "coordinator key")?;
        let node_id = r.i32("node_id")?;
        let host = string(&mut r, "host")?;
        let port = r.i32("port")?;
        let error_code = r.i16("error_code")?;
        let error_message = opt_string(&mut r, "error_message")?;
        skip_tags(&mut r, "coordinator tags")?;
        first.get_or_insert(Coordinator {
            error_code,
            error_message,
            node_id,
            host,
            port,
        });
    }
    finish(r, "FindCoordinator response")?;
    first.ok_or_else(|| CodecError::Invalid("FindCoordinator response holds no coordinator".into()))
}

/// (error code, identity).
pub fn decode_init_producer_id(body: &[u8]) -> Result<(i16, ProducerIdentity), CodecError> {
    let mut r = Reader::new(body);
    r.i32("throttle_time_ms")?;
    let code = r.i16("error_code")?;
    let producer_id = r.i64("producer_id")?;
    let epoch = r.i16("producer_epoch")?;
    finish(r, "InitProducerId response")?;
    Ok((code, ProducerIdentity { producer_id, epoch }))
}

/// The error code of the one partition asked for, or the first non-zero one:
/// v3 has no top-level error, and any failed partition fails the transaction.
pub fn decode_add_partitions_to_txn(body: &[u8]) -> Result<i16, CodecError> {
    let mut r = Reader::new(body);
    r.i32("throttle_time_ms")?;
    let mut code = None;
    for _ in 0..count(&mut r, 3, "results_by_topic")? {
        string(&mut r, "topic name")?;
        for _ in 0..count(&mut r, 7, "results_by_partition")? {
            r.i32("partition_index")?;
            let c = r.i16("partition_error_code")?;
            skip_tags(&mut r, "partition tags")?;
            if code.is_none_or(|prev| prev == 0) {
                code = Some(c);
            }
        }
        skip_tags(&mut r, "topic tags")?;
    }
    finish(r, "AddPartitionsToTxn response")?;
    code.ok_or_else(|| missing("AddPartitionsToTxn"))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProduceAnswer {
    pub error_code: i16,
    pub error_message: Option<String>,
    pub base_offset: i64,
}

/// The single partition's answer.
pub fn decode_produce(body: &[u8]) -> Result<ProduceAnswer, CodecError> {
    let mut r = Reader::new(body);
    let mut first = None;
    for _ in 0..count(&mut r, 3, "responses")? {
        string(&mut r, "topic name")?;
        // index, error, three offsets, record errors, message, tags
        for _ in 0..count(&mut r, 33, "partition_responses")? {
            r.i32("index")?;
            let error_code = r.i16("error_code")?;
            let base_offset = r.i64("base_offset")?;
            r.i64("log_append_time_ms")?;
            r.i64("log_start_offset")?;
            for _ in 0..count(&mut r, 6, "record_errors")? {
                r.i32("batch_index")?;
                opt_string(&mut r, "batch_index_error_message")?;
                skip_tags(&mut r, "record error tags")?;
            }
            let error_message = opt_string(&mut r, "error_message")?;
            skip_tags(&mut r, "partition tags")?;
            first.get_or_insert(ProduceAnswer {
                error_code,
                error_message,
                base_offset,
            });
        }
        skip_tags(&mut r, "topic tags")?;
    }
    r.i32("throttle_time_ms")?;
    finish(r, "Produce response")?;
    first.ok_or_else(|| missing("Produce"))
}

pub fn decode_end_txn(body: &[u8]) -> Result<i16, CodecError> {
    let mut r = Reader::new(body);
    r.i32("throttle_time_ms")?;
    let code = r.i16("error_code")?;
    finish(r, "EndTxn response")?;
    Ok(code)
}

/// (error code, offset) of the single partition.
pub fn decode_list_offsets(body: &[u8]) -> Result<(i16, i64), CodecError> {
    let mut r = Reader::new(body);
    r.i32("throttle_time_ms")?;
    let mut first = None;
    for _ in 0..count(&mut r, 3, "topics")? {
        string(&mut r, "topic name")?;
        // index, error, timestamp, offset, leader epoch, tags
        for _ in 0..count(&mut r, 27, "partitions")? {
            r.i32("partition_index")?;
            let code = r.i16("error_code")?;
            r.i64("timestamp")?;
            let offset = r.i64("offset")?;
            r.i32("leader_epoch")?;
            skip_tags(&mut r, "partition tags")?;
            first.get_or_insert((code, offset));
        }
        skip_tags(&mut r, "topic tags")?;
    }
    finish(r, "ListOffsets response")?;
    first.ok_or_else(|| missing("ListOffsets"))
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchAnswer {
    pub error_code: i16,
    pub partition_error: i16,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// (producer_id, first_offset)
    pub aborted: Vec<(i64, i64)>,
    pub records: Bytes,
}

/// The single partition's data. A top-level error may come with no partition
/// at all; the answer then carries that error and -1 offsets.
pub fn decode_fetch(body: &Bytes) -> Result<FetchAnswer, CodecError> {
    let mut r = Reader::new(body);
    r.i32("throttle_time_ms")?;
    let error_code = r.i16("error_code")?;
    r.i32("session_id")?;
    let mut first = None;
    for _ in 0..count(&mut r, 3, "responses")? {
        string(&mut r, "topic")?;
        // index, error, three offsets, aborted, preferred replica, records, tags
        for _ in 0..count(&mut r, 37, "partitions")? {
            r.i32("partition_index")?;
            let partition_error = r.i16("error_code")?;
            let high_watermark = r.i64("high_watermark")?;
            let last_stable_offset = r.i64("last_stable_offset")?;
            let log_start_offset = r.i64("log_start_offset")?;
            let mut aborted = Vec::new();
            // producer id, first offset, tags
            for _ in 0..count(&mut r, 17, "aborted_transactions")? {
                let producer = r.i64("producer_id")?;
                let first_offset = r.i64("first_offset")?;
                skip_tags(&mut r, "aborted transaction tags")?;
                aborted.push((producer, first_offset));
            }
            r.i32("preferred_read_replica")?;
            let records = match r.uvarint("records")? {
                0 => Bytes::new(),
                n => body.slice_ref(r.bytes(n as usize - 1, "records")?),
            };
            skip_tags(&mut r, "partition tags")?;
            first.get_or_insert(FetchAnswer {
                error_code,
                partition_error,
                high_watermark,
                last_stable_offset,
                log_start_offset,
                aborted,
                records,
            });
        }
        skip_tags(&mut r, "topic tags")?;
    }
    finish(r, "Fetch response")?;
    match first {
        Some(answer) => Ok(answer),
        None if error_code != 0 => Ok(FetchAnswer {
            error_code,
            partition_error: 0,
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
            aborted: Vec::new(),
            records: Bytes::new(),
        }),
        None => Err(missing("Fetch")),
    }
}

// ---------------------------------------------------------------------------
// Record batches (magic 2)
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlType {
    Abort,
    Commit,
    Other(i16),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub base_offset: i64,
    pub last_offset: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub transactional: bool,
    pub control: Option<ControlType>,
    pub records: Vec<LogRecord>,
}

/// Base offset and batch length: the length does not count them.
const LOG_OVERHEAD: usize = 12;
/// The rest of the header, from partition leader epoch to record count.
const BATCH_HEADER_AFTER_LENGTH: usize = 49;
/// Where the CRC'd part starts, counted from the partition leader epoch.
const CRC_START: usize = 9;
/// Length, attributes, timestamp delta, offset delta, key and value lengths,
/// header count: one byte each at least.
const MIN_RECORD_BYTES: usize = 7;

const ATTR_COMPRESSION: i16 = 0x07;
const ATTR_LOG_APPEND_TIME: i16 = 0x08;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;

/// A zigzag varlong, at most 10 bytes, as records encode their fields.
fn varlong(r: &mut Reader<'_>, what: &'static str) -> Result<i64, CodecError> {
    let mut raw: u64 = 0;
    for i in 0..10 {
        let b = r.i8(what)? as u8;
        raw |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok((raw >> 1) as i64 ^ -((raw & 1) as i64));
        }
    }
    Err(CodecError::Invalid(format!(
        "{what}: varint longer than 10 bytes"
    )))
}

fn varint(r: &mut Reader<'_>, what: &'static str) -> Result<i32, CodecError> {
    let v = varlong(r, what)?;
    i32::try_from(v).map_err(|_| CodecError::InvalidLength { what, length: v })
}

/// A varint length, then that many bytes; -1 is null. The bytes share
/// `whole`'s buffer instead of being copied.
fn var_bytes(
    r: &mut Reader<'_>,
    whole: &Bytes,
    what: &'static str,
) -> Result<Option<Bytes>, CodecError> {
    match varint(r, what)? {
        -1 => Ok(None),
        n if n >= 0 => Ok(Some(whole.slice_ref(r.bytes(n as usize, what)?))),
        n => Err(CodecError::InvalidLength {
            what,
            length: n.into(),
        }),
    }
}

/// CRC-32C (Castagnoli), which v2 batches carry over attributes..end.
const CRC32C_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82F6_3B78
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
};

fn crc32c(data: &[u8]) -> u32 {
    !data.iter().fold(!0u32, |crc, &b| {
        CRC32C_TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8)
    })
}

/// Every complete batch in a Fetch's records bytes. A trailing partial batch
/// is left out: brokers cut the last batch at max_bytes, and the next fetch
/// starts there.
pub fn decode_batches(records: &Bytes) -> Result<Vec<Batch>, CodecError> {
    let mut r = Reader::new(records);
    let mut out = Vec::new();
    while r.remaining() >= LOG_OVERHEAD {
        let base_offset = r.i64("base offset")?;
        let length = r.i32("batch length")?;
        let Ok(length) = usize::try_from(length) else {
            return Err(CodecError::InvalidLength {
                what: "batch length",
                length: length.into(),
            });
        };
        if r.remaining() < length {
            break;
        }
        out.push(decode_batch(
            records,
            base_offset,
            r.bytes(length, "record batch")?,
        )?);
    }
    Ok(out)
}

/// One batch, `raw` from its partition leader epoch to its end.
fn decode_batch(whole: &Bytes, base_offset: i64, raw: &[u8]) -> Result<Batch, CodecError> {
    let invalid =
        |why: String| CodecError::Invalid(format!("record batch at offset {base_offset}: {why}"));
    let mut r = Reader::new(raw);
    r.i32("partition leader epoch")?;
    let magic = r.i8("magic")?;
    if magic != 2 {
        return Err(invalid(format!(
            "magic {magic}; only v2 batches (Kafka 0.11+) are read"
        )));
    }
    if raw.len() < BATCH_HEADER_AFTER_LENGTH {
        return Err(invalid(format!(
            "length {} is shorter than a batch header",
            raw.len()
        )));
    }
    let crc = r.i32("crc")? as u32;
    // A corrupt batch must not become shared state; brokers check the same CRC.
    let computed = crc32c(raw.get(CRC_START..).unwrap_or_default());
    if computed != crc {
        return Err(invalid(format!(
            "CRC {crc:#010x} does not match its content ({computed:#010x})"
        )));
    }
    let attributes = r.i16("attributes")?;
    let codec = attributes & ATTR_COMPRESSION;
    if codec != 0 {
        return Err(invalid(format!(
            "compressed (codec {codec}); the state topic is written uncompressed and read so"
        )));
    }
    let last_offset_delta = r.i32("last offset delta")?;
    let base_timestamp = r.i64("base timestamp")?;
    let max_timestamp = r.i64("max timestamp")?;
    let producer_id = r.i64("producer id")?;
    let producer_epoch = r.i16("producer epoch")?;
    r.i32("base sequence")?;
    let n = r.i32("record count")?;
    let n = usize::try_from(n)
        .ok()
        .filter(|n| n.saturating_mul(MIN_RECORD_BYTES) <= r.remaining())
        .ok_or(CodecError::InvalidLength {
            what: "record count",
            length: n.into(),
        })?;
    let mut records = Vec::with_capacity(n);
    for _ in 0..n {
        let length = varint(&mut r, "record length")?;
        let length = usize::try_from(length).map_err(|_| CodecError::InvalidLength {
            what: "record length",
            length: length.into(),
        })?;
        let mut rec = Reader::new(r.bytes(length, "record")?);
        rec.i8("record attributes")?;
        let timestamp_delta = varlong(&mut rec, "timestamp delta")?;
        let offset_delta = varint(&mut rec, "offset delta")?;
        let key = var_bytes(&mut rec, whole, "record key")?;
        let value = var_bytes(&mut rec, whole, "record value")?;
        let headers = varint(&mut rec, "header count")?;
        let headers = usize::try_from(headers)
            .ok()
            .filter(|h| h.saturating_mul(2) <= rec.remaining())
            .ok_or(CodecError::InvalidLength {
                what: "header count",
                length: headers.into(),
            })?;
        for _ in 0..headers {
            var_bytes(&mut rec, whole, "header key")?.ok_or(CodecError::InvalidLength {
                what: "header key",
                length: -1,
            })?;
            var_bytes(&mut rec, whole, "header value")?;
        }
        rec.expect_end("record")?;
        let offset = base_offset
            .checked_add(offset_delta.into())
            .ok_or_else(|| invalid(format!("offset delta {offset_delta} overflows")))?;
        let timestamp = match attributes & ATTR_LOG_APPEND_TIME {
            0 => base_timestamp.wrapping_add(timestamp_delta),
            // The broker stamped the batch on append; the deltas inside are
            // still the producer's, so its time is the batch's.
            _ => max_timestamp,
        };
        records.push(LogRecord {
            offset,
            timestamp,
            key,
            value,
        });
    }
    r.expect_end("record batch")?;
    let last_offset = base_offset
        .checked_add(last_offset_delta.into())
        .ok_or_else(|| invalid(format!("last offset delta {last_offset_delta} overflows")))?;
    let control = match attributes & ATTR_CONTROL {
        0 => None,
        _ => {
            let kind = match records.first() {
                // Compaction can leave a producer's last control batch empty;
                // Java reads such a batch as UNKNOWN, whose id is -1.
                None => ControlType::Other(-1),
                Some(first) => {
                    let key = first.key.as_deref().unwrap_or_default();
                    let mut k = Reader::new(key);
                    let kind = k
                        .i16("control key version")
                        .and_then(|_| k.i16("control type"));
                    match kind
                        .map_err(|_| invalid("control record key is shorter than 4 bytes".into()))?
                    {
                        0 => ControlType::Abort,
                        1 => ControlType::Commit,
                        t => ControlType::Other(t),
                    }
                }
            };
            records.clear();
            Some(kind)
        }
    };
    Ok(Batch {
        base_offset,
        last_offset,
        producer_id,
        producer_epoch,
        transactional: attributes & ATTR_TRANSACTIONAL != 0,
        control,
        records,
    })
}

/// One uncompressed v2 batch. No records make no batch (empty bytes).
pub fn encode_batch(
    producer: Option<ProducerIdentity>,
    base_sequence: i32,
    transactional: bool,
    timestamp_ms: i64,
    records: &[(Option<Bytes>, Option<Bytes>)],
) -> Bytes {
    let (producer_id, producer_epoch) = producer.map_or((NO_PRODUCER_ID, NO_PRODUCER_EPOCH), |p| {
        (p.producer_id, p.epoch)
    });
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (key, value))| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
            producer_id,
            producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder starts a new batch wherever offset - sequence
            // changes; moving both together keeps one batch whose base
            // sequence is `base_sequence`.
            sequence: base_sequence.wrapping_add(i as i32),
            timestamp: timestamp_ms,
            key: key.clone(),
            value: value.clone(),
            headers: Default::default(),
        })
        .collect();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    let mut buf = BytesMut::new();
    match RecordBatchEncoder::encode(&mut buf, &records, &options) {
        Ok(()) => buf.freeze(),
        Err(e) => {
            tracing::error!("cannot encode a record batch: {e}");
            Bytes::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::add_partitions_to_txn_response::{
        AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
    };
    use kafka_protocol::messages::create_topics_response::{
        CreatableTopicConfigs, CreatableTopicResult,
    };
    use kafka_protocol::messages::fetch_response::{
        AbortedTransaction, FetchableTopicResponse, LeaderIdAndEpoch, PartitionData,
    };
    use kafka_protocol::messages::find_coordinator_response::Coordinator as KafkaCoordinator;
    use kafka_protocol::messages::list_offsets_response::{
        ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
    };
    use kafka_protocol::messages::metadata_response::{
        MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    use kafka_protocol::messages::produce_response::{
        BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
    };
    use kafka_protocol::messages::{
        AddPartitionsToTxnResponse, CreateTopicsResponse, EndTxnResponse, FetchResponse,
        FindCoordinatorResponse, InitProducerIdResponse, ListOffsetsResponse, MetadataResponse,
        ProduceResponse,
    };
    use kafka_protocol::protocol::Decodable;
    use kafka_protocol::records::RecordBatchDecoder;
    use proptest::prelude::*;

    fn wire<M: Encodable>(m: &M, version: i16) -> Bytes {
        let mut b = BytesMut::new();
        m.encode(&mut b, version).unwrap();
        b.freeze()
    }

    /// kafka-protocol's reading of a request encoded here, every byte used.
    fn read_back<M: Decodable>(mut body: Bytes, version: i16) -> M {
        let m = M::decode(&mut body, version).unwrap();
        assert!(body.is_empty(), "{} byte(s) left over", body.len());
        m
    }

    fn b(x: &'static [u8]) -> Bytes {
        Bytes::from_static(x)
    }

    const PRODUCER: ProducerIdentity = ProducerIdentity {
        producer_id: 9,
        epoch: 3,
    };

    fn metadata_sample() -> Bytes {
        let partition = MetadataResponsePartition::default()
            .with_leader_id(BrokerId(2))
            .with_leader_epoch(5)
            .with_replica_nodes(vec![BrokerId(1), BrokerId(2), BrokerId(3)])
            .with_isr_nodes(vec![BrokerId(2)]);
        let r = MetadataResponse::default()
            .with_brokers(vec![
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(1))
                    .with_host(text("a.example"))
                    .with_port(9092)
                    .with_rack(Some(text("r1"))),
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(2))
                    .with_host(text("b"))
                    .with_port(9093),
            ])
            .with_cluster_id(Some(text("cid")))
            .with_controller_id(BrokerId(1))
            .with_topics(vec![
                MetadataResponseTopic::default()
                    .with_name(Some(topic_name("state")))
                    .with_topic_id(uuid::Uuid::from_u128(7))
                    .with_partitions(vec![partition]),
                MetadataResponseTopic::default()
                    .with_error_code(3)
                    .with_name(Some(topic_name("gone"))),
            ]);
        wire(&r, METADATA_VERSION)
    }

    #[test]
    fn metadata_decodes() {
        let a = decode_metadata(&metadata_sample()).unwrap();
        assert_eq!(a.cluster_id.as_deref(), Some("cid"));
        assert_eq!(
            a.brokers.get(&1),
            Some(&BrokerInfo {
                host: "a.example".into(),
                port: 9092,
                rack: Some("r1".into())
            })
        );
        assert_eq!(
            a.brokers.get(&2),
            Some(&BrokerInfo {
                host: "b".into(),
                port: 9093,
                rack: None
            })
        );
        assert_eq!(
            a.topics,
            vec![
                TopicMeta {
                    name: "state".into(),
                    error_code: 0,
                    partitions: vec![PartitionMeta {
                        partition: 0,
                        error_code: 0,
                        leader: 2,
                        replicas: 3
                    }],
                },
                TopicMeta {
                    name: "gone".into(),
                    error_code: 3,
                    partitions: vec![]
                },
            ]
        );
    }

    fn create_topics_sample() -> Bytes {
        let config = CreatableTopicConfigs::default()
            .with_name(text("cleanup.policy"))
            .with_value(Some(text("compact")));
        let r = CreateTopicsResponse::default().with_topics(vec![CreatableTopicResult::default()
            .with_name(topic_name("state"))
            .with_topic_id(uuid::Uuid::from_u128(1))
            .with_error_code(36)
            .with_error_message(Some(text("exists")))
            .with_num_partitions(1)
            .with_replication_factor(3)
            .with_configs(Some(vec![config]))
            .with_topic_config_error_code(5)]);
        wire(&r, CREATE_TOPICS_VERSION)
    }

    #[test]
    fn create_topics_decodes() {
        assert_eq!(
            decode_create_topics(&create_topics_sample()).unwrap(),
            vec![("state".into(), 36, Some("exists".into()))]
        );
    }

    fn find_coordinator_sample() -> Bytes {
        let r =
            FindCoordinatorResponse::default().with_coordinators(vec![KafkaCoordinator::default()
                .with_key(text("kshim-x"))
                .with_node_id(BrokerId(3))
                .with_host(text("c"))
                .with_port(9094)
                .with_error_code(15)
                .with_error_message(Some(text("loading")))]);
        wire(&r, FIND_COORDINATOR_VERSION)
    }

    #[test]
    fn find_coordinator_decodes() {
        assert_eq!(
            decode_find_coordinator(&find_coordinator_sample()).unwrap(),
            Coordinator {
                error_code: 15,
                error_message: Some("loading".into()),
                node_id: 3,
                host: "c".into(),
                port: 9094
            }
        );
        let empty = wire(
            &FindCoordinatorResponse::default(),
            FIND_COORDINATOR_VERSION,
        );
        assert!(decode_find_coordinator(&empty).is_err());
    }

    fn init_producer_id_sample() -> Bytes {
        let r = InitProducerIdResponse::default()
            .with_error_code(51)
            .with_producer_id(ProducerId(42))
            .with_producer_epoch(7);
        wire(&r, INIT_PRODUCER_ID_VERSION)
    }

    #[test]
    fn init_producer_id_decodes() {
        assert_eq!(
            decode_init_producer_id(&init_producer_id_sample()).unwrap(),
            (
                51,
                ProducerIdentity {
                    producer_id: 42,
                    epoch: 7
                }
            )
        );
    }

    fn add_partitions_sample(codes: &[i16]) -> Bytes {
        let partitions = codes
            .iter()
            .enumerate()
            .map(|(i, c)| {
                AddPartitionsToTxnPartitionResult::default()
                    .with_partition_index(i as i32)
                    .with_partition_error_code(*c)
            })
            .collect();
        let r = AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(vec![
            AddPartitionsToTxnTopicResult::default()
                .with_name(topic_name("state"))
                .with_results_by_partition(partitions),
        ]);
        wire(&r, ADD_PARTITIONS_TO_TXN_VERSION)
    }

    #[test]
    fn add_partitions_to_txn_decodes() {
        assert_eq!(
            decode_add_partitions_to_txn(&add_partitions_sample(&[0])),
            Ok(0)
        );
        assert_eq!(
            decode_add_partitions_to_txn(&add_partitions_sample(&[0, 47, 51])),
            Ok(47)
        );
        assert!(decode_add_partitions_to_txn(&add_partitions_sample(&[])).is_err());
    }

    fn produce_sample() -> Bytes {
        let partition = PartitionProduceResponse::default()
            .with_error_code(46)
            .with_base_offset(100)
            .with_record_errors(vec![BatchIndexAndErrorMessage::default()
                .with_batch_index(0)
                .with_batch_index_error_message(Some(text("bad")))])
            .with_error_message(Some(text("out of order")));
        let r = ProduceResponse::default()
            .with_responses(vec![TopicProduceResponse::default()
                .with_name(topic_name("state"))
                .with_partition_responses(vec![partition])])
            .with_throttle_time_ms(5);
        wire(&r, PRODUCE_VERSION)
    }

    #[test]
    fn produce_decodes() {
        assert_eq!(
            decode_produce(&produce_sample()).unwrap(),
            ProduceAnswer {
                error_code: 46,
                error_message: Some("out of order".into()),
                base_offset: 100
            }
        );
        assert!(decode_produce(&wire(&ProduceResponse::default(), PRODUCE_VERSION)).is_err());
    }

    fn end_txn_sample() -> Bytes {
        wire(
            &EndTxnResponse::default().with_error_code(48),
            END_TXN_VERSION,
        )
    }

    #[test]
    fn end_txn_decodes() {
        assert_eq!(decode_end_txn(&end_txn_sample()), Ok(48));
    }

    fn list_offsets_sample() -> Bytes {
        let r =
            ListOffsetsResponse::default().with_topics(vec![ListOffsetsTopicResponse::default()
                .with_name(topic_name("state"))
                .with_partitions(vec![ListOffsetsPartitionResponse::default()
                    .with_error_code(0)
                    .with_timestamp(-1)
                    .with_offset(77)
                    .with_leader_epoch(4)])]);
        wire(&r, LIST_OFFSETS_VERSION)
    }

    #[test]
    fn list_offsets_decodes() {
        assert_eq!(decode_list_offsets(&list_offsets_sample()), Ok((0, 77)));
        assert!(
            decode_list_offsets(&wire(&ListOffsetsResponse::default(), LIST_OFFSETS_VERSION))
                .is_err()
        );
    }

    fn fetch_sample(records: Bytes) -> Bytes {
        let partition = PartitionData::default()
            .with_high_watermark(10)
            .with_last_stable_offset(9)
            .with_log_start_offset(2)
            .with_aborted_transactions(Some(vec![AbortedTransaction::default()
                .with_producer_id(ProducerId(5))
                .with_first_offset(3)]))
            .with_current_leader(
                LeaderIdAndEpoch::default()
                    .with_leader_id(BrokerId(1))
                    .with_leader_epoch(2),
            )
            .with_records(Some(records));
        let r = FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
            .with_topic(topic_name("state"))
            .with_partitions(vec![partition])]);
        wire(&r, FETCH_VERSION)
    }

    #[test]
    fn fetch_decodes() {
        let batch = encode_batch(
            Some(PRODUCER),
            0,
            true,
            1,
            &[(Some(b(b"k")), Some(b(b"v")))],
        );
        let a = decode_fetch(&fetch_sample(batch.clone())).unwrap();
        assert_eq!(
            a,
            FetchAnswer {
                error_code: 0,
                partition_error: 0,
                high_watermark: 10,
                last_stable_offset: 9,
                log_start_offset: 2,
                aborted: vec![(5, 3)],
                records: batch,
            }
        );
        let refused = wire(&FetchResponse::default().with_error_code(70), FETCH_VERSION);
        let a = decode_fetch(&refused).unwrap();
        assert_eq!(
            (a.error_code, a.partition_error, a.records.len()),
            (70, 0, 0)
        );
        assert!(decode_fetch(&wire(&FetchResponse::default(), FETCH_VERSION)).is_err());
    }

    #[test]
    fn requests_read_back_with_kafka_protocol() {
        let m: MetadataRequest = read_back(metadata_request(&["state", "other"]), METADATA_VERSION);
        let names: Vec<_> = m
            .topics
            .unwrap()
            .into_iter()
            .map(|t| t.name.unwrap().0.to_string())
            .collect();
        assert_eq!(names, ["state", "other"]);
        assert!(!m.allow_auto_topic_creation);

        let c: CreateTopicsRequest = read_back(
            create_topic_request("state", 1, 3, &[("cleanup.policy", "compact")], 30_000),
            CREATE_TOPICS_VERSION,
        );
        let t = &c.topics[0];
        assert_eq!(
            (t.name.0.as_str(), t.num_partitions, t.replication_factor),
            ("state", 1, 3)
        );
        assert_eq!(
            (t.configs[0].name.as_str(), t.configs[0].value.as_deref()),
            ("cleanup.policy", Some("compact"))
        );
        assert_eq!(
            (c.timeout_ms, c.validate_only, c.topics.len()),
            (30_000, false, 1)
        );

        let f: FindCoordinatorRequest = read_back(
            find_coordinator_request(COORDINATOR_TRANSACTION, "kshim-x"),
            FIND_COORDINATOR_VERSION,
        );
        assert_eq!((f.key_type, f.coordinator_keys), (1, vec![text("kshim-x")]));

        let i: InitProducerIdRequest = read_back(
            init_producer_id_request(Some("t"), 60_000, Some(PRODUCER)),
            INIT_PRODUCER_ID_VERSION,
        );
        assert_eq!(
            i.transactional_id.map(|t| t.0.to_string()),
            Some("t".into())
        );
        assert_eq!(
            (i.transaction_timeout_ms, i.producer_id.0, i.producer_epoch),
            (60_000, 9, 3)
        );
        let i: InitProducerIdRequest = read_back(
            init_producer_id_request(None, 1, None),
            INIT_PRODUCER_ID_VERSION,
        );
        assert_eq!(
            (i.transactional_id, i.producer_id.0, i.producer_epoch),
            (None, -1, -1)
        );

        let a: AddPartitionsToTxnRequest = read_back(
            add_partitions_to_txn_request("t", PRODUCER, "state", 0),
            ADD_PARTITIONS_TO_TXN_VERSION,
        );
        assert_eq!(a.v3_and_below_transactional_id.0.as_str(), "t");
        assert_eq!(
            (a.v3_and_below_producer_id.0, a.v3_and_below_producer_epoch),
            (9, 3)
        );
        assert_eq!(a.v3_and_below_topics[0].name.0.as_str(), "state");
        assert_eq!(a.v3_and_below_topics[0].partitions, vec![0]);

        let p: ProduceRequest = read_back(
            produce_request(Some("t"), -1, 30_000, "state", 0, b(b"batch")),
            PRODUCE_VERSION,
        );
        assert_eq!(
            p.transactional_id.map(|t| t.0.to_string()),
            Some("t".into())
        );
        assert_eq!((p.acks, p.timeout_ms), (-1, 30_000));
        assert_eq!(p.topic_data[0].name.0.as_str(), "state");
        assert_eq!(p.topic_data[0].partition_data[0].index, 0);
        assert_eq!(p.topic_data[0].partition_data[0].records, Some(b(b"batch")));

        let e: EndTxnRequest = read_back(end_txn_request("t", PRODUCER, true), END_TXN_VERSION);
        assert_eq!(
            (
                e.transactional_id.0.as_str(),
                e.producer_id.0,
                e.producer_epoch,
                e.committed
            ),
            ("t", 9, 3, true)
        );

        let l: ListOffsetsRequest = read_back(
            list_offsets_request(READ_COMMITTED, "state", 0, LATEST_TIMESTAMP),
            LIST_OFFSETS_VERSION,
        );
        assert_eq!((l.replica_id.0, l.isolation_level), (-1, 1));
        assert_eq!(l.topics[0].name.0.as_str(), "state");
        let lp = &l.topics[0].partitions[0];
        assert_eq!(
            (lp.partition_index, lp.current_leader_epoch, lp.timestamp),
            (0, -1, -1)
        );

        let spec = FetchSpec {
            topic: "state",
            partition: 0,
            offset: 12,
            max_wait_ms: 500,
            min_bytes: 1,
            max_bytes: 4 << 20,
            isolation_level: READ_COMMITTED,
        };
        let f: FetchRequest = read_back(fetch_request(&spec), FETCH_VERSION);
        assert_eq!(
            (f.replica_id.0, f.max_wait_ms, f.min_bytes, f.max_bytes),
            (-1, 500, 1, 4 << 20)
        );
        assert_eq!(
            (
                f.isolation_level,
                f.session_id,
                f.session_epoch,
                f.rack_id.as_str()
            ),
            (1, 0, -1, "")
        );
        assert_eq!(f.topics[0].topic.0.as_str(), "state");
        let fp = &f.topics[0].partitions[0];
        assert_eq!(
            (
                fp.partition,
                fp.fetch_offset,
                fp.partition_max_bytes,
                fp.current_leader_epoch,
                fp.log_start_offset
            ),
            (0, 12, 4 << 20, -1, -1)
        );
    }

    /// Moves a batch to `offset`, as the broker does on append (the base
    /// offset is outside the CRC).
    fn at_offset(batch: &Bytes, offset: i64) -> Vec<u8> {
        let mut v = batch.to_vec();
        v[..8].copy_from_slice(&offset.to_be_bytes());
        v
    }

    /// Recomputes the CRC of the single batch in `v` after an edit.
    fn reseal(v: &mut [u8]) {
        let crc = crc32c(&v[21..]);
        v[17..21].copy_from_slice(&crc.to_be_bytes());
    }

    fn sample_records() -> Vec<(Option<Bytes>, Option<Bytes>)> {
        vec![
            (Some(b(b"k1")), Some(b(b"v1"))),
            (Some(b(b"k2")), None),
            (None, Some(b(b"v3"))),
        ]
    }

    #[test]
    fn batches_round_trip() {
        let batch = encode_batch(Some(PRODUCER), 5, true, 1_000, &sample_records());
        let info = RecordBatchDecoder::decode_batch_info(&mut batch.clone()).unwrap();
        assert_eq!(info.len(), 1, "one batch, not one per record");
        assert_eq!((info[0].base_sequence, info[0].record_count), (5, 3));

        let moved = Bytes::from(at_offset(&batch, 100));
        let decoded = decode_batches(&moved).unwrap();
        let expected: Vec<LogRecord> = sample_records()
            .into_iter()
            .enumerate()
            .map(|(i, (key, value))| LogRecord {
                offset: 100 + i as i64,
                timestamp: 1_000,
                key,
                value,
            })
            .collect();
        assert_eq!(
            decoded,
            vec![Batch {
                base_offset: 100,
                last_offset: 102,
                producer_id: 9,
                producer_epoch: 3,
                transactional: true,
                control: None,
                records: expected,
            }]
        );

        let plain = decode_batches(&encode_batch(None, -1, false, 7, &sample_records())).unwrap();
        assert_eq!(
            (
                plain[0].producer_id,
                plain[0].producer_epoch,
                plain[0].transactional
            ),
            (-1, -1, false)
        );
        assert!(encode_batch(None, -1, false, 0, &[]).is_empty());
    }

    fn control_batch(offset: i64, kind: u8) -> Bytes {
        let record = Record {
            transactional: true,
            control: true,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: 9,
            producer_epoch: 3,
            timestamp_type: TimestampType::Creation,
            offset,
            sequence: -1,
            timestamp: 5,
            key: Some(Bytes::from(vec![0, 0, 0, kind])),
            value: Some(b(&[0, 0, 0, 0, 0, 0])),
            headers: Default::default(),
        };
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        };
        RecordBatchEncoder::encode(&mut buf, [&record], &options).unwrap();
        buf.freeze()
    }

    #[test]
    fn control_batches_say_their_type() {
        let commit = &decode_batches(&control_batch(10, 1)).unwrap()[0];
        assert_eq!(
            (commit.control, commit.records.len()),
            (Some(ControlType::Commit), 0)
        );
        assert_eq!(
            (commit.base_offset, commit.last_offset, commit.producer_id),
            (10, 10, 9)
        );
        let abort = &decode_batches(&control_batch(11, 0)).unwrap()[0];
        assert_eq!(abort.control, Some(ControlType::Abort));
    }

    #[test]
    fn batches_back_to_back_and_a_cut_last_one() {
        let first = encode_batch(Some(PRODUCER), 0, true, 1, &sample_records());
        let second = encode_batch(Some(PRODUCER), 3, true, 2, &[(Some(b(b"k")), None)]);
        let mut both = first.to_vec();
        both.extend(at_offset(&second, 3));
        let both = Bytes::from(both);
        let decoded = decode_batches(&both).unwrap();
        assert_eq!(decoded.len(), 2);
        assert_eq!(
            (decoded[1].base_offset, decoded[1].records[0].offset),
            (3, 3)
        );
        // Every cut inside the second batch leaves the first one whole.
        for cut in first.len()..both.len() {
            let part = both.slice(..cut);
            assert_eq!(decode_batches(&part).unwrap().len(), 1, "cut at {cut}");
        }
        for cut in 0..first.len() {
            assert_eq!(
                decode_batches(&first.slice(..cut)),
                Ok(vec![]),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn old_compressed_or_corrupt_batches_are_refused() {
        let batch = encode_batch(Some(PRODUCER), 0, false, 1, &sample_records());
        let mut old = batch.to_vec();
        old[16] = 1;
        let e = decode_batches(&Bytes::from(old)).unwrap_err();
        assert!(e.to_string().contains("magic 1"), "{e}");

        let mut gzip = batch.to_vec();
        gzip[22] |= 1;
        reseal(&mut gzip);
        let e = decode_batches(&Bytes::from(gzip)).unwrap_err();
        assert!(e.to_string().contains("compressed"), "{e}");

        let mut flipped = batch.to_vec();
        let last = flipped.len() - 1;
        flipped[last] ^= 0x40;
        let e = decode_batches(&Bytes::from(flipped)).unwrap_err();
        assert!(e.to_string().contains("CRC"), "{e}");
    }

    #[test]
    fn huge_counts_are_errors_not_allocations() {
        // throttle, then a compact array length of 2^31 elements
        let claim = [0, 0, 0, 0, 0x81, 0x80, 0x80, 0x80, 0x08, 0, 0, 0];
        assert!(matches!(
            decode_metadata(&claim),
            Err(CodecError::InvalidLength { .. })
        ));
        assert!(matches!(
            decode_create_topics(&claim),
            Err(CodecError::InvalidLength { .. })
        ));
        assert!(matches!(
            decode_produce(&claim[4..]),
            Err(CodecError::InvalidLength { .. })
        ));
        let mut fetch = vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        fetch.extend_from_slice(&claim[4..]);
        assert!(matches!(
            decode_fetch(&Bytes::from(fetch)),
            Err(CodecError::InvalidLength { .. })
        ));

        let mut batch = encode_batch(Some(PRODUCER), 0, false, 1, &sample_records()).to_vec();
        batch[57..61].copy_from_slice(&i32::MAX.to_be_bytes());
        reseal(&mut batch);
        assert!(matches!(
            decode_batches(&Bytes::from(batch)),
            Err(CodecError::InvalidLength { .. })
        ));
    }

    /// Runs every decoder on `body`; each must return, not panic.
    fn decode_all(body: &Bytes) {
        let _ = decode_metadata(body);
        let _ = decode_create_topics(body);
        let _ = decode_find_coordinator(body);
        let _ = decode_init_producer_id(body);
        let _ = decode_add_partitions_to_txn(body);
        let _ = decode_produce(body);
        let _ = decode_end_txn(body);
        let _ = decode_list_offsets(body);
        let _ = decode_fetch(body);
        let _ = decode_batches(body);
    }

    fn samples() -> Vec<Bytes> {
        vec![
            metadata_sample(),
            create_topics_sample(),
            find_coordinator_sample(),
            init_producer_id_sample(),
            add_partitions_sample(&[0, 47]),
            produce_sample(),
            end_txn_sample(),
            list_offsets_sample(),
            fetch_sample(encode_batch(Some(PRODUCER), 0, true, 1, &sample_records())),
        ]
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
            decode_all(&Bytes::from(body));
        }

        #[test]
        fn edited_responses_never_panic(
            which in 0usize..9,
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut body = samples()[which].to_vec();
            for (at, byte) in edits {
                let i = at.index(body.len());
                body[i] = byte;
            }
            let keep = cut.index(body.len() + 1);
            body.truncate(keep.max(body.len() / 2));
            decode_all(&Bytes::from(body));
        }

        /// Edits behind a valid CRC reach the record parser.
        #[test]
        fn edited_batches_never_panic(
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        ) {
            let mut batch = encode_batch(Some(PRODUCER), 0, true, 1, &sample_records()).to_vec();
            let tail = batch.len() - 21;
            for (at, byte) in edits {
                batch[21 + at.index(tail)] = byte;
            }
            reseal(&mut batch);
            let _ = decode_batches(&Bytes::from(batch));
        }
    }
}

/// The producer sequence after `n` more records: Kafka wraps it to 0 past
/// i32::MAX, not to i32::MIN.
pub fn next_sequence(sequence: i32, n: usize) -> i32 {
    ((i64::from(sequence) + n as i64) % (i64::from(i32::MAX) + 1)) as i32
}
