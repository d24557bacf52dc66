//! SaslHandshake (key 17) and SaslAuthenticate (key 36): the bounded decoders
//! of both requests (as kshim follows a client's exchange) and of both answers
//! (as kshim follows the broker's side, and as its own client reads them).

use crate::protocol::{CodecError, Reader};

/// SaslHandshake request v0-v1: the mechanism the client asks for.
pub fn handshake_mechanism(body: &[u8]) -> Result<&str, CodecError> {
    Reader::new(body).string(false, "Mechanism")
}

/// SaslHandshake answer v0-v1 (never flexible): the error code and the
/// mechanisms the broker has enabled (read as far as they are readable).
pub fn handshake_answer(body: &[u8]) -> Result<(i16, Vec<String>), CodecError> {
    let mut r = Reader::new(body);
    let code = r.i16("ErrorCode")?;
    let mut enabled = Vec::new();
    if let Ok(Some(n)) = r.array_len(false, 2, "Mechanisms") {
        for _ in 0..n {
            match r.string(false, "Mechanism") {
                Ok(m) => enabled.push(m.to_owned()),
                Err(_) => break,
            }
        }
    }
    Ok((code, enabled))
}

/// SaslAuthenticate request: its AuthBytes (flexible from v2).
pub fn authenticate_token(version: i16, body: &[u8]) -> Result<&[u8], CodecError> {
    auth_bytes(&mut Reader::new(body), version >= 2)
}

/// A SaslAuthenticate answer: the error code, the message and AuthBytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuthenticateAnswer<'a> {
    pub error_code: i16,
    pub error_message: Option<&'a str>,
    pub token: &'a [u8],
}

/// SaslAuthenticate answer v0-v2 (flexible from v2). An answer with an error
/// may end before its AuthBytes: the token then reads as empty.
pub fn authenticate_answer(
    version: i16,
    body: &[u8],
) -> Result<AuthenticateAnswer<'_>, CodecError> {
    let mut r = Reader::new(body);
    let flexible = version >= 2;
    let error_code = r.i16("ErrorCode")?;
    let error_message = r.nullable(flexible, "ErrorMessage")?;
    let token = if error_code != 0 && r.remaining() == 0 {
        &[][..]
    } else {
        auth_bytes(&mut r, flexible)?
    };
    Ok(AuthenticateAnswer {
        error_code,
        error_message,
        token,
    })
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
