//! A TLS session over a TCP socket that holds no buffer while it is idle: the
//! stream of every forwarded TLS connection, on the client's side
//! ([`ServerTls`]) and the broker's ([`ClientTls`]).
//!
//! rustls's buffered connection keeps a 4 KiB read buffer for as long as the
//! connection lives, and reads at most 4 KiB per system call. On rustls's
//! unbuffered API kshim owns the buffers instead: ciphertext is read in blocks
//! of up to 64 KiB (8 KiB during the handshake), and every buffer (the
//! ciphertext read, the plaintext not yet taken, the ciphertext not yet sent)
//! is given back when a read finds the socket empty with nothing held, which
//! is where an idle connection waits, and the ciphertext buffer as soon as a
//! read took every record in it. What stays is rustls's session state (keys,
//! the state machine, and on a client the server's certificate chain): 3 to
//! 5 KiB per side, about half what the buffered connection keeps.
//!
//! The bounds: a read makes room for 64 KiB of ciphertext beyond what is
//! pending (less than a record between reads, or a handshake message of up
//! to 64 KiB being joined, as rustls allows: 128 KiB in all at most, however
//! the network cuts the stream: records already processed are dropped from
//! the front before the buffer would grow); a write
//! takes at most 64 KiB of plaintext and takes nothing more until the
//! ciphertext of the one before is on the socket (rustls's buffered
//! connection held the same 64 KiB); plaintext not yet taken is at most what
//! one read of ciphertext decrypts to.
//!
//! Owns the socket and the TLS records in both directions. Knows nothing of
//! Kafka; which certificates and which peers are accepted is the configs'
//! business (`server`, `client`).

use rustls::client::{ClientConnectionData, UnbufferedClientConnection};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::server::{ServerConnectionData, UnbufferedServerConnection};
use rustls::unbuffered::{
    ConnectionState, EncodeError, EncryptError, UnbufferedStatus, WriteTraffic,
};
use std::future::poll_fn;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

pub use super::transport::{Pieces, PiecesHandle, Transport};

/// Room for each read of ciphertext: up to four records at once.
const READ_ROOM: usize = 64 * 1024;
/// Room for each read during the handshake, whose flights are small; a
/// larger message (a long certificate chain) makes it grow.
const HANDSHAKE_READ_ROOM: usize = 8 * 1024;
/// Room for one handshake message of up to 64 KiB (what rustls accepts) and
/// the headers of the records it spans.
pub(super) const MAX_JOINED: usize = 128 * 1024;
/// The most the buffer of ciphertext read and not yet processed ever holds
/// (the module header's bound: a read's room, or a handshake message being
/// joined), for the tests and the fuzz target.
#[doc(hidden)]
pub const READ_BUFFER_BOUND: usize = if READ_ROOM > MAX_JOINED {
    READ_ROOM
} else {
    MAX_JOINED
};
/// The plaintext one write takes at most.
const MAX_WRITE: usize = 64 * 1024;
/// Plaintext of one record.
const RECORD_PLAINTEXT: usize = 16 * 1024;
/// Room reserved per record for its header, tag and content type; a cipher
/// that needs more is told by rustls and given it.
const RECORD_OVERHEAD: usize = 64;

/// The stream of a client's connection to a kshim listener.
pub type ServerTls = TlsStream<UnbufferedServerConnection>;
/// The stream of kshim's connection to a broker.
pub type ClientTls = TlsStream<UnbufferedClientConnection>;

/// One side of an unbuffered rustls session.
pub trait Session: Send + Unpin + 'static {
    type Data;
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self::Data>;
    fn common(&self) -> &rustls::CommonState;
}

impl Session for UnbufferedServerConnection {
    type Data = ServerConnectionData;
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, ServerConnectionData> {
        self.process_tls_records(incoming)
    }
    fn common(&self) -> &rustls::CommonState {
        self
    }
}

impl Session for UnbufferedClientConnection {
    type Data = ClientConnectionData;
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, ClientConnectionData> {
        self.process_tls_records(incoming)
    }
    fn common(&self) -> &rustls::CommonState {
        self
    }
}

