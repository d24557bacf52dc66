//! The request header, read once per request: the connection reads the fixed
//! 8 bytes into an `Incoming` as the frame arrives and hands it down; the rest of
//! the header (client id, tagged fields) is read on from there into a
//! `RequestFrame`, only for requests whose body kshim reads.

use super::wire::{CodecError, Reader};
use bytes::Bytes;
use kafka_protocol::messages::ApiKey;

/// The fixed first 8 bytes of every request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderPeek {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
}

impl HeaderPeek {
    pub fn parse(frame: &[u8]) -> Result<HeaderPeek, CodecError> {
        let mut r = Reader::new(frame);
        Ok(HeaderPeek {
            api_key: r.i16("request api key")?,
            api_version: r.i16("request api version")?,
            correlation_id: r.i32("correlation id")?,
        })
    }

    pub fn known_api_key(&self) -> Option<ApiKey> {
        ApiKey::try_from(self.api_key).ok()
    }
}

/// One request frame (without its size prefix) with the fixed part of its
/// header read: what every layer above the connection is handed.
#[derive(Debug, Clone)]
pub struct Incoming {
    pub header: HeaderPeek,
    pub frame: Bytes,
}

impl Incoming {
    pub fn parse(frame: Bytes) -> Result<Incoming, CodecError> {
        Ok(Incoming {
            header: HeaderPeek::parse(&frame)?,
            frame,
        })
    }

    /// The rest of the header, read on from the fixed part: for a request
    /// whose body kshim reads.
    pub fn decode_header(self) -> Result<RequestFrame, CodecError> {
        RequestFrame::read(self.header, self.frame)
    }
}

/// One request frame with its header decoded. The body stays raw.
#[derive(Debug, Clone)]
pub struct RequestFrame {
    pub header: HeaderPeek,
    pub client_id: Option<String>,
    /// Whether the header (and so the body) uses the flexible encoding.
    pub flexible: bool,
    pub frame: Bytes,
    body_offset: usize,
}

impl RequestFrame {
    /// Decodes the header of a request whose API key kshim knows. The header
    /// version follows the API key and version, as in Kafka; an ApiVersions request
    /// of a version newer than any known is still read with the flexible header.
    pub fn parse(frame: Bytes) -> Result<RequestFrame, CodecError> {
        Incoming::parse(frame)?.decode_header()
    }

    fn read(header: HeaderPeek, frame: Bytes) -> Result<RequestFrame, CodecError> {
        let api_key = header
            .known_api_key()
            .ok_or_else(|| CodecError::Invalid(format!("unknown API key {}", header.api_key)))?;
        let flexible = match api_key {
            ApiKey::ApiVersions => header.api_version >= 3,
            _ => api_key.request_header_version(header.api_version) >= 2,
        };
        let mut r = Reader::new(&frame[8..]);
        let client_id = r.nullable_string("client id")?.map(str::to_owned);
        if flexible {
            r.tagged_fields("request header")?;
        }
        let body_offset = 8 + r.position();
        Ok(RequestFrame {
            header,
            client_id,
            flexible,
            frame,
            body_offset,
        })
    }

    pub fn body(&self) -> &[u8] {
        &self.frame[self.body_offset..]
    }

    /// The header as it came, for a request sent on with a new body.
    pub fn header_bytes(&self) -> &[u8] {
        &self.frame[..self.body_offset]
    }

    pub fn body_bytes(&self) -> Bytes {
        self.frame.slice(self.body_offset..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_flexible_header_and_finds_the_body() {
        // ApiVersions v3, correlation 7, client id "ab", no header tags, body [9].
        let frame = Bytes::from_static(&[0, 18, 0, 3, 0, 0, 0, 7, 0, 2, b'a', b'b', 0, 9]);
        let req = RequestFrame::parse(frame).unwrap();
        assert_eq!(
            req.header,
            HeaderPeek {
                api_key: 18,
                api_version: 3,
                correlation_id: 7
            }
        );
        assert_eq!(req.client_id.as_deref(), Some("ab"));
        assert!(req.flexible);
        assert_eq!(req.body(), &[9]);
    }

    #[test]
    fn garbage_headers_are_errors() {
        assert!(RequestFrame::parse(Bytes::from_static(&[0, 18, 0])).is_err());
        assert!(RequestFrame::parse(Bytes::from_static(&[
            0x7f, 0x7f, 0, 0, 0, 0, 0, 1, 0xff, 0xff
        ]))
        .is_err());
        assert!(
            RequestFrame::parse(Bytes::from_static(&[0, 18, 0, 3, 0, 0, 0, 7, 0, 9, b'a']))
                .is_err()
        );
    }
}
