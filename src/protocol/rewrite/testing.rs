//! What the per-API tests share: an address book, random contents, kafka-protocol
//! round trips, and the corruption drill every walker must survive.

use super::{rewrite_body, AddressBook, RewriteError};
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Debug;

pub const CLIENT_HOST: &str = "kshim.test";

pub fn client_port(node_id: i32) -> i32 {
    30_000i32.wrapping_add(node_id)
}

/// Sends node N to `kshim.test:30000+N`, and remembers who asked.
#[derive(Default)]
pub struct TestBook {
    identity: bool,
    host: Option<String>,
    refuse: Option<i32>,
    pub asked: RefCell<Vec<i32>>,
}

impl TestBook {
    /// Gives every broker its upstream address back.
    pub fn identity() -> Self {
        TestBook {
            identity: true,
            ..TestBook::default()
        }
    }

    pub fn with_host(host: String) -> Self {
        TestBook {
            host: Some(host),
            ..TestBook::default()
        }
    }

    pub fn refusing(node_id: i32) -> Self {
        TestBook {
            refuse: Some(node_id),
            ..TestBook::default()
        }
    }
}

impl AddressBook for TestBook {
    fn client_address(
        &self,
        node_id: i32,
        upstream_host: &str,
        upstream_port: i32,
    ) -> Result<(std::sync::Arc<str>, i32), String> {
        self.asked.borrow_mut().push(node_id);
        if self.refuse == Some(node_id) {
            return Err("no listener left".to_owned());
        }
        if self.identity {
            return Ok((upstream_host.into(), upstream_port));
        }
        let host = self.host.as_deref().unwrap_or(CLIENT_HOST);
        Ok((host.into(), client_port(node_id)))
    }
}

pub fn encode<M: Encodable>(message: &M, version: i16) -> Bytes {
    let mut out = BytesMut::new();
    message.encode(&mut out, version).unwrap();
    out.freeze()
}

pub fn decode<M: Decodable>(body: &Bytes, version: i16) -> M {
    M::decode(&mut body.clone(), version).unwrap()
}

/// What a test expects of one rewrite: the addresses it moves, in body order.
#[derive(Default)]
pub struct Expected {
    asked: Vec<i32>,
}

impl Expected {
    /// Moves broker `node_id` to its kshim address, as the walker must.
    pub fn address(&mut self, node_id: i32, host: &mut StrBytes, port: &mut i32) {
        if node_id >= 0 {
            self.asked.push(node_id);
            *host = StrBytes::from_static_str(CLIENT_HOST);
            *port = client_port(node_id);
        }
    }
}

/// Encodes `original` with kafka-protocol, rewrites it, and checks that the result
/// is, byte for byte, `original` with exactly the changes `expect` makes.
pub fn assert_rewrites<M>(
    api: ApiKey,
    version: i16,
    original: &M,
    expect: impl FnOnce(&mut M, &mut Expected),
) where
    M: Encodable + Decodable + PartialEq + Debug + Clone,
{
    let body = encode(original, version);
    // Fields a version lacks do not survive encoding; compare with what does.
    let baseline: M = decode(&body, version);
    let mut expected = baseline.clone();
    let mut moves = Expected::default();
    expect(&mut expected, &mut moves);

    let book = TestBook::default();
    let rewritten = rewrite_body(api, version, &body, &book).unwrap();
    assert_eq!(*book.asked.borrow(), moves.asked, "{api:?} v{version}");
    match rewritten {
        None => assert_eq!(expected, baseline, "{api:?} v{version}: nothing rewritten"),
        Some(new_body) => {
            assert_eq!(
                decode::<M>(&new_body, version),
                expected,
                "{api:?} v{version}"
            );
            assert_eq!(new_body, encode(&expected, version), "{api:?} v{version}");
        }
    }
}

