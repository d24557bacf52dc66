//! Frames over a byte stream, driven by polling so that one task can serve both
//! ends of a forwarded connection: `FrameReader` takes size-prefixed frames off a
//! stream, asking before it buffers a frame's body, and `Outbox` writes queued
//! frames out with vectored writes, a whole batch per system call.
//!
//! Knows frames only: a big-endian int32 size, then that many bytes.

use crate::protocol::frame::{frame_size, FrameError};
use bytes::{Buf, Bytes, BytesMut};
use std::collections::VecDeque;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite};

/// Room made for a read between frames: small frames arrive several to a read.
const READ_CHUNK: usize = 16 * 1024;
/// What a reader without a buffer reads first, on the stack: most requests
/// and many answers whole.
const PROBE: usize = 4096;

/// Slices handed to one vectored write.
const MAX_SLICES: usize = 64;

/// Reads frames (returned without their size prefix) off a stream.
#[derive(Debug)]
pub struct FrameReader {
    buf: BytesMut,
    max_frame_bytes: usize,
    /// The body size of the frame being read, once its size was granted (its
    /// prefix is then no longer in `buf`).
    granted: Option<usize>,
    /// Bytes of that frame's body already taken before it was whole
    /// ([`FrameReader::take_arrived`]).
    taken: usize,
    /// When the bytes of a frame not yet whole began to arrive (or its size was
    /// granted, after a wait for the grant).
    partial_since: Option<Instant>,
    /// The read buffer, set aside while the body of a frame larger than it is
    /// read into a block of the body's size (then `buf`).
    spare: Option<BytesMut>,
    /// The body size of the last frame read.
    last_size: usize,
    eof: bool,
}

impl FrameReader {
    pub fn new(max_frame_bytes: usize) -> FrameReader {
        FrameReader {
            buf: BytesMut::new(),
            max_frame_bytes,
            granted: None,
            taken: 0,
            partial_since: None,
            spare: None,
            last_size: 0,
            eof: false,
        }
    }

    /// Frames of more than `max_frame_bytes` are refused from the next size
    /// prefix on (a client that authenticates is allowed larger ones).
    pub fn limit(&mut self, max_frame_bytes: usize) {
        self.max_frame_bytes = max_frame_bytes;
    }

    /// Since when part of a frame has been waiting for the rest; `None` between
    /// frames and while waiting for a grant.
    pub fn partial_since(&self) -> Option<Instant> {
        self.partial_since
    }

    /// Whether the stream has ended.
    pub fn at_eof(&self) -> bool {
        self.eof
    }

