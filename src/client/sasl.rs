//! SASL on kshim's own client connections: PLAIN (RFC 4616) and SCRAM-SHA-256/512
//! (RFC 5802, as Kafka's ScramSaslClient speaks it: no channel binding, no
//! extensions). Used by `kshim features --command-config` and by kshim's own
//! connections to the upstream cluster (`[upstream.sasl]`).
//!
//! The exchange is SaslHandshake v1 naming the mechanism, then one
//! SaslAuthenticate v1 per token. A SCRAM server's first message is checked
//! before any work is done on it (its nonce must extend ours, its iteration
//! count is bounded), and its final message must prove that it knows the
//! password too.

use super::{ClientError, KafkaClient};
use crate::protocol::apis::sasl;
use crate::protocol::errors::{self};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use kafka_protocol::messages::ApiKey;
use ring::{digest, hmac, pbkdf2, rand::SecureRandom};
use std::num::NonZeroU32;

/// A SASL mechanism kshim can authenticate with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl SaslMechanism {
    /// The mechanism named as Kafka's `sasl.mechanism` names it.
    pub fn parse(name: &str) -> Option<SaslMechanism> {
        match name {
            "PLAIN" => Some(SaslMechanism::Plain),
            "SCRAM-SHA-256" => Some(SaslMechanism::ScramSha256),
            "SCRAM-SHA-512" => Some(SaslMechanism::ScramSha512),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::ScramSha256 => "SCRAM-SHA-256",
            SaslMechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// Credentials for a SASL exchange.
#[derive(Clone, PartialEq, Eq)]
pub struct SaslCredentials {
    pub mechanism: SaslMechanism,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for SaslCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SaslCredentials({}, {}, <password>)",
            self.mechanism.name(),
            self.username
        )
    }
}

/// Kafka's ScramMechanism bounds: fewer iterations than 4096 are refused by its
/// clients; more than this is not a count any Kafka broker stores, and would
/// only make the client spin.
const SCRAM_MIN_ITERATIONS: u32 = 4096;
const SCRAM_MAX_ITERATIONS: u32 = 1_000_000;

impl KafkaClient {
    /// Authenticates this connection, as the first thing after connecting.
    pub async fn authenticate(&mut self, credentials: &SaslCredentials) -> Result<(), ClientError> {
        self.sasl_handshake(credentials.mechanism).await?;
        match credentials.mechanism {
            SaslMechanism::Plain => {
                let token = format!("\0{}\0{}", credentials.username, credentials.password);
                self.sasl_token(credentials, token.as_bytes()).await?;
                Ok(())
            }
            SaslMechanism::ScramSha256 | SaslMechanism::ScramSha512 => {
                let mut scram =
                    Scram::start(credentials).map_err(|r| self.sasl_error(credentials, r))?;
                let server_first = self
                    .sasl_token(credentials, scram.client_first().as_bytes())
                    .await?;
                let client_final = scram
                    .client_final(&server_first)
                    .map_err(|r| self.sasl_error(credentials, r))?;
                let server_final = self
                    .sasl_token(credentials, client_final.as_bytes())
                    .await?;
                scram
                    .check_server_final(&server_final)
                    .map_err(|r| self.sasl_error(credentials, r))
            }
        }
    }

    fn sasl_error(&self, credentials: &SaslCredentials, reason: String) -> ClientError {
        ClientError::Protocol {
            addr: self.addr.clone(),
            reason: format!(
                "SASL/{} authentication as {} failed: {reason}",
                credentials.mechanism.name(),
                credentials.username
            ),
        }
    }

    async fn sasl_handshake(&mut self, mechanism: SaslMechanism) -> Result<(), ClientError> {
        let name = mechanism.name();
        let mut body = Vec::with_capacity(2 + name.len());
        body.extend_from_slice(&(name.len() as i16).to_be_bytes());
        body.extend_from_slice(name.as_bytes());
        let raw = self.request(ApiKey::SaslHandshake, 1, &body).await?;
        let (code, enabled) = sasl::handshake_answer(&raw).map_err(|e| self.decode_error(e))?;
        if code == errors::NONE {
            return Ok(());
        }
        Err(ClientError::Protocol {
            addr: self.addr.clone(),
            reason: format!(
                "the server does not accept SASL mechanism {name} ({}); it accepts: {}",
                errors::name(code),
                if enabled.is_empty() {
                    "none".to_owned()
                } else {
                    enabled.join(", ")
                }
            ),
        })
    }

