//! The one mechanism every rewrite uses: walk a body with the bounded `Reader`,
//! note the byte spans that must change, then copy the body with those spans
//! replaced. Bytes outside the spans are never re-encoded, so fields kshim does not
//! model (and future tagged fields) reach the client exactly as the upstream sent
//! them.

use super::{AddressBook, RewriteError};
use crate::protocol::wire::{put_compact_string, put_uvarint};
use crate::protocol::{CodecError, Reader};
use kafka_protocol::messages::ApiKey;
use std::ops::Range;

/// Why a walk stopped early.
#[derive(Debug)]
pub(super) enum Stop {
    Malformed(CodecError),
    NoAddress { node_id: i32, reason: String },
}

impl Stop {
    /// What a rewrite of `api` at `version` that stopped here reports.
    pub(super) fn into_error(self, api: ApiKey, version: i16) -> RewriteError {
        match self {
            Stop::Malformed(source) => RewriteError::Malformed {
                api,
                version,
                source,
            },
            Stop::NoAddress { node_id, reason } => RewriteError::NoAddress { node_id, reason },
        }
    }
}

impl From<CodecError> for Stop {
    fn from(e: CodecError) -> Self {
        Stop::Malformed(e)
    }
}

/// Replaces `span` of the walked body with `bytes` of the walk's `added`.
struct Splice {
    span: Range<usize>,
    bytes: Range<usize>,
}

/// Minimum encoded sizes, so `Reader::array_len` can refuse counts the body
/// cannot hold.
pub(super) const fn min_string(flexible: bool) -> usize {
    if flexible {
        1
    } else {
        2
    }
}

pub(super) const fn min_tags(flexible: bool) -> usize {
    if flexible {
        1
    } else {
        0
    }
}

/// NodeId, Host, Port, Rack and tags: the NodeEndpoint layout shared by Produce,
/// Fetch, ShareFetch and ShareAcknowledge, all flexible there.
pub(super) const MIN_NODE_ENDPOINT: usize = 4 + 1 + 4 + 1 + 1;

/// Java's string readers refuse longer strings (compact ones included), so a
/// longer host from the address book would make the response unreadable.
const MAX_HOST_BYTES: usize = i16::MAX as usize;

/// A controller id read from the body, to be settled once the broker ids are known.
pub(super) struct ControllerId {
    value: i32,
    at: usize,
}

/// One pass over a response body: the bounded reader, the string and array
/// flavour of the body's version (classic or flexible), and the splices noted so far.
pub(super) struct Walk<'a> {
    reader: Reader<'a>,
    body: &'a [u8],
    flexible: bool,
    book: &'a dyn AddressBook,
    splices: Vec<Splice>,
    /// The replacement bytes of every splice, one after the other: one block
    /// however many brokers a response names.
    added: Vec<u8>,
}

impl<'a> Walk<'a> {
    pub(super) fn new(body: &'a [u8], flexible: bool, book: &'a dyn AddressBook) -> Self {
        Walk {
            reader: Reader::new(body),
            body,
            flexible,
            book,
            splices: Vec::new(),
            added: Vec::new(),
        }
    }

    /// Bytes of the body read so far.
    pub(super) fn position(&self) -> usize {
        self.reader.position()
    }

    pub(super) fn flexible(&self) -> bool {
        self.flexible
    }

    pub(super) fn skip(&mut self, n: usize, what: &'static str) -> Result<(), Stop> {
        self.reader.bytes(n, what)?;
        Ok(())
    }

    pub(super) fn i32(&mut self, what: &'static str) -> Result<i32, Stop> {
        Ok(self.reader.i32(what)?)
    }

    /// Skips a string, nullable or not. Its contents are not checked: only the
    /// host needs to be text, and the client validates the rest.
    pub(super) fn string(&mut self, what: &'static str) -> Result<(), Stop> {
        let len = if self.flexible {
            self.compact_len(what)?
        } else {
            classic_len(self.reader.i16(what)?.into(), what)?
        };
        self.skip(len, what)
    }