    /// The next whole frame; `Ok(None)` at the end of the stream. `grant` is asked
    /// for each frame's body size once its prefix has arrived, and before any
    /// room is made for the body; while it is pending, nothing more is read.
    pub fn poll_frame<S: AsyncRead + Unpin>(
        &mut self,
        io: &mut S,
        cx: &mut Context<'_>,
        mut grant: impl FnMut(usize, &mut Context<'_>) -> Poll<()>,
    ) -> Poll<Result<Option<Bytes>, FrameError>> {
        loop {
            if self.granted.is_none() && self.buf.len() >= 4 {
                let size = frame_size(&self.buf[..4], self.max_frame_bytes)?;
                if grant(size, cx).is_pending() {
                    self.partial_since = None;
                    return Poll::Pending;
                }
                self.granted = Some(size);
                self.taken = 0;
                self.partial_since.get_or_insert_with(Instant::now);
                self.buf.advance(4);
                if size > self.buf.capacity() && !self.buf.try_reclaim(size - self.buf.len()) {
                    // A block of the body's size, which one read can fill and
                    // no read can run past; the read buffer waits for the
                    // frames after it.
                    let mut body = BytesMut::with_capacity(size);
                    body.extend_from_slice(&self.buf);
                    self.buf.clear();
                    self.spare = Some(std::mem::replace(&mut self.buf, body));
                }
            }
            if let Some(size) = self.granted {
                let rest = size - self.taken;
                if self.buf.len() >= rest {
                    let frame = match self.spare.take() {
                        Some(spare) => std::mem::replace(&mut self.buf, spare).freeze(),
                        None => self.buf.split_to(rest).freeze(),
                    };
                    self.granted = None;
                    self.last_size = size;
                    self.taken = 0;
                    self.partial_since = (!self.buf.is_empty()).then(Instant::now);
                    return Poll::Ready(Ok(Some(frame)));
                }
            }
            if self.eof {
                // The bytes of the unfinished frame, its size prefix included.
                let arrived = self.buf.len() + self.granted.map_or(0, |_| 4 + self.taken);
                return Poll::Ready(if arrived == 0 {
                    Ok(None)
                } else {
                    Err(FrameError::TruncatedAtEof(arrived))
                });
            }
            let n = if self.buf.capacity() == 0 {
                ready!(self.poll_probe(io, cx))?
            } else {
                // Between frames, room for one the size of the last (up to a
                // chunk), so that one read takes it; within one, room to read on.
                let want = if self.buf.is_empty() {
                    (4 + self.last_size).clamp(512, READ_CHUNK)
                } else {
                    512
                };
                if self.spare.is_none() && self.buf.capacity() - self.buf.len() < want {
                    // Reclaims the buffer's block once its frames are gone.
                    self.buf.reserve(READ_CHUNK);
                }
                ready!(tokio_util::io::poll_read_buf(
                    Pin::new(&mut *io),
                    cx,
                    &mut self.buf
                ))?
            };
            if n == 0 {
                self.eof = true;
            } else {
                self.partial_since.get_or_insert_with(Instant::now);
            }
        }
    }
}

impl FrameReader {
    /// Reads without a buffer (its owner freed it, expecting nothing): onto the
    /// stack, so that a read that finds nothing allocates nothing; what it finds
    /// starts a buffer of its size, from which a frame that came whole is cut.
    fn poll_probe<S: AsyncRead + Unpin>(
        &mut self,
        io: &mut S,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<usize>> {
        // Uninitialised: a wake-up that finds nothing does not clear 4 KiB.
        let mut probe = [std::mem::MaybeUninit::<u8>::uninit(); PROBE];
        let mut read = tokio::io::ReadBuf::uninit(&mut probe);
        ready!(Pin::new(io).poll_read(cx, &mut read))?;
        let arrived = read.filled();
        self.buf.extend_from_slice(arrived);
        Poll::Ready(Ok(arrived.len()))
    }

    /// Frees that buffer. Its owner frees it when it expects no frame (no
    /// request in flight, no answer due): the buffer stays between the frames of
    /// a busy connection, and the connections that wait hold none.
    pub fn free_room(&mut self) {
        // Empty, it may still hold the block its last frame was cut from.
        if self.granted.is_none() && self.buf.is_empty() {
            self.buf = BytesMut::new();
        }
    }

    /// The frame being read, once its size was granted and before it is whole:
    /// its body size, and the bytes of its body that arrived and were not
    /// taken yet (they start at body offset [`FrameReader::taken`]).
    pub fn receiving(&self) -> Option<(usize, &[u8])> {
        let size = self.granted?;
        let rest = size - self.taken;
        Some((size, &self.buf[..self.buf.len().min(rest)]))
    }

    /// Bytes of the frame being read that [`FrameReader::take_arrived`] took.
    pub fn taken(&self) -> usize {
        self.taken
    }

    /// Takes the arrived bytes of the frame being read, up to body offset
    /// `upto` and never its last byte, so that they can be passed on before
    /// the frame is whole. The frame `poll_frame` yields is then the rest of
    /// its body. Nothing is copied: the bytes taken share the frame's block.
    pub fn take_arrived(&mut self, upto: usize) -> Option<Bytes> {
        let size = self.granted?;
        let rest = size - self.taken;
        let n = self
            .buf
            .len()
            .min(rest.saturating_sub(1))
            .min(upto.saturating_sub(self.taken));
        if n == 0 {
            return None;
        }
        self.taken += n;
        Some(self.buf.split_to(n).freeze())
    }
}

/// One frame waiting to be written.
#[derive(Debug)]
struct Queued<T> {
    /// The size prefix, when the frame does not carry its own.
    prefix: Option<[u8; 4]>,
    frame: Bytes,
    /// Bytes of prefix and frame already written.
    written: usize,
    /// When it was queued.
    since: Instant,
    tag: T,
}

impl<T> Queued<T> {
    fn len(&self) -> usize {
        self.prefix.map_or(0, |_| 4) + self.frame.len()
    }
}

/// Frames queued for a stream, in order; each written whole before the next.
/// Each frame carries a tag for its owner's own bookkeeping (its kind, the
/// bytes of a budget that the frame holds until it is written, what it answers).
#[derive(Debug)]
pub struct Outbox<T = u32> {
    queue: VecDeque<Queued<T>>,
    /// Bytes queued and not yet written, prefixes included.
    bytes: usize,
    flushed: bool,
}

/// `frame` with its size prefix.
pub fn prefixed(frame: &[u8]) -> Bytes {
    let mut out = bytes::BytesMut::with_capacity(4 + frame.len());
    out.extend_from_slice(&(frame.len() as u32).to_be_bytes());
    out.extend_from_slice(frame);
    out.freeze()
}

impl<T> Default for Outbox<T> {
    fn default() -> Self {
        Outbox {
            queue: VecDeque::new(),
            bytes: 0,
            flushed: false,
        }
    }
}

impl<T: Copy> Outbox<T> {
    /// Queues a frame that lacks its size prefix.
    pub fn push_unprefixed(&mut self, frame: Bytes, tag: T, since: Instant) {
        let prefix = (frame.len() as u32).to_be_bytes();
        self.push(Queued {
            prefix: Some(prefix),
            frame,
            written: 0,
            since,
            tag,
        });
    }