/// A TLS session over TCP (or, in the tests and the fuzz target, over
/// [`Pieces`]); see the module header.
pub struct TlsStream<S, T = TcpStream> {
    tcp: T,
    session: S,
    incoming: Incoming,
    plain: Plain,
    out: Outgoing,
    /// The peer sent close_notify (or the socket ended): reads see the end.
    read_closed: bool,
    /// close_notify is queued or sent: nothing more is encrypted.
    close_queued: bool,
}

/// What a step of the session asks for next.
enum Next {
    /// Ciphertext from the peer.
    Input,
    /// Nothing: the peer closed its side.
    End,
}

/// What a step may do once the handshake is over.
enum Action<'a> {
    None,
    /// Encrypt these, at most `MAX_WRITE` bytes; how many were taken is
    /// returned.
    Encrypt(&'a [IoSlice<'a>]),
    /// Queue close_notify.
    Close,
}

impl<S: Session, T: Transport> TlsStream<S, T> {
    pub(super) fn new(tcp: T, session: S, incoming: Incoming) -> Self {
        TlsStream {
            tcp,
            session,
            incoming,
            plain: Plain::default(),
            out: Outgoing::default(),
            read_closed: false,
            close_queued: false,
        }
    }

    /// The TCP connection underneath.
    pub fn tcp(&self) -> &T {
        &self.tcp
    }

    /// The capacity of the buffer of ciphertext read and not yet processed
    /// (what the module header bounds), for the tests and the fuzz target.
    #[doc(hidden)]
    pub fn read_buffer_capacity(&self) -> usize {
        self.incoming.buf.capacity()
    }

    /// The certificates the peer presented, its own first.
    pub fn peer_certificates(&self) -> Option<&[CertificateDer<'static>]> {
        self.session.common().peer_certificates()
    }

    /// Runs the handshake to its end, our last flight sent.
    pub(super) async fn handshake(&mut self) -> io::Result<()> {
        poll_fn(|cx| self.poll_handshake(cx)).await
    }

    fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let next = self.step(None, Action::None)?.0;
            ready!(self.poll_send(cx))?;
            if !self.session.common().is_handshaking() {
                // Freed here, on the thread that allocated them (the
                // handshake threads): a block freed by another thread waits
                // for its owner to allocate again before its page can go.
                self.release_idle();
                return Poll::Ready(Ok(()));
            }
            if matches!(next, Next::End) || ready!(self.poll_fill(cx))? == 0 {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the peer closed the connection during the TLS handshake",
                )));
            }
        }
    }

    /// Processes the ciphertext read so far until the session needs more, or
    /// `read` is full, or it closed. Plaintext goes to `read` while it has
    /// room and nothing is waiting before it, the rest to `self.plain`;
    /// handshake and alert records to `self.out`. `action` is done once the
    /// session may send application data. Returns what the session needs
    /// next, and how many bytes `action` took.
    fn step(
        &mut self,
        mut read: Option<&mut ReadBuf<'_>>,
        mut action: Action<'_>,
    ) -> io::Result<(Next, usize)> {
        let mut taken = 0;
        loop {
            if self.read_closed && matches!(action, Action::None) {
                return Ok((Next::End, taken));
            }
            let Self {
                session,
                incoming,
                plain,
                out,
                ..
            } = self;
            let status = session.process(incoming.pending_mut());
            let discard = status.discard;
            let state = match status.state {
                Ok(state) => state,
                Err(e) => {
                    incoming.discard(discard);
                    return Err(self.failed(e));
                }
            };
            let mut next = None;
            match state {
                ConnectionState::ReadTraffic(mut records) => {
                    while let Some(record) = records.next_record() {
                        match record {
                            Ok(record) => plain.deliver(record.payload, read.as_deref_mut()),
                            Err(e) => {
                                drop(records);
                                incoming.discard(discard);
                                return Err(self.failed(e));
                            }
                        }
                    }
                    if read.as_ref().is_some_and(|r| r.remaining() == 0) {
                        next = Some(Next::Input);
                    }
                }
                ConnectionState::EncodeTlsData(mut encode) => {
                    out.append(RECORD_PLAINTEXT, |room| match encode.encode(room) {
                        Ok(n) => Ok(n),
                        Err(EncodeError::InsufficientSize(e)) => Err(Some(e.required_size)),
                        Err(EncodeError::AlreadyEncoded) => Err(None),
                    })
                    .map_err(|()| {
                        io::Error::other("a TLS handshake record could not be encoded")
                    })?;
                }
                // The records encoded are in `out`, ahead of anything written
                // after them; `poll_send` puts them on the socket in order.
                ConnectionState::TransmitTlsData(transmit) => transmit.done(),
                ConnectionState::BlockedHandshake => next = Some(Next::Input),
                ConnectionState::WriteTraffic(mut traffic) => {
                    match std::mem::replace(&mut action, Action::None) {
                        Action::None => {}
                        Action::Encrypt(bufs) => taken = encrypt(&mut traffic, bufs, out)?,
                        Action::Close => {
                            out.append(RECORD_OVERHEAD, |room| {
                                traffic.queue_close_notify(room).map_err(required)
                            })
                            .map_err(|()| {
                                io::Error::other("close_notify could not be encrypted")
                            })?;
                            self.close_queued = true;
                        }
                    }
                    next = Some(Next::Input);
                }
                // The peer's close_notify: reads end; writes may go on.
                ConnectionState::PeerClosed => self.read_closed = true,
                // Both sides sent close_notify: nothing more either way.
                ConnectionState::Closed => {
                    self.read_closed = true;
                    next = Some(Next::End);
                }
                // Early data is never accepted (the configs leave it off).
                ConnectionState::ReadEarlyData(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "TLS early data arrived, which kshim does not accept",
                    ))
                }
                other => {
                    return Err(io::Error::other(format!(
                        "TLS session in a state kshim does not handle: {other:?}"
                    )))
                }
            }
            self.incoming.discard(discard);
            if let Some(next) = next {
                return Ok((next, taken));
            }
        }
    }

    /// The session failed: its alert, if it has one, is sent without waiting,
    /// and the error is returned as `InvalidData`.
    fn failed(&mut self, error: rustls::Error) -> io::Error {
        let Self {
            session,
            incoming,
            out,
            tcp,
            ..
        } = self;
        let status = session.process(incoming.pending_mut());
        if let Ok(ConnectionState::EncodeTlsData(mut encode)) = status.state {
            let _ = out.append(RECORD_OVERHEAD, |room| {
                encode.encode(room).map_err(|_| None)
            });
        }
        if let Some(alert) = out.unsent() {
            let _ = tcp.try_write(alert);
        }
        *out = Outgoing::default();
        io::Error::new(io::ErrorKind::InvalidData, error)
    }

    /// Reads ciphertext into `self.incoming`; `Ready(Ok(0))` at the socket's
    /// end. While the socket has nothing, gives back the buffers that hold
    /// nothing, and returns `Pending`.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        loop {
            if self.tcp.poll_read_ready(cx)?.is_pending() {
                self.release_idle();
                return Poll::Pending;
            }
            let room = if self.session.common().is_handshaking() {
                HANDSHAKE_READ_ROOM
            } else {
                READ_ROOM
            };
            let buf = self.incoming.room(room)?;
            match self.tcp.try_read_buf(buf) {
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    /// Writes the queued ciphertext to the socket, all of it or `Pending`.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some(unsent) = self.out.unsent() {
            let n = ready!(Pin::new(&mut self.tcp).poll_write(cx, unsent))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.out.sent(n);
        }
        Poll::Ready(Ok(()))
    }

    /// Writes what the socket takes now of the queued ciphertext; the rest
    /// waits for the next write or flush.
    fn try_send(&mut self) -> io::Result<()> {
        while let Some(unsent) = self.out.unsent() {
            match self.tcp.try_write(unsent) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.out.sent(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The connection waits with nothing in flight: hold no buffer.
    fn release_idle(&mut self) {
        if self.incoming.is_empty() {
            self.incoming = Incoming::default();
        }
        if self.out.unsent().is_none() {
            self.out = Outgoing::default();
        }
    }
}

/// Encrypts up to `MAX_WRITE` bytes of `bufs` into `out`; small slices are
/// gathered into whole records first, so that a frame's size prefix does not
/// become a record of its own. Returns the bytes taken.
fn encrypt<D>(
    traffic: &mut WriteTraffic<'_, D>,
    bufs: &[IoSlice<'_>],
    out: &mut Outgoing,
) -> io::Result<usize> {
    let mut seal = |data: &[u8], out: &mut Outgoing| {
        let records = data.len().div_ceil(RECORD_PLAINTEXT).max(1);
        out.append(data.len() + records * RECORD_OVERHEAD, |room| {
            traffic.encrypt(data, room).map_err(|e| match e {
                EncryptError::InsufficientSize(e) => Some(e.required_size),
                EncryptError::EncryptExhausted => None,
            })
        })
        .map_err(|()| io::Error::other("the TLS session can encrypt no more (its key is used up)"))
    };
    let mut gathered: Vec<u8> = Vec::new();
    let mut taken = 0;
    for buf in bufs {
        let mut data = &buf[..buf.len().min(MAX_WRITE - taken)];
        taken += data.len();
        // A small slice, or the start of a large one after small ones, fills
        // the record being gathered.
        if !gathered.is_empty() || data.len() < RECORD_PLAINTEXT {
            let fill = (RECORD_PLAINTEXT - gathered.len()).min(data.len());
            gathered.extend_from_slice(&data[..fill]);
            data = &data[fill..];
            if gathered.len() == RECORD_PLAINTEXT {
                seal(&gathered, out)?;
                gathered.clear();
            }
        }
        if data.len() >= RECORD_PLAINTEXT {
            seal(data, out)?;
        } else {
            gathered.extend_from_slice(data);
        }
        if taken == MAX_WRITE {
            break;
        }
    }
    if !gathered.is_empty() {
        seal(&gathered, out)?;
    }
    Ok(taken)
}

/// What rustls asks for when the room given was too small.
fn required(e: EncryptError) -> Option<usize> {
    match e {
        EncryptError::InsufficientSize(e) => Some(e.required_size),
        EncryptError::EncryptExhausted => None,
    }
}

impl<S: Session, T: Transport> AsyncRead for TlsStream<S, T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.plain.read_into(buf) {
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        loop {
            // What the session queued (a key update, an alert) goes out
            // without waiting: a read never waits on the socket's writing side,
            // which may be another task's to wait on.
            this.try_send()?;
            let (next, _) = this.step(Some(buf), Action::None)?;
            if buf.filled().len() > before || buf.remaining() == 0 {
                // Every record read was taken: the ciphertext buffer goes now,
                // not at the next read, which a client that reads only when it
                // expects an answer (kshim's own connections to the brokers)
                // may not make for a long time. Reads allocate it again
                // without zeroing it.
                if this.incoming.is_empty() {
                    this.incoming = Incoming::default();
                }
                return Poll::Ready(Ok(()));
            }
            match next {
                Next::End => return Poll::Ready(Ok(())),
                Next::Input => {
                    if ready!(this.poll_fill(cx))? == 0 {
                        this.read_closed = true;
                        if !this.incoming.is_empty() {
                            return Poll::Ready(Err(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "the peer closed the connection inside a TLS record",
                            )));
                        }
                        return Poll::Ready(Ok(()));
                    }
                }
            }
        }
    }
}

impl<S: Session, T: Transport> AsyncWrite for TlsStream<S, T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_write_vectored(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        // The ciphertext of the last write leaves before more is taken.
        ready!(this.poll_send(cx))?;
        if bufs.iter().all(|b| b.is_empty()) {
            return Poll::Ready(Ok(0));
        }
        if this.close_queued {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "write after the TLS session was closed",
            )));
        }
        let (_, taken) = this.step(None, Action::Encrypt(bufs))?;
        if taken == 0 {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the TLS session takes no more application data",
            )));
        }
        // Start sending now; what the socket does not take waits for the
        // next write or flush.
        let _ = this.poll_send(cx)?;
        Poll::Ready(Ok(taken))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.tcp).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.close_queued {
            ready!(this.poll_send(cx))?;
            this.step(None, Action::Close)?;
            this.close_queued = true;
        }
        ready!(this.poll_send(cx))?;
        Pin::new(&mut this.tcp).poll_shutdown(cx)
    }
}

