//! Requests kshim does not answer: forwarded to the broker behind the
//! connection. Most go byte for byte, with only the header read, plus the acks
//! field of Produce, because a Produce with acks=0 gets no response and the
//! connection must not wait for one. What happens to the response is said by
//! `AfterResponse`: passed on, its broker addresses rewritten, or merged with the
//! results kshim gave for the items it refused.

use super::Action;
use crate::protocol::rewrite::{rewritable_versions, FetchTailScanner};
use crate::protocol::{api_name, requests, CodecError, HeaderPeek};
use crate::releases as release;
use bytes::Bytes;
use kafka_protocol::messages::ApiKey;

/// A request on its way to the upstream.
#[derive(Debug)]
pub struct Forward {
    /// The request frame, without its size prefix, exactly as the client sent it
    /// (or narrowed to the items kshim let through).
    pub frame: Bytes,
    pub correlation_id: i32,
    pub expects_response: bool,
    /// What the connection's session does with the response.
    pub then: Then,
}

/// What a forwarded request's response needs: which API and version it
/// answers, what is done to it, and what is kept until it comes.
pub struct Then {
    /// The API key, which kshim's Kafka library may not know (a newer release's).
    pub api_key: i16,
    pub version: i16,
    pub after: AfterResponse,
    /// Kept until the response has come back (or the request is dropped).
    pub hold: Option<Box<dyn std::any::Any + Send>>,
    /// How long the response waits before the client gets it (a discovery-lab
    /// scenario).
    pub delay: Option<std::time::Duration>,
}

impl std::fmt::Debug for Then {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Then")
            .field("api_key", &self.api_key)
            .field("version", &self.version)
            .field("after", &self.after)
            .field("holds", &self.hold.is_some())
            .finish()
    }
}

impl Then {
    /// Whether the response may be passed on while it arrives, and how: only
    /// one that goes as it came, or a Fetch v16+ whose only possible change is
    /// in its last bytes (`protocol::rewrite::FetchTailScanner`).
    pub fn streamed(self) -> Result<Streamed, Then> {
        let fetch = self.api_key == ApiKey::Fetch as i16;
        let tail = match self.after {
            _ if self.delay.is_some() => return Err(self),
            AfterResponse::PassOn => None,
            AfterResponse::RewriteAddresses if fetch && self.version < FETCH_NODE_ENDPOINTS => None,
            AfterResponse::RewriteAddresses if fetch => Some(FetchTailScanner::default()),
            _ => return Err(self),
        };
        Ok(Streamed { then: self, tail })
    }
}

/// Fetch responses name brokers (NodeEndpoints, KIP-951) from this version on.
const FETCH_NODE_ENDPOINTS: i16 = 16;

/// A response passed on while it arrives (see [`Then::streamed`]).
#[derive(Debug)]
pub struct Streamed {
    pub(super) then: Then,
    /// For a Fetch v16+: where its top-level tagged fields start.
    pub(super) tail: Option<FetchTailScanner>,
}

impl Streamed {
    /// How far the response may be passed on: `arrived` is the frame (without
    /// its size prefix) from offset `offset` on, as far as it came.
    pub fn passable(&mut self, arrived: &[u8], offset: usize) -> Result<usize, String> {
        match &mut self.tail {
            None => Ok(usize::MAX),
            Some(scanner) => scanner.feed(arrived, offset).map_err(|e| {
                format!(
                    "the upstream's Fetch v{} response does not decode: {e}",
                    self.then.version
                )
            }),
        }
    }
}

/// Turns the upstream's response body into the one the client gets.
pub type MergeFn = Box<dyn FnOnce(&[u8]) -> Result<Vec<u8>, CodecError> + Send>;

/// What becomes of the upstream's response.
pub enum AfterResponse {
    /// Passed on as it came.
    PassOn,
    /// It names brokers: their addresses are rewritten.
    RewriteAddresses,
    /// kshim answered some items itself; their results are merged in.
    Merge(MergeFn),
    /// A SASL exchange kshim reads along, to learn the client's principal.
    ReadSasl,
}

impl std::fmt::Debug for AfterResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AfterResponse::PassOn => "PassOn",
            AfterResponse::RewriteAddresses => "RewriteAddresses",
            AfterResponse::Merge(_) => "Merge(..)",
            AfterResponse::ReadSasl => "ReadSasl",
        })
    }
}

