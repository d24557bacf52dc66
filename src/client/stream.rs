//! A connection to a Kafka broker: plain TCP, or TLS over TCP. Both kinds read
//! and write alike, so that the client, discovery and the forwarding links do
//! not care which one they have.

use crate::tls::ClientTlsMaterial;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

pub enum Stream {
    Plain(TcpStream),
    Tls(Box<crate::tls::stream::ClientTls>),
}

impl Stream {
    /// The TCP connection underneath.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(s) => s.tcp(),
        }
    }

    /// Whether the peer has ended the connection: its FIN or a reset has
    /// arrived, whatever bytes are still unread (a TLS peer's close_notify
    /// among them). Asks the kernel for the TCP state; reads nothing.
    pub fn ended_by_peer(&self) -> bool {
        tcp_state(self.tcp()).is_some_and(|state| state != TCP_ESTABLISHED)
    }
}

/// `TCP_ESTABLISHED` of the kernel's TCP states (include/net/tcp_states.h).
const TCP_ESTABLISHED: u8 = 1;

/// The socket's TCP state (`tcpi_state` of `TCP_INFO`); None when the kernel
/// does not say.
fn tcp_state(tcp: &TcpStream) -> Option<u8> {
    use std::os::fd::AsRawFd;
    // SAFETY: tcp_info is plain data, for which all zeroes is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the descriptor is open for as long as `tcp` is borrowed, and the
    // kernel writes at most `len` bytes into `info`.
    let rc = unsafe {
        libc::getsockopt(
            tcp.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    (rc == 0 && len >= 1).then_some(info.tcpi_state)
}

/// Connects to `target` (HOST:PORT) and, with `tls`, completes the handshake;
/// both within `timeout`. The error says which step failed.
pub async fn connect(
    target: &str,
    timeout: Duration,
    tls: Option<&ClientTlsMaterial>,
) -> Result<Stream, String> {
    let steps = async {
        let tcp = TcpStream::connect(target)
            .await
            .map_err(|e| e.to_string())?;
        let _ = tcp.set_nodelay(true);
        keepalive(&tcp);
        let Some(material) = tls else {
            return Ok(Stream::Plain(tcp));
        };
        let name = material.name_for(target)?;
        crate::tls::stream::connect(std::sync::Arc::clone(&material.config), name, tcp)
            .await
            .map(|s| Stream::Tls(Box::new(s)))
            .map_err(|e| {
                if e.kind() == io::ErrorKind::UnexpectedEof {
                    format!(
                        "TLS handshake failed: the server closed the connection ({e}); \
                         a plaintext listener does that (connect with security.protocol=PLAINTEXT or SASL_PLAINTEXT)"
                    )
                } else {
                    format!("TLS handshake failed: {e}")
                }
            })
    };
    tokio::time::timeout(timeout, steps)
        .await
        .map_err(|_| format!("no answer within {timeout:?}"))?
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Turns on TCP keepalive: a peer that vanishes without a reset (a host that
/// lost power, a dropped route) is noticed within about two minutes, instead of
/// holding the connection and its descriptor for ever.
pub fn keepalive(tcp: &TcpStream) {
    let probes = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(60))
        .with_interval(Duration::from_secs(10))
        .with_retries(6);
    if let Err(e) = socket2::SockRef::from(tcp).set_tcp_keepalive(&probes) {
        tracing::debug!("TCP keepalive not set: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_connection_the_peer_closed_is_seen_ended_without_a_read() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let stream = connect(&addr, Duration::from_secs(5), None).await.unwrap();
        let (peer, _) = listener.accept().await.unwrap();
        assert!(!stream.ended_by_peer());
        // Bytes waiting unread do not end it; the peer's FIN does.
        let mut peer = peer.into_std().unwrap();
        io::Write::write_all(&mut peer, b"unread").unwrap();
        tokio::time::timeout(Duration::from_secs(5), stream.tcp().readable())
            .await
            .expect("the peer's bytes never arrived")
            .unwrap();
        assert!(!stream.ended_by_peer());
        drop(peer);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while !stream.ended_by_peer() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the peer's FIN never showed"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
