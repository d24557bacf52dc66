//! The fake upstream broker and the cluster it describes: `--brokers` brokers,
//! all at the fake's one address, and `--partitions` partitions over
//! `--topics` topics. It answers ApiVersions and Metadata, counts what it was
//! asked, and closes the connection of any other request. It knows nothing of
//! kshim beyond the client id of kshim's own connections.

use super::{frames, HOST, MIB};
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, BrokerId, MetadataRequest, MetadataResponse, RequestHeader,
    TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The client id of kshim's own connections (discovery).
const KSHIM_CLIENT_ID: &str = "kshim";
/// What the fake advertises: (API key, min, max).
const FAKE_APIS: [(i16, i16, i16); 2] = [(18, 0, 3), (3, 0, 12)];
const UNSUPPORTED_VERSION: i16 = 35;
pub(super) const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

/// The cluster the fake upstream describes.
#[derive(Debug, Clone)]
pub(super) struct Model {
    pub(super) port: u16,
    pub(super) brokers: i32,
    pub(super) topics: usize,
    pub(super) partitions: usize,
    pub(super) replication: usize,
}

impl Model {
    /// Broker i (0-based, modulo the broker count) as a node id.
    fn node(&self, i: usize) -> BrokerId {
        BrokerId((i % self.brokers as usize) as i32 + 1)
    }

    /// The global index of topic `t`'s first partition, and its partition count.
    pub(super) fn span(&self, t: usize) -> (usize, usize) {
        let base = self.partitions / self.topics;
        let extra = self.partitions % self.topics;
        (t * base + t.min(extra), base + usize::from(t < extra))
    }

    pub(super) fn topic_name(t: usize) -> String {
        format!("topic-{t:06}")
    }

    fn topic_index(&self, name: &str) -> Option<usize> {
        let t: usize = name.strip_prefix("topic-")?.parse().ok()?;
        (t < self.topics && Self::topic_name(t) == name).then_some(t)
    }

    fn topic_id(t: usize) -> uuid::Uuid {
        // "kshim_scale" in the high 11 bytes, the topic's number below.
        uuid::Uuid::from_u128((0x6b_7368_696d_5f73_6361_6c65_u128 << 40) | (t as u128 + 1))
    }

    fn brokers(&self) -> Vec<MetadataResponseBroker> {
        (0..self.brokers as usize)
            .map(|i| {
                MetadataResponseBroker::default()
                    .with_node_id(self.node(i))
                    .with_host(StrBytes::from_static_str(HOST))
                    .with_port(i32::from(self.port))
            })
            .collect()
    }

    /// Topic `t` with its partitions: leaders round-robin over the brokers,
    /// each partition's replicas the leader and the brokers after it.
    pub(super) fn topic(&self, t: usize) -> MetadataResponseTopic {
        let (first, count) = self.span(t);
        let partitions = (0..count)
            .map(|p| {
                let g = first + p;
                let replicas: Vec<BrokerId> =
                    (0..self.replication).map(|r| self.node(g + r)).collect();
                MetadataResponsePartition::default()
                    .with_partition_index(p as i32)
                    .with_leader_id(self.node(g))
                    .with_leader_epoch(0)
                    .with_isr_nodes(replicas.clone())
                    .with_replica_nodes(replicas)
            })
            .collect();
        MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(Self::topic_name(t)))))
            .with_topic_id(Self::topic_id(t))
            .with_partitions(partitions)
    }

    fn response(&self, topics: Vec<MetadataResponseTopic>) -> MetadataResponse {
        MetadataResponse::default()
            .with_brokers(self.brokers())
            .with_cluster_id(Some(StrBytes::from_static_str("kshim-scale-sim")))
            .with_controller_id(self.node(0))
            .with_topics(topics)
    }

    fn all_topics(&self) -> Vec<MetadataResponseTopic> {
        (0..self.topics).map(|t| self.topic(t)).collect()
    }
}

fn encode<M: Encodable>(m: &M, version: i16) -> Result<Bytes, String> {
    let mut out = BytesMut::new();
    m.encode(&mut out, version)
        .map_err(|e| format!("cannot encode at v{version}: {e}"))?;
    Ok(out.freeze())
}

/// The fake upstream broker: the model, its answers and what it was asked.
pub(super) struct Fake {
    model: Model,
    /// The answer for every topic, encoded once per Metadata version asked.
    full: Mutex<HashMap<i16, Bytes>>,
    /// Requests read: (client id, API key, version) -> count.
    asked: Mutex<BTreeMap<(String, i16, i16), u64>>,
    /// Metadata requests from kshim's own connections (its refreshes).
    pub(super) own_metadata: AtomicU64,
    /// Requests the fake does not answer (their connections were closed).
    pub(super) refused: AtomicU64,
}