/// Every truncation and many corruptions of `body` end in Ok or Err, never a panic.
pub fn assert_survives_corruption(api: ApiKey, version: i16, body: &Bytes, rng: &mut StdRng) {
    let book = TestBook::default();
    for len in 0..body.len() {
        let _ = rewrite_body(api, version, &body.slice(..len), &book);
    }
    for _ in 0..300 {
        let mut bytes = body.to_vec();
        for _ in 0..rng.gen_range(1..=4) {
            if bytes.is_empty() {
                break;
            }
            let at = rng.gen_range(0..bytes.len());
            match rng.gen_range(0..4) {
                0 => bytes[at] ^= 1 << rng.gen_range(0..8),
                1 => bytes[at] = rng.gen(),
                2 => bytes[at] = 0xff,
                _ => {
                    bytes.insert(at, rng.gen());
                }
            }
        }
        let _ = rewrite_body(api, version, &Bytes::from(bytes), &book);
    }
    for _ in 0..50 {
        let len = rng.gen_range(0..64);
        let bytes: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
        let _ = rewrite_body(api, version, &Bytes::from(bytes), &book);
    }
}

/// `prefix` (the fields before a response's first array), then that array claiming
/// 2^31 entries, then a little padding: refused before any entry is read.
pub fn assert_huge_count_refused(api: ApiKey, version: i16, flexible: bool, prefix: &[u8]) {
    let mut body = prefix.to_vec();
    if flexible {
        crate::protocol::wire::put_uvarint(&mut body, (1 << 31) + 1);
    } else {
        body.extend_from_slice(&i32::MAX.to_be_bytes());
    }
    body.extend_from_slice(&[0; 64]);
    let book = TestBook::default();
    let result = rewrite_body(api, version, &Bytes::from(body), &book);
    assert!(
        matches!(result, Err(RewriteError::Malformed { .. })),
        "{api:?} v{version}: {result:?}"
    );
    assert!(book.asked.borrow().is_empty());
}

pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

pub fn string(rng: &mut StdRng) -> StrBytes {
    const PIECES: [&str; 6] = ["broker", "-", "1", "east.example.com", "", "ünï"];
    let s: String = (0..rng.gen_range(0..4))
        .map(|_| PIECES[rng.gen_range(0..PIECES.len())])
        .collect();
    StrBytes::from_string(s)
}

pub fn nullable_string(rng: &mut StdRng) -> Option<StrBytes> {
    rng.gen_bool(0.7).then(|| string(rng))
}

pub fn bytes(rng: &mut StdRng, max: usize) -> Bytes {
    let len = rng.gen_range(0..=max);
    (0..len).map(|_| rng.gen()).collect::<Vec<u8>>().into()
}

/// Tagged fields kafka-protocol does not know, with tags from `first_tag` on (the
/// lower ones are the known fields of that struct).
pub fn unknown_tags(rng: &mut StdRng, first_tag: i32) -> BTreeMap<i32, Bytes> {
    (0..rng.gen_range(0..3))
        .map(|_| (rng.gen_range(first_tag..first_tag + 40), bytes(rng, 12)))
        .collect()
}

/// A broker id: usually a real one, now and then the -1 of "no node".
pub fn node_id(rng: &mut StdRng) -> i32 {
    if rng.gen_bool(0.1) {
        -1
    } else {
        rng.gen_range(0..12)
    }
}

/// A controller id that is -1, one of `brokers`, or one not listed.
pub fn controller_id(rng: &mut StdRng, brokers: &[i32]) -> i32 {
    match rng.gen_range(0..3) {
        0 => -1,
        1 if !brokers.is_empty() => brokers[rng.gen_range(0..brokers.len())],
        _ => rng.gen_range(100..110),
    }
}

/// The controller id rule, restated for the expectations.
pub fn expected_controller(controller: i32, brokers: &[i32]) -> i32 {
    let listed: Vec<i32> = brokers.iter().copied().filter(|id| *id >= 0).collect();
    if controller < 0 || listed.contains(&controller) {
        controller
    } else {
        listed.into_iter().min().unwrap_or(-1)
    }
}