    /// Skips nullable bytes (a record set) without looking inside.
    pub(super) fn bytes(&mut self, what: &'static str) -> Result<(), Stop> {
        let len = if self.flexible {
            self.compact_len(what)?
        } else {
            classic_len(self.reader.i32(what)?, what)?
        };
        self.skip(len, what)
    }

    /// A compact length (uvarint, one more than the length, 0 for null).
    fn compact_len(&mut self, what: &'static str) -> Result<usize, Stop> {
        Ok((self.reader.uvarint(what)? as usize).saturating_sub(1))
    }

    /// An array's entry count, refused when the rest of the body cannot hold that
    /// many entries of `min_entry` bytes. A null array has no entries.
    pub(super) fn array(&mut self, min_entry: usize, what: &'static str) -> Result<usize, Stop> {
        Ok(self
            .reader
            .array_len(self.flexible, min_entry, what)?
            .unwrap_or(0))
    }

    /// Skips a tagged-field section; there is none in classic versions.
    pub(super) fn tagged_fields(&mut self, what: &'static str) -> Result<(), Stop> {
        if !self.flexible {
            return Ok(());
        }
        // Each field consumes at least two bytes, so a huge count ends at the body's end.
        for _ in 0..self.reader.uvarint(what)? {
            self.reader.uvarint(what)?;
            let size = self.reader.uvarint(what)? as usize;
            self.skip(size, what)?;
        }
        Ok(())
    }

    /// Reads the Host and Port of broker `node_id` and arranges for them to be
    /// replaced by the address clients must use. Nodes with a negative id (no node,
    /// as in an error) have no listener, so the book is not asked.
    pub(super) fn address(&mut self, node_id: i32) -> Result<(), Stop> {
        let start = self.reader.position();
        let host = self.reader.string(self.flexible, "host")?;
        let port = self.reader.i32("port")?;
        if node_id < 0 {
            return Ok(());
        }
        let (new_host, new_port) = self
            .book
            .client_address(node_id, host, port)
            .map_err(|reason| Stop::NoAddress { node_id, reason })?;
        if &*new_host == host && new_port == port {
            return Ok(());
        }
        if new_host.len() > MAX_HOST_BYTES {
            return Err(Stop::NoAddress {
                node_id,
                reason: format!(
                    "host {new_host:?} is {} bytes, more than a Kafka string holds",
                    new_host.len()
                ),
            });
        }
        let span = start..self.reader.position();
        let flexible = self.flexible;
        self.splice(span, |out| {
            if flexible {
                put_compact_string(out, &new_host);
            } else {
                out.extend_from_slice(&(new_host.len() as i16).to_be_bytes());
                out.extend_from_slice(new_host.as_bytes());
            }
            out.extend_from_slice(&new_port.to_be_bytes());
        });
        Ok(())
    }

    pub(super) fn controller_id(&mut self) -> Result<ControllerId, Stop> {
        let at = self.reader.position();
        let value = self.reader.i32("controller_id")?;
        Ok(ControllerId { value, at })
    }

    /// Makes the controller one of `broker_ids` (those listed in the same
    /// response), since only those are reachable through kshim.
    pub(super) fn settle_controller(&mut self, controller: ControllerId, broker_ids: &[i32]) {
        let reachable = reachable_controller(controller.value, broker_ids);
        if reachable != controller.value {
            self.splice(controller.at..controller.at + 4, |out| {
                out.extend_from_slice(&reachable.to_be_bytes())
            });
        }
    }

    /// A NodeEndpoints array: the brokers a client is told to go to for new leaders.
    pub(super) fn node_endpoints(&mut self) -> Result<(), Stop> {
        for _ in 0..self.array(MIN_NODE_ENDPOINT, "node_endpoints")? {
            let node_id = self.i32("node_id")?;
            self.address(node_id)?;
            self.string("rack")?;
            self.tagged_fields("node endpoint")?;
        }
        Ok(())
    }

