//! kshim's TLS stream (`tls::stream`) on the server's side, fed a real
//! client's ciphertext (rustls's buffered connection) cut into pieces whose
//! sizes the input picks, each read by the stream alone, as a network hands
//! over one segment at a time: the handshake, the records, close_notify.
//!
//! Input: a mode byte (bit 0: flip one byte of the application data's
//! ciphertext), a repeat byte, a u16 offset of the flipped byte, a chunk of
//! big-endian u16s (each piece's size, less one; none: 1,448 bytes), then the
//! plaintext, sent `repeat % 64 + 1` times over. Checked beyond "no panic":
//! the stream's buffer of ciphertext never exceeds its bound; untouched, the
//! plaintext read is exactly the plaintext sent; with a flipped byte, the
//! stream fails and what it read before is a prefix of what was sent.

#![no_main]

mod common;

use kshim::tls::feed::feed_server;
use kshim::tls::stream::READ_BUFFER_BOUND;
use libfuzzer_sys::fuzz_target;
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use std::sync::{Arc, OnceLock};

#[global_allocator]
static ALLOCATOR: common::BoundedAllocator = common::BoundedAllocator;

struct Setup {
    runtime: tokio::runtime::Runtime,
    server: Arc<rustls::ServerConfig>,
    client: Arc<rustls::ClientConfig>,
}

/// A self-signed certificate for localhost, and the two configs, made once.
fn setup() -> &'static Setup {
    static SETUP: OnceLock<Setup> = OnceLock::new();
    SETUP.get_or_init(|| {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = rcgen::KeyPair::generate().expect("a key");
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .expect("params")
            .self_signed(&key)
            .expect("a certificate");
        let server = rustls::ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )
            .expect("the server config");
        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert.der().clone()).expect("the root");
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        Setup {
            runtime: tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("a runtime"),
            server: Arc::new(server),
            client: Arc::new(client),
        }
    })
}

fn seeds() -> Vec<(String, Vec<u8>)> {
    let text = b"a Produce request, or anything else a client sends".repeat(40);
    let seed = |mode: u8, repeat: u8, cuts: &[u16]| {
        let mut sizes = Vec::new();
        for c in cuts {
            sizes.extend_from_slice(&c.to_be_bytes());
        }
        common::Seed::new()
            .byte(mode)
            .byte(repeat)
            .u16(700)
            .chunk(&sizes)
            .bytes(&text)
            .done()
    };
    vec![
        ("segments".into(), seed(0, 40, &[1447])),
        ("large".into(), seed(0, 40, &[u16::MAX])),
        ("bytes".into(), seed(0, 0, &[0])),
        ("mixed".into(), seed(0, 20, &[0, 99, 1447, 16383, 40000])),
        ("flipped".into(), seed(1, 20, &[1447])),
    ]
}

fuzz_target!(init: common::write_seeds_if_asked(seeds), |data: &[u8]| {
    let mut input = common::Input::new(data);
    let mode = input.byte();
    let repeat = usize::from(input.byte() % 64) + 1;
    let offset = usize::from(input.u16());
    let flip = (mode & 1 == 1).then_some(offset);
    let cuts: Vec<usize> = input
        .chunk()
        .chunks(2)
        .map(|c| usize::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])) + 1)
        .collect();
    let cuts = if cuts.is_empty() { vec![1448] } else { cuts };
    let plaintext = input.rest().repeat(repeat);
    let s = setup();
    let name = ServerName::try_from("localhost").expect("a name");
    let fed = s.runtime.block_on(feed_server(
        Arc::clone(&s.server),
        Arc::clone(&s.client),
        name,
        &plaintext,
        &cuts,
        flip,
    ));
    assert!(
        fed.most_buffered <= READ_BUFFER_BOUND,
        "the read buffer grew to {} bytes",
        fed.most_buffered
    );
    match flip {
        None => {
            assert!(fed.error.is_none(), "{:?}", fed.error);
            assert!(fed.read == plaintext, "read {} bytes of {}", fed.read.len(), plaintext.len());
        }
        Some(_) => assert!(plaintext.starts_with(&fed.read), "a flipped byte was read as plaintext"),
    }
});