/// How the response of `key` at `version` is made safe for the client: its
/// broker addresses rewritten, or passed on when it names no broker (as the
/// newest release data says); `Err` when it names brokers kshim cannot rewrite.
/// The one rule for both what kshim forwards and what its ApiVersions offers.
pub fn response_handling(key: i16, version: i16) -> Result<AfterResponse, String> {
    let rewritten = ApiKey::try_from(key)
        .ok()
        .and_then(rewritable_versions)
        .is_some_and(|(min, max)| (min..=max).contains(&version));
    if rewritten {
        return Ok(AfterResponse::RewriteAddresses);
    }
    // A layout newer than any release kshim has data for may name brokers. An
    // older one than the release defines is a removed version some brokers
    // still offer and refuse (Produce v0-v2, KAFKA-18659): as Kafka only adds
    // fields, it names no broker when the oldest defined version names none.
    let newest = release::newest();
    let Some(definition) = newest
        .api(key)
        .filter(|a| version <= a.versions[1])
        .filter(|a| {
            version >= a.versions[0]
                || a.broker_address_versions()
                    .is_none_or(|(first, _)| first > a.versions[0])
        })
    else {
        return Err(format!(
            "{} v{version} is not served: Kafka {} (the newest release kshim knows) does not define it",
            api_name(key),
            newest.release
        ));
    };
    // A response that names brokers must never pass unrewritten: the client
    // would learn an address around kshim.
    let names_brokers = definition
        .broker_address_versions()
        .is_some_and(|(min, max)| (min..=max).contains(&version));
    if names_brokers {
        let why = crate::protocol::rewrite::NOT_REWRITABLE
            .iter()
            .find(|(api, _)| *api as i16 == key)
            .map_or(
                "its responses name brokers and kshim cannot rewrite that version",
                |(_, why)| why,
            );
        return Err(format!("{} v{version} is not served: {why}", api_name(key)));
    }
    Ok(AfterResponse::PassOn)
}

/// The versions of `key` within `min..=max` that kshim can forward: the
/// highest run of versions whose responses it can make safe.
pub fn forwardable_versions(key: i16, min: i16, max: i16) -> Option<(i16, i16)> {
    let ok = |v: i16| response_handling(key, v).is_ok();
    let hi = (min..=max).rev().find(|&v| ok(v))?;
    let lo = (min..=hi).rev().take_while(|&v| ok(v)).last()?;
    Some((lo, hi))
}

/// Logs, once per API key and client software (the first 1,024 pairs), a
/// request whose key no Kafka release kshim has data for defines, and what
/// `upstream.unknown_api_keys` does with it. Says whether it logged.
pub fn log_unknown_key(
    api_key: i16,
    software: Option<&crate::protocol::api_versions::ClientSoftware>,
    peer: &super::Peer,
    forwarded: bool,
) -> bool {
    static LOGGED: crate::log_limit::OncePerCause = crate::log_limit::OncePerCause::new(1024);
    let label = software.map_or_else(
        || "unknown".to_owned(),
        |s| format!("{}/{}", s.name, s.version),
    );
    if !LOGGED.first(&format!("{api_key} {label}")) {
        return false;
    }
    if forwarded {
        tracing::warn!(
            api_key,
            software = %label,
            "forwarding API key {api_key} from client software {label} (first from {} {}), which no \
             Kafka release kshim has data for defines, as bytes: upstream.unknown_api_keys = \
             \"forward\"; its responses are not rewritten",
            peer.principal,
            peer.addr
        );
    } else {
        tracing::warn!(
            api_key,
            software = %label,
            "closing the connections that send API key {api_key} from client software {label} \
             (first from {} {}): no Kafka release kshim has data for defines it, and \
             upstream.unknown_api_keys = \"hide\"",
            peer.principal,
            peer.addr
        );
    }
    true
}

/// A request whose API key no Kafka release kshim has data for defines,
/// forwarded as bytes and its response passed on unread
/// (`upstream.unknown_api_keys = "forward"`).
pub fn plan_unknown(peek: HeaderPeek, frame: Bytes) -> Action {
    Action::Forward(Forward {
        frame,
        correlation_id: peek.correlation_id,
        expects_response: true,
        then: Then {
            api_key: peek.api_key,
            version: peek.api_version,
            after: AfterResponse::PassOn,
            hold: None,
            delay: None,
        },
    })
}

