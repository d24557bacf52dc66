//! Reading Kafka response frames off a stream, shared by the benchmark programs.

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

/// Reads one response frame into `buf` (which may already hold bytes read ahead)
/// and returns its body, leaving anything after it in `buf`. A size prefix above
/// `max_bytes` is an error, so that a confused server cannot make the reader
/// allocate without bound.
pub async fn read_frame<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
    max_bytes: usize,
) -> Result<BytesMut, String> {
    loop {
        if buf.len() >= 4 {
            let size = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
            if size < 4 || size as usize > max_bytes {
                return Err(format!("response size {size} is out of range"));
            }
            let size = size as usize;
            if buf.len() >= 4 + size {
                buf.advance(4);
                return Ok(buf.split_to(size));
            }
            buf.reserve(4 + size - buf.len());
        } else {
            buf.reserve(4096);
        }
        match stream.read_buf(buf).await {
            Ok(0) => return Err("connection closed by the server".into()),
            Ok(_) => {}
            Err(e) => return Err(format!("read failed: {e}")),
        }
    }
}
