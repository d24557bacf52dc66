//! Kafka's magic-v2 record batches, as a kshim cluster writes its state topic
//! and reads it back: the bounded decoder (every length checked before use,
//! CRC-32C verified, compressed batches refused) and the encoder. Bytes only.

use super::{CodecError, Reader};
use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID,
};

/// (Producer id, epoch) as the broker assigned them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdentity {
    pub producer_id: i64,
    pub epoch: i16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlType {
    Abort,
    Commit,
    Other(i16),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    pub base_offset: i64,
    pub last_offset: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub transactional: bool,
    pub control: Option<ControlType>,
    pub records: Vec<LogRecord>,
}

/// Base offset and batch length: the length does not count them.
const LOG_OVERHEAD: usize = 12;

/// The rest of the header, from partition leader epoch to record count.
const BATCH_HEADER_AFTER_LENGTH: usize = 49;

/// Where the CRC'd part starts, counted from the partition leader epoch.
const CRC_START: usize = 9;

/// Length, attributes, timestamp delta, offset delta, key and value lengths,
/// header count: one byte each at least.
const MIN_RECORD_BYTES: usize = 7;

const ATTR_COMPRESSION: i16 = 0x07;

const ATTR_LOG_APPEND_TIME: i16 = 0x08;

const ATTR_TRANSACTIONAL: i16 = 0x10;

const ATTR_CONTROL: i16 = 0x20;

/// A varint length, then that many bytes; -1 is null. The bytes share
/// `whole`'s buffer instead of being copied.
fn var_bytes(
    r: &mut Reader<'_>,
    whole: &Bytes,
    what: &'static str,
) -> Result<Option<Bytes>, CodecError> {
    match r.varint(what)? {
        -1 => Ok(None),
        n if n >= 0 => Ok(Some(whole.slice_ref(r.bytes(n as usize, what)?))),
        n => Err(CodecError::InvalidLength {
            what,
            length: n.into(),
        }),
    }
}

/// Every complete batch in a Fetch's records bytes. A trailing partial batch
/// is left out: brokers cut the last batch at max_bytes, and the next fetch
/// starts there.
pub fn decode_batches(records: &Bytes) -> Result<Vec<Batch>, CodecError> {
    let mut r = Reader::new(records);
    let mut out = Vec::new();
    while r.remaining() >= LOG_OVERHEAD {
        let base_offset = r.i64("base offset")?;
        let length = r.i32("batch length")?;
        let Ok(length) = usize::try_from(length) else {
            return Err(CodecError::InvalidLength {
                what: "batch length",
                length: length.into(),
            });
        };
        if r.remaining() < length {
            break;
        }
        out.push(decode_batch(
            records,
            base_offset,
            r.bytes(length, "record batch")?,
        )?);
    }
    Ok(out)
}

