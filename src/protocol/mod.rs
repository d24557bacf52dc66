//! The Kafka wire format as kshim needs it: frames, the request-header peek, the
//! bodies kshim decodes itself, and the KIP-584 draft tags.
//!
//! Owns bytes and types only. No I/O, no feature semantics, no config.
//! Every decoder here takes bytes from the network and must return an error, never
//! panic or allocate in proportion to a length field it has not checked.

pub mod api_versions;
pub mod config_requests;
pub mod draft_tags;
pub mod error_codes;
pub mod frame;
pub mod header;
pub mod requests;
pub mod response;
pub mod results;
pub mod wire;

pub use frame::{FrameCodec, FrameError, DEFAULT_MAX_FRAME_BYTES};
pub use header::{HeaderPeek, RequestFrame};
pub use wire::{CodecError, Reader};
