//! A minimal Kafka client: one connection, one request at a time. Used by the
//! `kshim features` CLI against kshim or any Kafka cluster, and by the tools in
//! `examples/`. Responses are read through the bounded decoders of `protocol`.

use crate::protocol::api_versions::{self, ApiRange, DecodedApiVersions};
pub use crate::protocol::apis::{decode_update_features_response, UpdateFeaturesAnswer};
use crate::protocol::response::{response_body_offset, response_correlation_id};
use crate::protocol::wire::CodecError;
use crate::protocol::FrameCodec;
use bytes::{BufMut, Bytes, BytesMut};
use futures::{SinkExt, StreamExt};
use kafka_protocol::messages::{ApiKey, UpdateFeaturesRequest};
use kafka_protocol::protocol::Encodable;
use std::time::Duration;
use tokio_util::codec::Framed;

mod sasl;
mod stream;

pub use sasl::{SaslCredentials, SaslMechanism};
pub use stream::{connect, keepalive, Stream};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{addr}: could not connect: {reason}")]
    Connect { addr: String, reason: String },
    #[error("{addr}: {reason}")]
    Io { addr: String, reason: String },
    #[error("{addr}: timed out after {0:?}", .timeout)]
    Timeout { addr: String, timeout: Duration },
    #[error("{addr}: unreadable response: {source}")]
    Decode { addr: String, source: CodecError },
    #[error("{addr}: {reason}")]
    Protocol { addr: String, reason: String },
}

/// How a connection is secured: Kafka's `security.protocol` in its two parts.
#[derive(Debug, Default, Clone)]
pub struct ClientSecurity {
    pub tls: Option<std::sync::Arc<crate::tls::ClientTlsMaterial>>,
    pub sasl: Option<SaslCredentials>,
}

pub struct KafkaClient {
    addr: String,
    framed: Framed<Stream, FrameCodec>,
    next_correlation_id: i32,
    timeout: Duration,
    client_id: String,
}

impl KafkaClient {
    pub async fn connect(addr: &str, timeout: Duration) -> Result<KafkaClient, ClientError> {
        KafkaClient::connect_secured(addr, timeout, &ClientSecurity::default()).await
    }

    /// Connects with TLS and authenticates with SASL as `security` says.
    pub async fn connect_secured(
        addr: &str,
        timeout: Duration,
        security: &ClientSecurity,
    ) -> Result<KafkaClient, ClientError> {
        let stream = connect(addr, timeout, security.tls.as_deref())
            .await
            .map_err(|reason| ClientError::Connect {
                addr: addr.to_owned(),
                reason,
            })?;
        let mut client = KafkaClient::from_stream(stream, addr, timeout, "kshim-cli");
        if let Some(credentials) = &security.sasl {
            client.authenticate(credentials).await?;
        }
        Ok(client)
    }

