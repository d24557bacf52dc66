//! The principal of a client that authenticated with SASL through kshim. kshim
//! forwards SaslHandshake and SaslAuthenticate unchanged, so the upstream is the
//! one that checks the credentials; kshim reads along, and once the upstream
//! accepts the exchange, the connection's principal is `User:` and the name the
//! upstream authenticated:
//!
//! - PLAIN: the authentication identity (Kafka refuses a different authzid);
//! - SCRAM-SHA-256/512: the `n=` user name of the client-first message, once the
//!   server-final message (`v=...`) arrives without an error;
//! - OAUTHBEARER: the `sub` claim of the bearer token, once the upstream answers
//!   the token without an error or a challenge.
//!
//! GSSAPI names come from Kerberos and the upstream's mapping rules, which kshim
//! does not see; such connections keep the principal they had. A failed exchange
//! changes nothing (the upstream closes the connection).

use crate::protocol::response::response_body_offset;
use crate::protocol::{CodecError, Reader, RequestFrame};
use base64::Engine as _;
use bytes::Bytes;
use kafka_protocol::messages::ApiKey;

/// Where one connection's SASL exchange stands.
#[derive(Debug, Default)]
pub struct SaslExchange {
    mechanism: Option<String>,
    /// The name the client presented, waiting for the upstream's verdict.
    candidate: Option<String>,
}

impl SaslExchange {
    /// Reads a request on its way to the upstream: the mechanism of a
    /// SaslHandshake, the name in the first token of a SaslAuthenticate.
    pub fn request(&mut self, api_key: i16, frame: &Bytes) {
        let Ok(request) = RequestFrame::parse(frame.clone()) else {
            return;
        };
        if api_key == ApiKey::SaslHandshake as i16 {
            let mut r = Reader::new(request.body());
            self.mechanism = r.string(false, "Mechanism").ok().map(str::to_owned);
            self.candidate = None;
        } else if api_key == ApiKey::SaslAuthenticate as i16 {
            let version = request.header.api_version;
            let Ok(token) = auth_bytes(&mut Reader::new(request.body()), version >= 2) else {
                return;
            };
            if let Some(name) = self
                .mechanism
                .as_deref()
                .and_then(|m| client_name(m, token))
            {
                self.candidate = Some(name);
            }
        }
    }

    /// Reads the upstream's SaslAuthenticate response (without its size prefix);
    /// returns the principal once the exchange has succeeded.
    pub fn response(&mut self, version: i16, frame: &[u8]) -> Option<String> {
        let offset = response_body_offset(ApiKey::SaslAuthenticate, version, frame).ok()?;
        let mut r = Reader::new(frame.get(offset..)?);
        let flexible = version >= 2;
        let code = r.i16("ErrorCode").ok()?;
        if flexible {
            r.compact_nullable_string("ErrorMessage").ok()?;
        } else {
            r.nullable_string("ErrorMessage").ok()?;
        }
        let token = auth_bytes(&mut r, flexible).ok()?;
        if code != crate::protocol::error_codes::NONE {
            self.candidate = None;
            return None;
        }
        let done = match self.mechanism.as_deref()? {
            "PLAIN" => true,
            m if m.starts_with("SCRAM-") => token.starts_with(b"v="),
            "OAUTHBEARER" => token.is_empty(),
            _ => false,
        };
        if done {
            self.candidate.take().map(|name| format!("User:{name}"))
        } else {
            None
        }
    }
}

/// SaslAuthenticate's AuthBytes: BYTES, or COMPACT_BYTES in flexible versions.
fn auth_bytes<'a>(r: &mut Reader<'a>, flexible: bool) -> Result<&'a [u8], CodecError> {
    let n = if flexible {
        match r.uvarint("AuthBytes length")? {
            0 => return Err(CodecError::Invalid("null AuthBytes".into())),
            n => n as usize - 1,
        }
    } else {
        usize::try_from(r.i32("AuthBytes length")?)
            .map_err(|_| CodecError::Invalid("negative AuthBytes length".into()))?
    };
    r.bytes(n, "AuthBytes")
}