/// One batch, `raw` from its partition leader epoch to its end.
fn decode_batch(whole: &Bytes, base_offset: i64, raw: &[u8]) -> Result<Batch, CodecError> {
    let invalid =
        |why: String| CodecError::Invalid(format!("record batch at offset {base_offset}: {why}"));
    let mut r = Reader::new(raw);
    r.i32("partition leader epoch")?;
    let magic = r.i8("magic")?;
    if magic != 2 {
        return Err(invalid(format!(
            "magic {magic}; only v2 batches (Kafka 0.11+) are read"
        )));
    }
    if raw.len() < BATCH_HEADER_AFTER_LENGTH {
        return Err(invalid(format!(
            "length {} is shorter than a batch header",
            raw.len()
        )));
    }
    let crc = r.i32("crc")? as u32;
    // A corrupt batch must not become shared state; brokers check the same CRC.
    let computed = crc32c::crc32c(raw.get(CRC_START..).unwrap_or_default());
    if computed != crc {
        return Err(invalid(format!(
            "CRC {crc:#010x} does not match its content ({computed:#010x})"
        )));
    }
    let attributes = r.i16("attributes")?;
    let codec = attributes & ATTR_COMPRESSION;
    if codec != 0 {
        return Err(invalid(format!(
            "compressed (codec {codec}); the state topic is written uncompressed and read so"
        )));
    }
    let last_offset_delta = r.i32("last offset delta")?;
    let base_timestamp = r.i64("base timestamp")?;
    let max_timestamp = r.i64("max timestamp")?;
    let producer_id = r.i64("producer id")?;
    let producer_epoch = r.i16("producer epoch")?;
    r.i32("base sequence")?;
    let n = r.i32("record count")?;
    let n = usize::try_from(n)
        .ok()
        .filter(|n| n.saturating_mul(MIN_RECORD_BYTES) <= r.remaining())
        .ok_or(CodecError::InvalidLength {
            what: "record count",
            length: n.into(),
        })?;
    let mut records = Vec::with_capacity(n);
    for _ in 0..n {
        let length = r.varint("record length")?;
        let length = usize::try_from(length).map_err(|_| CodecError::InvalidLength {
            what: "record length",
            length: length.into(),
        })?;
        let mut rec = Reader::new(r.bytes(length, "record")?);
        rec.i8("record attributes")?;
        let timestamp_delta = rec.varlong("timestamp delta")?;
        let offset_delta = rec.varint("offset delta")?;
        let key = var_bytes(&mut rec, whole, "record key")?;
        let value = var_bytes(&mut rec, whole, "record value")?;
        let headers = rec.varint("header count")?;
        let headers = usize::try_from(headers)
            .ok()
            .filter(|h| h.saturating_mul(2) <= rec.remaining())
            .ok_or(CodecError::InvalidLength {
                what: "header count",
                length: headers.into(),
            })?;
        for _ in 0..headers {
            var_bytes(&mut rec, whole, "header key")?.ok_or(CodecError::InvalidLength {
                what: "header key",
                length: -1,
            })?;
            var_bytes(&mut rec, whole, "header value")?;
        }
        rec.expect_end("record")?;
        let offset = base_offset
            .checked_add(offset_delta.into())
            .ok_or_else(|| invalid(format!("offset delta {offset_delta} overflows")))?;
        let timestamp = match attributes & ATTR_LOG_APPEND_TIME {
            0 => base_timestamp.wrapping_add(timestamp_delta),
            // The broker stamped the batch on append; the deltas inside are
            // still the producer's, so its time is the batch's.
            _ => max_timestamp,
        };
        records.push(LogRecord {
            offset,
            timestamp,
            key,
            value,
        });
    }
    r.expect_end("record batch")?;
    let last_offset = base_offset
        .checked_add(last_offset_delta.into())
        .ok_or_else(|| invalid(format!("last offset delta {last_offset_delta} overflows")))?;
    let control = match attributes & ATTR_CONTROL {
        0 => None,
        _ => {
            let kind = match records.first() {
                // Compaction can leave a producer's last control batch empty;
                // Java reads such a batch as UNKNOWN, whose id is -1.
                None => ControlType::Other(-1),
                Some(first) => {
                    let key = first.key.as_deref().unwrap_or_default();
                    let mut k = Reader::new(key);
                    let kind = k
                        .i16("control key version")
                        .and_then(|_| k.i16("control type"));
                    match kind
                        .map_err(|_| invalid("control record key is shorter than 4 bytes".into()))?
                    {
                        0 => ControlType::Abort,
                        1 => ControlType::Commit,
                        t => ControlType::Other(t),
                    }
                }
            };
            records.clear();
            Some(kind)
        }
    };
    Ok(Batch {
        base_offset,
        last_offset,
        producer_id,
        producer_epoch,
        transactional: attributes & ATTR_TRANSACTIONAL != 0,
        control,
        records,
    })
}

/// One uncompressed v2 batch. No records make no batch (empty bytes).
pub fn encode_batch(
    producer: Option<ProducerIdentity>,
    base_sequence: i32,
    transactional: bool,
    timestamp_ms: i64,
    records: &[(Option<Bytes>, Option<Bytes>)],
) -> Bytes {
    let (producer_id, producer_epoch) = producer.map_or((NO_PRODUCER_ID, NO_PRODUCER_EPOCH), |p| {
        (p.producer_id, p.epoch)
    });
    let records: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, (key, value))| Record {
            transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
            producer_id,
            producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder starts a new batch wherever offset - sequence
            // changes; moving both together keeps one batch whose base
            // sequence is `base_sequence`.
            sequence: base_sequence.wrapping_add(i as i32),
            timestamp: timestamp_ms,
            key: key.clone(),
            value: value.clone(),
            headers: Default::default(),
        })
        .collect();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    let mut buf = BytesMut::new();
    match RecordBatchEncoder::encode(&mut buf, &records, &options) {
        Ok(()) => buf.freeze(),
        Err(e) => {
            tracing::error!("cannot encode a record batch: {e}");
            Bytes::new()
        }
    }
}