    /// Queues the first part of a frame of `size` bytes (without prefix), to
    /// go after the frame's size prefix; the rest follows with `push_prefixed`.
    pub fn push_first_part(&mut self, part: Bytes, size: usize, tag: T, since: Instant) {
        self.push(Queued {
            prefix: Some((size as u32).to_be_bytes()),
            frame: part,
            written: 0,
            since,
            tag,
        });
    }

    /// Queues a frame that starts with its size prefix (or a part of a frame
    /// whose prefix was queued before it).
    pub fn push_prefixed(&mut self, frame: Bytes, tag: T, since: Instant) {
        self.push(Queued {
            prefix: None,
            frame,
            written: 0,
            since,
            tag,
        });
    }

    fn push(&mut self, q: Queued<T>) {
        self.bytes += q.len();
        self.queue.push_back(q);
        self.flushed = false;
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Whether the queue keeps room, though empty, from its last burst.
    pub fn keeps_room(&self) -> bool {
        self.queue.is_empty() && self.queue.capacity() > 0
    }

    /// Frees the room an empty queue kept from its last burst.
    pub fn free_room(&mut self) {
        if self.queue.is_empty() {
            self.queue = VecDeque::new();
        }
    }

    /// Frames not yet written whole.
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// Bytes not yet written.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// When the oldest frame not yet written whole was queued.
    pub fn oldest(&self) -> Option<Instant> {
        self.queue.front().map(|q| q.since)
    }

    /// Writes until everything queued is written and flushed, or the stream
    /// would block. `written` hears of each frame written whole, with its tag,
    /// its size without prefix, and when it was queued.
    pub fn poll_write<S: AsyncWrite + Unpin>(
        &mut self,
        io: &mut S,
        cx: &mut Context<'_>,
        mut written: impl FnMut(T, usize, Instant),
    ) -> Poll<std::io::Result<()>> {
        while !self.queue.is_empty() {
            let n = {
                let mut slices: [IoSlice<'_>; MAX_SLICES] = [IoSlice::new(&[]); MAX_SLICES];
                let mut used = 0;
                for q in self.queue.iter() {
                    if used + 2 > MAX_SLICES {
                        break;
                    }
                    let mut skip = q.written;
                    if let Some(prefix) = &q.prefix {
                        if skip < 4 {
                            slices[used] = IoSlice::new(&prefix[skip..]);
                            used += 1;
                            skip = 0;
                        } else {
                            skip -= 4;
                        }
                    }
                    if skip < q.frame.len() {
                        slices[used] = IoSlice::new(&q.frame[skip..]);
                        used += 1;
                    }
                }
                ready!(Pin::new(&mut *io).poll_write_vectored(cx, &slices[..used]))?
            };
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            self.bytes -= n;
            let mut left = n;
            while left > 0 {
                let front = self
                    .queue
                    .front_mut()
                    .expect("written bytes belong to queued frames");
                let take = (front.len() - front.written).min(left);
                front.written += take;
                left -= take;
                if front.written == front.len() {
                    let done = self.queue.pop_front().expect("front exists");
                    written(done.tag, done.frame.len(), done.since);
                }
            }
        }
        if !self.flushed {
            ready!(Pin::new(&mut *io).poll_flush(cx))?;
            self.flushed = true;
        }
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::task::noop_waker_ref;
    use tokio::io::AsyncWriteExt;

    fn cx() -> Context<'static> {
        Context::from_waker(noop_waker_ref())
    }

    #[tokio::test]
    async fn reads_frames_after_their_grant() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        a.write_all(&[0, 0, 0, 3, 1, 2, 3, 0, 0, 0, 1, 9])
            .await
            .unwrap();
        let mut reader = FrameReader::new(16);
        let mut asked = Vec::new();
        let mut pending = true;
        // The grant is pending: nothing comes, and only the first size was asked.
        let first = reader.poll_frame(&mut b, &mut cx(), |n, _| {
            asked.push(n);
            if pending {
                Poll::Pending
            } else {
                Poll::Ready(())
            }
        });
        assert!(first.is_pending());
        pending = false;
        let got =
            |r: &mut FrameReader, b: &mut tokio::io::DuplexStream, asked: &mut Vec<usize>| match r
                .poll_frame(b, &mut cx(), |n, _| {
                    asked.push(n);
                    Poll::Ready(())
                }) {
                Poll::Ready(Ok(Some(f))) => f,
                other => panic!("expected a frame, got {other:?}"),
            };
        assert_eq!(&got(&mut reader, &mut b, &mut asked)[..], &[1, 2, 3]);
        assert_eq!(&got(&mut reader, &mut b, &mut asked)[..], &[9]);
        let _ = pending;
        assert_eq!(asked, vec![3, 3, 1]);
        drop(a);
        assert!(matches!(
            reader.poll_frame(&mut b, &mut cx(), |_, _| Poll::Ready(())),
            Poll::Ready(Ok(None))
        ));
    }

    #[tokio::test]
    async fn a_frame_can_be_taken_in_parts_while_it_arrives() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let mut reader = FrameReader::new(64);
        let grant = |_: usize, _: &mut Context<'_>| Poll::Ready(());
        a.write_all(&[0, 0, 0, 10, 1, 2, 3]).await.unwrap();
        assert!(reader.poll_frame(&mut b, &mut cx(), grant).is_pending());
        assert_eq!(
            reader.receiving().map(|(n, got)| (n, got.len())),
            Some((10, 3))
        );
        // Up to offset 2, then what arrived; never the frame's last byte.
        assert_eq!(&reader.take_arrived(2).unwrap()[..], &[1, 2]);
        assert_eq!(&reader.take_arrived(usize::MAX).unwrap()[..], &[3]);
        assert_eq!(reader.taken(), 3);
        assert!(reader.take_arrived(usize::MAX).is_none());
        a.write_all(&[4, 5, 6, 7, 8, 9]).await.unwrap();
        assert!(reader.poll_frame(&mut b, &mut cx(), grant).is_pending());
        assert_eq!(&reader.take_arrived(8).unwrap()[..], &[4, 5, 6, 7, 8]);
        a.write_all(&[10, 0, 0, 0, 1, 11]).await.unwrap();
        match reader.poll_frame(&mut b, &mut cx(), grant) {
            Poll::Ready(Ok(Some(rest))) => assert_eq!(&rest[..], &[9, 10]),
            other => panic!("expected the rest of the frame, got {other:?}"),
        }
        assert_eq!(reader.taken(), 0);
        match reader.poll_frame(&mut b, &mut cx(), grant) {
            Poll::Ready(Ok(Some(next))) => assert_eq!(&next[..], &[11]),
            other => panic!("expected the next frame, got {other:?}"),
        }
        // A stream that ends inside a frame taken in part is truncated.
        a.write_all(&[0, 0, 0, 5, 1, 2]).await.unwrap();
        assert!(reader.poll_frame(&mut b, &mut cx(), grant).is_pending());
        assert!(reader.take_arrived(usize::MAX).is_some());
        drop(a);
        assert!(matches!(
            reader.poll_frame(&mut b, &mut cx(), grant),
            Poll::Ready(Err(FrameError::TruncatedAtEof(6)))
        ));
    }

