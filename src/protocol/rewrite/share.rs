//! ShareFetch (key 78) and ShareAcknowledge (key 79), v1-v2 (KIP-932; v0 was the
//! early-access layout of Kafka 4.0 and is gone from 4.1). Both end with a plain,
//! untagged NodeEndpoints array; the walk stops after it and the tagged fields
//! that follow are copied unread. Records are skipped by length. v2 (Kafka 4.4,
//! KIP-1206 and KIP-1222) changed ShareFetch only in its request, and added
//! AcquisitionLockTimeoutMs to ShareAcknowledge's response.

use super::walk::{Stop, Walk};

/// TopicId, Partitions, tags.
const MIN_TOPIC: usize = 16 + 1 + 1;

/// LeaderId, LeaderEpoch, tags: CurrentLeader, an inline struct.
const CURRENT_LEADER: usize = 4 + 4 + 1;

/// PartitionIndex, ErrorCode, ErrorMessage, AcknowledgeErrorCode,
/// AcknowledgeErrorMessage, CurrentLeader, Records, AcquiredRecords, tags.
const MIN_FETCH_PARTITION: usize = 4 + 2 + 1 + 2 + 1 + CURRENT_LEADER + 1 + 1 + 1;

/// FirstOffset, LastOffset, DeliveryCount, tags.
const MIN_ACQUIRED_RECORDS: usize = 8 + 8 + 2 + 1;

/// PartitionIndex, ErrorCode, ErrorMessage, CurrentLeader, tags.
const MIN_ACKNOWLEDGE_PARTITION: usize = 4 + 2 + 1 + CURRENT_LEADER + 1;

pub(super) fn walk_fetch(_version: i16, w: &mut Walk<'_>) -> Result<(), Stop> {
    w.skip(4 + 2, "throttle_time_ms, error_code")?;
    w.string("error_message")?;
    w.skip(4, "acquisition_lock_timeout_ms")?;
    for _ in 0..w.array(MIN_TOPIC, "responses")? {
        w.skip(16, "topic_id")?;
        for _ in 0..w.array(MIN_FETCH_PARTITION, "partitions")? {
            w.skip(4 + 2, "partition_index, error_code")?;
            w.string("error_message")?;
            w.skip(2, "acknowledge_error_code")?;
            w.string("acknowledge_error_message")?;
            current_leader(w)?;
            w.bytes("records")?;
            for _ in 0..w.array(MIN_ACQUIRED_RECORDS, "acquired_records")? {
                w.skip(8 + 8 + 2, "acquired records")?;
                w.tagged_fields("acquired records")?;
            }
            w.tagged_fields("partition")?;
        }
        w.tagged_fields("topic")?;
    }
    w.node_endpoints()
}

pub(super) fn walk_acknowledge(version: i16, w: &mut Walk<'_>) -> Result<(), Stop> {
    w.skip(4 + 2, "throttle_time_ms, error_code")?;
    w.string("error_message")?;
    if version >= 2 {
        w.skip(4, "acquisition_lock_timeout_ms")?;
    }
    for _ in 0..w.array(MIN_TOPIC, "responses")? {
        w.skip(16, "topic_id")?;
        for _ in 0..w.array(MIN_ACKNOWLEDGE_PARTITION, "partitions")? {
            w.skip(4 + 2, "partition_index, error_code")?;
            w.string("error_message")?;
            current_leader(w)?;
            w.tagged_fields("partition")?;
        }
        w.tagged_fields("topic")?;
    }
    w.node_endpoints()
}