/// Connects a TLS session to a server over `tcp` and completes the handshake.
pub async fn connect<T: Transport>(
    config: Arc<rustls::ClientConfig>,
    name: ServerName<'static>,
    tcp: T,
) -> io::Result<TlsStream<UnbufferedClientConnection, T>> {
    let session = UnbufferedClientConnection::new(config, name)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut stream = TlsStream::new(tcp, session, Incoming::default());
    stream.handshake().await?;
    Ok(stream)
}

/// Ciphertext read and not yet processed: `buf[start..]`. Reads go into the
/// buffer's spare capacity, which is never zeroed first.
#[derive(Default)]
pub(super) struct Incoming {
    buf: Vec<u8>,
    start: usize,
}

impl Incoming {
    pub(super) fn holding(bytes: Vec<u8>) -> Self {
        Incoming {
            buf: bytes,
            start: 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.start == self.buf.len()
    }

    fn pending_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..]
    }

    fn discard(&mut self, n: usize) {
        self.start = (self.start + n).min(self.buf.len());
        if self.is_empty() {
            self.buf.clear();
            self.start = 0;
        }
    }

    /// The buffer, with room for the next read: at least a read's worth, or
    /// twice what is pending while one handshake message spans more than
    /// that. Its capacity is at most [`READ_BUFFER_BOUND`] whatever the reads
    /// were cut into.
    fn room(&mut self, size: usize) -> io::Result<&mut Vec<u8>> {
        let pending = self.buf.len() - self.start;
        let want = if pending < size / 2 {
            size - pending
        } else if pending < MAX_JOINED {
            pending.min(MAX_JOINED - pending)
        } else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a TLS message larger than 128 KiB",
            ));
        };
        // The records already processed go before the buffer would grow: a
        // read that ends inside a record (every read, when the network hands
        // over one 1,448-byte segment at a time) leaves them in front, and
        // growing past them would grow the buffer by every record processed
        // until a read happened to end on a record's boundary. What moves is
        // the part of a record read so far.
        if self.start > 0 && self.buf.capacity() - self.buf.len() < want {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        // Exact: a buffer of one size, allocated again after every idle
        // spell, is one the allocator reuses.
        self.buf.reserve_exact(want);
        Ok(&mut self.buf)
    }
}