    /// Sends one SaslAuthenticate v1 token and returns the server's.
    async fn sasl_token(
        &mut self,
        credentials: &SaslCredentials,
        token: &[u8],
    ) -> Result<Vec<u8>, ClientError> {
        let mut body = Vec::with_capacity(4 + token.len());
        body.extend_from_slice(&(token.len() as i32).to_be_bytes());
        body.extend_from_slice(token);
        let raw = self.request(ApiKey::SaslAuthenticate, 1, &body).await?;
        let answer = sasl::authenticate_answer(1, &raw).map_err(|e| self.decode_error(e))?;
        if answer.error_code != errors::NONE {
            let reason = answer.error_message.map_or_else(
                || errors::name(answer.error_code).to_string(),
                str::to_owned,
            );
            return Err(self.sasl_error(credentials, reason));
        }
        Ok(answer.token.to_vec())
    }

    fn decode_error(&self, source: crate::protocol::wire::CodecError) -> ClientError {
        ClientError::Decode {
            addr: self.addr.clone(),
            source,
        }
    }
}

/// One SCRAM exchange, client side.
struct Scram<'a> {
    credentials: &'a SaslCredentials,
    nonce: String,
    client_first_bare: String,
    /// What the server must prove: HMAC(ServerKey, AuthMessage), once known.
    server_signature: Option<Vec<u8>>,
}