fn current_leader(w: &mut Walk<'_>) -> Result<(), Stop> {
    w.skip(4 + 4, "current_leader")?;
    w.tagged_fields("current_leader")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::rewrite::rewrite_body;
    use crate::protocol::rewrite::testing::*;
    use kafka_protocol::messages::{
        share_acknowledge_response as ack, share_fetch_response as fetch,
    };
    use kafka_protocol::messages::{
        ApiKey, BrokerId, ShareAcknowledgeResponse, ShareFetchResponse,
    };
    use rand::rngs::StdRng;
    use rand::Rng;

    const VERSION: i16 = 1;

    macro_rules! random_endpoints {
        ($rng:expr, $endpoint:ty) => {
            (0..$rng.gen_range(0..5))
                .map(|_| {
                    <$endpoint>::default()
                        .with_node_id(BrokerId(node_id($rng)))
                        .with_host(string($rng))
                        .with_port($rng.gen())
                        .with_rack(nullable_string($rng))
                        .with_unknown_tagged_fields(unknown_tags($rng, 0))
                })
                .collect()
        };
    }

    fn random_fetch(rng: &mut StdRng) -> ShareFetchResponse {
        let responses = (0..rng.gen_range(0..4))
            .map(|_| {
                let partitions = (0..rng.gen_range(0..4))
                    .map(|_| {
                        let acquired = (0..rng.gen_range(0..3))
                            .map(|_| {
                                fetch::AcquiredRecords::default()
                                    .with_first_offset(rng.gen())
                                    .with_last_offset(rng.gen())
                                    .with_delivery_count(rng.gen())
                                    .with_unknown_tagged_fields(unknown_tags(rng, 0))
                            })
                            .collect();
                        fetch::PartitionData::default()
                            .with_partition_index(rng.gen())
                            .with_error_code(rng.gen())
                            .with_error_message(nullable_string(rng))
                            .with_acknowledge_error_code(rng.gen())
                            .with_acknowledge_error_message(nullable_string(rng))
                            .with_current_leader(
                                fetch::LeaderIdAndEpoch::default()
                                    .with_leader_id(node_id(rng))
                                    .with_leader_epoch(rng.gen())
                                    .with_unknown_tagged_fields(unknown_tags(rng, 0)),
                            )
                            .with_records(rng.gen_bool(0.7).then(|| bytes(rng, 600)))
                            .with_acquired_records(acquired)
                            .with_unknown_tagged_fields(unknown_tags(rng, 0))
                    })
                    .collect();
                fetch::ShareFetchableTopicResponse::default()
                    .with_topic_id(uuid::Uuid::from_u128(rng.gen()))
                    .with_partitions(partitions)
                    .with_unknown_tagged_fields(unknown_tags(rng, 0))
            })
            .collect();
        ShareFetchResponse::default()
            .with_throttle_time_ms(rng.gen())
            .with_error_code(rng.gen())
            .with_error_message(nullable_string(rng))
            .with_acquisition_lock_timeout_ms(rng.gen())
            .with_responses(responses)
            .with_node_endpoints(random_endpoints!(rng, fetch::NodeEndpoint))
            .with_unknown_tagged_fields(unknown_tags(rng, 0))
    }

    fn random_acknowledge(rng: &mut StdRng) -> ShareAcknowledgeResponse {
        let responses = (0..rng.gen_range(0..4))
            .map(|_| {
                let partitions = (0..rng.gen_range(0..4))
                    .map(|_| {
                        ack::PartitionData::default()
                            .with_partition_index(rng.gen())
                            .with_error_code(rng.gen())
                            .with_error_message(nullable_string(rng))
                            .with_current_leader(
                                ack::LeaderIdAndEpoch::default()
                                    .with_leader_id(node_id(rng))
                                    .with_leader_epoch(rng.gen())
                                    .with_unknown_tagged_fields(unknown_tags(rng, 0)),
                            )
                            .with_unknown_tagged_fields(unknown_tags(rng, 0))
                    })
                    .collect();
                ack::ShareAcknowledgeTopicResponse::default()
                    .with_topic_id(uuid::Uuid::from_u128(rng.gen()))
                    .with_partitions(partitions)
                    .with_unknown_tagged_fields(unknown_tags(rng, 0))
            })
            .collect();
        ShareAcknowledgeResponse::default()
            .with_throttle_time_ms(rng.gen())
            .with_error_code(rng.gen())
            .with_error_message(nullable_string(rng))
            .with_responses(responses)
            .with_node_endpoints(random_endpoints!(rng, ack::NodeEndpoint))
            .with_unknown_tagged_fields(unknown_tags(rng, 0))
    }

    #[test]
    fn rewrites_share_fetch_as_kafka_protocol_reads_it() {
        let mut rng = rng(78);
        for _ in 0..300 {
            let response = random_fetch(&mut rng);
            assert_rewrites(ApiKey::ShareFetch, VERSION, &response, |r, moves| {
                for e in &mut r.node_endpoints {
                    moves.address(e.node_id.0, &mut e.host, &mut e.port);
                }
            });
        }
    }

    #[test]
    fn rewrites_share_acknowledge_as_kafka_protocol_reads_it() {
        let mut rng = rng(79);
        for _ in 0..300 {
            let response = random_acknowledge(&mut rng);
            assert_rewrites(ApiKey::ShareAcknowledge, VERSION, &response, |r, moves| {
                for e in &mut r.node_endpoints {
                    moves.address(e.node_id.0, &mut e.host, &mut e.port);
                }
            });
        }
    }

    #[test]
    fn without_node_endpoints_nothing_is_copied() {
        let mut rng = rng(80);
        for _ in 0..20 {
            let fetch_body = encode(&random_fetch(&mut rng).with_node_endpoints(vec![]), VERSION);
            let ack_body = encode(
                &random_acknowledge(&mut rng).with_node_endpoints(vec![]),
                VERSION,
            );
            let book = TestBook::default();
            assert_eq!(
                rewrite_body(ApiKey::ShareFetch, VERSION, &fetch_body, &book).unwrap(),
                None
            );
            assert_eq!(
                rewrite_body(ApiKey::ShareAcknowledge, VERSION, &ack_body, &book).unwrap(),
                None
            );
        }
    }

    #[test]
    fn minimum_sizes_are_those_of_empty_entries() {
        let fetch_topic = fetch::ShareFetchableTopicResponse::default();
        assert_eq!(encode(&fetch_topic, VERSION).len(), MIN_TOPIC);
        let ack_topic = ack::ShareAcknowledgeTopicResponse::default();
        assert_eq!(encode(&ack_topic, VERSION).len(), MIN_TOPIC);
        let fetch_partition = fetch::PartitionData::default()
            .with_error_message(None)
            .with_acknowledge_error_message(None)
            .with_records(None);
        assert_eq!(encode(&fetch_partition, VERSION).len(), MIN_FETCH_PARTITION);
        let acquired = fetch::AcquiredRecords::default();
        assert_eq!(encode(&acquired, VERSION).len(), MIN_ACQUIRED_RECORDS);
        let ack_partition = ack::PartitionData::default().with_error_message(None);
        assert_eq!(
            encode(&ack_partition, VERSION).len(),
            MIN_ACKNOWLEDGE_PARTITION
        );
    }

    #[test]
    fn survives_truncation_and_corruption() {
        let mut rng = rng(81);
        for _ in 0..8 {
            let body = encode(&random_fetch(&mut rng), VERSION);
            assert_survives_corruption(ApiKey::ShareFetch, VERSION, &body, &mut rng);
            let body = encode(&random_acknowledge(&mut rng), VERSION);
            assert_survives_corruption(ApiKey::ShareAcknowledge, VERSION, &body, &mut rng);
        }
    }

    #[test]
    fn huge_counts_are_refused() {
        // throttle, error code, null message, lock timeout
        assert_huge_count_refused(ApiKey::ShareFetch, VERSION, true, &[0; 11]);
        // throttle, error code, null message
        assert_huge_count_refused(ApiKey::ShareAcknowledge, VERSION, true, &[0; 7]);
        // ... and no topics, then NodeEndpoints claiming 2^31 entries.
        assert_huge_count_refused(
            ApiKey::ShareFetch,
            VERSION,
            true,
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        );
        assert_huge_count_refused(
            ApiKey::ShareAcknowledge,
            VERSION,
            true,
            &[0, 0, 0, 0, 0, 0, 0, 1],
        );
    }

    /// v2 bodies built from v1 ones (kafka-protocol 0.18 encodes v1 only):
    /// ShareFetch's is the same, ShareAcknowledge's has AcquisitionLockTimeoutMs
    /// after ErrorMessage. Each rewrites as its v1 body does.
    #[test]
    fn v2_rewrites_as_v1() {
        let mut rng = rng(82);
        let book = TestBook::default();
        for _ in 0..50 {
            let fetch_v1 = encode(&random_fetch(&mut rng), VERSION);
            assert_eq!(
                rewrite_body(ApiKey::ShareFetch, 2, &fetch_v1, &book).unwrap(),
                rewrite_body(ApiKey::ShareFetch, 1, &fetch_v1, &book).unwrap()
            );
            let ack_v1 = encode(
                &random_acknowledge(&mut rng).with_error_message(None),
                VERSION,
            );
            // throttle time, error code, a null compact string: 7 bytes.
            let lock_timeout = [0, 0, 0x75, 0x30];
            let splice = |body: &[u8]| {
                let mut v2 = body[..7].to_vec();
                v2.extend_from_slice(&lock_timeout);
                v2.extend_from_slice(&body[7..]);
                bytes::Bytes::from(v2)
            };
            let ack_v2 = splice(&ack_v1);
            let v1 = rewrite_body(ApiKey::ShareAcknowledge, 1, &ack_v1, &book).unwrap();
            let v2 = rewrite_body(ApiKey::ShareAcknowledge, 2, &ack_v2, &book).unwrap();
            assert_eq!(v2, v1.map(|b| splice(&b)));
        }
    }
}
