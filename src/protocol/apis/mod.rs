//! The Kafka requests kshim sends as a client of the upstream cluster (its
//! state topic, the upstream view, the config audit) and the bounded decoders
//! of their responses, one file per API. Request encoders use kafka-protocol at
//! fixed versions; responses come from the network, so they are read with
//! `protocol::Reader`, never kafka-protocol's decoders: those reserve capacity
//! straight from counts on the wire. Bytes only, no I/O.

mod add_partitions_to_txn;
mod create_topics;
mod describe_configs;
mod describe_quorum;
mod end_txn;
mod fetch;
mod find_coordinator;
mod init_producer_id;
mod list_offsets;
mod metadata;
mod produce;
pub mod sasl;
mod update_features;

pub use super::records::ProducerIdentity;
pub use add_partitions_to_txn::*;
pub use create_topics::*;
pub use describe_configs::*;
pub use describe_quorum::*;
pub use end_txn::*;
pub use fetch::*;
pub use find_coordinator::*;
pub use init_producer_id::*;
pub use list_offsets::*;
pub use metadata::*;
pub use produce::*;
pub use update_features::*;

use crate::protocol::{CodecError, Reader};
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::{Encodable, StrBytes};

/// kafka-protocol fails to encode only a field the version cannot carry or a
/// length the format cannot express; the versions here are fixed and tested,
/// so that is a bug, not an input. An empty body then makes the broker refuse
/// the request, which the caller sees as an error rather than a panic.
fn encode<M: Encodable>(message: &M, version: i16, api: &str) -> Bytes {
    let mut buf = BytesMut::new();
    match message.encode(&mut buf, version) {
        Ok(()) => buf.freeze(),
        Err(e) => {
            tracing::error!("cannot encode {api} v{version}: {e}");
            Bytes::new()
        }
    }
}

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn topic_name(s: &str) -> TopicName {
    TopicName(text(s))
}

/// An array's element count. A null array reads as empty: no caller here
/// tells the two apart.
fn count(
    r: &mut Reader<'_>,
    min_element_bytes: usize,
    what: &'static str,
) -> Result<usize, CodecError> {
    Ok(r.array_len(true, min_element_bytes, what)?.unwrap_or(0))
}

fn string(r: &mut Reader<'_>, what: &'static str) -> Result<String, CodecError> {
    Ok(r.string(true, what)?.to_owned())
}

fn opt_string(r: &mut Reader<'_>, what: &'static str) -> Result<Option<String>, CodecError> {
    Ok(r.compact_nullable_string(what)?.map(str::to_owned))
}

fn skip_tags(r: &mut Reader<'_>, what: &'static str) -> Result<(), CodecError> {
    r.tagged_fields(what).map(|_| ())
}

/// The top-level tagged fields, then nothing: trailing bytes mean the layout
/// read is not the one the broker wrote, and nothing read can be trusted.
fn finish(mut r: Reader<'_>, what: &'static str) -> Result<(), CodecError> {
    skip_tags(&mut r, what)?;
    r.expect_end(what)
}

fn missing(what: &str) -> CodecError {
    CodecError::Invalid(format!("{what} response holds no partition"))
}

#[cfg(test)]
mod tests;