/// Plaintext decrypted and not yet read: `buf[at..]`.
#[derive(Default)]
struct Plain {
    buf: Vec<u8>,
    at: usize,
}

impl Plain {
    /// Hands `payload` to `read` while it has room and nothing is waiting
    /// before it; keeps the rest.
    fn deliver(&mut self, payload: &[u8], read: Option<&mut ReadBuf<'_>>) {
        let mut given = 0;
        if let Some(read) = read {
            if self.buf.is_empty() {
                given = payload.len().min(read.remaining());
                read.put_slice(&payload[..given]);
            }
        }
        self.buf.extend_from_slice(&payload[given..]);
    }

    /// Copies what is waiting into `read`; false when nothing was.
    fn read_into(&mut self, read: &mut ReadBuf<'_>) -> bool {
        if self.buf.is_empty() || read.remaining() == 0 {
            return false;
        }
        let n = (self.buf.len() - self.at).min(read.remaining());
        read.put_slice(&self.buf[self.at..self.at + n]);
        self.at += n;
        if self.at == self.buf.len() {
            *self = Plain::default();
        }
        true
    }
}

/// Ciphertext to send: `buf[sent..end]`. rustls writes into initialized
/// room, so the buffer is zeroed when it grows, and kept at its size while
/// the connection is busy (given back when it goes idle).
#[derive(Default)]
struct Outgoing {
    buf: Vec<u8>,
    sent: usize,
    end: usize,
}

impl Outgoing {
    fn unsent(&self) -> Option<&[u8]> {
        (self.sent < self.end).then(|| &self.buf[self.sent..self.end])
    }

    fn sent(&mut self, n: usize) {
        self.sent += n;
        if self.sent == self.end {
            self.sent = 0;
            self.end = 0;
        }
    }

    /// Appends what `write` puts into the room it is given (`hint` bytes,
    /// or what it says it needs); `Err(None)` from `write` fails.
    fn append(
        &mut self,
        hint: usize,
        mut write: impl FnMut(&mut [u8]) -> Result<usize, Option<usize>>,
    ) -> Result<(), ()> {
        let mut room = hint;
        loop {
            if self.buf.len() < self.end + room {
                self.buf.resize(self.end + room, 0);
            }
            match write(&mut self.buf[self.end..]) {
                Ok(n) => {
                    self.end += n;
                    return Ok(());
                }
                Err(Some(needed)) if needed > room => room = needed,
                Err(_) => return Err(()),
            }
        }
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
