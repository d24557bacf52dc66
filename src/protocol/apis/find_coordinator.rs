//! FindCoordinator (key 10): finding the state writer's transaction
//! coordinator.

use super::*;
use crate::protocol::{CodecError, Reader};
use bytes::Bytes;
use kafka_protocol::messages::FindCoordinatorRequest;

pub const FIND_COORDINATOR_VERSION: i16 = 4;

pub const COORDINATOR_TRANSACTION: i8 = 1;

pub fn find_coordinator_request(key_type: i8, key: &str) -> Bytes {
    let req = FindCoordinatorRequest::default()
        .with_key_type(key_type)
        .with_coordinator_keys(vec![text(key)]);
    encode(&req, FIND_COORDINATOR_VERSION, "FindCoordinator")
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coordinator {
    pub error_code: i16,
    pub error_message: Option<String>,
    pub node_id: i32,
    pub host: String,
    pub port: i32,
}

/// The first coordinator of the batched (v4) answer: the request asks for one.
pub fn decode_find_coordinator(body: &[u8]) -> Result<Coordinator, CodecError> {
    let mut r = Reader::new(body);
    r.i32("throttle_time_ms")?;
    let mut first = None;
    // key, node, host, port, error, message, tags
    for _ in 0..count(&mut r, 14, "coordinators")? {
        string(&mut r, "coordinator key")?;
        let node_id = r.i32("node_id")?;
        let host = string(&mut r, "host")?;
        let port = r.i32("port")?;
        let error_code = r.i16("error_code")?;
        let error_message = opt_string(&mut r, "error_message")?;
        skip_tags(&mut r, "coordinator tags")?;
        first.get_or_insert(Coordinator {
            error_code,
            error_message,
            node_id,
            host,
            port,
        });
    }
    finish(r, "FindCoordinator response")?;
    first.ok_or_else(|| CodecError::Invalid("FindCoordinator response holds no coordinator".into()))
}