/// A request forwarded as it is. Its API key may be one kshim's Kafka library
/// does not know, as long as the newest release kshim has data for defines it.
pub fn plan(peek: HeaderPeek, frame: Bytes) -> Action {
    let (key, version) = (peek.api_key, peek.api_version);
    let after = match response_handling(key, version) {
        Ok(after) => after,
        Err(why) => return Action::Close(why),
    };
    let expects_response = if key == ApiKey::Produce as i16 {
        match requests::produce_acks(&frame, version) {
            Ok(acks) => acks != 0,
            Err(e) => return Action::Close(format!("malformed Produce v{version} request: {e}")),
        }
    } else {
        true
    };
    Action::Forward(Forward {
        frame,
        correlation_id: peek.correlation_id,
        expects_response,
        then: Then {
            api_key: key,
            version,
            after,
            hold: None,
            delay: None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_key_is_logged_once_per_key_and_client_software() {
        use crate::protocol::api_versions::ClientSoftware;
        let peer = crate::handlers::Peer {
            addr: "127.0.0.1:5000".parse().unwrap(),
            principal: crate::handlers::ANONYMOUS.into(),
            route: crate::upstream::Route::Bootstrap,
            tls: false,
        };
        let software = |name: &str| ClientSoftware {
            name: name.into(),
            version: "1.0".into(),
        };
        let (a, b) = (software("fork-client"), software("other-client"));
        assert!(log_unknown_key(4001, Some(&a), &peer, true));
        assert!(
            !log_unknown_key(4001, Some(&a), &peer, false),
            "the same key and software again"
        );
        assert!(
            log_unknown_key(4001, Some(&b), &peer, true),
            "another client software"
        );
        assert!(log_unknown_key(4002, Some(&a), &peer, true), "another key");
        assert!(
            log_unknown_key(4001, None, &peer, true),
            "a client that named no software"
        );
        assert!(!log_unknown_key(4001, None, &peer, true));
    }
    use bytes::{BufMut, BytesMut};

    fn produce(version: i16, acks: i16) -> Bytes {
        let mut b = BytesMut::new();
        b.put_i16(0);
        b.put_i16(version);
        b.put_i32(5);
        b.put_i16(1);
        b.put_u8(b'c');
        if version >= 9 {
            b.put_u8(0); // header tags
            b.put_u8(3); // compact "tx"
            b.put_slice(b"tx");
        } else {
            b.put_i16(-1);
        }
        b.put_i16(acks);
        b.freeze()
    }

    fn forwarded(action: Action) -> Forward {
        match action {
            Action::Forward(f) => f,
            other => panic!("expected Forward, got {other:?}"),
        }
    }

    #[test]
    fn produce_with_acks_zero_expects_no_response() {
        for version in [3, 8, 9, 12] {
            for (acks, expects) in [(0, false), (1, true), (-1, true)] {
                let frame = produce(version, acks);
                let peek = HeaderPeek::parse(&frame).unwrap();
                assert_eq!(forwarded(plan(peek, frame)).expects_response, expects);
            }
        }
    }

    #[test]
    fn versions_kshim_cannot_rewrite_close_the_connection() {
        let frame = Bytes::from_static(&[0, 3, 0, 99, 0, 0, 0, 1, 0, 0]);
        let peek = HeaderPeek::parse(&frame).unwrap();
        assert!(matches!(plan(peek, frame), Action::Close(_)));
        let frame = Bytes::from_static(&[0, 0, 0, 9, 0, 0, 0, 1, 0, 0, 0]);
        let peek = HeaderPeek::parse(&frame).unwrap();
        assert!(matches!(plan(peek, frame), Action::Close(_)));
    }

    #[test]
    fn newer_apis_pass_on_and_unrewritten_broker_addresses_never_do() {
        // StreamsGroupHeartbeat v1 (Kafka 4.4; unknown to kshim's Kafka library):
        // its application endpoints reach the client as they are.
        let frame = Bytes::from_static(&[0, 88, 0, 1, 0, 0, 0, 7, 0, 0, 0]);
        let peek = HeaderPeek::parse(&frame).unwrap();
        let fw = forwarded(plan(peek, frame));
        assert_eq!((fw.then.api_key, fw.then.version), (88, 1));
        assert!(matches!(fw.then.after, AfterResponse::PassOn));
        // Vote v1 answers with broker endpoints kshim has no rewrite for.
        let frame = Bytes::from_static(&[0, 52, 0, 1, 0, 0, 0, 7, 0, 0, 0]);
        let peek = HeaderPeek::parse(&frame).unwrap();
        assert!(matches!(plan(peek, frame), Action::Close(why) if why.contains("name brokers")));
    }
}
