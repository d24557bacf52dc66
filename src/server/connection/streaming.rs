//! A large upstream response passed on while it arrives, before it is whole.

use super::{Connection, Sending, Slot};
use crate::handlers::forward::Streamed;
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite};

/// Responses of at least this many bytes are passed on while they arrive (when
/// the session allows it): a consumer waits for each Fetch answer before it
/// asks for the next, and a whole answer held before its first byte went on
/// cost it about 15% of its throughput at 64 KiB records (docs/performance.md).
const STREAM_FROM_BYTES: usize = 64 << 10;

/// The upstream response being passed on while it arrives: it answers the
/// request at the front of `slots`.
pub(super) struct Streaming {
    pub(super) streamed: Streamed,
    /// Bytes of the global budget its grant took and its parts have not.
    pub(super) held: usize,
    /// Bytes of the frame passed on so far.
    pub(super) passed: usize,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Connection<'_, S> {
    /// Passes on what arrived of the upstream response being read before it
    /// is whole: a large one that answers the request at the front, when the
    /// session allows it (`Then::streamed`). Its parts go to the outbox at
    /// once; they hold their bytes of the global budget until written, as the
    /// whole response would.
    pub(super) fn pass_on_arrived(&mut self, progress: &mut bool) -> Result<(), String> {
        let Some(link) = self.link.as_mut() else {
            return Ok(());
        };
        let Some((size, offset, arrived)) = link.receiving() else {
            return Ok(());
        };
        if self.streaming.is_none() {
            if size < STREAM_FROM_BYTES
                || self.awaiting.front() != Some(&self.front_seq)
                || self.kept_whole == Some(self.front_seq)
            {
                return Ok(());
            }
            let Some(entry) = self.slots.front_mut() else {
                return Ok(());
            };
            let Slot::Upstream(then) = std::mem::replace(&mut entry.slot, Slot::Streaming) else {
                unreachable!("the slot awaiting the upstream's next response")
            };
            match then.streamed() {
                Ok(streamed) => {
                    self.streaming = Some(Streaming {
                        streamed,
                        held: size.min(self.answers.most()),
                        passed: 0,
                    })
                }
                Err(then) => {
                    entry.slot = Slot::Upstream(then);
                    self.kept_whole = Some(self.front_seq);
                    return Ok(());
                }
            }
        }
        let Some(stream) = self.streaming.as_mut() else {
            return Ok(());
        };
        let upto = stream.streamed.passable(arrived, offset)?;
        let part = match link.take_arrived(upto) {
            Ok(Some(part)) => part,
            Ok(None) => return Ok(()),
            Err(e) => return Err(format!("the upstream connection ended: {e}")),
        };
        let first = stream.passed == 0;
        stream.passed += part.len();
        let held = part.len().min(stream.held);
        stream.held -= held;
        let sending = Sending {
            held: held as u32,
            api_key: None,
        };
        let now = Instant::now();
        if self.out.is_empty() {
            self.last_written = now;
        }
        let metrics = self.session.metrics();
        if first {
            metrics.sent(4 + part.len());
            self.out.push_first_part(part, size, sending, now);
        } else {
            metrics.sent(part.len());
            self.out.push_prefixed(part, sending, now);
        }
        *progress = true;
        Ok(())
    }
}
