//! Produce (key 0): record batches appended to the state topic.

use super::*;
use crate::protocol::{CodecError, Reader};
use bytes::Bytes;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{ProduceRequest, TransactionalId};

pub const PRODUCE_VERSION: i16 = 9;

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
