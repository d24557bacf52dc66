//! The one fake Kafka broker of the Rust tests, for upstream behaviour a real
//! broker does not produce on demand (wrong correlation ids, undecodable
//! bodies, hang-ups, stalls, floods of node ids, requests at a scale no
//! interop test sends). The proof that kshim works with Kafka is the interop
//! suite against real brokers; this only plays the edge cases.
//!
//! It answers ApiVersions and Metadata by itself, encoded with the same
//! kafka-protocol encoders kshim uses, records every request it reads, and
//! asks a script what to do with each one first:
//!
//! ```ignore
//! let broker = FakeBroker::builder()
//!     .apis(&[(3, 0, 12), (18, 0, 4)])
//!     .on_request(|req| match req.api_key {
//!         19 => Reply::Close,
//!         _ => Reply::Default,
//!     })
//!     .start()
//!     .await;
//! ```

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse, BrokerId, MetadataResponse};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A request as the fake broker read it: the header's fields and the body.
#[derive(Clone, Debug)]
pub struct Request {
    pub api_key: i16,
    pub version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
    pub body: Bytes,
}

impl Request {
    /// The body decoded as `M` at the request's version; a test that asks for a
    /// body the fake cannot decode has a bug, so this panics.
    pub fn decode<M: Decodable>(&self) -> M {
        M::decode(&mut self.body.clone(), self.version)
            .unwrap_or_else(|e| panic!("request {} v{}: {e}", self.api_key, self.version))
    }

    /// Whether kshim's own discovery sent it (its client id is "kshim").
    pub fn from_discovery(&self) -> bool {
        self.client_id.as_deref() == Some("kshim")
    }
}

/// What the fake broker does with one request.
pub enum Reply {
    /// ApiVersions and Metadata answered from the builder's table and brokers;
    /// the connection closed on anything else.
    Default,
    /// `body` under a response header for the request's key and version.
    Body(Bytes),
    /// `body` under a response header carrying this correlation id instead.
    BodyWithCorrelation(i32, Bytes),
    /// These bytes as they are, size prefix included (garbage, huge frames).
    Raw(Bytes),
    /// Nothing more: the connection stays open and is never read again.
    Stall,
    /// The connection is closed without an answer.
    Close,
}

type Script = Arc<dyn Fn(&Request) -> Reply + Send + Sync>;
type Brokers = Arc<dyn Fn(u16) -> Vec<(i32, String, u16)> + Send + Sync>;

/// How to build a [`FakeBroker`].
pub struct Builder {
    apis: Vec<(i16, i16, i16)>,
    brokers: Brokers,
    script: Script,
}

impl Builder {
    /// The `(api key, min, max)` table its ApiVersions advertises.
    pub fn apis(mut self, apis: &[(i16, i16, i16)]) -> Self {
        self.apis = apis.to_vec();
        self
    }

    /// The `(node id, host, port)` list its Metadata answers carry, asked anew
    /// for every answer and given the broker's own port; the first is the
    /// controller. By default: node 1 at the broker itself.
    pub fn brokers(
        mut self,
        brokers: impl Fn(u16) -> Vec<(i32, String, u16)> + Send + Sync + 'static,
    ) -> Self {
        self.brokers = Arc::new(brokers);
        self
    }

    /// Asked first about every request it reads.
    pub fn on_request(
        mut self,
        script: impl Fn(&Request) -> Reply + Send + Sync + 'static,
    ) -> Self {
        self.script = Arc::new(script);
        self
    }

    /// Binds an ephemeral loopback port and serves in the background.
    pub async fn start(self) -> FakeBroker {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("local addr").port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let shared = Arc::new(Served {
            apis: self.apis,
            brokers: self.brokers,
            script: self.script,
            received: Arc::clone(&received),
            port,
        });
        let task = tokio::spawn(accept_loop(listener, shared));
        FakeBroker {
            addr: format!("127.0.0.1:{port}"),
            port,
            received,
            task,
        }
    }
}

/// A fake broker serving on loopback until dropped.
pub struct FakeBroker {
    pub addr: String,
    pub port: u16,
    received: Arc<Mutex<Vec<Request>>>,
    task: JoinHandle<()>,
}

impl FakeBroker {
    pub fn builder() -> Builder {
        Builder {
            apis: vec![(0, 3, 12), (3, 0, 12), (18, 0, 4)],
            brokers: Arc::new(|port| vec![(1, "127.0.0.1".to_owned(), port)]),
            script: Arc::new(|_| Reply::Default),
        }
    }

    /// Every request read so far, in the order read (across connections).
    pub fn received(&self) -> Vec<Request> {
        self.received.lock().unwrap().clone()
    }

    /// Requests of one API key read so far.
    pub fn received_of(&self, key: ApiKey) -> Vec<Request> {
        self.received()
            .into_iter()
            .filter(|r| r.api_key == key as i16)
            .collect()
    }

    /// Forgets what was received so far.
    pub fn clear_received(&self) {
        self.received.lock().unwrap().clear();
    }
}

impl Drop for FakeBroker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Served {
    apis: Vec<(i16, i16, i16)>,
    brokers: Brokers,
    script: Script,
    received: Arc<Mutex<Vec<Request>>>,
    port: u16,
}

