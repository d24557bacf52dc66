//! A Fetch response passed on while it arrives (v16+).
//!
//! A consumer waits for each Fetch answer before it asks for the next, so every
//! millisecond kshim holds an answer of a MiB is a millisecond the consumer
//! waits. kshim therefore passes such an answer on as it arrives, and only the
//! one part it may have to change waits for the rest: the top-level tagged
//! fields at the very end, where NodeEndpoints names brokers (KIP-951).
//!
//! [`TailScanner`] follows the response frame (header v1, then the body) as its
//! bytes arrive, skipping records by their length, and says how far the bytes
//! are certainly not part of that section. Once the answer is whole, [`rewrite_tail`] rewrites the section. Its
//! size was sent first, so the rewritten section must keep the length the
//! broker gave it:
//! - a shorter one is padded with a tagged field no Kafka release defines (tag
//!   [`PAD_TAG`]), which clients skip as they skip every unknown tag;
//! - a longer one is sent without NodeEndpoints, and padded: NodeEndpoints only
//!   spares a client a Metadata request after a leader moved, which it then
//!   makes, through kshim, as it does with brokers before KIP-951.

use super::walk::Walk;
use super::{AddressBook, RewriteError};
use crate::protocol::wire::put_uvarint;
use crate::protocol::{CodecError, Reader};
use kafka_protocol::messages::ApiKey;

/// The tag of the padding field: past any top-level tag of a Kafka Fetch
/// response, and one byte long as a varint.
const PAD_TAG: u32 = 127;

/// Where the top-level tagged fields of a streamed Fetch body might start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    /// The response header's tagged fields.
    ResponseHeader,
    AbortedTransaction,
    Partition,
    Topic,
    Response,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    CorrelationId,
    /// throttle_time_ms, error_code, session_id.
    Header,
    Topics,
    TopicId,
    Partitions,
    /// partition_index, error_code, high_watermark, last_stable_offset, log_start_offset.
    PartitionFixed,
    AbortedTransactions,
    /// producer_id, first_offset.
    AbortedTransaction,
    PreferredReadReplica,
    RecordsLength,
    /// Bytes of records or of a tagged field's value left to skip.
    Skip(usize, Section),
    TagCount(Section),
    Tag(Section),
    /// The top-level tagged fields start at this frame offset.
    Tail(usize),
}

/// Follows a Fetch v16+ response frame (without its size prefix) as it arrives.
#[derive(Debug)]
pub struct TailScanner {
    /// Frame offset scanned up to.
    pos: usize,
    step: Step,
    topics: u64,
    partitions: u64,
    aborted: u64,
    tags: u64,
    /// Whether the record set being skipped ends a partition (else a tagged
    /// field's value is being skipped).
    in_records: bool,
}

impl Default for TailScanner {
    fn default() -> Self {
        TailScanner {
            pos: 0,
            step: Step::CorrelationId,
            topics: 0,
            partitions: 0,
            aborted: 0,
            tags: 0,
            in_records: false,
        }
    }
}

/// A uvarint at the start of `buf`: `None` when it has not all arrived.
fn uvarint(buf: &[u8]) -> Result<Option<(u64, usize)>, CodecError> {
    let mut value = 0u64;
    for (i, &b) in buf.iter().enumerate().take(5) {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok(Some((value, i + 1)));
        }
    }
    if buf.len() >= 5 {
        return Err(CodecError::Invalid("a varint longer than 5 bytes".into()));
    }
    Ok(None)
}

impl TailScanner {
    /// Reads what arrived: `arrived` is the frame from offset `offset` on, as far
    /// as it came. Returns the frame offset up to which the bytes are certainly
    /// not part of the top-level tagged fields (they may be passed on).
    pub fn feed(&mut self, arrived: &[u8], offset: usize) -> Result<usize, CodecError> {
        loop {
            if let Step::Tail(at) = self.step {
                return Ok(at);
            }
            let Some(buf) = arrived.get(self.pos.saturating_sub(offset)..) else {
                return Ok(self.pos);
            };
            if !self.advance(buf)? {
                return Ok(self.pos);
            }
        }
    }

