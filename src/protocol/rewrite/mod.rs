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
mod fetch_stream;
mod find_coordinator;
mod metadata;
mod produce;
mod share;
#[cfg(test)]
mod testing;
mod walk;

use crate::protocol::response::Answer;
use crate::protocol::CodecError;
use bytes::Bytes;
pub use fetch_stream::{rewrite_tail as rewrite_fetch_tail, TailScanner as FetchTailScanner};
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
    ) -> Result<(std::sync::Arc<str>, i32), String>;
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

/// The responses that carry broker addresses, as the newest Kafka release kshim
/// has data for (4.4) lays them out. A version whose responses name brokers and
/// that is not walked here is neither offered nor forwarded
/// (`handlers::forward::response_handling`); the tests below fail when the
/// release data names brokers in an API a broker serves that is missing here.
/// (Vote, BeginQuorumEpoch, EndQuorumEpoch, FetchSnapshot and UpdateRaftVoter
/// are served by controllers only.)
fn layout(api: ApiKey) -> Option<Layout> {
    let (versions, first_flexible, walk): (_, _, WalkFn) = match api {
        ApiKey::Produce => ((3, 13), 9, produce::walk),
        ApiKey::Fetch => ((4, 18), 12, fetch::walk),
        ApiKey::Metadata => ((0, 13), 9, metadata::walk),
        ApiKey::FindCoordinator => ((0, 6), 3, find_coordinator::walk),
        ApiKey::DescribeCluster => ((0, 2), 0, describe_cluster::walk),
        ApiKey::ShareFetch => ((1, 2), 0, share::walk_fetch),
        ApiKey::ShareAcknowledge => ((1, 2), 0, share::walk_acknowledge),
        _ => return None,
    };
    Some(Layout {
        versions,
        first_flexible,
        walk,
    })
}

/// APIs a broker serves whose responses name Kafka nodes kshim does not stand
/// in front of, so that no rewrite could keep clients on kshim: their versions
/// that name nodes are capped, deliberately, with the reason.
pub const NOT_REWRITABLE: &[(ApiKey, &str)] = &[(
    ApiKey::DescribeQuorum,
    "v2+ list the controllers' listeners, and kshim stands in front of brokers only",
)];

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
    Ok(rewrite_frame(api, version, body, 0, book)?.map(Answer::into_frame))
}

/// What follows the last change of a rewritten response is passed on in the block
/// it was read into, rather than copied, from this many bytes: below, one block
/// (one write) is worth the copy.
const KEEP_TAIL_FROM_BYTES: usize = 64 << 10;

/// Rewrites the body of a response `frame` (without its size prefix) that starts at
/// `body_offset`. The new frame's header and rewritten body are copied once, into one
/// block; a large part after the last change (the topics of a Metadata answer) stays
/// in `frame`'s block, as the answer's tail. Ok(None) when nothing needed changing.
pub fn rewrite_frame(
    api: ApiKey,
    version: i16,
    frame: &Bytes,
    body_offset: usize,
    book: &dyn AddressBook,
) -> Result<Option<Answer>, RewriteError> {
    let Some(layout) = layout(api) else {
        return Ok(None);
    };
    let (min, max) = layout.versions;
    if !(min..=max).contains(&version) {
        return Err(RewriteError::UnknownVersion { api, version });
    }
    let body_offset = body_offset.min(frame.len());
    let (head, body) = frame.split_at(body_offset);
    let mut walk = Walk::new(body, version >= layout.first_flexible, book);
    (layout.walk)(version, &mut walk).map_err(|stop| stop.into_error(api, version))?;
    Ok(walk
        .into_spliced(head, KEEP_TAIL_FROM_BYTES)
        .map(|(head, end)| Answer {
            head: Bytes::from(head),
            tail: frame.slice(body_offset + end..),
        }))
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
    fn versions_are_those_the_newest_release_defines() {
        let release = crate::releases::newest();
        for api in REWRITTEN {
            let defined = release.api(api as i16).unwrap();
            assert_eq!(
                rewritable_versions(api),
                Some((defined.versions[0], defined.versions[1])),
                "{api:?}"
            );
            let first_flexible = defined.first_flexible.unwrap_or(i16::MAX);
            for version in defined.versions[0]..=defined.versions[1] {
                assert_eq!(
                    version >= layout(api).unwrap().first_flexible,
                    version >= first_flexible,
                    "{api:?} v{version}"
                );
            }
        }
    }

    #[test]
    fn every_broker_api_whose_responses_name_brokers_is_walked() {
        let release = crate::releases::newest();
        for defined in &release.apis {
            let Some((first, last)) = defined.broker_address_versions() else {
                continue;
            };
            if !defined.listeners.iter().any(|l| l == "broker") {
                continue;
            }
            let api = ApiKey::try_from(defined.key)
                .unwrap_or_else(|_| panic!("{} names brokers and has no walk", defined.name));
            if NOT_REWRITABLE.iter().any(|(a, _)| *a == api) {
                continue;
            }
            let (min, max) = rewritable_versions(api)
                .unwrap_or_else(|| panic!("{} names brokers and has no walk", defined.name));
            assert!(
                min <= first && last <= max,
                "{} names brokers in v{first}-v{last}; walked: v{min}-v{max}",
                defined.name
            );
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
            (ApiKey::ShareAcknowledge, 3),
        ] {
            assert!(matches!(
                rewrite_body(api, version, &body, &TestBook::default()),
                Err(RewriteError::UnknownVersion { api: a, version: v }) if a == api && v == version
            ));
        }
    }
}
