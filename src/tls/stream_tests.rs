//! The unbuffered stream against rustls's buffered connection (through
//! tokio-rustls) as the peer, and against itself.

use super::*;
use crate::tls::feed::feed_server;
use crate::tls::hello::{accept, read_client_hello};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::RootCertStore;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

struct Pki {
    server: Arc<rustls::ServerConfig>,
    client: Arc<rustls::ClientConfig>,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A CA, a server certificate for localhost signed by it, and configs that
/// use them.
fn pki() -> Pki {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let server = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
        )
        .unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(ca.der().clone()).unwrap();
    let client = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Pki {
        server: Arc::new(server),
        client: Arc::new(client),
    }
}

fn localhost() -> ServerName<'static> {
    ServerName::try_from("localhost").unwrap()
}

async fn pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (a, b) = tokio::join!(TcpStream::connect(addr), listener.accept());
    (a.unwrap(), b.unwrap().0)
}

/// Bytes that are not all alike, so that a misplaced byte shows.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// Echoes what `s` reads until its end, writing with vectored writes of
/// three slices so that gathering is exercised.
async fn echo<S: AsyncRead + AsyncWrite + Unpin>(mut s: S) {
    let mut buf = vec![0u8; 50_000];
    loop {
        let n = s.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        let (a, rest) = buf[..n].split_at(n.min(4));
        let (b, c) = rest.split_at(rest.len() / 2);
        let mut slices = [IoSlice::new(a), IoSlice::new(b), IoSlice::new(c)];
        let mut left: &mut [IoSlice<'_>] = &mut slices;
        while !left.is_empty() {
            let w = s.write_vectored(left).await.unwrap();
            IoSlice::advance_slices(&mut left, w);
        }
    }
    s.shutdown().await.unwrap();
}

/// kshim's stream connected to an echo server on kshim's stream.
async fn echo_pair() -> (ClientTls, tokio::task::JoinHandle<()>) {
    let pki = pki();
    let (client, server) = pair().await;
    let config = Arc::clone(&pki.server);
    let served = tokio::spawn(async move { echo(accept(config, server).await.unwrap()).await });
    let tls = connect(Arc::clone(&pki.client), localhost(), client)
        .await
        .unwrap();
    (tls, served)
}

/// Sends `data` in writes of varied sizes and reads the echo back.
async fn round_trip<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(s: S, data: Vec<u8>) {
    let (mut r, mut w) = tokio::io::split(s);
    let expected = data.clone();
    let writer = tokio::spawn(async move {
        let mut at = 0;
        let mut size = 1;
        while at < data.len() {
            let end = (at + size).min(data.len());
            w.write_all(&data[at..end]).await.unwrap();
            at = end;
            size = size * 3 % 70_001 + 1;
        }
        w.flush().await.unwrap();
        w
    });
    let mut back = vec![0u8; expected.len()];
    r.read_exact(&mut back).await.unwrap();
    assert!(back == expected, "the echo differs from what was sent");
    let mut w = writer.await.unwrap();
    w.shutdown().await.unwrap();
    let mut end = [0u8; 1];
    assert_eq!(
        r.read(&mut end).await.unwrap(),
        0,
        "the echo ends after the data"
    );
}

#[tokio::test]
async fn serves_a_buffered_client() {
    let pki = pki();
    let (client, server) = pair().await;
    let config = Arc::clone(&pki.server);
    let served = tokio::spawn(async move { echo(accept(config, server).await.unwrap()).await });
    let connector = tokio_rustls::TlsConnector::from(Arc::clone(&pki.client));
    let tls = connector.connect(localhost(), client).await.unwrap();
    round_trip(tls, pattern(3 << 20)).await;
    served.await.unwrap();
}

#[tokio::test]
async fn connects_to_a_buffered_server() {
    let pki = pki();
    let (client, server) = pair().await;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(&pki.server));
    let served = tokio::spawn(async move { echo(acceptor.accept(server).await.unwrap()).await });
    let tls = connect(Arc::clone(&pki.client), localhost(), client)
        .await
        .unwrap();
    assert!(tls.peer_certificates().is_some_and(|c| c.len() == 1));
    round_trip(tls, pattern(3 << 20)).await;
    served.await.unwrap();
}

#[tokio::test]
async fn both_sides_unbuffered() {
    let (tls, served) = echo_pair().await;
    round_trip(tls, pattern(1 << 20)).await;
    served.await.unwrap();
}

#[tokio::test]
async fn an_idle_stream_holds_no_buffer() {
    let (mut tls, served) = echo_pair().await;
    let data = pattern(200_000);
    tls.write_all(&data).await.unwrap();
    tls.flush().await.unwrap();
    let mut back = vec![0u8; data.len()];
    tls.read_exact(&mut back).await.unwrap();
    assert!(back == data);
    let mut one = [0u8; 1];
    let waited = tokio::time::timeout(Duration::from_millis(50), tls.read(&mut one)).await;
    assert!(waited.is_err(), "nothing more was sent");
    assert_eq!(
        tls.incoming.buf.capacity(),
        0,
        "ciphertext buffer kept while idle"
    );
    assert_eq!(tls.out.buf.capacity(), 0, "send buffer kept while idle");
    assert_eq!(
        tls.plain.buf.capacity(),
        0,
        "plaintext buffer kept while idle"
    );
    tls.shutdown().await.unwrap();
    served.await.unwrap();
}

