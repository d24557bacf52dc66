//! A real TLS client against kshim's server stream over memory, cut into
//! the pieces a test or the fuzz target chooses: what the property tests of
//! `stream` and the `tls_stream` fuzz target drive the stream with.

use super::hello::accept;
use super::transport::Pieces;
use std::io;
use std::sync::Arc;

/// What [`feed_server`] saw.
#[doc(hidden)]
#[derive(Debug)]
pub struct Fed {
    /// The plaintext the server read, up to its end or its error.
    pub read: Vec<u8>,
    /// Why the server's stream failed, if it did.
    pub error: Option<io::Error>,
    /// The largest capacity of the server's buffer of ciphertext, after each read.
    pub most_buffered: usize,
}

/// A TLS client (rustls's buffered connection) against kshim's server stream
/// over [`Pieces`], for the tests and the fuzz target: the client's
/// ciphertext goes over in pieces of the sizes `cuts` gives in turn (each
/// read by the server alone), `data` is sent once the handshake is done,
/// then close_notify. `corrupt`: the byte at this offset of the application
/// data's ciphertext is flipped on the way.
#[doc(hidden)]
pub async fn feed_server(
    server: Arc<rustls::ServerConfig>,
    client: Arc<rustls::ClientConfig>,
    name: rustls::pki_types::ServerName<'static>,
    data: &[u8],
    cuts: &[usize],
    corrupt: Option<usize>,
) -> Fed {
    use std::io::Write as _;
    use tokio::io::AsyncReadExt as _;
    let (transport, wire) = Pieces::new();
    let done = std::cell::Cell::new(false);
    let serving = async {
        let mut fed = Fed {
            read: Vec::new(),
            error: None,
            most_buffered: 0,
        };
        match accept(server, transport).await {
            Err(e) => fed.error = Some(e),
            Ok(mut tls) => {
                let mut buf = vec![0u8; 20_000];
                loop {
                    let read = tls.read(&mut buf).await;
                    fed.most_buffered = fed.most_buffered.max(tls.read_buffer_capacity());
                    match read {
                        Ok(0) => break,
                        Ok(n) => fed.read.extend_from_slice(&buf[..n]),
                        Err(e) => {
                            fed.error = Some(e);
                            break;
                        }
                    }
                }
            }
        }
        done.set(true);
        fed
    };
    let driving = async {
        let Ok(mut conn) = rustls::ClientConnection::new(client, name) else {
            wire.end();
            return;
        };
        // All of `data` encrypted at once, so that no record boundary but the stream's
        // last falls where a batch ends.
        conn.set_buffer_limit(None);
        let mut cut = cuts.iter().map(|&c| c.max(1)).cycle();
        // Plaintext taken by the client so far (rustls takes 64 KiB at a time), and the
        // ciphertext sent since the first of it.
        let mut taken: Option<usize> = None;
        let mut application = 0;
        let mut closing = false;
        while !done.get() {
            let mut out = Vec::new();
            while conn.wants_write() {
                if conn.write_tls(&mut out).is_err() {
                    break;
                }
            }
            if taken.is_some() {
                if let Some(at) = corrupt.and_then(|c| c.checked_sub(application)) {
                    if let Some(byte) = out.get_mut(at) {
                        *byte ^= 0x5a;
                    }
                }
                application += out.len();
            }
            let mut rest = &out[..];
            while !rest.is_empty() {
                let n = cut.next().unwrap_or(1).min(rest.len());
                wire.push(&rest[..n]);
                rest = &rest[n..];
                // The server reads this piece alone before the next arrives.
                while wire.unread() > 0 && !done.get() {
                    tokio::task::yield_now().await;
                }
            }
            if closing {
                wire.end();
                break;
            }
            let back = wire.take_written();
            if !back.is_empty()
                && (conn.read_tls(&mut &back[..]).is_err() || conn.process_new_packets().is_err())
            {
                wire.end();
                break;
            }
            if !conn.is_handshaking() {
                let at = taken.unwrap_or(0);
                let n = conn.writer().write(&data[at..]).unwrap_or(0);
                taken = Some(at + n);
                if at + n == data.len() {
                    conn.send_close_notify();
                    closing = true;
                }
                continue;
            }
            tokio::task::yield_now().await;
        }
    };
    let (fed, ()) = futures::join!(serving, driving);
    fed
}
