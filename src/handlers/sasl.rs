//! The principal of a client that authenticated with SASL through kshim. kshim
//! forwards SaslHandshake and SaslAuthenticate unchanged, so the upstream is the
//! one that checks the credentials; kshim reads along, and once the upstream
//! accepts an exchange, the connection's principal is `User:` and the name the
//! upstream authenticated:
//!
//! - PLAIN: the authentication identity (Kafka refuses a different authzid);
//! - SCRAM-SHA-256/512: the `n=` user name of the client-first message, once the
//!   server-final message (`v=...`) arrives without an error;
//! - OAUTHBEARER: the `sub` claim of the bearer token, once the upstream answers
//!   the token without an error or a challenge.
//!
//! A name counts only when it comes from the exchange that the upstream's own
//! answer accepted. So kshim pairs each SASL request with its response:
//!
//! - one SASL request at a time: a second one sent before the first is answered
//!   closes the connection (Kafka clients always wait; nothing can be paired
//!   otherwise);
//! - SaslAuthenticate only inside an exchange that a successful SaslHandshake
//!   opened; on a connection that has authenticated and opened none, kshim
//!   answers ILLEGAL_SASL_STATE itself, as the broker does, and forwards nothing;
//! - re-authentication (KIP-368) opens a new exchange with the same mechanism
//!   and must name the same user, as in Kafka;
//! - SaslHandshake v0, after which the tokens travel unframed, and any answer
//!   that does not decode close the connection.
//!
//! GSSAPI names come from Kerberos and the upstream's mapping rules, which kshim
//! does not see; such connections keep the principal they had. A failed exchange
//! changes nothing.

use super::refusal::Refusal;
use crate::protocol::apis::sasl;
use crate::protocol::errors;
use crate::protocol::response::{encode_frame, response_body_offset};
use crate::protocol::Incoming;
use crate::protocol::{CodecError, RequestFrame};
use base64::Engine as _;
use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, SaslAuthenticateResponse};
use kafka_protocol::protocol::StrBytes;

/// What the connection does with a SASL request.
#[derive(Debug, PartialEq, Eq)]
pub enum SaslVerdict {
    /// Send it on to the upstream.
    Forward,
    /// Answer it with this response frame (size prefix included); nothing is
    /// forwarded.
    Refuse(Bytes),
    /// Close the connection, for this reason.
    Close(String),
}

/// The SASL request the upstream has not answered yet.
#[derive(Debug)]
struct Pending {
    correlation_id: i32,
    version: i16,
    step: Step,
}

#[derive(Debug)]
enum Step {
    Handshake { mechanism: String },
    Authenticate,
}

/// An exchange the upstream opened by accepting a SaslHandshake.
#[derive(Debug)]
struct Exchange {
    mechanism: String,
    /// The name in the exchange's first token, once that token has been sent.
    candidate: Option<String>,
    tokens_sent: u32,
}

/// A completed authentication.
#[derive(Debug, Clone)]
struct Authenticated {
    mechanism: String,
    /// `None` for mechanisms whose names kshim cannot read (GSSAPI).
    name: Option<String>,
}

/// Where one connection's SASL authentication stands.
#[derive(Debug, Default)]
pub struct SaslExchange {
    pending: Option<Pending>,
    exchange: Option<Exchange>,
    authenticated: Option<Authenticated>,
}

/// Whether kshim reads requests of this API key (and their answers) along.
pub fn reads(api_key: i16) -> bool {
    api_key == ApiKey::SaslHandshake as i16 || api_key == ApiKey::SaslAuthenticate as i16
}

/// Mechanisms whose user names kshim reads from the first token.
fn names_users(mechanism: &str) -> bool {
    mechanism == "PLAIN" || mechanism == "OAUTHBEARER" || mechanism.starts_with("SCRAM-")
}

impl SaslExchange {
    /// The mechanism of the authentication the upstream accepted.
    pub fn mechanism(&self) -> Option<&str> {
        self.authenticated.as_ref().map(|a| a.mechanism.as_str())
    }

