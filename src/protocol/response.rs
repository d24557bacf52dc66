//! Writing response frames: size prefix, response header, body.

use super::wire::{CodecError, Reader};
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::Encodable;

/// A response kshim built could not be encoded. Always kshim's fault.
#[derive(Debug, thiserror::Error)]
#[error("encoding the {api:?} v{version} response: {reason}")]
pub struct EncodeError {
    pub api: ApiKey,
    pub version: i16,
    pub reason: String,
}

/// The response header version, as Kafka picks it. ApiVersions always answers with
/// header v0 so that a client that sent a version the broker does not know can
/// still read the error.
pub fn response_header_version(api: ApiKey, version: i16) -> i16 {
    match api {
        ApiKey::ApiVersions => 0,
        _ => api.response_header_version(version),
    }
}

/// The correlation id a response frame (without its size prefix) answers.
pub fn response_correlation_id(frame: &[u8]) -> Result<i32, CodecError> {
    Reader::new(frame).i32("correlation id")
}

/// Where the body of a response frame (without its size prefix) starts: after
/// the correlation id, and the header's tagged fields from header v1.
pub fn response_body_offset(api: ApiKey, version: i16, frame: &[u8]) -> Result<usize, CodecError> {
    let mut r = Reader::new(frame);
    r.i32("correlation id")?;
    if response_header_version(api, version) >= 1 {
        r.tagged_fields("response header")?;
    }
    Ok(r.position())
}

/// A response frame (without its size prefix) in at most two blocks: `head`, then
/// `tail`, the upstream's own bytes that follow what kshim rewrote (empty for a
/// frame in one block). A rewrite that changes only the head of a large answer (the
/// brokers at the head of a Metadata answer naming a million partitions) copies the
/// head and passes the rest on as it came, in the block it was read into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub head: Bytes,
    pub tail: Bytes,
}

impl Answer {
    /// A frame in one block.
    pub fn whole(frame: Bytes) -> Answer {
        Answer {
            head: frame,
            tail: Bytes::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The frame in one block (copied when it is in two).
    pub fn into_frame(self) -> Bytes {
        if self.tail.is_empty() {
            return self.head;
        }
        let mut out = BytesMut::with_capacity(self.len());
        out.put_slice(&self.head);
        out.put_slice(&self.tail);
        out.freeze()
    }
}

/// A response frame (without its size prefix) with everything from `offset`
/// (its body) replaced by `body`.
pub fn with_new_body(frame: &[u8], offset: usize, body: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(offset + body.len());
    out.put_slice(&frame[..offset]);
    out.put_slice(body);
    out.freeze()
}

/// Frames an already-encoded body.
pub fn frame_with_body(api: ApiKey, version: i16, correlation_id: i32, body: &[u8]) -> Bytes {
    let header_version = response_header_version(api, version);
    let header_len = if header_version >= 1 { 5 } else { 4 };
    let mut out = BytesMut::with_capacity(4 + header_len + body.len());
    out.put_i32((header_len + body.len()) as i32);
    out.put_i32(correlation_id);
    if header_version >= 1 {
        out.put_u8(0); // empty tagged-field section
    }
    out.put_slice(body);
    out.freeze()
}

/// Encodes a kafka-protocol message body at `version`.
pub fn encode_body<M: Encodable>(
    api: ApiKey,
    version: i16,
    body: &M,
) -> Result<Bytes, EncodeError> {
    let err = |e: anyhow::Error| EncodeError {
        api,
        version,
        reason: e.to_string(),
    };
    let size = body.compute_size(version).map_err(err)?;
    let mut out = BytesMut::with_capacity(size);
    body.encode(&mut out, version).map_err(err)?;
    Ok(out.freeze())
}

/// Encodes a whole response frame.
pub fn encode_frame<M: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &M,
) -> Result<Bytes, EncodeError> {
    Ok(frame_with_body(
        api,
        version,
        correlation_id,
        &encode_body(api, version, body)?,
    ))
}
