//! The length-prefixed frame codec, fed a byte stream in chunks whose sizes the
//! input chooses, then EOF. It must split frames exactly, refuse negative and
//! oversized lengths before reserving memory for them, and report a stream cut
//! inside a frame as an error.

#![no_main]

mod common;

use bytes::BytesMut;
use kshim::protocol::FrameCodec;
use libfuzzer_sys::fuzz_target;
use tokio_util::codec::Decoder;

#[global_allocator]
static ALLOCATOR: common::BoundedAllocator = common::BoundedAllocator;

const MAX_FRAME: usize = 4096;

// The seeds are the captured frames of protocol-fixtures/, as they are.
fuzz_target!(init: common::write_seeds_if_asked(Vec::new), |data: &[u8]| {
    // First byte: the chunk size (1-256); the rest: the stream.
    let Some((&chunk, stream)) = data.split_first() else { return };
    let chunk = usize::from(chunk) + 1;
    let mut codec = FrameCodec::new(MAX_FRAME);
    let mut buf = BytesMut::new();
    let mut taken = 0;
    let mut pieces = stream.chunks(chunk).peekable();
    loop {
        if let Some(piece) = pieces.next() {
            buf.extend_from_slice(piece);
        }
        let at_eof = pieces.peek().is_none();
        let result = if at_eof { codec.decode_eof(&mut buf) } else { codec.decode(&mut buf) };
        match result {
            Ok(Some(frame)) => {
                assert!(frame.len() <= MAX_FRAME);
                taken += 4 + frame.len();
                assert_eq!(&stream[taken - frame.len()..taken], &frame[..]);
            }
            Ok(None) if at_eof => {
                assert!(buf.is_empty());
                assert_eq!(taken, stream.len());
                return;
            }
            Ok(None) => {}
            Err(_) => return,
        }
        assert!(buf.capacity() <= stream.len() + MAX_FRAME + 128 * 1024, "capacity {}", buf.capacity());
    }
});