    #[tokio::test]
    async fn a_busy_reader_keeps_its_buffer_and_an_idle_one_reads_without_one() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        let mut reader = FrameReader::new(64);
        let grant = |_: usize, _: &mut Context<'_>| Poll::Ready(());
        assert!(reader.poll_frame(&mut b, &mut cx(), grant).is_pending());
        assert_eq!(
            reader.buf.capacity(),
            0,
            "a read that found nothing made no buffer"
        );
        a.write_all(&[0, 0, 0, 1, 7]).await.unwrap();
        assert!(
            matches!(reader.poll_frame(&mut b, &mut cx(), grant), Poll::Ready(Ok(Some(f))) if f[..] == [7])
        );
        assert!(reader.poll_frame(&mut b, &mut cx(), grant).is_pending());
        assert!(reader.buf.capacity() > 0, "the buffer stays between frames");
        reader.free_room();
        assert_eq!(reader.buf.capacity(), 0);
        assert!(reader.poll_frame(&mut b, &mut cx(), grant).is_pending());
        assert_eq!(reader.buf.capacity(), 0, "nor after its room was freed");
        a.write_all(&[0, 0, 0, 2, 8, 9]).await.unwrap();
        assert!(
            matches!(reader.poll_frame(&mut b, &mut cx(), grant), Poll::Ready(Ok(Some(f))) if f[..] == [8, 9])
        );
    }