    /// A top-level tagged-field section in which tag `node_endpoints_tag` holds a
    /// NodeEndpoints array. Only that field's entry is replaced (its size changes
    /// with the hosts); the other fields stay as they are.
    pub(super) fn tagged_fields_with_node_endpoints(
        &mut self,
        node_endpoints_tag: u32,
    ) -> Result<(), Stop> {
        for _ in 0..self.reader.uvarint("tagged fields")? {
            let start = self.reader.position();
            let tag = self.reader.uvarint("tag")?;
            let size = self.reader.uvarint("tagged field size")? as usize;
            let value = self.reader.bytes(size, "tagged field")?;
            if tag != node_endpoints_tag {
                continue;
            }
            let mut inner = Walk::new(value, true, self.book);
            inner.node_endpoints()?;
            let Some(new_value) = inner.into_body() else {
                continue;
            };
            let new_size = u32::try_from(new_value.len()).map_err(|_| {
                CodecError::Invalid("NodeEndpoints too large once rewritten".to_owned())
            })?;
            self.splice(start..self.reader.position(), |out| {
                put_uvarint(out, tag);
                put_uvarint(out, new_size);
                out.extend_from_slice(&new_value);
            });
        }
        Ok(())
    }

    /// Notes that `span` is to be replaced by what `write` appends.
    fn splice(&mut self, span: Range<usize>, write: impl FnOnce(&mut Vec<u8>)) {
        let from = self.added.len();
        write(&mut self.added);
        self.splices.push(Splice {
            span,
            bytes: from..self.added.len(),
        });
    }

    /// The rewritten body, or `None` when nothing changed. The walk may stop before
    /// the end of the body: what follows the last span is copied unread.
    pub(super) fn into_body(self) -> Option<Vec<u8>> {
        self.into_spliced(&[], usize::MAX).map(|(out, _)| out)
    }

    /// `head` followed by the rewritten body (the frame's response header, so that
    /// the body is copied once), or `None` when nothing changed. When at least
    /// `keep_from` bytes of the body follow its last change, they are left out and
    /// their offset in the body returned, for the caller to pass on as they are;
    /// otherwise the offset is the body's end.
    pub(super) fn into_spliced(self, head: &[u8], keep_from: usize) -> Option<(Vec<u8>, usize)> {
        if self.splices.is_empty() {
            return None;
        }
        let mut splices = self.splices;
        // DescribeCluster's controller id precedes its brokers but is settled after them.
        splices.sort_by_key(|s| s.span.start);
        let last_change = splices.last().map_or(0, |s| s.span.end);
        let end = if self.body.len() - last_change >= keep_from {
            last_change
        } else {
            self.body.len()
        };
        let removed: usize = splices.iter().map(|s| s.span.len()).sum();
        let mut out = Vec::with_capacity(head.len() + end - removed + self.added.len());
        out.extend_from_slice(head);
        let mut copied = 0;
        // Every span came from positions of a Reader over `self.body`, each covering
        // a different field, so the spans are in bounds and, once sorted, disjoint.
        for splice in splices {
            out.extend_from_slice(&self.body[copied..splice.span.start]);
            out.extend_from_slice(&self.added[splice.bytes]);
            copied = splice.span.end;
        }
        out.extend_from_slice(&self.body[copied..end]);
        Some((out, end))
    }
}

/// A classic length (int16 or int32, -1 for null).
fn classic_len(length: i32, what: &'static str) -> Result<usize, Stop> {
    match length {
        -1 => Ok(0),
        n => usize::try_from(n).map_err(|_| {
            Stop::Malformed(CodecError::InvalidLength {
                what,
                length: n.into(),
            })
        }),
    }
}

