//! A bounds-checked reader for Kafka primitive types.
//!
//! kafka-protocol's generated decoders reserve `Vec` capacity straight from an
//! array's length field, so a 20-byte frame claiming 2^31 elements would make the
//! process abort on allocation. The bodies kshim decodes from the network go through
//! this reader instead: an array length is accepted only when the bytes left could
//! hold that many elements.

use bytes::Bytes;
use std::collections::BTreeMap;

/// Why bytes could not be decoded. Always the peer's fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("truncated: needed {needed} more byte(s) for {what}")]
    Truncated { what: &'static str, needed: usize },
    #[error("invalid length {length} for {what}")]
    InvalidLength { what: &'static str, length: i64 },
    #[error("{what} is not valid UTF-8")]
    InvalidUtf8 { what: &'static str },
    #[error("varint longer than 5 bytes in {what}")]
    VarintTooLong { what: &'static str },
    #[error("{0}")]
    Invalid(String),
}

/// Reads primitives from a byte slice, failing cleanly at its end.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], CodecError> {
        if self.remaining() < n {
            return Err(CodecError::Truncated {
                what,
                needed: n - self.remaining(),
            });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    pub fn i8(&mut self, what: &'static str) -> Result<i8, CodecError> {
        Ok(self.take(1, what)?[0] as i8)
    }

    pub fn bool(&mut self, what: &'static str) -> Result<bool, CodecError> {
        Ok(self.take(1, what)?[0] != 0)
    }

    pub fn i16(&mut self, what: &'static str) -> Result<i16, CodecError> {
        let b = self.take(2, what)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    pub fn i32(&mut self, what: &'static str) -> Result<i32, CodecError> {
        let b = self.take(4, what)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn i64(&mut self, what: &'static str) -> Result<i64, CodecError> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }

    pub fn uuid(&mut self, what: &'static str) -> Result<[u8; 16], CodecError> {
        let b = self.take(16, what)?;
        let mut a = [0u8; 16];
        a.copy_from_slice(b);
        Ok(a)
    }

    pub fn uvarint(&mut self, what: &'static str) -> Result<u32, CodecError> {
        let mut value: u32 = 0;
        for i in 0..5 {
            let b = self.take(1, what)?[0];
            value |= u32::from(b & 0x7f) << (i * 7);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(CodecError::VarintTooLong { what })
    }

    pub fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], CodecError> {
        self.take(n, what)
    }

    fn utf8(raw: &'a [u8], what: &'static str) -> Result<&'a str, CodecError> {
        std::str::from_utf8(raw).map_err(|_| CodecError::InvalidUtf8 { what })
    }

    /// A classic nullable string (int16 length, -1 for null).
    pub fn nullable_string(&mut self, what: &'static str) -> Result<Option<&'a str>, CodecError> {
        match self.i16(what)? {
            -1 => Ok(None),
            n if n >= 0 => Ok(Some(Self::utf8(self.take(n as usize, what)?, what)?)),
            n => Err(CodecError::InvalidLength {
                what,
                length: n.into(),
            }),
        }
    }

    /// A compact nullable string (uvarint length + 1, 0 for null).
    pub fn compact_nullable_string(
        &mut self,
        what: &'static str,
    ) -> Result<Option<&'a str>, CodecError> {
        match self.uvarint(what)? {
            0 => Ok(None),
            n => Ok(Some(Self::utf8(self.take(n as usize - 1, what)?, what)?)),
        }
    }

    /// A nullable string, compact in flexible versions, classic before.
    pub fn nullable(
        &mut self,
        flexible: bool,
        what: &'static str,
    ) -> Result<Option<&'a str>, CodecError> {
        if flexible {
            self.compact_nullable_string(what)
        } else {
            self.nullable_string(what)
        }
    }

    /// A zigzag varlong, at most 10 bytes, as records encode their fields.
    pub fn varlong(&mut self, what: &'static str) -> Result<i64, CodecError> {
        let mut raw: u64 = 0;
        for i in 0..10 {
            let b = self.i8(what)? as u8;
            raw |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok((raw >> 1) as i64 ^ -((raw & 1) as i64));
            }
        }
        Err(CodecError::Invalid(format!(
            "{what}: varint longer than 10 bytes"
        )))
    }

    /// A zigzag varint: a varlong that must fit 32 bits.
    pub fn varint(&mut self, what: &'static str) -> Result<i32, CodecError> {
        let v = self.varlong(what)?;
        i32::try_from(v).map_err(|_| CodecError::InvalidLength { what, length: v })
    }

    pub fn string(&mut self, flexible: bool, what: &'static str) -> Result<&'a str, CodecError> {
        self.nullable(flexible, what)?
            .ok_or(CodecError::InvalidLength { what, length: -1 })
    }

    /// An array length, classic (int32) or compact (uvarint + 1); `None` for a null
    /// array. Refused when the remaining bytes cannot hold that many elements of at
    /// least `min_element_bytes` each.
    pub fn array_len(
        &mut self,
        flexible: bool,
        min_element_bytes: usize,
        what: &'static str,
    ) -> Result<Option<usize>, CodecError> {
        let n: i64 = if flexible {
            i64::from(self.uvarint(what)?) - 1
        } else {
            i64::from(self.i32(what)?)
        };
        if n == -1 {
            return Ok(None);
        }
        if n < 0 {
            return Err(CodecError::InvalidLength { what, length: n });
        }
        let n = n as usize;
        if n.saturating_mul(min_element_bytes.max(1)) > self.remaining() {
            return Err(CodecError::InvalidLength {
                what,
                length: n as i64,
            });
        }
        Ok(Some(n))
    }

    /// A tagged-field section, kept as raw values by tag. Tag numbers are
    /// unsigned 32-bit, as on the wire: kafka-protocol's signed keys would turn
    /// tags of 2^31 and more negative, and its encoder leaves those out.
    pub fn tagged_fields(
        &mut self,
        what: &'static str,
    ) -> Result<BTreeMap<u32, Bytes>, CodecError> {
        let count = self.uvarint(what)?;
        let mut out = BTreeMap::new();
        let mut last: Option<u32> = None;
        for _ in 0..count {
            let tag = self.uvarint(what)?;
            if last.is_some_and(|l| tag <= l) {
                return Err(CodecError::Invalid(format!(
                    "{what}: tags out of order ({tag})"
                )));
            }
            last = Some(tag);
            let size = self.uvarint(what)? as usize;
            let value = self.take(size, what)?;
            out.insert(tag, Bytes::copy_from_slice(value));
        }
        Ok(out)
    }

    pub fn expect_end(&self, what: &'static str) -> Result<(), CodecError> {
        if self.remaining() != 0 {
            return Err(CodecError::Invalid(format!(
                "{} trailing byte(s) after {what}",
                self.remaining()
            )));
        }
        Ok(())
    }
}

/// Appends a uvarint.
pub fn put_uvarint(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Appends a compact (non-null) string.
pub fn put_compact_string(out: &mut Vec<u8>, s: &str) {
    put_uvarint(out, s.len() as u32 + 1);
    out.extend_from_slice(s.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_len_refuses_counts_the_frame_cannot_hold() {
        let mut r = Reader::new(&[0x7f, 0xff, 0xff, 0xff, 0, 0]);
        assert!(matches!(
            r.array_len(false, 1, "a"),
            Err(CodecError::InvalidLength { .. })
        ));
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
        assert!(r.array_len(true, 1, "a").is_err());
        let mut r = Reader::new(&[0, 0, 0, 2, 1, 1]);
        assert_eq!(r.array_len(false, 1, "a"), Ok(Some(2)));
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff]);
        assert_eq!(r.array_len(false, 1, "a"), Ok(None));
    }

    #[test]
    fn varints_round_trip_and_overlong_ones_fail() {
        for v in [0u32, 1, 127, 128, 300, 16_383, 16_384, u32::MAX] {
            let mut out = Vec::new();
            put_uvarint(&mut out, v);
            assert_eq!(Reader::new(&out).uvarint("v"), Ok(v));
        }
        assert!(Reader::new(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01])
            .uvarint("v")
            .is_err());
    }

    #[test]
    fn strings_check_length_and_utf8() {
        assert!(Reader::new(&[0, 5, b'a']).nullable_string("s").is_err());
        assert!(Reader::new(&[0, 2, 0xff, 0xfe])
            .nullable_string("s")
            .is_err());
        assert_eq!(Reader::new(&[0xff, 0xff]).nullable_string("s"), Ok(None));
        assert_eq!(
            Reader::new(&[3, b'h', b'i']).compact_nullable_string("s"),
            Ok(Some("hi"))
        );
    }
}