    #[tokio::test]
    async fn a_frame_larger_than_the_read_buffer_has_a_block_of_its_own() {
        let size = READ_CHUNK * 3 + 5;
        let body: Vec<u8> = (0..size).map(|i| i as u8).collect();
        let mut wire = (size as u32).to_be_bytes().to_vec();
        wire.extend_from_slice(&body);
        wire.extend_from_slice(&[0, 0, 0, 1, 42]);
        let (mut a, mut b) = tokio::io::duplex(4096);
        let writer = tokio::spawn(async move { a.write_all(&wire).await.map(|()| a) });
        let mut reader = FrameReader::new(size);
        let mut parts = Vec::new();
        let frame = std::future::poll_fn(|cx| loop {
            match reader.poll_frame(&mut b, cx, |_, _| Poll::Ready(())) {
                Poll::Pending => match reader.take_arrived(size / 2) {
                    Some(part) => parts.push(part),
                    None => return Poll::Pending,
                },
                other => return other,
            }
        })
        .await
        .unwrap()
        .unwrap();
        assert_eq!(reader.taken(), 0);
        let mut whole: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
        assert_eq!(whole.len(), size / 2, "taken up to the offset asked");
        whole.extend_from_slice(&frame);
        assert!(whole == body, "the frame arrives whole and in order");
        assert!(reader.spare.is_none());
        assert!(
            reader.buf.capacity() <= READ_CHUNK,
            "the read buffer is back"
        );
        let _a = writer.await.unwrap().unwrap();
        let next = std::future::poll_fn(|cx| reader.poll_frame(&mut b, cx, |_, _| Poll::Ready(())));
        assert!(matches!(next.await, Ok(Some(f)) if f[..] == [42]));
    }

    /// Counts the reads that returned bytes.
    struct Counted<R>(R, usize);

    impl<R: AsyncRead + Unpin> AsyncRead for Counted<R> {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            let before = buf.filled().len();
            let polled = Pin::new(&mut self.0).poll_read(cx, buf);
            if buf.filled().len() > before {
                self.1 += 1;
            }
            polled
        }
    }

    #[tokio::test]
    async fn between_frames_one_read_takes_a_frame_the_size_of_the_last() {
        let (mut a, b) = tokio::io::duplex(64 << 10);
        let mut b = Counted(b, 0);
        let mut reader = FrameReader::new(64 << 10);
        let mut held = Vec::new();
        for round in 0..6u8 {
            let mut frame = 12_000u32.to_be_bytes().to_vec();
            frame.resize(4 + 12_000, round);
            a.write_all(&frame).await.unwrap();
            let reads = b.1;
            let got =
                std::future::poll_fn(|cx| reader.poll_frame(&mut b, cx, |_, _| Poll::Ready(())));
            let got = got.await.unwrap().unwrap();
            assert!(got.len() == 12_000 && got[0] == round);
            if round > 0 {
                assert_eq!(b.1 - reads, 1, "frame {round} took one read");
            }
            // The frames are still held (on their way upstream): no block is reclaimed.
            held.push(got);
        }
    }