    /// A client on an already connected stream.
    pub fn from_stream(
        stream: Stream,
        addr: &str,
        timeout: Duration,
        client_id: &str,
    ) -> KafkaClient {
        KafkaClient {
            addr: addr.to_owned(),
            framed: Framed::new(stream, FrameCodec::default()),
            next_correlation_id: 1,
            timeout,
            client_id: client_id.to_owned(),
        }
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Whether the broker has closed this connection (a restart, a broker
    /// gone): a client held for later is then only a dead descriptor.
    pub fn ended_by_peer(&self) -> bool {
        self.framed.get_ref().ended_by_peer()
    }

    /// Sends one request and returns the response body (after its header).
    pub async fn request(
        &mut self,
        api: ApiKey,
        version: i16,
        body: &[u8],
    ) -> Result<Bytes, ClientError> {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let flexible = match api {
            ApiKey::ApiVersions => version >= 3,
            _ => api.request_header_version(version) >= 2,
        };
        let mut frame = BytesMut::new();
        let header_len = 8 + 2 + self.client_id.len() + usize::from(flexible);
        frame.put_i32((header_len + body.len()) as i32);
        frame.put_i16(api as i16);
        frame.put_i16(version);
        frame.put_i32(correlation_id);
        frame.put_i16(self.client_id.len() as i16);
        frame.put_slice(self.client_id.as_bytes());
        if flexible {
            frame.put_u8(0);
        }
        frame.put_slice(body);
        let addr = self.addr.clone();
        let io = |e: crate::protocol::FrameError| ClientError::Io {
            addr: addr.clone(),
            reason: match e {
                crate::protocol::FrameError::TooLarge { size, .. } if is_tls_record_head(size) => {
                    TLS_ANSWER.to_owned()
                }
                e => e.to_string(),
            },
        };
        let exchange = async {
            self.framed.send(frame.freeze()).await.map_err(io)?;
            match self.framed.next().await {
                Some(Ok(response)) => Ok(response),
                Some(Err(e)) => Err(io(e)),
                None => Err(ClientError::Io {
                    addr: addr.clone(),
                    reason: "connection closed by the server".into(),
                }),
            }
        };
        let response = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| ClientError::Timeout {
                addr: self.addr.clone(),
                timeout: self.timeout,
            })??;
        let decode = |source| ClientError::Decode {
            addr: self.addr.clone(),
            source,
        };
        let got = response_correlation_id(&response).map_err(decode)?;
        if got != correlation_id {
            return Err(ClientError::Protocol {
                addr: self.addr.clone(),
                reason: format!(
                    "correlation id {got} does not match the request's {correlation_id}"
                ),
            });
        }
        let offset = response_body_offset(api, version, &response).map_err(decode)?;
        Ok(response.slice(offset..))
    }

    /// ApiVersions at the highest version both sides speak (v4 first, then what
    /// the server says it supports).
    pub async fn api_versions(&mut self) -> Result<(i16, DecodedApiVersions), ClientError> {
        // v5 adds only the node a client means to reach (KIP-1242), which
        // kshim's own client, always bootstrapping, never names.
        let mut version = 4;
        loop {
            let body = if version >= 3 {
                software_fields()
            } else {
                Vec::new()
            };
            let raw = self.request(ApiKey::ApiVersions, version, &body).await?;
            // An UNSUPPORTED_VERSION answer always comes in the v0 layout.
            let first =
                api_versions::response_error_code(&raw).map_err(|source| ClientError::Decode {
                    addr: self.addr.clone(),
                    source,
                })?;
            if first == crate::protocol::errors::ResponseError::UnsupportedVersion.code() {
                // Brokers list their ApiVersions range in the v0 layout. Some servers
                // (librdkafka's mock cluster) send an unreadable list instead; then
                // step down one version at a time.
                let max = api_versions::decode_response(0, &raw)
                    .ok()
                    .and_then(|decoded| {
                        decoded
                            .apis
                            .iter()
                            .find(|a| a.api_key == ApiKey::ApiVersions as i16)
                            .map(|a| a.max)
                    })
                    .unwrap_or(version - 1);
                if (0..version).contains(&max) {
                    version = max;
                    continue;
                }
                return Err(ClientError::Protocol {
                    addr: self.addr.clone(),
                    reason: "the server supports no common ApiVersions version".into(),
                });
            }
            let decoded = api_versions::decode_response(version, &raw).map_err(|source| {
                ClientError::Decode {
                    addr: self.addr.clone(),
                    source,
                }
            })?;
            return Ok((version, decoded));
        }
    }

    /// Sends UpdateFeatures at `version` and reads the answer.
    pub async fn update_features(
        &mut self,
        version: i16,
        request: &UpdateFeaturesRequest,
    ) -> Result<UpdateFeaturesAnswer, ClientError> {
        let mut body = BytesMut::new();
        request
            .encode(&mut body, version)
            .map_err(|e| ClientError::Protocol {
                addr: self.addr.clone(),
                reason: format!("cannot encode UpdateFeatures v{version}: {e}"),
            })?;
        let raw = self.request(ApiKey::UpdateFeatures, version, &body).await?;
        decode_update_features_response(version, &raw).map_err(|source| ClientError::Decode {
            addr: self.addr.clone(),
            source,
        })
    }
}

const TLS_ANSWER: &str = "the server answered with a TLS record, not a Kafka response: \
     it is a TLS listener (connect with security.protocol=SSL or SASL_SSL)";

/// Whether the four bytes read as a frame size are the head of a TLS record:
/// a content type (alert, handshake, ...) and major version 3. A TLS server
/// answers a plaintext request with an alert, whose head reads as a frame size
/// of about 350 MB.
fn is_tls_record_head(size: usize) -> bool {
    let content_type = (size >> 24) & 0xff;
    let major = (size >> 16) & 0xff;
    (0x14..=0x17).contains(&content_type) && major == 3
}

/// The highest version of `api` in `apis` that is at most `ours`.
pub fn negotiate(apis: &[ApiRange], api: ApiKey, ours: i16) -> Option<i16> {
    apis.iter()
        .find(|a| a.api_key == api as i16)
        .filter(|a| a.min <= ours)
        .map(|a| a.max.min(ours))
}

fn software_fields() -> Vec<u8> {
    let mut out = Vec::new();
    crate::protocol::wire::put_compact_string(&mut out, "kshim");
    crate::protocol::wire::put_compact_string(&mut out, env!("CARGO_PKG_VERSION"));
    out.push(0);
    out
}