    /// The frame offset where the top-level tagged fields start, once scanned.
    pub fn tail(&self) -> Option<usize> {
        match self.step {
            Step::Tail(at) => Some(at),
            _ => None,
        }
    }

    /// Takes one step over `buf` (the frame from `pos`); false when the step
    /// needs bytes that have not arrived.
    fn advance(&mut self, buf: &[u8]) -> Result<bool, CodecError> {
        let fixed = |n: usize| buf.len() >= n;
        let (next, used) = match self.step {
            Step::CorrelationId if fixed(4) => (Step::TagCount(Section::ResponseHeader), 4),
            Step::Header if fixed(10) => (Step::Topics, 10),
            Step::TopicId if fixed(16) => (Step::Partitions, 16),
            Step::PartitionFixed if fixed(30) => (Step::AbortedTransactions, 30),
            Step::AbortedTransaction if fixed(16) => {
                (Step::TagCount(Section::AbortedTransaction), 16)
            }
            Step::PreferredReadReplica if fixed(4) => (Step::RecordsLength, 4),
            Step::CorrelationId
            | Step::Header
            | Step::TopicId
            | Step::PartitionFixed
            | Step::AbortedTransaction
            | Step::PreferredReadReplica => return Ok(false),
            Step::Skip(left, section) => {
                let n = left.min(buf.len());
                if n == 0 && left > 0 {
                    return Ok(false);
                }
                let next = if n < left {
                    Step::Skip(left - n, section)
                } else if self.in_records {
                    self.in_records = false;
                    Step::TagCount(Section::Partition)
                } else {
                    self.tag_done(section)
                };
                (next, n)
            }
            Step::Tag(section) => {
                let Some((_, a)) = uvarint(buf)? else {
                    return Ok(false);
                };
                let Some((size, b)) = uvarint(&buf[a..])? else {
                    return Ok(false);
                };
                (Step::Skip(size as usize, section), a + b)
            }
            Step::Tail(_) => return Ok(false),
            counted => {
                let Some((value, used)) = uvarint(buf)? else {
                    return Ok(false);
                };
                (self.counted(counted, value), used)
            }
        };
        self.pos += used;
        self.step = next;
        Ok(true)
    }

    /// The step after a count (a compact array's length plus one, or a tag count).
    fn counted(&mut self, step: Step, value: u64) -> Step {
        let entries = value.saturating_sub(1);
        match step {
            Step::Topics => {
                self.topics = entries;
                self.next_topic()
            }
            Step::Partitions => {
                self.partitions = entries;
                self.next_partition()
            }
            Step::AbortedTransactions => {
                self.aborted = entries;
                self.next_aborted()
            }
            Step::RecordsLength => {
                self.in_records = true;
                Step::Skip(entries as usize, Section::Partition)
            }
            Step::TagCount(Section::Response) => Step::Tail(self.pos),
            Step::TagCount(section) => {
                self.tags = value;
                self.next_tag(section)
            }
            other => other,
        }
    }

    fn next_topic(&self) -> Step {
        if self.topics > 0 {
            Step::TopicId
        } else {
            Step::TagCount(Section::Response)
        }
    }

    fn next_partition(&self) -> Step {
        if self.partitions > 0 {
            Step::PartitionFixed
        } else {
            Step::TagCount(Section::Topic)
        }
    }

    fn next_aborted(&self) -> Step {
        if self.aborted > 0 {
            Step::AbortedTransaction
        } else {
            Step::PreferredReadReplica
        }
    }

    fn next_tag(&mut self, section: Section) -> Step {
        if self.tags > 0 {
            return Step::Tag(section);
        }
        match section {
            Section::ResponseHeader => Step::Header,
            Section::AbortedTransaction => {
                self.aborted -= 1;
                self.next_aborted()
            }
            Section::Partition => {
                self.partitions -= 1;
                self.next_partition()
            }
            Section::Topic => {
                self.topics -= 1;
                self.next_topic()
            }
            Section::Response => Step::Tail(self.pos),
        }
    }