/// KRaft brokers report a random live broker as the controller, and one missing
/// from the broker list has no kshim listener a client could use. Such an id
/// becomes the lowest listed broker id, or -1 (no controller) when none is listed.
/// Negative ids name no broker and are never chosen.
pub(super) fn reachable_controller(controller: i32, broker_ids: &[i32]) -> i32 {
    if controller < 0 || broker_ids.contains(&controller) {
        return controller;
    }
    broker_ids
        .iter()
        .copied()
        .filter(|id| *id >= 0)
        .min()
        .unwrap_or(-1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::rewrite::testing::TestBook;

    #[test]
    fn the_controller_must_be_a_listed_broker() {
        assert_eq!(reachable_controller(2, &[1, 2, 3]), 2);
        assert_eq!(reachable_controller(7, &[3, 1, 2]), 1);
        assert_eq!(reachable_controller(7, &[]), -1);
        assert_eq!(reachable_controller(-1, &[1, 2]), -1);
        assert_eq!(reachable_controller(7, &[-1, 4]), 4);
        assert_eq!(reachable_controller(7, &[-1]), -1);
    }

    #[test]
    fn splices_recorded_out_of_order_are_applied_in_order() {
        let book = TestBook::default();
        // controller id 9, then a flexible broker entry: node 1, "h", port 1.
        let body = [0, 0, 0, 9, 0, 0, 0, 1, 2, b'h', 0, 0, 0, 1];
        let mut w = Walk::new(&body, true, &book);
        let controller = w.controller_id().unwrap();
        let node_id = w.i32("node_id").unwrap();
        w.address(node_id).unwrap();
        w.settle_controller(controller, &[node_id]);
        let mut expected = vec![0, 0, 0, 1, 0, 0, 0, 1, 11];
        expected.extend_from_slice(b"kshim.test");
        expected.extend_from_slice(&30001i32.to_be_bytes());
        assert_eq!(w.into_body(), Some(expected));
    }

    #[test]
    fn the_head_goes_before_the_rewritten_body_in_one_block() {
        let book = TestBook::default();
        let body = [0, 0, 0, 1, 2, b'h', 0, 0, 0, 1, 0xaa];
        let mut w = Walk::new(&body, true, &book);
        let node_id = w.i32("node_id").unwrap();
        w.address(node_id).unwrap();
        let mut expected = vec![0, 0, 0, 42, 0, 0, 0, 0, 1, 11];
        expected.extend_from_slice(b"kshim.test");
        expected.extend_from_slice(&30001i32.to_be_bytes());
        expected.push(0xaa);
        let (out, end) = w.into_spliced(&[0, 0, 0, 42, 0], usize::MAX).unwrap();
        assert_eq!((out.as_slice(), end), (expected.as_slice(), body.len()));
        assert_eq!(out.capacity(), out.len(), "sized exactly, never grown");
    }

    #[test]
    fn what_follows_the_last_change_can_be_left_to_pass_on_as_it_came() {
        let book = TestBook::default();
        let mut body = vec![0, 0, 0, 1, 2, b'h', 0, 0, 0, 1];
        body.extend_from_slice(&[0xaa; 100]);
        let spliced = |keep_from| {
            let mut w = Walk::new(&body, true, &book);
            let node_id = w.i32("node_id").unwrap();
            w.address(node_id).unwrap();
            w.into_spliced(&[9], keep_from).unwrap()
        };
        let mut head = vec![9, 0, 0, 0, 1, 11];
        head.extend_from_slice(b"kshim.test");
        head.extend_from_slice(&30001i32.to_be_bytes());
        let (out, end) = spliced(100);
        assert_eq!(
            (out.as_slice(), end),
            (head.as_slice(), 10),
            "the 100 bytes left out"
        );
        let (out, end) = spliced(101);
        assert_eq!(
            (&out[..head.len()], &out[head.len()..], end),
            (head.as_slice(), &body[10..], body.len())
        );
    }

    #[test]
    fn an_unchanged_address_needs_no_copy() {
        let book = TestBook::identity();
        let body = [0, 0, 0, 1, 2, b'h', 0, 0, 0, 1, 0xaa];
        let mut w = Walk::new(&body, true, &book);
        let node_id = w.i32("node_id").unwrap();
        w.address(node_id).unwrap();
        assert!(w.into_body().is_none());
    }

    #[test]
    fn a_host_too_long_for_a_kafka_string_is_refused() {
        let book = TestBook::with_host("h".repeat(MAX_HOST_BYTES + 1));
        let body = [0, 0, 0, 1, 2, b'h', 0, 0, 0, 1];
        let mut w = Walk::new(&body, true, &book);
        let node_id = w.i32("node_id").unwrap();
        assert!(matches!(
            w.address(node_id),
            Err(Stop::NoAddress { node_id: 1, .. })
        ));
    }
}