    /// Judges a SaslHandshake or SaslAuthenticate request on its way to the
    /// upstream.
    pub fn request(&mut self, request: &Incoming) -> SaslVerdict {
        let request = match request.clone().decode_header() {
            Ok(r) => r,
            Err(e) => return SaslVerdict::Close(format!("unreadable SASL request: {e}")),
        };
        let (api_key, version) = (request.header.api_key, request.header.api_version);
        if let Some(p) = &self.pending {
            return SaslVerdict::Close(format!(
                "a SASL request (correlation id {}) arrived before the upstream answered the \
                 previous one ({}); SASL requests must wait for their answers",
                request.header.correlation_id, p.correlation_id
            ));
        }
        let step = if api_key == ApiKey::SaslHandshake as i16 {
            match self.handshake(&request) {
                Ok(step) => step,
                Err(why) => return SaslVerdict::Close(why),
            }
        } else if api_key == ApiKey::SaslAuthenticate as i16 {
            match self.authenticate(&request) {
                Ok(Some(step)) => step,
                Ok(None) => return self.refuse_authenticate(&request),
                Err(why) => return SaslVerdict::Close(why),
            }
        } else {
            return SaslVerdict::Forward;
        };
        self.pending = Some(Pending {
            correlation_id: request.header.correlation_id,
            version,
            step,
        });
        SaslVerdict::Forward
    }

    fn handshake(&mut self, request: &RequestFrame) -> Result<Step, String> {
        if request.header.api_version == 0 {
            return Err(
                "SaslHandshake v0 is followed by unframed SASL tokens, which kshim \
                        cannot pair with the upstream's answers; clients since Kafka 1.0 use v1"
                    .into(),
            );
        }
        let mechanism = sasl::handshake_mechanism(request.body())
            .map_err(|e| format!("unreadable SaslHandshake: {e}"))?
            .to_owned();
        if let Some(x) = &self.exchange {
            // An exchange kshim follows to its end must end before another starts.
            if names_users(&x.mechanism) {
                return Err(format!(
                    "SaslHandshake in the middle of a {} exchange",
                    x.mechanism
                ));
            }
        }
        if let Some(a) = &self.authenticated {
            if a.mechanism != mechanism {
                return Err(format!(
                    "re-authentication with {mechanism} on a connection that authenticated with {}; \
                     Kafka requires the same mechanism",
                    a.mechanism
                ));
            }
        }
        Ok(Step::Handshake { mechanism })
    }

    /// The step a SaslAuthenticate request takes; `None` when kshim refuses it as
    /// the broker would (no exchange open on an authenticated connection).
    fn authenticate(&mut self, request: &RequestFrame) -> Result<Option<Step>, String> {
        let version = request.header.api_version;
        let Some(x) = self.exchange.as_mut() else {
            if self.authenticated.is_some() {
                return Ok(None);
            }
            return Err("SaslAuthenticate before a successful SaslHandshake".into());
        };
        let token = sasl::authenticate_token(version, request.body())
            .map_err(|e| format!("unreadable SaslAuthenticate: {e}"))?;
        if x.tokens_sent == 0 && names_users(&x.mechanism) {
            let name = client_name(&x.mechanism, token).ok_or_else(|| {
                format!(
                    "the first {} token names no user kshim can read",
                    x.mechanism
                )
            })?;
            if let Some(Authenticated {
                name: Some(before), ..
            }) = &self.authenticated
            {
                if *before != name {
                    return Err(format!(
                        "re-authentication as {name} on a connection authenticated as {before}; \
                         Kafka does not let a connection change its principal"
                    ));
                }
            }
            x.candidate = Some(name);
        }
        x.tokens_sent += 1;
        Ok(Some(Step::Authenticate))
    }

    fn refuse_authenticate(&self, request: &RequestFrame) -> SaslVerdict {
        let version = request.header.api_version;
        let answer = SaslAuthenticateResponse::default()
            .with_error_code(Refusal::SaslOutOfTurn.code())
            .with_error_message(Some(StrBytes::from_static_str(
                "This connection has already authenticated; re-authentication starts with SaslHandshake",
            )));
        match encode_frame(
            ApiKey::SaslAuthenticate,
            version,
            request.header.correlation_id,
            &answer,
        ) {
            Ok(frame) => SaslVerdict::Refuse(frame),
            Err(e) => SaslVerdict::Close(e.to_string()),
        }
    }