impl<'a> Scram<'a> {
    fn start(credentials: &'a SaslCredentials) -> Result<Scram<'a>, String> {
        let mut raw = [0u8; 24];
        ring::rand::SystemRandom::new()
            .fill(&mut raw)
            .map_err(|_| "no random bytes for the nonce".to_owned())?;
        Ok(Scram::with_nonce(credentials, B64.encode(raw)))
    }

    fn with_nonce(credentials: &'a SaslCredentials, nonce: String) -> Scram<'a> {
        // RFC 5802 saslname: "=" and "," are escaped.
        let name = credentials.username.replace('=', "=3D").replace(',', "=2C");
        Scram {
            credentials,
            client_first_bare: format!("n={name},r={nonce}"),
            nonce,
            server_signature: None,
        }
    }

    fn client_first(&self) -> String {
        format!("n,,{}", self.client_first_bare)
    }

    fn algorithms(
        &self,
    ) -> (
        pbkdf2::Algorithm,
        hmac::Algorithm,
        &'static digest::Algorithm,
    ) {
        match self.credentials.mechanism {
            SaslMechanism::ScramSha512 => (
                pbkdf2::PBKDF2_HMAC_SHA512,
                hmac::HMAC_SHA512,
                &digest::SHA512,
            ),
            _ => (
                pbkdf2::PBKDF2_HMAC_SHA256,
                hmac::HMAC_SHA256,
                &digest::SHA256,
            ),
        }
    }

    /// Reads the server-first message and answers it with the client proof.
    fn client_final(&mut self, server_first: &[u8]) -> Result<String, String> {
        let server_first = std::str::from_utf8(server_first)
            .map_err(|_| "the server's first message is not UTF-8".to_owned())?;
        let (mut nonce, mut salt, mut iterations) = (None, None, None);
        for attribute in server_first.split(',') {
            match attribute.split_once('=') {
                Some(("r", v)) => nonce = Some(v),
                Some(("s", v)) => salt = Some(v),
                Some(("i", v)) => iterations = Some(v),
                Some(("e", v)) => return Err(format!("the server refused: {v}")),
                _ => {}
            }
        }
        let (Some(nonce), Some(salt), Some(iterations)) = (nonce, salt, iterations) else {
            return Err(format!("unreadable server-first message {server_first:?}"));
        };
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err("the server's nonce does not extend the client's".to_owned());
        }
        let salt = B64
            .decode(salt)
            .map_err(|_| "the server's salt is not base64".to_owned())?;
        let iterations = iterations
            .parse::<u32>()
            .ok()
            .filter(|i| (SCRAM_MIN_ITERATIONS..=SCRAM_MAX_ITERATIONS).contains(i))
            .ok_or_else(|| {
                format!(
                    "iteration count {iterations} is outside {SCRAM_MIN_ITERATIONS}..={SCRAM_MAX_ITERATIONS}"
                )
            })?;
        let (kdf, mac, hash) = self.algorithms();
        let mut salted = vec![0u8; hash.output_len()];
        pbkdf2::derive(
            kdf,
            NonZeroU32::new(iterations).unwrap_or(NonZeroU32::MIN),
            &salt,
            self.credentials.password.as_bytes(),
            &mut salted,
        );
        let salted = hmac::Key::new(mac, &salted);
        let client_key = hmac::sign(&salted, b"Client Key");
        let stored_key = digest::digest(hash, client_key.as_ref());
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let signature = hmac::sign(
            &hmac::Key::new(mac, stored_key.as_ref()),
            auth_message.as_bytes(),
        );
        let proof: Vec<u8> = client_key
            .as_ref()
            .iter()
            .zip(signature.as_ref())
            .map(|(k, s)| k ^ s)
            .collect();
        let server_key = hmac::sign(&salted, b"Server Key");
        self.server_signature = Some(
            hmac::sign(
                &hmac::Key::new(mac, server_key.as_ref()),
                auth_message.as_bytes(),
            )
            .as_ref()
            .to_vec(),
        );
        Ok(format!("{without_proof},p={}", B64.encode(proof)))
    }

    /// Checks the server's proof that it knows the password.
    fn check_server_final(&self, server_final: &[u8]) -> Result<(), String> {
        let text = String::from_utf8_lossy(server_final);
        if let Some(error) = text.strip_prefix("e=") {
            return Err(format!("the server refused: {error}"));
        }
        let verifier = text
            .split(',')
            .find_map(|a| a.strip_prefix("v="))
            .and_then(|v| B64.decode(v).ok())
            .ok_or_else(|| format!("unreadable server-final message {text:?}"))?;
        match &self.server_signature {
            Some(expected) if *expected == verifier => Ok(()),
            _ => Err("the server's signature does not match: it does not know the password".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credentials(mechanism: SaslMechanism, username: &str, password: &str) -> SaslCredentials {
        SaslCredentials {
            mechanism,
            username: username.into(),
            password: password.into(),
        }
    }

    /// The worked example of RFC 7677 section 3 (SCRAM-SHA-256).
    #[test]
    fn scram_sha_256_matches_rfc_7677() {
        let c = credentials(SaslMechanism::ScramSha256, "user", "pencil");
        let mut scram = Scram::with_nonce(&c, "rOprNGfwEbeRWgbNEkqO".into());
        assert_eq!(scram.client_first(), "n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let server_first = "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
        let client_final = scram.client_final(server_first.as_bytes()).unwrap();
        assert_eq!(
            client_final,
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        scram
            .check_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap();
        let err = scram
            .check_server_final(b"v=AAAATRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
            .unwrap_err();
        assert!(err.contains("does not know the password"), "{err}");
    }

    #[test]
    fn a_server_first_message_is_checked_before_any_work() {
        let c = credentials(SaslMechanism::ScramSha512, "a,b=c", "pw");
        let mut scram = Scram::with_nonce(&c, "abc".into());
        assert_eq!(scram.client_first(), "n,,n=a=2Cb=3Dc,r=abc");
        for (server_first, wanted) in [
            ("r=xyz123,s=AAAA,i=4096", "does not extend"),
            ("r=abc,s=AAAA,i=4096", "does not extend"),
            ("r=abcdef,s=AAAA,i=10", "outside"),
            ("r=abcdef,s=AAAA,i=99999999999", "outside"),
            ("r=abcdef,s=!!,i=4096", "not base64"),
            ("r=abcdef,i=4096", "unreadable"),
            ("e=unknown-user", "refused: unknown-user"),
        ] {
            let err = scram.client_final(server_first.as_bytes()).unwrap_err();
            assert!(err.contains(wanted), "{server_first}: {err}");
        }
        assert!(scram
            .check_server_final(b"e=invalid-proof")
            .unwrap_err()
            .contains("refused"));
        assert!(
            scram.check_server_final(b"v=AAAA").is_err(),
            "no proof computed yet"
        );
        assert!(scram.client_final(&[0xff, 0xfe]).is_err());
    }

    #[test]
    fn mechanisms_are_named_as_kafka_names_them() {
        for name in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
            assert_eq!(SaslMechanism::parse(name).unwrap().name(), name);
        }
        assert_eq!(SaslMechanism::parse("GSSAPI"), None);
        let debug = format!("{:?}", credentials(SaslMechanism::Plain, "u", "secret"));
        assert!(!debug.contains("secret"), "{debug}");
    }
}
