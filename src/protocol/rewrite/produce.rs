//! Produce (key 0), v3-v13. From v10 on (KIP-951), a response whose partitions
//! moved carries NodeEndpoints, the new leaders' addresses, as tag 0 of the
//! top-level tagged fields, after every partition. Earlier versions name no
//! address. Tag 0 of a partition's tagged fields is its CurrentLeader (id and
//! epoch only) and is left alone.

use super::walk::{Stop, Walk};

const NODE_ENDPOINTS_SINCE: i16 = 10;
const NODE_ENDPOINTS_TAG: u32 = 0;

/// Name (v12 and before) or TopicId (v13), PartitionResponses, tags.
fn min_topic(version: i16) -> usize {
    let id = if version >= 13 { 16 } else { 1 };
    id + 1 + 1
}

/// Index, ErrorCode, BaseOffset, LogAppendTimeMs, LogStartOffset, RecordErrors,
/// ErrorMessage, tags.
const MIN_PARTITION: usize = 4 + 2 + 8 + 8 + 8 + 1 + 1 + 1;

/// BatchIndex, BatchIndexErrorMessage, tags.
const MIN_RECORD_ERROR: usize = 4 + 1 + 1;

/// Walks only versions that may carry NodeEndpoints, which are all flexible.
pub(super) fn walk(version: i16, w: &mut Walk<'_>) -> Result<(), Stop> {
    if version < NODE_ENDPOINTS_SINCE {
        return Ok(());
    }
    for _ in 0..w.array(min_topic(version), "responses")? {
        if version >= 13 {
            w.skip(16, "topic_id")?;
        } else {
            w.string("name")?;
        }
        for _ in 0..w.array(MIN_PARTITION, "partition_responses")? {
            w.skip(4 + 2 + 8 + 8 + 8, "partition offsets")?;
            for _ in 0..w.array(MIN_RECORD_ERROR, "record_errors")? {
                w.skip(4, "batch_index")?;
                w.string("batch_index_error_message")?;
                w.tagged_fields("record error")?;
            }
            w.string("error_message")?;
            w.tagged_fields("partition")?;
        }
        w.tagged_fields("topic")?;
    }
    w.skip(4, "throttle_time_ms")?;
    w.tagged_fields_with_node_endpoints(NODE_ENDPOINTS_TAG)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::rewrite::rewrite_body;
    use crate::protocol::rewrite::testing::*;
    use kafka_protocol::messages::produce_response::{
        BatchIndexAndErrorMessage, LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse,
        TopicProduceResponse,
    };
    use kafka_protocol::messages::{ApiKey, BrokerId, ProduceResponse, TopicName};
    use rand::rngs::StdRng;
    use rand::Rng;

    const API: ApiKey = ApiKey::Produce;
    const VERSIONS: std::ops::RangeInclusive<i16> = 3..=13;

    fn random_partition(rng: &mut StdRng, version: i16) -> PartitionProduceResponse {
        let mut partition = PartitionProduceResponse::default()
            .with_index(rng.gen())
            .with_error_code(rng.gen())
            .with_base_offset(rng.gen())
            .with_log_append_time_ms(rng.gen())
            .with_log_start_offset(rng.gen())
            .with_error_message(nullable_string(rng))
            .with_unknown_tagged_fields(unknown_tags(rng, 1));
        if version >= 8 {
            partition.record_errors = (0..rng.gen_range(0..3))
                .map(|_| {
                    BatchIndexAndErrorMessage::default()
                        .with_batch_index(rng.gen())
                        .with_batch_index_error_message(nullable_string(rng))
                        .with_unknown_tagged_fields(unknown_tags(rng, 0))
                })
                .collect();
        }
        if version >= 10 && rng.gen() {
            partition.current_leader = LeaderIdAndEpoch::default()
                .with_leader_id(BrokerId(node_id(rng)))
                .with_leader_epoch(rng.gen())
                .with_unknown_tagged_fields(unknown_tags(rng, 0));
        }
        partition
    }

    fn random_response(rng: &mut StdRng, version: i16, endpoints: bool) -> ProduceResponse {
        let responses = (0..rng.gen_range(0..4))
            .map(|_| {
                TopicProduceResponse::default()
                    .with_name(TopicName(string(rng)))
                    .with_topic_id(uuid::Uuid::from_u128(rng.gen()))
                    .with_partition_responses(
                        (0..rng.gen_range(0..4))
                            .map(|_| random_partition(rng, version))
                            .collect(),
                    )
                    .with_unknown_tagged_fields(unknown_tags(rng, 0))
            })
            .collect();
        let mut response = ProduceResponse::default()
            .with_responses(responses)
            .with_throttle_time_ms(rng.gen())
            .with_unknown_tagged_fields(unknown_tags(rng, 1));
        if endpoints && version >= NODE_ENDPOINTS_SINCE {
            response.node_endpoints = (0..rng.gen_range(1..5))
                .map(|_| {
                    NodeEndpoint::default()
                        .with_node_id(BrokerId(node_id(rng)))
                        .with_host(string(rng))
                        .with_port(rng.gen())
                        .with_rack(nullable_string(rng))
                        .with_unknown_tagged_fields(unknown_tags(rng, 0))
                })
                .collect();
        }
        response
    }

    fn expect(response: &mut ProduceResponse, moves: &mut Expected) {
        for e in &mut response.node_endpoints {
            moves.address(e.node_id.0, &mut e.host, &mut e.port);
        }
    }

    #[test]
    fn rewrites_every_version_as_kafka_protocol_reads_it() {
        let mut rng = rng(0);
        for version in VERSIONS {
            for _ in 0..60 {
                let endpoints = rng.gen_bool(0.7);
                let response = random_response(&mut rng, version, endpoints);
                assert_rewrites(API, version, &response, expect);
            }
        }
    }

    #[test]
    fn without_node_endpoints_nothing_is_copied() {
        let mut rng = rng(1);
        for version in VERSIONS {
            for _ in 0..20 {
                let body = encode(&random_response(&mut rng, version, false), version);
                let book = TestBook::default();
                assert_eq!(rewrite_body(API, version, &body, &book).unwrap(), None);
                assert!(book.asked.borrow().is_empty());
            }
        }
    }

    #[test]
    fn minimum_sizes_are_those_of_empty_entries() {
        for version in NODE_ENDPOINTS_SINCE..=13 {
            let topic = TopicProduceResponse::default();
            assert_eq!(encode(&topic, version).len(), min_topic(version));
            let partition = PartitionProduceResponse::default().with_error_message(None);
            assert_eq!(encode(&partition, version).len(), MIN_PARTITION);
            let error = BatchIndexAndErrorMessage::default();
            assert_eq!(encode(&error, version).len(), MIN_RECORD_ERROR);
        }
    }

    #[test]
    fn survives_truncation_and_corruption() {
        let mut rng = rng(2);
        for version in NODE_ENDPOINTS_SINCE..=13 {
            for _ in 0..6 {
                let body = encode(&random_response(&mut rng, version, true), version);
                assert_survives_corruption(API, version, &body, &mut rng);
            }
        }
    }

    #[test]
    fn huge_counts_are_refused() {
        for version in NODE_ENDPOINTS_SINCE..=13 {
            assert_huge_count_refused(API, version, true, &[]);
            // No topics, throttle, then one tagged field (tag 0, 40 bytes) whose
            // NodeEndpoints claim 2^31 entries.
            let mut body = vec![1, 0, 0, 0, 0, 1, 0, 40];
            crate::protocol::wire::put_uvarint(&mut body, (1 << 31) + 1);
            body.resize(8 + 40, 0);
            let result = rewrite_body(API, version, &body.into(), &TestBook::default());
            assert!(result.is_err(), "v{version}: {result:?}");
        }
    }
}
