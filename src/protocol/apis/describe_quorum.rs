//! DescribeQuorum (key 55): the metadata log's high watermark, which an upgrade
//! audit waits for the brokers it reads to have applied.

use super::*;
use crate::protocol::{CodecError, Reader};
use bytes::Bytes;
use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
use kafka_protocol::messages::DescribeQuorumRequest;

/// v0: every KRaft release serves it, and it carries the high watermark.
pub const DESCRIBE_QUORUM_VERSION: i16 = 0;

/// KRaft's metadata log: one topic, one partition.
pub const METADATA_TOPIC: &str = "__cluster_metadata";

pub fn describe_quorum_request() -> Bytes {
    let req = DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
        .with_topic_name(topic_name(METADATA_TOPIC))
        .with_partitions(vec![PartitionData::default().with_partition_index(0)])]);
    encode(&req, DESCRIBE_QUORUM_VERSION, "DescribeQuorum")
}

/// What a v0 answer says of the metadata partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuorumState {
    /// The top-level error code, else the partition's.
    pub error_code: i16,
    /// The first offset not yet committed: every record below it is.
    pub high_watermark: i64,
}

pub fn decode_describe_quorum(body: &[u8]) -> Result<QuorumState, CodecError> {
    let mut r = Reader::new(body);
    let top_error = r.i16("error_code")?;
    let mut first = None;
    // name, partitions, tags
    for _ in 0..count(&mut r, 3, "topics")? {
        string(&mut r, "topic name")?;
        // index, error, leader, epoch, high watermark, voters, observers, tags
        for _ in 0..count(&mut r, 25, "partitions")? {
            r.i32("partition_index")?;
            let error_code = r.i16("partition error_code")?;
            r.i32("leader_id")?;
            r.i32("leader_epoch")?;
            let high_watermark = r.i64("high_watermark")?;
            for what in ["current_voters", "observers"] {
                // id, log end offset, tags
                for _ in 0..count(&mut r, 13, what)? {
                    r.i32("replica_id")?;
                    r.i64("log_end_offset")?;
                    skip_tags(&mut r, "replica tags")?;
                }
            }
            skip_tags(&mut r, "partition tags")?;
            first.get_or_insert(QuorumState {
                error_code: if top_error != 0 {
                    top_error
                } else {
                    error_code
                },
                high_watermark,
            });
        }
        skip_tags(&mut r, "topic tags")?;
    }
    finish(r, "DescribeQuorum response")?;
    match first {
        Some(state) => Ok(state),
        // A refused request (no DESCRIBE on the cluster) may carry no topic.
        None if top_error != 0 => Ok(QuorumState {
            error_code: top_error,
            high_watermark: -1,
        }),
        None => Err(missing("DescribeQuorum")),
    }
}
