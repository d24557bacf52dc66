//! Rewriting the broker addresses in upstream responses, so that no client learns
//! an address that bypasses kshim.
//!
//! Owns the byte layout of the responses that carry broker addresses, one file per
//! API. Knows nothing of sockets or listeners: an `AddressBook` says where clients
//! must go. Never decodes a body with kafka-protocol (its decoders reserve capacity
//! from unchecked counts): every walk goes through the bounded `Reader`, returns an
//! error rather than panic, and copies whatever it does not change byte for byte.

mod describe_cluster;
mod fetch;
mod find_coordinator;
mod metadata;
mod produce;
mod share;
#[cfg(test)]
mod testing;
mod walk;

use crate::protocol::CodecError;
use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use walk::{Stop, Walk};

/// Where clients must go for a broker the upstream reported.
pub trait AddressBook {
    /// The upstream reported broker `node_id` at `upstream_host:upstream_port`. Returns the
    /// host and port clients must use instead (a kshim listener, created if needed), or why
    /// none can be given.
    fn client_address(
        &self,
        node_id: i32,
        upstream_host: &str,
        upstream_port: i32,
    ) -> Result<(String, i32), String>;
}

/// Why a response could not be rewritten. It must not be forwarded as it is.
#[derive(Debug, thiserror::Error)]
pub enum RewriteError {
    /// The upstream sent a body that does not decode (the upstream's fault).
    #[error("the upstream's {api:?} v{version} response does not decode: {source}")]
    Malformed {
        api: ApiKey,
        version: i16,
        source: CodecError,
    },
    /// kshim could not give an address for a node (kshim's fault).
    #[error("no client address for broker {node_id}: {reason}")]
    NoAddress { node_id: i32, reason: String },
    /// A version whose layout this module does not know.
    #[error("the layout of {api:?} v{version} responses is not known here")]
    UnknownVersion { api: ApiKey, version: i16 },
}

/// Walks a body of one version, noting the spans to replace.
type WalkFn = fn(i16, &mut Walk<'_>) -> Result<(), Stop>;

struct Layout {
    versions: (i16, i16),
    first_flexible: i16,
    walk: WalkFn,
}

/// The responses that carry broker addresses, as kafka-protocol 0.18 (Apache Kafka
/// 4.1) lays them out.
///
/// Checklist when kafka-protocol is upgraded: a new version of one of these APIs,
/// or a new API whose response names a broker's host and port, must be walked here
/// before kshim forwards it; a response left out tells clients how to bypass kshim.
/// (DescribeQuorum, Vote, BeginQuorumEpoch, EndQuorumEpoch, FetchSnapshot and
/// UpdateRaftVoter name controller listeners, not brokers.)
fn layout(api: ApiKey) -> Option<Layout> {
    let (versions, first_flexible, walk): (_, _, WalkFn) = match api {
        ApiKey::Produce => ((3, 13), 9, produce::walk),
        ApiKey::Fetch => ((4, 18), 12, fetch::walk),
        ApiKey::Metadata => ((0, 13), 9, metadata::walk),
        ApiKey::FindCoordinator => ((0, 6), 3, find_coordinator::walk),
        ApiKey::DescribeCluster => ((0, 2), 0, describe_cluster::walk),
        ApiKey::ShareFetch => ((1, 1), 0, share::walk_fetch),
        ApiKey::ShareAcknowledge => ((1, 1), 0, share::walk_acknowledge),
        _ => return None,
    };
    Some(Layout {
        versions,
        first_flexible,
        walk,
    })
}

/// The versions of `api` whose responses this module can rewrite, or None when responses of
/// `api` carry no broker address (forwarded untouched).
pub fn rewritable_versions(api: ApiKey) -> Option<(i16, i16)> {
    layout(api).map(|l| l.versions)
}

/// Rewrites a response BODY (the bytes after the response header) of `api` at `version`.
/// Ok(None): nothing needed changing (fast path, no allocation) — e.g. a Fetch/Produce response
/// without NodeEndpoints. Ok(Some(new_body)) otherwise.
pub fn rewrite_body(
    api: ApiKey,
    version: i16,
    body: &Bytes,
    book: &dyn AddressBook,
) -> Result<Option<Bytes>, RewriteError> {
    let Some(layout) = layout(api) else {
        return Ok(None);
    };
    let (min, max) = layout.versions;
    if !(min..=max).contains(&version) {
        return Err(RewriteError::UnknownVersion { api, version });
    }
    let mut walk = Walk::new(body, version >= layout.first_flexible, book);
    (layout.walk)(version, &mut walk).map_err(|stop| match stop {
        Stop::Malformed(source) => RewriteError::Malformed {
            api,
            version,
            source,
        },
        Stop::NoAddress { node_id, reason } => RewriteError::NoAddress { node_id, reason },
    })?;
    Ok(walk.into_body().map(Bytes::from))
}

#[cfg(test)]
mod tests {
    use super::*;
    use testing::TestBook;

    const REWRITTEN: [ApiKey; 7] = [
        ApiKey::Produce,
        ApiKey::Fetch,
        ApiKey::Metadata,
        ApiKey::FindCoordinator,
        ApiKey::DescribeCluster,
        ApiKey::ShareFetch,
        ApiKey::ShareAcknowledge,
    ];

    #[test]
    fn versions_are_those_kafka_protocol_knows() {
        for api in REWRITTEN {
            let known = api.valid_versions();
            assert_eq!(rewritable_versions(api), Some((known.min, known.max)));
        }
    }

    #[test]
    fn flexible_versions_are_those_with_a_flexible_header() {
        for api in REWRITTEN {
            let layout = layout(api).unwrap();
            for version in layout.versions.0..=layout.versions.1 {
                assert_eq!(
                    version >= layout.first_flexible,
                    api.response_header_version(version) >= 1,
                    "{api:?} v{version}"
                );
            }
        }
    }

    #[test]
    fn other_apis_are_forwarded_untouched() {
        let body = Bytes::from_static(&[1, 2, 3]);
        for api in [
            ApiKey::ApiVersions,
            ApiKey::OffsetCommit,
            ApiKey::DescribeQuorum,
        ] {
            assert_eq!(rewritable_versions(api), None);
            assert_eq!(
                rewrite_body(api, 0, &body, &TestBook::default()).unwrap(),
                None
            );
        }
    }

    #[test]
    fn versions_outside_the_table_are_refused() {
        let body = Bytes::new();
        for (api, version) in [
            (ApiKey::Metadata, 14),
            (ApiKey::Metadata, -1),
            (ApiKey::Produce, 2),
            (ApiKey::Fetch, 19),
            (ApiKey::ShareFetch, 0),
            (ApiKey::ShareAcknowledge, 2),
        ] {
            assert!(matches!(
                rewrite_body(api, version, &body, &TestBook::default()),
                Err(RewriteError::UnknownVersion { api: a, version: v }) if a == api && v == version
            ));
        }
    }
}
