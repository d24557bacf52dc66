//! A client's first flight, read before the TLS handshake goes on: the
//! server name it asks for chooses the config (or is refused) before kshim
//! spends a signature on it (`server::accept_tls`).

use super::stream::{Incoming, TlsStream, MAX_JOINED};
use super::transport::Transport;
use rustls::server::{Acceptor, UnbufferedServerConnection};
use std::io;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A client's first flight, read and parsed: enough to choose a config (or to
/// refuse the server name it asks for) before the handshake goes on.
pub struct ClientHello<T = TcpStream> {
    tcp: T,
    /// Every byte read so far, handed to the session.
    bytes: Vec<u8>,
    server_name: Option<String>,
}

/// Reads a client's ClientHello from `tcp`. An error names what was wrong;
/// a malformed hello is answered with rustls's alert first.
pub async fn read_client_hello<T: Transport>(mut tcp: T) -> io::Result<ClientHello<T>> {
    /// A ClientHello is a few hundred bytes; a larger one takes more reads.
    const HELLO_READ: usize = 4096;
    let mut acceptor = Acceptor::default();
    let mut bytes = Vec::new();
    loop {
        let at = bytes.len();
        if at >= MAX_JOINED {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a ClientHello larger than 128 KiB",
            ));
        }
        bytes.resize(at + HELLO_READ, 0);
        let n = tcp.read(&mut bytes[at..]).await?;
        bytes.truncate(at + n);
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the peer closed the connection before its ClientHello was whole",
            ));
        }
        let mut fresh = &bytes[at..];
        while !fresh.is_empty() {
            if acceptor.read_tls(&mut fresh)? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a ClientHello larger than rustls accepts",
                ));
            }
        }
        match acceptor.accept() {
            Ok(None) => {}
            Ok(Some(accepted)) => {
                let server_name = accepted.client_hello().server_name().map(str::to_owned);
                return Ok(ClientHello {
                    tcp,
                    bytes,
                    server_name,
                });
            }
            Err((error, mut alert)) => {
                let mut record = Vec::new();
                if alert.write_all(&mut record).is_ok() {
                    let _ = tcp.write_all(&record).await;
                }
                return Err(io::Error::new(io::ErrorKind::InvalidData, error));
            }
        }
    }
}

impl<T: Transport> ClientHello<T> {
    /// The server name the client asked for (SNI), if any.
    pub fn server_name(&self) -> Option<&str> {
        self.server_name.as_deref()
    }

    /// The TCP connection, to refuse the hello on.
    pub fn into_tcp(self) -> T {
        self.tcp
    }

    /// Goes on with the handshake under `config`.
    pub async fn accept(
        self,
        config: Arc<rustls::ServerConfig>,
    ) -> io::Result<TlsStream<UnbufferedServerConnection, T>> {
        let session = UnbufferedServerConnection::new(config)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut stream = TlsStream::new(self.tcp, session, Incoming::holding(self.bytes));
        stream.handshake().await?;
        Ok(stream)
    }
}

/// Accepts a TLS session over `tcp` under `config`, whatever name it asks for.
pub async fn accept<T: Transport>(
    config: Arc<rustls::ServerConfig>,
    tcp: T,
) -> io::Result<TlsStream<UnbufferedServerConnection, T>> {
    read_client_hello(tcp).await?.accept(config).await
}
