//! AddPartitionsToTxn (key 24): the state topic's partition joins a
//! transaction.

use super::*;
use crate::protocol::{CodecError, Reader};
use bytes::Bytes;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::{AddPartitionsToTxnRequest, ProducerId, TransactionalId};

pub const ADD_PARTITIONS_TO_TXN_VERSION: i16 = 3;

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