/// The producer sequence after `n` more records: Kafka wraps it to 0 past
/// i32::MAX, not to i32::MIN.
pub fn next_sequence(sequence: i32, n: usize) -> i32 {
    ((i64::from(sequence) + n as i64) % (i64::from(i32::MAX) + 1)) as i32
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use kafka_protocol::records::RecordBatchDecoder;

    pub(crate) const PRODUCER: ProducerIdentity = ProducerIdentity {
        producer_id: 9,
        epoch: 3,
    };

    pub(crate) fn b(x: &'static [u8]) -> Bytes {
        Bytes::from_static(x)
    }

    /// Moves a batch to `offset`, as the broker does on append (the base
    /// offset is outside the CRC).
    pub(crate) fn at_offset(batch: &Bytes, offset: i64) -> Vec<u8> {
        let mut v = batch.to_vec();
        v[..8].copy_from_slice(&offset.to_be_bytes());
        v
    }

    /// Recomputes the CRC of the single batch in `v` after an edit.
    pub(crate) fn reseal(v: &mut [u8]) {
        let crc = crc32c::crc32c(&v[21..]);
        v[17..21].copy_from_slice(&crc.to_be_bytes());
    }

    pub(crate) fn sample_records() -> Vec<(Option<Bytes>, Option<Bytes>)> {
        vec![
            (Some(b(b"k1")), Some(b(b"v1"))),
            (Some(b(b"k2")), None),
            (None, Some(b(b"v3"))),
        ]
    }

    #[test]
    fn batches_round_trip() {
        let batch = encode_batch(Some(PRODUCER), 5, true, 1_000, &sample_records());
        let info = RecordBatchDecoder::decode_batch_info(&mut batch.clone()).unwrap();
        assert_eq!(info.len(), 1, "one batch, not one per record");
        assert_eq!((info[0].base_sequence, info[0].record_count), (5, 3));

        let moved = Bytes::from(at_offset(&batch, 100));
        let decoded = decode_batches(&moved).unwrap();
        let expected: Vec<LogRecord> = sample_records()
            .into_iter()
            .enumerate()
            .map(|(i, (key, value))| LogRecord {
                offset: 100 + i as i64,
                timestamp: 1_000,
                key,
                value,
            })
            .collect();
        assert_eq!(
            decoded,
            vec![Batch {
                base_offset: 100,
                last_offset: 102,
                producer_id: 9,
                producer_epoch: 3,
                transactional: true,
                control: None,
                records: expected,
            }]
        );

        let plain = decode_batches(&encode_batch(None, -1, false, 7, &sample_records())).unwrap();
        assert_eq!(
            (
                plain[0].producer_id,
                plain[0].producer_epoch,
                plain[0].transactional
            ),
            (-1, -1, false)
        );
        assert!(encode_batch(None, -1, false, 0, &[]).is_empty());
    }

    pub(crate) fn control_batch(offset: i64, kind: u8) -> Bytes {
        let record = Record {
            transactional: true,
            control: true,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: 9,
            producer_epoch: 3,
            timestamp_type: TimestampType::Creation,
            offset,
            sequence: -1,
            timestamp: 5,
            key: Some(Bytes::from(vec![0, 0, 0, kind])),
            value: Some(b(&[0, 0, 0, 0, 0, 0])),
            headers: Default::default(),
        };
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        };
        RecordBatchEncoder::encode(&mut buf, [&record], &options).unwrap();
        buf.freeze()
    }

    #[test]
    fn control_batches_say_their_type() {
        let commit = &decode_batches(&control_batch(10, 1)).unwrap()[0];
        assert_eq!(
            (commit.control, commit.records.len()),
            (Some(ControlType::Commit), 0)
        );
        assert_eq!(
            (commit.base_offset, commit.last_offset, commit.producer_id),
            (10, 10, 9)
        );
        let abort = &decode_batches(&control_batch(11, 0)).unwrap()[0];
        assert_eq!(abort.control, Some(ControlType::Abort));
    }

    #[test]
    fn batches_back_to_back_and_a_cut_last_one() {
        let first = encode_batch(Some(PRODUCER), 0, true, 1, &sample_records());
        let second = encode_batch(Some(PRODUCER), 3, true, 2, &[(Some(b(b"k")), None)]);
        let mut both = first.to_vec();
        both.extend(at_offset(&second, 3));
        let both = Bytes::from(both);
        let decoded = decode_batches(&both).unwrap();
        assert_eq!(decoded.len(), 2);
        assert_eq!(
            (decoded[1].base_offset, decoded[1].records[0].offset),
            (3, 3)
        );
        // Every cut inside the second batch leaves the first one whole.
        for cut in first.len()..both.len() {
            let part = both.slice(..cut);
            assert_eq!(decode_batches(&part).unwrap().len(), 1, "cut at {cut}");
        }
        for cut in 0..first.len() {
            assert_eq!(
                decode_batches(&first.slice(..cut)),
                Ok(vec![]),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn old_compressed_or_corrupt_batches_are_refused() {
        let batch = encode_batch(Some(PRODUCER), 0, false, 1, &sample_records());
        let mut old = batch.to_vec();
        old[16] = 1;
        let e = decode_batches(&Bytes::from(old)).unwrap_err();
        assert!(e.to_string().contains("magic 1"), "{e}");

        let mut gzip = batch.to_vec();
        gzip[22] |= 1;
        reseal(&mut gzip);
        let e = decode_batches(&Bytes::from(gzip)).unwrap_err();
        assert!(e.to_string().contains("compressed"), "{e}");

        let mut flipped = batch.to_vec();
        let last = flipped.len() - 1;
        flipped[last] ^= 0x40;
        let e = decode_batches(&Bytes::from(flipped)).unwrap_err();
        assert!(e.to_string().contains("CRC"), "{e}");
    }
}