    /// Reads the upstream's answer (without its size prefix) to the SASL request
    /// forwarded last. Returns the connection's new principal once an exchange
    /// has succeeded; an answer kshim cannot pair is an error, and the
    /// connection closes.
    pub fn response(&mut self, frame: &[u8]) -> Result<Option<String>, String> {
        let pending = self
            .pending
            .take()
            .ok_or("a SASL answer arrived for no SASL request")?;
        let correlation_id = frame
            .get(..4)
            .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        if correlation_id != Some(pending.correlation_id) {
            return Err(format!(
                "the upstream's SASL answer carries correlation id {correlation_id:?}, not {}",
                pending.correlation_id
            ));
        }
        match pending.step {
            Step::Handshake { mechanism } => {
                let code = handshake_error(frame)
                    .map_err(|e| format!("unreadable SaslHandshake answer: {e}"))?;
                self.exchange = (code == errors::NONE).then_some(Exchange {
                    mechanism,
                    candidate: None,
                    tokens_sent: 0,
                });
                Ok(None)
            }
            Step::Authenticate => {
                let (code, token) = authenticate_answer(pending.version, frame)
                    .map_err(|e| format!("unreadable SaslAuthenticate answer: {e}"))?;
                let Some(x) = self.exchange.as_ref() else {
                    return Err("a SaslAuthenticate answer outside any exchange".into());
                };
                if code != errors::NONE {
                    self.exchange = None;
                    return Ok(None);
                }
                let done = match x.mechanism.as_str() {
                    "PLAIN" => true,
                    m if m.starts_with("SCRAM-") => token.starts_with(b"v="),
                    "OAUTHBEARER" => token.is_empty(),
                    _ => false,
                };
                if !done {
                    return Ok(None);
                }
                let Some(x) = self.exchange.take() else {
                    return Ok(None);
                };
                self.authenticated = Some(Authenticated {
                    mechanism: x.mechanism,
                    name: x.candidate.clone(),
                });
                Ok(x.candidate.map(|name| format!("User:{name}")))
            }
        }
    }
}

/// SaslHandshake's ErrorCode (the answer is never flexible).
fn handshake_error(frame: &[u8]) -> Result<i16, CodecError> {
    let offset = response_body_offset(ApiKey::SaslHandshake, 1, frame)?;
    Ok(sasl::handshake_answer(frame.get(offset..).unwrap_or_default())?.0)
}

