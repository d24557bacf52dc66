//! ListOffsets (key 2): the state topic's log end and start.

use super::*;
use crate::protocol::{CodecError, Reader};
use bytes::Bytes;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{BrokerId, ListOffsetsRequest};

pub const LIST_OFFSETS_VERSION: i16 = 7;

pub const LATEST_TIMESTAMP: i64 = -1;

pub const EARLIEST_TIMESTAMP: i64 = -2;

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
