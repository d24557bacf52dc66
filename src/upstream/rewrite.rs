//! Placeholder until the address rewriter lands.
use crate::protocol::CodecError;
use bytes::Bytes;
use kafka_protocol::messages::ApiKey;

pub trait AddressBook {
    fn client_address(
        &self,
        node_id: i32,
        upstream_host: &str,
        upstream_port: i32,
    ) -> Result<(String, i32), String>;
}

#[derive(Debug, thiserror::Error)]
pub enum RewriteError {
    #[error("malformed {api:?} v{version} response from the upstream: {source}")]
    Malformed {
        api: ApiKey,
        version: i16,
        source: CodecError,
    },
    #[error("no kshim address for broker {node_id}: {reason}")]
    NoAddress { node_id: i32, reason: String },
    #[error("kshim cannot rewrite {api:?} v{version} responses")]
    UnknownVersion { api: ApiKey, version: i16 },
}

pub fn rewritable_versions(api: ApiKey) -> Option<(i16, i16)> {
    match api {
        ApiKey::Metadata => Some((0, 13)),
        ApiKey::FindCoordinator => Some((0, 6)),
        ApiKey::DescribeCluster => Some((0, 2)),
        ApiKey::Produce => Some((3, 13)),
        ApiKey::Fetch => Some((4, 18)),
        ApiKey::ShareFetch | ApiKey::ShareAcknowledge => Some((0, 1)),
        _ => None,
    }
}

pub fn rewrite_body(
    api: ApiKey,
    version: i16,
    _body: &Bytes,
    _book: &dyn AddressBook,
) -> Result<Option<Bytes>, RewriteError> {
    Err(RewriteError::UnknownVersion { api, version })
}