async fn accept_loop(listener: TcpListener, served: Arc<Served>) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok((socket, _)) = listener.accept().await else {
            return;
        };
        // The set aborts every connection task when the broker is dropped.
        connections.spawn(serve_connection(socket, Arc::clone(&served)));
    }
}

async fn serve_connection(mut socket: TcpStream, served: Arc<Served>) {
    while let Some(frame) = read_frame(&mut socket).await {
        let Some(request) = parse_request(frame) else {
            return;
        };
        served.received.lock().unwrap().push(request.clone());
        let reply = match (served.script)(&request) {
            Reply::Default => default_reply(&served, &request),
            other => other,
        };
        let written = match reply {
            Reply::Default | Reply::Close => return,
            Reply::Stall => {
                std::future::pending::<()>().await;
                return;
            }
            Reply::Body(body) => {
                socket
                    .write_all(&response_frame(&request, request.correlation_id, &body))
                    .await
            }
            Reply::BodyWithCorrelation(id, body) => {
                socket.write_all(&response_frame(&request, id, &body)).await
            }
            Reply::Raw(bytes) => socket.write_all(&bytes).await,
        };
        if written.is_err() {
            return;
        }
    }
}

fn default_reply(served: &Served, request: &Request) -> Reply {
    if request.api_key == ApiKey::ApiVersions as i16 {
        return Reply::Body(api_versions_body(&served.apis, request.version));
    }
    if request.api_key == ApiKey::Metadata as i16 {
        let listed = (served.brokers)(served.port);
        let controller = listed.first().map_or(-1, |b| b.0);
        let metadata = MetadataResponse::default()
            .with_brokers(
                listed
                    .into_iter()
                    .map(|(id, host, port)| {
                        MetadataResponseBroker::default()
                            .with_node_id(BrokerId(id))
                            .with_host(StrBytes::from_string(host))
                            .with_port(i32::from(port))
                    })
                    .collect(),
            )
            .with_controller_id(BrokerId(controller));
        return Reply::Body(encode(&metadata, request.version));
    }
    Reply::Close
}

/// One request frame, without its size prefix; `None` once the peer is gone.
async fn read_frame(s: &mut TcpStream) -> Option<Bytes> {
    let size = s.read_i32().await.ok()?;
    let mut buf = vec![0; usize::try_from(size).ok()?];
    s.read_exact(&mut buf).await.ok()?;
    Some(Bytes::from(buf))
}

/// The request header (v1 or v2, as the key and version say) and the body.
fn parse_request(mut frame: Bytes) -> Option<Request> {
    if frame.len() < 10 {
        return None;
    }
    let api_key = frame.get_i16();
    let version = frame.get_i16();
    let correlation_id = frame.get_i32();
    let id_len = frame.get_i16();
    let client_id = if id_len < 0 {
        None
    } else {
        let n = usize::try_from(id_len).ok()?;
        if frame.len() < n {
            return None;
        }
        Some(String::from_utf8_lossy(&frame.split_to(n)).into_owned())
    };
    let flexible = ApiKey::try_from(api_key)
        .map(|k| k.request_header_version(version) >= 2)
        .unwrap_or(false);
    if flexible {
        for _ in 0..uvarint(&mut frame)? {
            let _tag = uvarint(&mut frame)?;
            let size = usize::try_from(uvarint(&mut frame)?).ok()?;
            if frame.len() < size {
                return None;
            }
            frame.advance(size);
        }
    }
    Some(Request {
        api_key,
        version,
        correlation_id,
        client_id,
        body: frame,
    })
}

fn uvarint(buf: &mut Bytes) -> Option<u32> {
    let mut value = 0u32;
    for shift in (0..35).step_by(7) {
        let b = *buf.first()?;
        buf.advance(1);
        value |= u32::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// Size prefix, correlation id, the header's tag section when it is flexible
/// (never for ApiVersions), then `body`.
fn response_frame(request: &Request, correlation_id: i32, body: &[u8]) -> Bytes {
    let flexible = ApiKey::try_from(request.api_key)
        .map(|k| k.response_header_version(request.version) >= 1)
        .unwrap_or(false);
    let mut out = BytesMut::new();
    out.put_i32((4 + usize::from(flexible) + body.len()) as i32);
    out.put_i32(correlation_id);
    if flexible {
        out.put_u8(0);
    }
    out.put_slice(body);
    out.freeze()
}

/// An ApiVersions response body advertising `(api key, min, max)` for each key,
/// at `version` (capped at 3: v4 adds nothing a fake needs).
pub fn api_versions_body(keys: &[(i16, i16, i16)], version: i16) -> Bytes {
    let body = ApiVersionsResponse::default().with_api_keys(
        keys.iter()
            .map(|&(key, min, max)| {
                ApiVersion::default()
                    .with_api_key(key)
                    .with_min_version(min)
                    .with_max_version(max)
            })
            .collect(),
    );
    encode(&body, version.min(3))
}

pub fn encode<M: Encodable>(m: &M, version: i16) -> Bytes {
    let mut out = BytesMut::new();
    m.encode(&mut out, version).unwrap();
    out.freeze()
}
