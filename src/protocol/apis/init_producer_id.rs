//! InitProducerId (key 22): the state writer's transactional producer id and
//! epoch (the epoch fences older writers).

use super::*;
use crate::protocol::{CodecError, Reader};
use bytes::Bytes;
use kafka_protocol::messages::{InitProducerIdRequest, ProducerId, TransactionalId};
use kafka_protocol::records::{NO_PRODUCER_EPOCH, NO_PRODUCER_ID};

pub const INIT_PRODUCER_ID_VERSION: i16 = 4;

/// `transactional_id` None is an idempotent producer. `current` lets a
/// producer that still holds an identity bump its epoch (KIP-360) instead of
/// being fenced by a fresh one.
pub fn init_producer_id_request(
    transactional_id: Option<&str>,
    transaction_timeout_ms: i32,
    current: Option<ProducerIdentity>,
) -> Bytes {
    let (id, epoch) = current.map_or((NO_PRODUCER_ID, NO_PRODUCER_EPOCH), |c| {
        (c.producer_id, c.epoch)
    });
    // Set explicitly: kafka-protocol's default is Some(""), not null.
    let req = InitProducerIdRequest::default()
        .with_transactional_id(transactional_id.map(|t| TransactionalId(text(t))))
        .with_transaction_timeout_ms(transaction_timeout_ms)
        .with_producer_id(ProducerId(id))
        .with_producer_epoch(epoch);
    encode(&req, INIT_PRODUCER_ID_VERSION, "InitProducerId")
}

/// (error code, identity).
pub fn decode_init_producer_id(body: &[u8]) -> Result<(i16, ProducerIdentity), CodecError> {
    let mut r = Reader::new(body);
    r.i32("throttle_time_ms")?;
    let code = r.i16("error_code")?;
    let producer_id = r.i64("producer_id")?;
    let epoch = r.i16("producer_epoch")?;
    finish(r, "InitProducerId response")?;
    Ok((code, ProducerIdentity { producer_id, epoch }))
}
