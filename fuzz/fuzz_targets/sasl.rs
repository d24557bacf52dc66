//! A connection's SASL exchange as kshim reads it along (`handlers::sasl`):
//! SaslHandshake and SaslAuthenticate requests from the client, the upstream's
//! answers to them, in any order and any number. Only the exchange's public
//! face is used: `SaslExchange::request(frame)` and `SaslExchange::response(frame)`.
//!
//! Input: a script of steps, each an opcode byte and a chunk (u16 length, then
//! the bytes). By the opcode's low two bits:
//! - 0: the chunk is a whole request frame;
//! - 1: a request is built: SaslHandshake, or SaslAuthenticate when bit 0x10 is
//!   set, at version (opcode >> 5) & 3, with the next correlation id, and the
//!   chunk as its body;
//! - 2: the chunk is a whole answer frame (without size prefix);
//! - 3: an answer is built: the last request's correlation id, then the chunk.
//!
//! Nothing beyond "no panic" is checked: what the exchange decides is its own
//! business, and the unit tests in `handlers::sasl` pin it down.

#![no_main]

mod common;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;
use kshim::handlers::sasl::{self, SaslExchange};
use kshim::protocol::Incoming;
use libfuzzer_sys::fuzz_target;

#[global_allocator]
static ALLOCATOR: common::BoundedAllocator = common::BoundedAllocator;

const MAX_STEPS: usize = 64;

const RAW_REQUEST: u8 = 0;
const REQUEST: u8 = 1;
const RAW_ANSWER: u8 = 2;
const ANSWER: u8 = 3;
const AUTHENTICATE: u8 = 0x10;
/// The version bits of an opcode: SaslHandshake v1 (v0 is refused).
const HANDSHAKE_V1: u8 = 1 << 5;

fn request(api: ApiKey, version: i16, correlation_id: i32, body: &[u8]) -> Bytes {
    let mut f = BytesMut::new();
    f.put_i16(api as i16);
    f.put_i16(version);
    f.put_i32(correlation_id);
    f.put_i16(4);
    f.put_slice(b"fuzz");
    if api.request_header_version(version) >= 2 {
        f.put_u8(0);
    }
    f.put_slice(body);
    f.freeze()
}

fuzz_target!(
    init: common::write_seeds_if_asked(seeds),
    |data: &[u8]| {
        let mut input = common::Input::new(data);
        let mut exchange = SaslExchange::default();
        let mut correlation_id = 0i32;
        for _ in 0..MAX_STEPS {
            if input.is_empty() {
                break;
            }
            let op = input.byte();
            let chunk = input.chunk();
            match op & 3 {
                RAW_REQUEST => {
                    if let Some(peek) = chunk.get(..2) {
                        let _ = sasl::reads(i16::from_be_bytes([peek[0], peek[1]]));
                    }
                    // The connection reads the fixed header first; a frame too
                    // short for it never reaches the exchange.
                    if let Ok(incoming) = Incoming::parse(Bytes::copy_from_slice(chunk)) {
                        let _ = exchange.request(&incoming);
                    }
                }
                REQUEST => {
                    correlation_id = correlation_id.wrapping_add(1);
                    let api = if op & AUTHENTICATE != 0 {
                        ApiKey::SaslAuthenticate
                    } else {
                        ApiKey::SaslHandshake
                    };
                    let version = i16::from((op >> 5) & 3);
                    if let Ok(incoming) = Incoming::parse(request(api, version, correlation_id, chunk)) {
                        let _ = exchange.request(&incoming);
                    }
                }
                RAW_ANSWER => {
                    let _ = exchange.response(chunk);
                }
                _ => {
                    let mut frame = correlation_id.to_be_bytes().to_vec();
                    frame.extend_from_slice(chunk);
                    let _ = exchange.response(&frame);
                }
            }
        }
    }
);

// ---------------------------------------------------------------------------
// Seeds: whole exchanges per mechanism and SaslAuthenticate version.
// ---------------------------------------------------------------------------

fn handshake_body(mechanism: &str) -> Vec<u8> {
    let mut b = (mechanism.len() as i16).to_be_bytes().to_vec();
    b.extend_from_slice(mechanism.as_bytes());
    b
}

