//! Fetch (key 1), v4-v18. From v16 on (KIP-951), a response whose partitions moved
//! carries NodeEndpoints, the new leaders' addresses, as tag 0 of the top-level
//! tagged fields, after every partition. Earlier versions name no address.
//!
//! Bodies can be megabytes of records, so the walk skips each record set by its
//! length and never looks inside; without NodeEndpoints it allocates nothing.
//! Tags 0-2 of a partition (DivergingEpoch, CurrentLeader, SnapshotId) hold no
//! address and are left alone.

use super::walk::{Stop, Walk};

pub(super) const NODE_ENDPOINTS_SINCE: i16 = 16;
pub(super) const NODE_ENDPOINTS_TAG: u32 = 0;

/// TopicId, Partitions, tags.
const MIN_TOPIC: usize = 16 + 1 + 1;

/// PartitionIndex, ErrorCode, HighWatermark, LastStableOffset, LogStartOffset,
/// AbortedTransactions, PreferredReadReplica, Records, tags.
const MIN_PARTITION: usize = 4 + 2 + 8 + 8 + 8 + 1 + 4 + 1 + 1;

/// ProducerId, FirstOffset, tags.
const MIN_ABORTED_TRANSACTION: usize = 8 + 8 + 1;

/// Walks only versions that may carry NodeEndpoints; v16-v18 share one layout.
pub(super) fn walk(version: i16, w: &mut Walk<'_>) -> Result<(), Stop> {
    if version < NODE_ENDPOINTS_SINCE {
        return Ok(());
    }
    w.skip(4 + 2 + 4, "throttle_time_ms, error_code, session_id")?;
    for _ in 0..w.array(MIN_TOPIC, "responses")? {
        w.skip(16, "topic_id")?;
        for _ in 0..w.array(MIN_PARTITION, "partitions")? {
            w.skip(4 + 2 + 8 + 8 + 8, "partition offsets")?;
            for _ in 0..w.array(MIN_ABORTED_TRANSACTION, "aborted_transactions")? {
                w.skip(8 + 8, "aborted transaction")?;
                w.tagged_fields("aborted transaction")?;
            }
            w.skip(4, "preferred_read_replica")?;
            w.bytes("records")?;
            w.tagged_fields("partition")?;
        }
        w.tagged_fields("topic")?;
    }
    w.tagged_fields_with_node_endpoints(NODE_ENDPOINTS_TAG)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::rewrite::rewrite_body;
    use crate::protocol::rewrite::testing::*;
    use crate::protocol::rewrite::walk::MIN_NODE_ENDPOINT;
    use bytes::Bytes;
    use kafka_protocol::messages::fetch_response::{
        AbortedTransaction, EpochEndOffset, FetchableTopicResponse, LeaderIdAndEpoch, NodeEndpoint,
        PartitionData, SnapshotId,
    };
    use kafka_protocol::messages::{ApiKey, BrokerId, FetchResponse, ProducerId, TopicName};
    use kafka_protocol::protocol::StrBytes;
    use rand::rngs::StdRng;
    use rand::Rng;

    const API: ApiKey = ApiKey::Fetch;
    const VERSIONS: std::ops::RangeInclusive<i16> = 4..=18;

    fn random_partition(rng: &mut StdRng, version: i16) -> PartitionData {
        let aborted = (0..rng.gen_range(0..3))
            .map(|_| {
                AbortedTransaction::default()
                    .with_producer_id(ProducerId(rng.gen()))
                    .with_first_offset(rng.gen())
                    .with_unknown_tagged_fields(unknown_tags(rng, 0))
            })
            .collect();
        let mut partition = PartitionData::default()
            .with_partition_index(rng.gen())
            .with_error_code(rng.gen())
            .with_high_watermark(rng.gen())
            .with_last_stable_offset(rng.gen())
            .with_log_start_offset(rng.gen())
            .with_aborted_transactions(rng.gen_bool(0.7).then_some(aborted))
            .with_records(rng.gen_bool(0.7).then(|| bytes(rng, 600)))
            .with_unknown_tagged_fields(unknown_tags(rng, 3));
        if version >= 11 {
            partition.preferred_read_replica = BrokerId(node_id(rng));
        }
        if version >= 12 {
            if rng.gen() {
                partition.diverging_epoch = EpochEndOffset::default()
                    .with_epoch(rng.gen())
                    .with_end_offset(rng.gen());
            }
            if rng.gen() {
                partition.current_leader = LeaderIdAndEpoch::default()
                    .with_leader_id(BrokerId(node_id(rng)))
                    .with_leader_epoch(rng.gen());
            }
            if rng.gen() {
                partition.snapshot_id = SnapshotId::default()
                    .with_end_offset(rng.gen())
                    .with_epoch(rng.gen());
            }
        }
        partition
    }

    fn random_endpoints(rng: &mut StdRng) -> Vec<NodeEndpoint> {
        (0..rng.gen_range(1..5))
            .map(|_| {
                NodeEndpoint::default()
                    .with_node_id(BrokerId(node_id(rng)))
                    .with_host(string(rng))
                    .with_port(rng.gen())
                    .with_rack(nullable_string(rng))
                    .with_unknown_tagged_fields(unknown_tags(rng, 0))
            })
            .collect()
    }

    fn random_response(rng: &mut StdRng, version: i16, endpoints: bool) -> FetchResponse {
        let responses = (0..rng.gen_range(0..4))
            .map(|_| {
                FetchableTopicResponse::default()
                    .with_topic(TopicName(string(rng)))
                    .with_topic_id(uuid::Uuid::from_u128(rng.gen()))
                    .with_partitions(
                        (0..rng.gen_range(0..4))
                            .map(|_| random_partition(rng, version))
                            .collect(),
                    )
                    .with_unknown_tagged_fields(unknown_tags(rng, 0))
            })
            .collect();
        let mut response = FetchResponse::default()
            .with_throttle_time_ms(rng.gen())
            .with_error_code(rng.gen())
            .with_responses(responses)
            .with_unknown_tagged_fields(unknown_tags(rng, 1));
        if version >= 7 {
            response.session_id = rng.gen();
        }
        if endpoints && version >= NODE_ENDPOINTS_SINCE {
            response.node_endpoints = random_endpoints(rng);
        }
        response
    }

    fn expect(response: &mut FetchResponse, moves: &mut Expected) {
        for e in &mut response.node_endpoints {
            moves.address(e.node_id.0, &mut e.host, &mut e.port);
        }
    }

    #[test]
    fn rewrites_every_version_as_kafka_protocol_reads_it() {
        let mut rng = rng(16);
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
        let mut rng = rng(17);
        for version in VERSIONS {
            for _ in 0..20 {
                let body = encode(&random_response(&mut rng, version, false), version);
                let book = TestBook::default();
                assert_eq!(rewrite_body(API, version, &body, &book).unwrap(), None);
                assert!(book.asked.borrow().is_empty());
            }
        }
    }

    /// A few megabytes of records, skipped by length: the NodeEndpoints after them
    /// are found and rewritten, and the records arrive intact.
    #[test]
    fn records_are_skipped_not_read() {
        let records = Bytes::from(vec![0xab; 4 << 20]);
        let partition = PartitionData::default().with_records(Some(records.clone()));
        let mut response = FetchResponse::default()
            .with_responses(vec![FetchableTopicResponse::default()
                .with_partitions(vec![partition.clone(), partition])]);
        for version in NODE_ENDPOINTS_SINCE..=18 {
            let body = encode(&response, version);
            assert_eq!(
                rewrite_body(API, version, &body, &TestBook::default()).unwrap(),
                None
            );
        }
        response.node_endpoints = vec![NodeEndpoint::default()
            .with_node_id(BrokerId(2))
            .with_host(StrBytes::from_static_str("broker-2.internal"))
            .with_port(9092)];
        for version in NODE_ENDPOINTS_SINCE..=18 {
            assert_rewrites(API, version, &response, expect);
        }
    }

    /// A frame passed on while it arrives, in random pieces: the scanner never
    /// lets the top-level tagged fields go early, finds where they start, and
    /// the rewritten section keeps the frame's length, with NodeEndpoints
    /// rewritten, or left out where the new addresses would not fit.
    #[test]
    fn streamed_answers_keep_their_length_and_read_as_kafka_reads_them() {
        use crate::protocol::rewrite::{rewrite_fetch_tail, FetchTailScanner};
        let mut rng = rng(20);
        let (mut kept, mut dropped) = (0, 0);
        for version in NODE_ENDPOINTS_SINCE..=18 {
            for _ in 0..150 {
                let endpoints = rng.gen_bool(0.8);
                let response = random_response(&mut rng, version, endpoints);
                let body = encode(&response, version);
                // Response header v1: correlation id, no tagged fields.
                let mut frame = vec![0, 0, 0, 7, 0];
                frame.extend_from_slice(&body);
                let mut scanner = FetchTailScanner::default();
                let (mut taken, mut arrived) = (0, 0);
                while arrived < frame.len() {
                    arrived = (arrived + rng.gen_range(1..40)).min(frame.len());
                    let upto = scanner.feed(&frame[taken..arrived], taken).unwrap();
                    taken = taken.max(upto.min(arrived));
                }
                let tail_at = scanner.tail().expect("the tail is found");
                assert!(taken <= tail_at);
                let book = TestBook::default();
                let tail = &frame[tail_at..];
                let new_body = match rewrite_fetch_tail(version, tail, &book).unwrap() {
                    None => Bytes::copy_from_slice(&frame[5..]),
                    Some(new_tail) => {
                        assert_eq!(new_tail.len(), tail.len());
                        let mut out = frame[5..tail_at].to_vec();
                        out.extend_from_slice(&new_tail);
                        Bytes::from(out)
                    }
                };
                let mut got: FetchResponse = decode(&new_body, version);
                got.unknown_tagged_fields.remove(&127);
                let mut expected: FetchResponse = decode(&body, version);
                expect(&mut expected, &mut Expected::default());
                if got.node_endpoints.is_empty() && !expected.node_endpoints.is_empty() {
                    expected.node_endpoints.clear();
                    dropped += 1;
                } else if !expected.node_endpoints.is_empty() {
                    kept += 1;
                }
                assert_eq!(got, expected, "v{version}");
            }
        }
        // Both ways are taken: hosts shorter and longer than kshim's.
        assert!(kept > 20 && dropped > 20, "kept {kept}, dropped {dropped}");
    }

    #[test]
    fn a_streamed_scan_survives_any_bytes() {
        use crate::protocol::rewrite::FetchTailScanner;
        let mut rng = rng(21);
        for _ in 0..2000 {
            let len = rng.gen_range(0..200);
            let bytes: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            let mut scanner = FetchTailScanner::default();
            let _ = scanner.feed(&bytes, 0);
        }
    }

    #[test]
    fn minimum_sizes_are_those_of_empty_entries() {
        for version in NODE_ENDPOINTS_SINCE..=18 {
            let topic = FetchableTopicResponse::default();
            assert_eq!(encode(&topic, version).len(), MIN_TOPIC);
            let partition = PartitionData::default()
                .with_aborted_transactions(None)
                .with_records(None);
            assert_eq!(encode(&partition, version).len(), MIN_PARTITION);
            let aborted = AbortedTransaction::default();
            assert_eq!(encode(&aborted, version).len(), MIN_ABORTED_TRANSACTION);
            let endpoint = NodeEndpoint::default().with_rack(None);
            assert_eq!(encode(&endpoint, version).len(), MIN_NODE_ENDPOINT);
        }
    }

    #[test]
    fn survives_truncation_and_corruption() {
        let mut rng = rng(19);
        for version in NODE_ENDPOINTS_SINCE..=18 {
            for _ in 0..8 {
                let body = encode(&random_response(&mut rng, version, true), version);
                assert_survives_corruption(API, version, &body, &mut rng);
            }
        }
    }

    #[test]
    fn huge_counts_are_refused() {
        for version in NODE_ENDPOINTS_SINCE..=18 {
            assert_huge_count_refused(API, version, true, &[0; 10]);
            // throttle, error code, session id, one topic id with 2^31 partitions.
            let mut prefix = vec![0; 10];
            prefix.push(2);
            prefix.extend_from_slice(&[7; 16]);
            assert_huge_count_refused(API, version, true, &prefix);
        }
    }
}