    #[tokio::test]
    async fn refuses_bad_sizes_and_truncation() {
        let (mut a, mut b) = tokio::io::duplex(1024);
        a.write_all(&[0, 0, 0, 17]).await.unwrap();
        let mut reader = FrameReader::new(16);
        assert!(matches!(
            reader.poll_frame(&mut b, &mut cx(), |_, _| Poll::Ready(())),
            Poll::Ready(Err(FrameError::TooLarge { size: 17, max: 16 }))
        ));
        let (mut a, mut b) = tokio::io::duplex(1024);
        a.write_all(&[0, 0, 0, 3, 1]).await.unwrap();
        drop(a);
        let mut reader = FrameReader::new(16);
        assert!(matches!(
            reader.poll_frame(&mut b, &mut cx(), |_, _| Poll::Ready(())),
            Poll::Ready(Err(FrameError::TruncatedAtEof(5)))
        ));
    }

    #[tokio::test]
    async fn writes_queued_frames_in_order_with_their_prefixes() {
        let (mut a, mut b) = tokio::io::duplex(7);
        let mut outbox = Outbox::default();
        let now = Instant::now();
        outbox.push_unprefixed(Bytes::from_static(b"abc"), 1, now);
        outbox.push_prefixed(Bytes::from_static(&[0, 0, 0, 2, b'x', b'y']), 2, now);
        outbox.push_unprefixed(Bytes::from_static(b"0123456789"), 1, now);
        assert_eq!(outbox.bytes(), 7 + 6 + 14);
        let mut done = Vec::new();
        let mut seen = Vec::new();
        // The pipe holds 7 bytes: the outbox writes what fits, then waits.
        while !outbox.is_empty() {
            let _ = outbox.poll_write(&mut a, &mut cx(), |tag, n, _| done.push((tag, n)));
            let mut chunk = [0u8; 64];
            let n = tokio::io::AsyncReadExt::read(&mut b, &mut chunk)
                .await
                .unwrap();
            seen.extend_from_slice(&chunk[..n]);
        }
        assert!(outbox
            .poll_write(&mut a, &mut cx(), |_, _, _| {})
            .is_ready());
        let mut rest = [0u8; 64];
        drop(a);
        let n = tokio::io::AsyncReadExt::read(&mut b, &mut rest)
            .await
            .unwrap();
        seen.extend_from_slice(&rest[..n]);
        let mut want = vec![0, 0, 0, 3];
        want.extend_from_slice(b"abc");
        want.extend_from_slice(&[0, 0, 0, 2, b'x', b'y']);
        want.extend_from_slice(&[0, 0, 0, 10]);
        want.extend_from_slice(b"0123456789");
        assert_eq!(seen, want);
        assert_eq!(done, vec![(1, 3), (2, 6), (1, 10)]);
        assert_eq!(outbox.bytes(), 0);
    }

    #[test]
    fn an_empty_outbox_frees_the_room_of_its_last_burst_and_a_busy_one_keeps_its_frames() {
        let mut outbox = Outbox::default();
        assert!(!outbox.keeps_room(), "a new outbox has no room to free");
        outbox.push_unprefixed(Bytes::from_static(b"abc"), 1, Instant::now());
        outbox.free_room();
        assert_eq!(outbox.bytes(), 7, "a queued frame stays");
        assert!(
            !outbox.keeps_room(),
            "an outbox with frames keeps no idle room"
        );
        let mut sink = tokio::io::sink();
        assert!(outbox
            .poll_write(&mut sink, &mut cx(), |_, _, _| {})
            .is_ready());
        assert!(outbox.is_empty());
        assert!(
            outbox.keeps_room(),
            "the written frame's room stays until freed"
        );
        outbox.free_room();
        assert!(!outbox.keeps_room());
    }
}
