//! Length-prefixed Kafka frames: a big-endian int32 size, then that many bytes.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

/// Kafka's `socket.request.max.bytes` default: 100 MiB.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 100 * 1024 * 1024;

/// Buffer growth ahead of a large frame is capped so that a peer announcing a huge
/// frame and then sending nothing holds little memory.
const MAX_RESERVE_AHEAD: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame size {0} is negative")]
    NegativeSize(i32),
    #[error("frame size {size} exceeds the maximum of {max} bytes")]
    TooLarge { size: usize, max: usize },
    #[error("connection closed inside a frame ({0} byte(s) left unread)")]
    TruncatedAtEof(usize),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Splits a byte stream into frames (without their size prefix) and writes frames
/// back with one. The size limit is checked before any buffer is reserved.
#[derive(Debug, Clone)]
pub struct FrameCodec {
    max_frame_bytes: usize,
    /// When the bytes of a frame not yet whole began to arrive.
    partial_since: Option<std::time::Instant>,
}

impl FrameCodec {
    pub fn new(max_frame_bytes: usize) -> Self {
        FrameCodec {
            max_frame_bytes,
            partial_since: None,
        }
    }

    /// Since when part of a frame has been waiting for the rest; `None` between
    /// frames.
    pub fn partial_since(&self) -> Option<std::time::Instant> {
        self.partial_since
    }
}

impl Default for FrameCodec {
    fn default() -> Self {
        FrameCodec::new(DEFAULT_MAX_FRAME_BYTES)
    }
}

impl Decoder for FrameCodec {
    type Item = Bytes;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        if src.is_empty() {
            self.partial_since = None;
            return Ok(None);
        }
        self.partial_since
            .get_or_insert_with(std::time::Instant::now);
        if src.len() < 4 {
            return Ok(None);
        }
        let size = frame_size(&src[..4], self.max_frame_bytes)?;
        if src.len() < 4 + size {
            src.reserve((4 + size - src.len()).min(MAX_RESERVE_AHEAD));
            return Ok(None);
        }
        src.advance(4);
        let frame = src.split_to(size).freeze();
        // What follows in the buffer is the start of the next frame.
        self.partial_since = (!src.is_empty()).then(std::time::Instant::now);
        Ok(Some(frame))
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Bytes>, FrameError> {
        match self.decode(src)? {
            Some(frame) => Ok(Some(frame)),
            None if src.is_empty() => Ok(None),
            None => Err(FrameError::TruncatedAtEof(src.len())),
        }
    }
}

/// The body size a frame's 4-byte prefix announces, refused when negative or
/// above `max`.
pub fn frame_size(prefix: &[u8], max: usize) -> Result<usize, FrameError> {
    let size = i32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
    if size < 0 {
        return Err(FrameError::NegativeSize(size));
    }
    let size = size as usize;
    if size > max {
        return Err(FrameError::TooLarge { size, max });
    }
    Ok(size)
}

/// Frames are written already prefixed (see `response::encode_frame`), so the
/// encoder only copies them out.
impl Encoder<Bytes> for FrameCodec {
    type Error = FrameError;

    fn encode(&mut self, frame: Bytes, dst: &mut BytesMut) -> Result<(), FrameError> {
        dst.put(frame);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_frames_and_waits_for_the_rest() {
        let mut codec = FrameCodec::new(16);
        let mut buf = BytesMut::from(&[0, 0, 0, 3, 1, 2][..]);
        assert!(codec.decode(&mut buf).unwrap().is_none());
        buf.extend_from_slice(&[3, 0, 0, 0, 1, 9]);
        assert_eq!(
            codec.decode(&mut buf).unwrap().unwrap(),
            Bytes::from_static(&[1, 2, 3])
        );
        assert_eq!(
            codec.decode(&mut buf).unwrap().unwrap(),
            Bytes::from_static(&[9])
        );
        assert!(codec.decode(&mut buf).unwrap().is_none());
    }

    #[test]
    fn refuses_negative_and_oversized_lengths_before_reserving() {
        let mut codec = FrameCodec::new(16);
        let mut buf = BytesMut::from(&[0xff, 0xff, 0xff, 0xf0][..]);
        assert!(matches!(
            codec.decode(&mut buf),
            Err(FrameError::NegativeSize(_))
        ));
        let mut buf = BytesMut::from(&[0, 0, 0, 17][..]);
        let cap = buf.capacity();
        assert!(matches!(
            codec.decode(&mut buf),
            Err(FrameError::TooLarge { size: 17, max: 16 })
        ));
        assert_eq!(buf.capacity(), cap);
    }

    #[test]
    fn eof_inside_a_frame_is_an_error() {
        let mut codec = FrameCodec::new(16);
        let mut buf = BytesMut::from(&[0, 0, 0, 3, 1][..]);
        assert!(matches!(
            codec.decode_eof(&mut buf),
            Err(FrameError::TruncatedAtEof(5))
        ));
    }
}