#[tokio::test]
async fn a_client_that_reads_only_its_answers_keeps_no_read_buffer() {
    let (mut tls, served) = echo_pair().await;
    for size in [10, 5_000, 100_000] {
        let data = pattern(size);
        tls.write_all(&data).await.unwrap();
        let mut back = vec![0u8; size];
        tls.read_exact(&mut back).await.unwrap();
        assert!(back == data);
        // No read waits after the answer, as with kshim's own client.
        assert_eq!(
            tls.incoming.buf.capacity(),
            0,
            "after an answer of {size} bytes"
        );
    }
    tls.shutdown().await.unwrap();
    served.await.unwrap();
}

#[tokio::test]
async fn a_key_update_from_the_peer_is_answered() {
    let pki = pki();
    let (client, server) = pair().await;
    let config = Arc::clone(&pki.server);
    let served = tokio::spawn(async move { echo(accept(config, server).await.unwrap()).await });
    let connector = tokio_rustls::TlsConnector::from(Arc::clone(&pki.client));
    let mut tls = connector.connect(localhost(), client).await.unwrap();
    for round in 0..4 {
        // Asks the server to update its keys as well.
        tls.get_mut().1.refresh_traffic_keys().unwrap();
        let data = pattern(40_000 + round);
        tls.write_all(&data).await.unwrap();
        let mut back = vec![0u8; data.len()];
        tls.read_exact(&mut back).await.unwrap();
        assert!(back == data, "round {round}");
    }
    tls.shutdown().await.unwrap();
    served.await.unwrap();
}

#[tokio::test]
async fn an_untrusted_server_is_refused_with_an_alert() {
    let trusted = pki();
    let other = pki();
    let (client, server) = pair().await;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(&other.server));
    let served = tokio::spawn(async move { acceptor.accept(server).await.map(|_| ()) });
    let refused = connect(Arc::clone(&trusted.client), localhost(), client).await;
    let error = refused.err().expect("the handshake fails");
    assert_eq!(error.kind(), io::ErrorKind::InvalidData);
    assert!(
        error.to_string().contains("invalid peer certificate"),
        "{error}"
    );
    let seen = served.await.unwrap().expect_err("the server hears of it");
    assert!(
        seen.to_string().contains("alert"),
        "the server got an alert: {seen}"
    );
}

#[tokio::test]
async fn bytes_that_are_not_tls_are_refused() {
    for garbage in [
        &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        &[0, 0, 0, 14, 0, 18, 0, 3][..],
    ] {
        let (mut client, server) = pair().await;
        client.write_all(garbage).await.unwrap();
        let error = read_client_hello(server).await.err().expect("refused");
        assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
    }
    let (client, server) = pair().await;
    drop(client);
    let error = read_client_hello(server).await.err().expect("refused");
    assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
}

#[tokio::test]
async fn a_plaintext_server_ends_the_handshake() {
    let pki = pki();
    let (client, mut server) = pair().await;
    tokio::spawn(async move {
        // Reads the ClientHello's record whole, so that closing sends a FIN
        // (unread bytes would make it a reset), and closes.
        let mut header = [0u8; 5];
        server.read_exact(&mut header).await.unwrap();
        let mut body = vec![0u8; u16::from_be_bytes([header[3], header[4]]) as usize];
        server.read_exact(&mut body).await.unwrap();
    });
    let error = connect(Arc::clone(&pki.client), localhost(), client)
        .await
        .err()
        .expect("no handshake");
    assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof, "{error}");
}

#[tokio::test]
async fn the_server_name_is_read_before_the_config_is_chosen() {
    let pki = pki();
    let (client, server) = pair().await;
    let connector = tokio_rustls::TlsConnector::from(Arc::clone(&pki.client));
    let connecting = tokio::spawn(async move {
        let mut tls = connector.connect(localhost(), client).await.unwrap();
        tls.write_all(b"ping").await.unwrap();
        tls.shutdown().await.unwrap();
    });
    let hello = read_client_hello(server).await.unwrap();
    assert_eq!(hello.server_name(), Some("localhost"));
    let mut tls = hello.accept(Arc::clone(&pki.server)).await.unwrap();
    let mut got = Vec::new();
    tls.read_to_end(&mut got).await.unwrap();
    assert_eq!(got, b"ping");
    connecting.await.unwrap();
}

