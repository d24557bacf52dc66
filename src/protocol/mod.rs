//! The Kafka wire format as kshim needs it: frames, the request-header peek, the
//! bodies kshim decodes itself, and the KIP-584 draft tags.
//!
//! Owns bytes and types only. No I/O, no feature semantics, no config.
//! Every decoder here takes bytes from the network and must return an error, never
//! panic or allocate in proportion to a length field it has not checked.

pub mod api_versions;
pub mod apis;
pub mod config_requests;
pub mod draft_tags;
pub mod errors;
pub mod frame;
pub mod header;
pub mod records;

pub mod requests;
pub mod response;
pub mod results;
pub mod rewrite;
pub mod wire;

pub use frame::{FrameCodec, FrameError, DEFAULT_MAX_FRAME_BYTES};
pub use header::{HeaderPeek, Incoming, RequestFrame};
pub use wire::{CodecError, Reader};

/// Kafka's name for an API key ("Produce"), from kshim's Kafka library or the
/// newest release data, or "Unknown<key>".
pub fn api_name(key: i16) -> String {
    match kafka_protocol::messages::ApiKey::try_from(key) {
        Ok(api) => format!("{api:?}"),
        Err(_) => crate::releases::newest()
            .api(key)
            .map_or_else(|| format!("Unknown{key}"), |a| a.name.clone()),
    }
}
