//! EndTxn (key 26): committing or aborting the state writer's transaction.

use super::*;
use crate::protocol::{CodecError, Reader};
use bytes::Bytes;
use kafka_protocol::messages::{EndTxnRequest, ProducerId, TransactionalId};

pub const END_TXN_VERSION: i16 = 3;

pub fn end_txn_request(transactional_id: &str, producer: ProducerIdentity, commit: bool) -> Bytes {
    let req = EndTxnRequest::default()
        .with_transactional_id(TransactionalId(text(transactional_id)))
        .with_producer_id(ProducerId(producer.producer_id))
        .with_producer_epoch(producer.epoch)
        .with_committed(commit);
    encode(&req, END_TXN_VERSION, "EndTxn")
}

pub fn decode_end_txn(body: &[u8]) -> Result<i16, CodecError> {
    let mut r = Reader::new(body);
    r.i32("throttle_time_ms")?;
    let code = r.i16("error_code")?;
    finish(r, "EndTxn response")?;
    Ok(code)
}
