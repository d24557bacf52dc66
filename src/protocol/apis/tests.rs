use super::*;
use crate::protocol::records::tests::{b, reseal, sample_records, PRODUCER};
use crate::protocol::records::*;
use crate::protocol::CodecError;
use bytes::{Bytes, BytesMut};
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
    AddPartitionsToTxnRequest, BrokerId, CreateTopicsRequest, DescribeQuorumRequest, EndTxnRequest,
    FetchRequest, FindCoordinatorRequest, InitProducerIdRequest, ListOffsetsRequest,
    MetadataRequest, ProduceRequest, ProducerId,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnResponse, CreateTopicsResponse, DescribeQuorumResponse, EndTxnResponse,
    FetchResponse, FindCoordinatorResponse, InitProducerIdResponse, ListOffsetsResponse,
    MetadataResponse, ProduceResponse,
};
use kafka_protocol::protocol::Decodable;
use kafka_protocol::protocol::Encodable;
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
    let a = decode_metadata(METADATA_VERSION, &metadata_sample()).unwrap();
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
    let r = FindCoordinatorResponse::default().with_coordinators(vec![KafkaCoordinator::default()
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

fn describe_quorum_sample() -> Bytes {
    use kafka_protocol::messages::describe_quorum_response::{
        PartitionData, ReplicaState, TopicData,
    };
    let replica = |id: i32, end: i64| {
        ReplicaState::default()
            .with_replica_id(BrokerId(id))
            .with_log_end_offset(end)
    };
    let r = DescribeQuorumResponse::default().with_topics(vec![TopicData::default()
        .with_topic_name(topic_name(METADATA_TOPIC))
        .with_partitions(vec![PartitionData::default()
            .with_leader_id(BrokerId(3000))
            .with_leader_epoch(4)
            .with_high_watermark(1234)
            .with_current_voters(vec![replica(3000, 1234)])
            .with_observers(vec![replica(1, 1230), replica(2, 1234)])])]);
    wire(&r, DESCRIBE_QUORUM_VERSION)
}

#[test]
fn describe_quorum_decodes() {
    assert_eq!(
        decode_describe_quorum(&describe_quorum_sample()).unwrap(),
        QuorumState {
            error_code: 0,
            high_watermark: 1234
        }
    );
    // Refused (CLUSTER_AUTHORIZATION_FAILED) with no topic.
    let refused = wire(
        &DescribeQuorumResponse::default().with_error_code(31),
        DESCRIBE_QUORUM_VERSION,
    );
    assert_eq!(decode_describe_quorum(&refused).unwrap().error_code, 31);
    let empty = wire(&DescribeQuorumResponse::default(), DESCRIBE_QUORUM_VERSION);
    assert!(decode_describe_quorum(&empty).is_err());
    // The request reads back as kafka-protocol writes it.
    let request: DescribeQuorumRequest =
        read_back(describe_quorum_request(), DESCRIBE_QUORUM_VERSION);
    assert_eq!(request.topics[0].topic_name.0.as_str(), METADATA_TOPIC);
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
    let r = ListOffsetsResponse::default().with_topics(vec![ListOffsetsTopicResponse::default()
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
        decode_list_offsets(&wire(&ListOffsetsResponse::default(), LIST_OFFSETS_VERSION)).is_err()
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

#[test]
fn huge_counts_are_errors_not_allocations() {
    // throttle, then a compact array length of 2^31 elements
    let claim = [0, 0, 0, 0, 0x81, 0x80, 0x80, 0x80, 0x08, 0, 0, 0];
    assert!(matches!(
        decode_metadata(METADATA_VERSION, &claim),
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
    let _ = decode_metadata(METADATA_VERSION, body);
    let _ = decode_create_topics(body);
    let _ = decode_find_coordinator(body);
    let _ = decode_init_producer_id(body);
    let _ = decode_add_partitions_to_txn(body);
    let _ = decode_produce(body);
    let _ = decode_end_txn(body);
    let _ = decode_list_offsets(body);
    let _ = decode_describe_quorum(body);
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
        describe_quorum_sample(),
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
        which in 0usize..10,
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
