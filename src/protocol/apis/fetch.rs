//! Fetch (key 1): reading the state topic.

use super::*;
use crate::protocol::{CodecError, Reader};
use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest};
use kafka_protocol::protocol::StrBytes;

pub const FETCH_VERSION: i16 = 12;

pub const READ_UNCOMMITTED: i8 = 0;

pub const READ_COMMITTED: i8 = 1;

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
