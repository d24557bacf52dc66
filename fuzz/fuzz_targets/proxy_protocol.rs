//! The PROXY protocol header a load balancer sends before a client's first
//! byte (`server::proxy_protocol`), read from a stream as a listener with
//! `proxy_protocol` reads it, and each version's parser on raw bytes.
//!
//! Input: a mode byte (off, v1, v2, any: its value modulo 4; off reads as any
//! here), then the stream. Checked beyond "no panic": a header that reads is
//! never longer than its bound, and nothing past it is consumed.

#![no_main]

mod common;

use kshim::server::proxy_protocol::{parse_v1, parse_v2, read_header, Mode, MAX_V1, MAX_V2_BODY};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

#[global_allocator]
static ALLOCATOR: common::BoundedAllocator = common::BoundedAllocator;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
    })
}

fuzz_target!(init: common::write_seeds_if_asked(seeds), |data: &[u8]| {
    let Some((&mode, stream)) = data.split_first() else { return };
    let mode = match mode % 4 {
        1 => Mode::V1,
        2 => Mode::V2,
        _ => Mode::Any,
    };
    let mut rest = stream;
    let read = runtime().block_on(read_header(&mut rest, mode));
    let consumed = stream.len() - rest.len();
    if read.is_ok() {
        assert!(consumed <= MAX_V1.max(16 + MAX_V2_BODY), "a header of {consumed} bytes was taken");
        if stream.starts_with(b"PROXY") {
            assert!(consumed <= MAX_V1 && stream[..consumed].ends_with(b"\r\n"));
        }
    }
    let _ = parse_v1(stream);
    if stream.len() >= 16 {
        let mut fixed = [0u8; 16];
        fixed.copy_from_slice(&stream[..16]);
        let _ = parse_v2(&fixed, &stream[16..]);
    }
});

fn seeds() -> Vec<(String, Vec<u8>)> {
    let signature = b"\r\n\r\n\0\r\nQUIT\n".as_slice();
    let inet = [192, 0, 2, 1, 198, 51, 100, 1, 0x9c, 0x40, 0x23, 0x84];
    let mut inet6 = vec![0x20, 0x01, 0x0d, 0xb8];
    inet6.resize(32, 1);
    inet6.extend_from_slice(&[0x0f, 0xa0, 0x23, 0x84]);
    let tlv = [0x02, 0x00, 0x03, b'k', b'a', b'f'];
    let v2 = |command: u8, family: u8, body: &[u8]| {
        let mut out = vec![3u8];
        out.extend_from_slice(signature);
        out.push(0x20 | command);
        out.push(family);
        out.extend_from_slice(&(body.len() as u16).to_be_bytes());
        out.extend_from_slice(body);
        out.extend_from_slice(b"\x00\x00\x00\x0aframe");
        out
    };
    let v1 = |line: &str| [[3u8].as_slice(), line.as_bytes(), b"\x00\x00\x00\x0aframe"].concat();
    vec![
        (
            "v1-tcp4".into(),
            v1("PROXY TCP4 192.0.2.1 198.51.100.1 40000 9092\r\n"),
        ),
        (
            "v1-tcp6".into(),
            v1("PROXY TCP6 2001:db8::1 2001:db8::2 40000 9092\r\n"),
        ),
        ("v1-unknown".into(), v1("PROXY UNKNOWN\r\n")),
        ("v2-inet".into(), v2(1, 0x11, &inet)),
        (
            "v2-inet-tlv".into(),
            v2(1, 0x11, &[inet.as_slice(), &tlv].concat()),
        ),
        ("v2-inet6".into(), v2(1, 0x21, &inet6)),
        ("v2-local".into(), v2(0, 0x00, &[])),
    ]
}