    fn tag_done(&mut self, section: Section) -> Step {
        self.tags -= 1;
        self.next_tag(section)
    }
}

/// The top-level tagged fields of a Fetch v16+ response (`tail`, from its count
/// to the end of the frame) with NodeEndpoints' addresses rewritten, at the same
/// length; `None` when nothing changes.
pub fn rewrite_tail(
    version: i16,
    tail: &[u8],
    book: &dyn AddressBook,
) -> Result<Option<Vec<u8>>, RewriteError> {
    let malformed = |source| RewriteError::Malformed {
        api: ApiKey::Fetch,
        version,
        source,
    };
    let mut walk = Walk::new(tail, true, book);
    walk.tagged_fields_with_node_endpoints(super::fetch::NODE_ENDPOINTS_TAG)
        .map_err(|stop| stop.into_error(ApiKey::Fetch, version))?;
    if walk.position() != tail.len() {
        return Err(malformed(CodecError::Invalid(format!(
            "{} bytes after the top-level tagged fields",
            tail.len() - walk.position()
        ))));
    }
    let Some(rewritten) = walk.into_body() else {
        return Ok(None);
    };
    let fields = parse_fields(&rewritten).map_err(malformed)?;
    if let Some(fitted) = fit(&fields, tail.len()) {
        return Ok(Some(fitted));
    }
    let others: Vec<_> = fields
        .into_iter()
        .filter(|(tag, _)| *tag != super::fetch::NODE_ENDPOINTS_TAG)
        .collect();
    fit(&others, tail.len()).map(Some).ok_or_else(|| {
        malformed(CodecError::Invalid(
            "the tagged fields cannot be rewritten at their length".into(),
        ))
    })
}

/// The `(tag, value)` pairs of a whole tagged-field section.
fn parse_fields(section: &[u8]) -> Result<Vec<(u32, &[u8])>, CodecError> {
    let mut r = Reader::new(section);
    let count = r.uvarint("tagged fields")?;
    let mut fields = Vec::new();
    for _ in 0..count {
        let tag = r.uvarint("tag")?;
        let size = r.uvarint("tagged field size")? as usize;
        fields.push((tag, r.bytes(size, "tagged field")?));
    }
    r.expect_end("tagged fields")?;
    Ok(fields)
}

fn uvarint_len(v: u64) -> usize {
    let mut n = 1;
    let mut v = v >> 7;
    while v > 0 {
        n += 1;
        v >>= 7;
    }
    n
}

/// `fields` encoded as a section of exactly `len` bytes, padded with a
/// [`PAD_TAG`] field if they are shorter; `None` when that cannot be done.
fn fit(fields: &[(u32, &[u8])], len: usize) -> Option<Vec<u8>> {
    let encoded = |fields: &[(u32, &[u8])], pad: Option<usize>| {
        let mut out = Vec::with_capacity(len);
        put_uvarint(&mut out, (fields.len() + usize::from(pad.is_some())) as u32);
        for (tag, value) in fields {
            put_uvarint(&mut out, *tag);
            put_uvarint(&mut out, value.len() as u32);
            out.extend_from_slice(value);
        }
        if let Some(n) = pad {
            put_uvarint(&mut out, PAD_TAG);
            put_uvarint(&mut out, n as u32);
            out.resize(out.len() + n, 0);
        }
        out
    };
    let plain = encoded(fields, None);
    if plain.len() == len {
        return Some(plain);
    }
    if fields.iter().any(|(tag, _)| *tag >= PAD_TAG) {
        return None;
    }
    let body: usize = fields
        .iter()
        .map(|(tag, v)| uvarint_len((*tag).into()) + uvarint_len(v.len() as u64) + v.len())
        .sum();
    let head = uvarint_len(fields.len() as u64 + 1) + body + uvarint_len(PAD_TAG.into());
    (1..=5).find_map(|size_len| {
        let pad = len.checked_sub(head + size_len)?;
        (uvarint_len(pad as u64) == size_len).then(|| encoded(fields, Some(pad)))
    })
}