impl Fake {
    pub(super) fn new(model: Model) -> Fake {
        Fake {
            model,
            full: Mutex::new(HashMap::new()),
            asked: Mutex::new(BTreeMap::new()),
            own_metadata: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    pub(super) fn full_answer(&self, version: i16) -> Result<Bytes, String> {
        if let Some(b) = self.full.lock().unwrap().get(&version) {
            return Ok(b.clone());
        }
        let encoded = encode(&self.model.response(self.model.all_topics()), version)?;
        self.full.lock().unwrap().insert(version, encoded.clone());
        Ok(encoded)
    }

    fn metadata_body(&self, version: i16, body: &mut Bytes) -> Result<Bytes, String> {
        if version > 12 {
            return Err(format!("Metadata v{version} is not advertised"));
        }
        let request = MetadataRequest::decode(body, version)
            .map_err(|e| format!("unreadable Metadata v{version} request: {e}"))?;
        match request.topics {
            None => self.full_answer(version),
            Some(t) if t.is_empty() && version == 0 => self.full_answer(version),
            Some(asked) => {
                let topics = asked
                    .iter()
                    .map(|topic| {
                        let name = topic.name.as_ref().map(|n| n.0.to_string());
                        let found = match &name {
                            Some(n) => self.model.topic_index(n),
                            None => (0..self.model.topics)
                                .find(|&t| Model::topic_id(t) == topic.topic_id),
                        };
                        match found {
                            Some(t) => self.model.topic(t),
                            None => MetadataResponseTopic::default()
                                .with_error_code(UNKNOWN_TOPIC_OR_PARTITION)
                                .with_name(name.map(|n| TopicName(StrBytes::from_string(n))))
                                .with_topic_id(topic.topic_id),
                        }
                    })
                    .collect();
                encode(&self.model.response(topics), version)
            }
        }
    }

    fn api_versions_body(version: i16) -> Result<Bytes, String> {
        let keys = FAKE_APIS
            .iter()
            .map(|&(key, min, max)| {
                ApiVersion::default()
                    .with_api_key(key)
                    .with_min_version(min)
                    .with_max_version(max)
            })
            .collect();
        let body = ApiVersionsResponse::default().with_api_keys(keys);
        if version > 3 {
            // As a broker does: UNSUPPORTED_VERSION, in the v0 layout, with the
            // versions it does serve.
            return encode(&body.with_error_code(UNSUPPORTED_VERSION), 0);
        }
        encode(&body, version)
    }

    /// The response to one request frame (size prefix excluded): the header's
    /// bytes with the size prefix, and the body.
    fn answer(&self, mut frame: Bytes) -> Result<(Vec<u8>, Bytes), String> {
        if frame.len() < 8 {
            return Err(format!("a request of {} bytes", frame.len()));
        }
        let key = i16::from_be_bytes([frame[0], frame[1]]);
        let version = i16::from_be_bytes([frame[2], frame[3]]);
        let api = ApiKey::try_from(key).map_err(|_| format!("unknown API key {key}"))?;
        let header = RequestHeader::decode(&mut frame, api.request_header_version(version))
            .map_err(|e| format!("unreadable request header ({api:?} v{version}): {e}"))?;
        let client = header
            .client_id
            .as_ref()
            .map_or_else(String::new, |c| c.to_string());
        if api == ApiKey::Metadata && client == KSHIM_CLIENT_ID {
            self.own_metadata.fetch_add(1, Ordering::Relaxed);
        }
        *self
            .asked
            .lock()
            .unwrap()
            .entry((client, key, version))
            .or_default() += 1;
        let body = match api {
            ApiKey::ApiVersions => Self::api_versions_body(version)?,
            ApiKey::Metadata => self.metadata_body(version, &mut frame)?,
            other => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                return Err(format!("no answer for {other:?} v{version}"));
            }
        };
        let flexible = api.response_header_version(version) >= 1;
        let mut head = Vec::with_capacity(9);
        head.put_i32((4 + usize::from(flexible) + body.len()) as i32);
        head.put_i32(header.correlation_id);
        if flexible {
            head.put_u8(0);
        }
        Ok((head, body))
    }

    /// What was asked, for the report.
    pub(super) fn asked_summary(&self) -> BTreeMap<String, u64> {
        self.asked
            .lock()
            .unwrap()
            .iter()
            .map(|((client, key, version), n)| {
                let api = ApiKey::try_from(*key)
                    .map_or_else(|_| format!("key {key}"), |a| format!("{a:?}"));
                let who = if client == KSHIM_CLIENT_ID {
                    "kshim's own".to_owned()
                } else {
                    format!("client {client:?}")
                };
                (format!("{api} v{version} from {who}"), *n)
            })
            .collect()
    }
}

async fn serve_upstream_connection(mut socket: TcpStream, fake: Arc<Fake>) {
    let _ = socket.set_nodelay(true);
    let mut buf = BytesMut::with_capacity(4096);
    loop {
        let frame = match frames::read_frame(&mut socket, &mut buf, MIB).await {
            Ok(f) => f.freeze(),
            Err(_) => return,
        };
        match fake.answer(frame) {
            Ok((head, body)) => {
                if socket.write_all(&head).await.is_err() || socket.write_all(&body).await.is_err()
                {
                    return;
                }
            }
            Err(e) => {
                eprintln!("metadata_scale: fake upstream: {e}; closing the connection");
                return;
            }
        }
    }
}

/// Serves `fake` on `listener` from a thread of its own, until the process ends.
pub(super) fn start_fake(listener: std::net::TcpListener, fake: Arc<Fake>) -> Result<(), String> {
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("fake upstream: {e}"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("fake upstream runtime: {e}"))?;
    std::thread::Builder::new()
        .name("fake-upstream".into())
        .spawn(move || {
            runtime.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        eprintln!("metadata_scale: fake upstream: {e}");
                        return;
                    }
                };
                while let Ok((socket, _)) = listener.accept().await {
                    tokio::spawn(serve_upstream_connection(socket, Arc::clone(&fake)));
                }
            })
        })
        .map_err(|e| format!("fake upstream thread: {e}"))?;
    Ok(())
}