/// The name a client's first token presents for `mechanism`.
fn client_name(mechanism: &str, token: &[u8]) -> Option<String> {
    match mechanism {
        "PLAIN" => {
            // [authzid] NUL authcid NUL password
            let mut parts = token.splitn(3, |&b| b == 0);
            let _authzid = parts.next()?;
            let authcid = std::str::from_utf8(parts.next()?).ok()?;
            parts.next()?;
            (!authcid.is_empty()).then(|| authcid.to_owned())
        }
        m if m.starts_with("SCRAM-") => {
            // gs2-header "n,," (or "y,," / "n,a=authzid,") then "n=user,r=nonce".
            let text = std::str::from_utf8(token).ok()?;
            let bare = text.splitn(3, ',').nth(2)?;
            let user = bare.split(',').find_map(|a| a.strip_prefix("n="))?;
            // SCRAM escapes ',' and '=' in names.
            let user = user.replace("=2C", ",").replace("=3D", "=");
            (!user.is_empty()).then_some(user)
        }
        "OAUTHBEARER" => {
            let text = std::str::from_utf8(token).ok()?;
            let jwt = text
                .split('\u{1}')
                .find_map(|kv| kv.strip_prefix("auth=Bearer "))?;
            let payload = jwt.split('.').nth(1)?;
            let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(payload.trim_end_matches('='))
                .ok()?;
            let claims: serde_json::Value = serde_json::from_slice(&raw).ok()?;
            claims
                .get("sub")?
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{BufMut, BytesMut};

    fn request(api: ApiKey, version: i16, body: &[u8]) -> Bytes {
        let mut f = BytesMut::new();
        f.put_i16(api as i16);
        f.put_i16(version);
        f.put_i32(7);
        f.put_i16(3);
        f.put_slice(b"cli");
        if api.request_header_version(version) >= 2 {
            f.put_u8(0);
        }
        f.put_slice(body);
        f.freeze()
    }

    fn handshake(mechanism: &str) -> Bytes {
        let mut b = Vec::new();
        b.extend_from_slice(&(mechanism.len() as i16).to_be_bytes());
        b.extend_from_slice(mechanism.as_bytes());
        request(ApiKey::SaslHandshake, 1, &b)
    }

    fn authenticate(version: i16, token: &[u8]) -> Bytes {
        let mut b = Vec::new();
        if version >= 2 {
            crate::protocol::wire::put_uvarint(&mut b, token.len() as u32 + 1);
            b.extend_from_slice(token);
            b.push(0);
        } else {
            b.extend_from_slice(&(token.len() as i32).to_be_bytes());
            b.extend_from_slice(token);
        }
        request(ApiKey::SaslAuthenticate, version, &b)
    }

    fn answer(version: i16, code: i16, token: &[u8]) -> Vec<u8> {
        let mut f = 7i32.to_be_bytes().to_vec();
        if version >= 2 {
            f.push(0);
        }
        f.extend_from_slice(&code.to_be_bytes());
        if version >= 2 {
            f.push(0); // null message
            crate::protocol::wire::put_uvarint(&mut f, token.len() as u32 + 1);
            f.extend_from_slice(token);
            f.extend_from_slice(&0i64.to_be_bytes());
            f.push(0);
        } else {
            f.extend_from_slice(&(-1i16).to_be_bytes());
            f.extend_from_slice(&(token.len() as i32).to_be_bytes());
            f.extend_from_slice(token);
            if version >= 1 {
                f.extend_from_slice(&0i64.to_be_bytes());
            }
        }
        f
    }

    #[test]
    fn plain_names_the_authentication_identity_once_accepted() {
        for version in 0..=2 {
            let mut x = SaslExchange::default();
            x.request(ApiKey::SaslHandshake as i16, &handshake("PLAIN"));
            x.request(
                ApiKey::SaslAuthenticate as i16,
                &authenticate(version, b"\0alice\0secret"),
            );
            assert_eq!(
                x.response(version, &answer(version, 0, b"")).as_deref(),
                Some("User:alice")
            );
        }
        let mut refused = SaslExchange::default();
        refused.request(ApiKey::SaslHandshake as i16, &handshake("PLAIN"));
        refused.request(
            ApiKey::SaslAuthenticate as i16,
            &authenticate(2, b"\0bob\0wrong"),
        );
        assert_eq!(refused.response(2, &answer(2, 58, b"")), None);
    }

    #[test]
    fn scram_waits_for_the_server_final_message() {
        let mut x = SaslExchange::default();
        x.request(ApiKey::SaslHandshake as i16, &handshake("SCRAM-SHA-256"));
        x.request(
            ApiKey::SaslAuthenticate as i16,
            &authenticate(2, b"n,,n=carol=2Cops,r=fyko+d2lbbFgONRv9qkxdawL"),
        );
        assert_eq!(
            x.response(2, &answer(2, 0, b"r=fyko,s=QSXCR+Q6sek8bf92,i=4096")),
            None
        );
        x.request(
            ApiKey::SaslAuthenticate as i16,
            &authenticate(2, b"c=biws,r=fyko,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="),
        );
        assert_eq!(
            x.response(2, &answer(2, 0, b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ="))
                .as_deref(),
            Some("User:carol,ops")
        );
    }

    #[test]
    fn oauthbearer_reads_the_subject_claim() {
        let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(br#"{"sub":"svc-billing","exp":1}"#);
        let token = format!("n,,\u{1}auth=Bearer eyJhbGciOiJub25lIn0.{claims}.\u{1}\u{1}");
        let mut x = SaslExchange::default();
        x.request(ApiKey::SaslHandshake as i16, &handshake("OAUTHBEARER"));
        x.request(
            ApiKey::SaslAuthenticate as i16,
            &authenticate(2, token.as_bytes()),
        );
        assert_eq!(
            x.response(2, &answer(2, 0, br#"{"status":"invalid_token"}"#)),
            None
        );
        let mut y = SaslExchange::default();
        y.request(ApiKey::SaslHandshake as i16, &handshake("OAUTHBEARER"));
        y.request(
            ApiKey::SaslAuthenticate as i16,
            &authenticate(2, token.as_bytes()),
        );
        assert_eq!(
            y.response(2, &answer(2, 0, b"")).as_deref(),
            Some("User:svc-billing")
        );
    }

    #[test]
    fn garbage_never_names_anyone() {
        let mut x = SaslExchange::default();
        x.request(ApiKey::SaslHandshake as i16, &handshake("GSSAPI"));
        x.request(
            ApiKey::SaslAuthenticate as i16,
            &authenticate(1, b"\x60\x82kerberos"),
        );
        assert_eq!(x.response(1, &answer(1, 0, b"")), None);
        let mut y = SaslExchange::default();
        y.request(
            ApiKey::SaslHandshake as i16,
            &Bytes::from_static(b"\0\x11\0\x01"),
        );
        y.request(
            ApiKey::SaslAuthenticate as i16,
            &authenticate(0, &[0xff; 3]),
        );
        assert_eq!(y.response(0, &[1, 2, 3]), None);
        for token in [
            &b""[..],
            b"\0",
            b"\0\0",
            b"n,,",
            b"n,,r=x",
            b"\x01auth=Bearer a.!!!.c",
        ] {
            for m in ["PLAIN", "SCRAM-SHA-512", "OAUTHBEARER"] {
                assert_eq!(client_name(m, token), None, "{m} {token:?}");
            }
        }
    }
}