fn authenticate_body(version: i16, token: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    if version >= 2 {
        kshim::protocol::wire::put_uvarint(&mut b, token.len() as u32 + 1);
        b.extend_from_slice(token);
        b.push(0);
    } else {
        b.extend_from_slice(&(token.len() as i32).to_be_bytes());
        b.extend_from_slice(token);
    }
    b
}

/// The body of an answer after the correlation id.
fn handshake_answer(code: i16) -> Vec<u8> {
    let mut b = code.to_be_bytes().to_vec();
    b.extend_from_slice(&1i32.to_be_bytes());
    b.extend_from_slice(&handshake_body("PLAIN"));
    b
}

fn authenticate_answer(version: i16, code: i16, token: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    if version >= 2 {
        b.push(0); // header tags
    }
    b.extend_from_slice(&code.to_be_bytes());
    if version >= 2 {
        b.push(0); // null message
        kshim::protocol::wire::put_uvarint(&mut b, token.len() as u32 + 1);
        b.extend_from_slice(token);
        b.extend_from_slice(&0i64.to_be_bytes());
        b.push(0);
    } else {
        b.extend_from_slice(&(-1i16).to_be_bytes());
        b.extend_from_slice(&(token.len() as i32).to_be_bytes());
        b.extend_from_slice(token);
        if version >= 1 {
            b.extend_from_slice(&0i64.to_be_bytes());
        }
    }
    b
}

fn seeds() -> Vec<(String, Vec<u8>)> {
    use base64::Engine as _;
    let jwt = format!(
        "eyJhbGciOiJub25lIn0.{}.",
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(br#"{"sub":"alice","exp":4102444800}"#)
    );
    let oauth = format!("n,,\u{1}auth=Bearer {jwt}\u{1}\u{1}");
    let exchanges: Vec<(&str, Vec<(Vec<u8>, Vec<u8>)>)> = vec![
        ("PLAIN", vec![(b"\0alice\0secret".to_vec(), Vec::new())]),
        (
            "SCRAM-SHA-256",
            vec![
                (
                    b"n,,n=alice,r=abc".to_vec(),
                    b"r=abcdef,s=c2FsdA==,i=4096".to_vec(),
                ),
                (
                    b"c=biws,r=abcdef,p=cHJvb2Y=".to_vec(),
                    b"v=c2lnbmF0dXJl".to_vec(),
                ),
            ],
        ),
        ("OAUTHBEARER", vec![(oauth.into_bytes(), Vec::new())]),
        ("GSSAPI", vec![(vec![0x60, 0x01, 0x00], Vec::new())]),
    ];
    let mut out = Vec::new();
    for version in 0..=2i16 {
        for (mechanism, steps) in &exchanges {
            let mut s = common::Seed::new()
                .byte(REQUEST | HANDSHAKE_V1)
                .chunk(&handshake_body(mechanism))
                .byte(ANSWER)
                .chunk(&handshake_answer(0));
            for (token, answer) in steps {
                s = s
                    .byte(REQUEST | AUTHENTICATE | ((version as u8) << 5))
                    .chunk(&authenticate_body(version, token))
                    .byte(ANSWER)
                    .chunk(&authenticate_answer(version, 0, answer));
            }
            // Re-authentication, then a SaslAuthenticate without a handshake.
            s = s
                .byte(REQUEST | HANDSHAKE_V1)
                .chunk(&handshake_body(mechanism))
                .byte(ANSWER)
                .chunk(&handshake_answer(0))
                .byte(REQUEST | AUTHENTICATE | ((version as u8) << 5))
                .chunk(&authenticate_body(version, &steps[0].0))
                .byte(ANSWER)
                .chunk(&authenticate_answer(version, 58, b""))
                .byte(REQUEST | AUTHENTICATE | ((version as u8) << 5))
                .chunk(&authenticate_body(version, b"again"));
            out.push((
                format!("{}-authenticate-v{version}", mechanism.to_lowercase()),
                s.done(),
            ));
        }
    }
    out
}