/// SaslAuthenticate's ErrorCode and AuthBytes.
fn authenticate_answer(version: i16, frame: &[u8]) -> Result<(i16, &[u8]), CodecError> {
    let offset = response_body_offset(ApiKey::SaslAuthenticate, version, frame)?;
    let answer = sasl::authenticate_answer(version, frame.get(offset..).unwrap_or_default())?;
    Ok((answer.error_code, answer.token))
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
    use crate::protocol::errors::ResponseError;
    use bytes::{BufMut, BytesMut};

    fn request(api: ApiKey, version: i16, correlation_id: i32, body: &[u8]) -> Bytes {
        let mut f = BytesMut::new();
        f.put_i16(api as i16);
        f.put_i16(version);
        f.put_i32(correlation_id);
        f.put_i16(3);
        f.put_slice(b"cli");
        if api.request_header_version(version) >= 2 {
            f.put_u8(0);
        }
        f.put_slice(body);
        f.freeze()
    }

    fn incoming(frame: Bytes) -> Incoming {
        Incoming::parse(frame).expect("a request header")
    }

    fn handshake(correlation_id: i32, mechanism: &str) -> Incoming {
        let mut b = Vec::new();
        b.extend_from_slice(&(mechanism.len() as i16).to_be_bytes());
        b.extend_from_slice(mechanism.as_bytes());
        incoming(request(ApiKey::SaslHandshake, 1, correlation_id, &b))
    }

    fn authenticate(version: i16, correlation_id: i32, token: &[u8]) -> Incoming {
        let mut b = Vec::new();
        if version >= 2 {
            crate::protocol::wire::put_uvarint(&mut b, token.len() as u32 + 1);
            b.extend_from_slice(token);
            b.push(0);
        } else {
            b.extend_from_slice(&(token.len() as i32).to_be_bytes());
            b.extend_from_slice(token);
        }
        incoming(request(
            ApiKey::SaslAuthenticate,
            version,
            correlation_id,
            &b,
        ))
    }

    fn handshake_answer(correlation_id: i32, code: i16) -> Vec<u8> {
        let mut f = correlation_id.to_be_bytes().to_vec();
        f.extend_from_slice(&code.to_be_bytes());
        f.extend_from_slice(&1i32.to_be_bytes());
        f.extend_from_slice(&5i16.to_be_bytes());
        f.extend_from_slice(b"PLAIN");
        f
    }

    fn answer(version: i16, correlation_id: i32, code: i16, token: &[u8]) -> Vec<u8> {
        let mut f = correlation_id.to_be_bytes().to_vec();
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

    /// A connection whose SaslHandshake (correlation id 1) for `mechanism` the
    /// upstream accepted.
    fn opened(mechanism: &str) -> SaslExchange {
        let mut x = SaslExchange::default();
        assert_eq!(x.request(&handshake(1, mechanism)), SaslVerdict::Forward);
        assert_eq!(x.response(&handshake_answer(1, 0)), Ok(None));
        x
    }

    /// A connection that has gone through a successful PLAIN exchange as `user`.
    fn logged_in(user: &str) -> SaslExchange {
        let mut x = opened("PLAIN");
        let token = format!("\0{user}\0secret");
        assert_eq!(
            x.request(&authenticate(2, 2, token.as_bytes())),
            SaslVerdict::Forward
        );
        assert_eq!(
            x.response(&answer(2, 2, 0, b"")),
            Ok(Some(format!("User:{user}")))
        );
        x
    }

    fn closes(verdict: SaslVerdict) -> String {
        match verdict {
            SaslVerdict::Close(why) => why,
            other => panic!("expected the connection to close, got {other:?}"),
        }
    }

    #[test]
    fn plain_names_the_authentication_identity_once_accepted() {
        for version in 0..=2 {
            let mut x = opened("PLAIN");
            x.request(&authenticate(version, 2, b"\0alice\0secret"));
            assert_eq!(
                x.response(&answer(version, 2, 0, b"")).unwrap().as_deref(),
                Some("User:alice")
            );
        }
        let mut refused = opened("PLAIN");
        refused.request(&authenticate(2, 2, b"\0bob\0wrong"));
        assert_eq!(refused.response(&answer(2, 2, 58, b"")), Ok(None));
    }

    #[test]
    fn a_pipelined_second_authenticate_closes_the_connection() {
        // The takeover: bob's valid login and, before its answer, alice's.
        let mut x = opened("PLAIN");
        assert_eq!(
            x.request(&authenticate(2, 2, b"\0bob\0bob-secret")),
            SaslVerdict::Forward
        );
        let why = closes(x.request(&authenticate(2, 3, b"\0alice\0wrong")));
        assert!(why.contains("before the upstream answered"), "{why}");
        // A pipelined handshake is no different.
        let mut y = SaslExchange::default();
        y.request(&handshake(1, "PLAIN"));
        closes(y.request(&handshake(2, "PLAIN")));
    }

    #[test]
    fn authenticate_after_success_is_refused_as_the_broker_does() {
        let mut x = logged_in("bob");
        let SaslVerdict::Refuse(frame) = x.request(&authenticate(2, 9, b"\0alice\0wrong")) else {
            panic!("expected kshim to refuse");
        };
        // size, correlation id 9, header tags, ILLEGAL_SASL_STATE
        assert_eq!(&frame[4..8], &9i32.to_be_bytes());
        assert_eq!(frame[8], 0);
        assert_eq!(
            &frame[9..11],
            &ResponseError::IllegalSaslState.code().to_be_bytes()
        );
        // Nothing is pending: the refusal answered it, and bob stays bob.
        assert!(x.response(&answer(2, 9, 0, b"")).is_err());
        let mut v0 = logged_in("bob");
        assert!(matches!(
            v0.request(&authenticate(0, 4, b"\0alice\0x")),
            SaslVerdict::Refuse(_)
        ));
    }

    #[test]
    fn an_answer_that_does_not_pair_closes_the_connection() {
        let mut x = opened("PLAIN");
        x.request(&authenticate(2, 2, b"\0alice\0secret"));
        let why = x.response(&answer(2, 7, 0, b"")).unwrap_err();
        assert!(why.contains("correlation id"), "{why}");
        // No request waiting: any SASL answer is unpaired.
        assert!(SaslExchange::default()
            .response(&answer(2, 1, 0, b""))
            .is_err());
        // An answer that does not decode.
        let mut y = SaslExchange::default();
        y.request(&handshake(1, "PLAIN"));
        assert!(y.response(&[0, 0, 0, 1, 0]).is_err());
    }

    #[test]
    fn authenticate_without_a_handshake_closes_the_connection() {
        let mut x = SaslExchange::default();
        closes(x.request(&authenticate(2, 1, b"\0alice\0secret")));
        // A refused handshake opens nothing.
        let mut y = SaslExchange::default();
        y.request(&handshake(1, "PLAIN"));
        y.response(&handshake_answer(
            1,
            ResponseError::UnsupportedSaslMechanism.code(),
        ))
        .unwrap();
        closes(y.request(&authenticate(2, 2, b"\0alice\0secret")));
        // Handshake v0 is followed by unframed tokens.
        let mut z = SaslExchange::default();
        let mut v0 = handshake(1, "PLAIN").frame.to_vec();
        v0[3] = 0;
        assert!(closes(z.request(&incoming(Bytes::from(v0)))).contains("v0"));
    }

    #[test]
    fn failed_then_succeeded_names_the_user_of_the_success() {
        let mut x = opened("PLAIN");
        x.request(&authenticate(2, 2, b"\0alice\0wrong"));
        assert_eq!(
            x.response(&answer(
                2,
                2,
                ResponseError::SaslAuthenticationFailed.code(),
                b""
            )),
            Ok(None)
        );
        // The failed exchange is over; another token needs a new handshake.
        closes(x.request(&authenticate(2, 3, b"\0alice\0again")));
        let mut y = opened("PLAIN");
        y.request(&authenticate(2, 2, b"\0alice\0wrong"));
        y.response(&answer(2, 2, 58, b"")).unwrap();
        y.request(&handshake(3, "PLAIN"));
        y.response(&handshake_answer(3, 0)).unwrap();
        y.request(&authenticate(2, 4, b"\0bob\0bob-secret"));
        assert_eq!(
            y.response(&answer(2, 4, 0, b"")).unwrap().as_deref(),
            Some("User:bob")
        );
    }

    #[test]
    fn reauthentication_keeps_the_user_and_the_mechanism() {
        let mut same = logged_in("bob");
        same.request(&handshake(5, "PLAIN"));
        same.response(&handshake_answer(5, 0)).unwrap();
        assert_eq!(
            same.request(&authenticate(2, 6, b"\0bob\0bob-secret")),
            SaslVerdict::Forward
        );
        assert_eq!(
            same.response(&answer(2, 6, 0, b"")).unwrap().as_deref(),
            Some("User:bob")
        );

        let mut other = logged_in("bob");
        other.request(&handshake(5, "PLAIN"));
        other.response(&handshake_answer(5, 0)).unwrap();
        let why = closes(other.request(&authenticate(2, 6, b"\0alice\0alice-secret")));
        assert!(why.contains("authenticated as bob"), "{why}");

        let mut mechanism = logged_in("bob");
        closes(mechanism.request(&handshake(5, "SCRAM-SHA-256")));

        // A failed re-authentication leaves the earlier principal, and opens nothing.
        let mut failed = logged_in("bob");
        failed.request(&handshake(5, "PLAIN"));
        failed.response(&handshake_answer(5, 0)).unwrap();
        failed.request(&authenticate(2, 6, b"\0bob\0wrong"));
        assert_eq!(failed.response(&answer(2, 6, 58, b"")), Ok(None));
        assert!(matches!(
            failed.request(&authenticate(2, 7, b"\0alice\0x")),
            SaslVerdict::Refuse(_)
        ));
    }

    #[test]
    fn scram_waits_for_the_server_final_message() {
        let mut x = opened("SCRAM-SHA-256");
        x.request(&authenticate(
            2,
            2,
            b"n,,n=carol=2Cops,r=fyko+d2lbbFgONRv9qkxdawL",
        ));
        assert_eq!(
            x.response(&answer(2, 2, 0, b"r=fyko,s=QSXCR+Q6sek8bf92,i=4096")),
            Ok(None)
        );
        // The client-final message carries no name; the first one's stands.
        x.request(&authenticate(
            2,
            3,
            b"c=biws,r=fyko,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts=",
        ));
        assert_eq!(
            x.response(&answer(2, 3, 0, b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ="))
                .unwrap()
                .as_deref(),
            Some("User:carol,ops")
        );
        // A handshake in the middle of a SCRAM exchange cannot be followed.
        let mut y = opened("SCRAM-SHA-512");
        y.request(&authenticate(2, 2, b"n,,n=carol,r=abc"));
        y.response(&answer(2, 2, 0, b"r=abc,s=x,i=4096")).unwrap();
        closes(y.request(&handshake(3, "SCRAM-SHA-512")));
        // A wrong password fails at the client-final message.
        let mut z = opened("SCRAM-SHA-256");
        z.request(&authenticate(2, 2, b"n,,n=carol,r=abc"));
        z.response(&answer(2, 2, 0, b"r=abc,s=x,i=4096")).unwrap();
        z.request(&authenticate(2, 3, b"c=biws,r=abc,p=bad"));
        assert_eq!(z.response(&answer(2, 3, 58, b"")), Ok(None));
    }

    #[test]
    fn oauthbearer_reads_the_subject_claim() {
        let claims = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(br#"{"sub":"svc-billing","exp":1}"#);
        let token = format!("n,,\u{1}auth=Bearer eyJhbGciOiJub25lIn0.{claims}.\u{1}\u{1}");
        // Refused: a challenge, then the client's empty reply and the error.
        let mut x = opened("OAUTHBEARER");
        x.request(&authenticate(2, 2, token.as_bytes()));
        assert_eq!(
            x.response(&answer(2, 2, 0, br#"{"status":"invalid_token"}"#)),
            Ok(None)
        );
        x.request(&authenticate(2, 3, b"\x01"));
        assert_eq!(x.response(&answer(2, 3, 58, b"")), Ok(None));
        let mut y = opened("OAUTHBEARER");
        y.request(&authenticate(2, 2, token.as_bytes()));
        assert_eq!(
            y.response(&answer(2, 2, 0, b"")).unwrap().as_deref(),
            Some("User:svc-billing")
        );
    }

    #[test]
    fn gssapi_keeps_the_principal_and_may_start_over() {
        let mut x = opened("GSSAPI");
        assert_eq!(
            x.request(&authenticate(1, 2, b"\x60\x82kerberos")),
            SaslVerdict::Forward
        );
        assert_eq!(x.response(&answer(1, 2, 0, b"")), Ok(None));
        assert_eq!(x.request(&handshake(3, "GSSAPI")), SaslVerdict::Forward);
    }

    #[test]
    fn garbage_never_names_anyone() {
        let mut y = SaslExchange::default();
        // A client id longer than the frame.
        closes(y.request(&incoming(Bytes::from_static(
            b"\0\x11\0\x01\0\0\0\x01\0\x05ab",
        ))));
        let mut z = opened("PLAIN");
        closes(z.request(&authenticate(0, 2, &[0xff; 3])));
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
