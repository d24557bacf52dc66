//! What the TLS stream (`stream`) needs of the socket underneath it, and an
//! in-memory socket for the tests and the fuzz target.
//!
//! The stream reads ciphertext in two steps, as tokio's `TcpStream` lets it:
//! it waits for the socket to be readable, and only then makes room in its
//! buffer and reads, so that a connection that finds nothing allocates
//! nothing. [`Transport`] names those two steps and the write that does not
//! wait. [`Pieces`] hands over the bytes pushed into it one piece per read,
//! as a network hands over one segment at a time, so that a test can cut a
//! stream exactly where it wants.

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// A socket the TLS stream can run over.
pub trait Transport: AsyncRead + AsyncWrite + Send + Unpin + 'static {
    /// Ready once a read may find bytes (or the end); the waker is kept
    /// until then.
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    /// Reads into `buf`'s spare capacity, never beyond it; `WouldBlock` when
    /// nothing has arrived, `Ok(0)` at the end.
    fn try_read_buf(&self, buf: &mut Vec<u8>) -> io::Result<usize>;
    /// Writes what the socket takes now; `WouldBlock` when it takes nothing.
    fn try_write(&self, buf: &[u8]) -> io::Result<usize>;
}

impl Transport for TcpStream {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        TcpStream::poll_read_ready(self, cx)
    }

    fn try_read_buf(&self, buf: &mut Vec<u8>) -> io::Result<usize> {
        TcpStream::try_read_buf(self, buf)
    }

    fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        TcpStream::try_write(self, buf)
    }
}

/// A socket in memory: each read takes at most one of the pieces pushed
/// through its [`PiecesHandle`] (the rest of a piece the reader had no room
/// for comes with the next read); what is written to it is kept for the
/// handle to take.
#[doc(hidden)]
pub struct Pieces {
    shared: Arc<Mutex<Wire>>,
}

/// The other end of [`Pieces`].
#[doc(hidden)]
#[derive(Clone)]
pub struct PiecesHandle {
    shared: Arc<Mutex<Wire>>,
}

#[derive(Default)]
struct Wire {
    pieces: VecDeque<Vec<u8>>,
    ended: bool,
    written: Vec<u8>,
    reader: Option<Waker>,
}

fn lock(shared: &Mutex<Wire>) -> MutexGuard<'_, Wire> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

impl Pieces {
    pub fn new() -> (Pieces, PiecesHandle) {
        let shared = Arc::new(Mutex::new(Wire::default()));
        (
            Pieces {
                shared: Arc::clone(&shared),
            },
            PiecesHandle { shared },
        )
    }

    /// Takes the next piece, or as much of it as `room` allows.
    fn take(&self, room: usize, into: impl FnOnce(&[u8])) -> io::Result<usize> {
        let mut wire = lock(&self.shared);
        let Some(mut piece) = wire.pieces.pop_front() else {
            return if wire.ended {
                Ok(0)
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            };
        };
        let n = piece.len().min(room);
        into(&piece[..n]);
        if n < piece.len() {
            piece.drain(..n);
            wire.pieces.push_front(piece);
        }
        Ok(n)
    }
}

impl PiecesHandle {
    /// Hands `piece` to the reader (an empty piece is dropped: a read of 0
    /// bytes would be the end).
    pub fn push(&self, piece: &[u8]) {
        if piece.is_empty() {
            return;
        }
        let mut wire = lock(&self.shared);
        wire.pieces.push_back(piece.to_vec());
        if let Some(reader) = wire.reader.take() {
            reader.wake();
        }
    }

    /// The reader sees the end once it has read every piece.
    pub fn end(&self) {
        let mut wire = lock(&self.shared);
        wire.ended = true;
        if let Some(reader) = wire.reader.take() {
            reader.wake();
        }
    }

    /// Pieces not read yet.
    pub fn unread(&self) -> usize {
        lock(&self.shared).pieces.len()
    }

    /// What was written since the last call.
    pub fn take_written(&self) -> Vec<u8> {
        std::mem::take(&mut lock(&self.shared).written)
    }
}

impl Transport for Pieces {
    fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut wire = lock(&self.shared);
        if wire.pieces.is_empty() && !wire.ended {
            wire.reader = Some(cx.waker().clone());
            return Poll::Pending;
        }
        Poll::Ready(Ok(()))
    }

    fn try_read_buf(&self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let room = buf.capacity() - buf.len();
        self.take(room, |bytes| buf.extend_from_slice(bytes))
    }

    fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        lock(&self.shared).written.extend_from_slice(buf);
        Ok(buf.len())
    }
}

impl AsyncRead for Pieces {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.poll_read_ready(cx)?.is_pending() {
            return Poll::Pending;
        }
        self.take(buf.remaining(), |bytes| buf.put_slice(bytes))?;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Pieces {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(self.try_write(buf))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