#[tokio::test]
async fn a_socket_closed_without_close_notify_ends_reads() {
    let pki = pki();
    let (client, server) = pair().await;
    let config = Arc::clone(&pki.server);
    let accepted = tokio::spawn(async move { accept(config, server).await.unwrap() });
    let connector = tokio_rustls::TlsConnector::from(Arc::clone(&pki.client));
    let mut tls = connector.connect(localhost(), client).await.unwrap();
    let mut ours = accepted.await.unwrap();
    // The session tickets the server sent are read (unread bytes would turn
    // the close into a reset), then the TCP connection goes away without a
    // close_notify.
    let mut none = [0u8; 1];
    let _ = tokio::time::timeout(Duration::from_millis(50), tls.read(&mut none)).await;
    drop(tls.into_inner().0);
    let mut buf = [0u8; 8];
    assert_eq!(ours.read(&mut buf).await.unwrap(), 0);
}

use std::time::Duration;

/// The largest TLS record on the wire: 16 KiB of plaintext, the most
/// expansion TLS 1.2 allows, and the header.
const MAX_RECORD: usize = 16 * 1024 + 2048 + 5;

/// A stream of application-data records of the given payload sizes, each
/// payload a pattern that starts at its record's index.
fn records(sizes: &[usize]) -> Vec<u8> {
    let mut stream = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        stream.extend_from_slice(&[23, 3, 3]);
        stream.extend_from_slice(&(size as u16).to_be_bytes());
        stream.extend((0..size).map(|j| (i * 31 + j * 7) as u8));
    }
    stream
}

proptest::proptest! {
    /// The read buffer against any cutting of the stream into reads, as the
    /// network hands it over (one 1,448-byte segment, or 64 KiB at once):
    /// its capacity stays within the module's bound, and the records taken
    /// out of it are the records sent, byte for byte. `process` here takes
    /// every whole record, as rustls does.
    #[test]
    fn the_read_buffer_stays_within_its_bound_whatever_the_reads_are_cut_into(
        sizes in proptest::collection::vec(0usize..=MAX_RECORD - 5, 1..48),
        cuts in proptest::collection::vec(1usize..=READ_ROOM, 1..64),
        segment in proptest::bool::ANY,
    ) {
        let stream = records(&sizes);
        let mut incoming = Incoming::default();
        let mut taken = Vec::new();
        let mut at = 0;
        let mut cut = cuts.iter().cycle();
        while at < stream.len() {
            let buf = incoming.room(READ_ROOM).unwrap();
            let wanted = if segment { 1448 } else { *cut.next().unwrap() };
            let n = wanted.min(buf.capacity() - buf.len()).min(stream.len() - at);
            proptest::prop_assert!(n > 0, "a read was given no room");
            buf.extend_from_slice(&stream[at..at + n]);
            at += n;
            proptest::prop_assert!(
                incoming.buf.capacity() <= READ_BUFFER_BOUND,
                "the read buffer grew to {} bytes", incoming.buf.capacity()
            );
            loop {
                let pending = incoming.pending_mut();
                if pending.len() < 5 {
                    break;
                }
                let whole = 5 + u16::from_be_bytes([pending[3], pending[4]]) as usize;
                if pending.len() < whole {
                    break;
                }
                taken.extend_from_slice(&pending[..whole]);
                incoming.discard(whole);
            }
        }
        proptest::prop_assert!(taken == stream, "the records taken differ from those sent");
        proptest::prop_assert!(incoming.is_empty());
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    /// The whole stream against any cutting of a client's ciphertext into
    /// reads of 1 byte to 64 KiB (the handshake included): the plaintext
    /// read is exactly the plaintext sent, and the ciphertext buffer stays
    /// within the module's bound.
    #[test]
    fn the_stream_reads_exactly_what_was_sent_whatever_the_reads_are_cut_into(
        cuts in proptest::collection::vec(
            proptest::prop_oneof![1usize..=64, 1usize..=2048, 1usize..=READ_ROOM],
            1..16,
        ),
        len in 0usize..=200_000,
    ) {
        let pki = pki();
        let data = pattern(len);
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let fed = runtime.block_on(feed_server(pki.server, pki.client, localhost(), &data, &cuts, None));
        proptest::prop_assert!(fed.error.is_none(), "{:?}", fed.error);
        proptest::prop_assert!(fed.read == data, "read {} bytes of {}", fed.read.len(), data.len());
        proptest::prop_assert!(fed.most_buffered <= READ_BUFFER_BOUND, "{}", fed.most_buffered);
    }
}

#[test]
fn a_flipped_byte_of_ciphertext_fails_the_stream_and_passes_nothing_on() {
    let pki = pki();
    let data = pattern(50_000);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let fed = runtime.block_on(feed_server(
        pki.server,
        pki.client,
        localhost(),
        &data,
        &[1448],
        Some(20_000),
    ));
    let error = fed.error.expect("the stream failed");
    assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
    // The records before the flipped one are intact, and nothing after it is read.
    assert!(fed.read.len() < 20_000 && data.starts_with(&fed.read));
}
