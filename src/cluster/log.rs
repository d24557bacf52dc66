//! The state topic as kshim reaches it: one partition on the upstream, found
//! through Metadata, created when absent and refused when it is not what a
//! state topic must be; its end offsets and its read_committed fetches.
//!
//! Connections are kshim's own (the upstream's TLS and SASL settings), one per
//! broker address, dropped on the first error so the next call reconnects.

use crate::client::KafkaClient;
use crate::protocol::apis::{self as wire, FetchAnswer, FetchSpec, MetadataAnswer};
use crate::protocol::errors::{self, ResponseError};
use crate::upstream::cluster::control_connection;
use crate::upstream::configs::{self, RESOURCE_TOPIC};
use crate::upstream::{LinkSettings, UpstreamError};
use bytes::Bytes;
use kafka_protocol::messages::ApiKey;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// What went wrong with the state topic. `retriable` ones pass by themselves
/// (a leader moving, a coordinator loading); the others need a person.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LogError {
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    /// The topic exists but cannot hold kshim's state, or cannot be made.
    #[error("state topic {topic}: {reason}")]
    Topic { topic: String, reason: String },
    #[error("{api} answered {} ({code}){}", errors::name(*.code), .message.as_deref().map(|m| format!(": {m}")).unwrap_or_default())]
    Kafka {
        api: &'static str,
        code: i16,
        message: Option<String>,
    },
    /// Another instance took the writer role: this one's change was not
    /// committed and never will be.
    #[error("another kshim instance became the state writer before this change was committed")]
    Fenced,
    #[error("timed out: {0}")]
    Timeout(String),
    /// The commit was sent but its answer says nothing certain (the
    /// coordinator failed mid-way, or no answer came): whether the change
    /// ending at offset `last` was committed is read back from the topic.
    #[error("the commit's outcome is not known: {reason}")]
    Undecided { last: i64, reason: String },
}

impl LogError {
    fn kafka(api: &'static str, code: i16, message: Option<String>) -> LogError {
        LogError::Kafka { api, code, message }
    }

    /// Whether trying again (after a refresh of the leader) may succeed.
    pub fn retriable(&self) -> bool {
        match self {
            LogError::Upstream(_) | LogError::Timeout(_) => true,
            // Kafka's own retriability, and CONCURRENT_TRANSACTIONS, which
            // Kafka's transactional producer also retries: the coordinator is
            // still completing the previous transaction of this producer.
            LogError::Kafka { code, .. } => {
                errors::is_retriable(*code) || *code == ResponseError::ConcurrentTransactions.code()
            }
            LogError::Topic { .. } | LogError::Fenced | LogError::Undecided { .. } => false,
        }
    }
}

/// What the state topic is created with.
fn topic_configs(min_insync: i16) -> Vec<(&'static str, String)> {
    vec![
        ("cleanup.policy", "compact".into()),
        ("min.insync.replicas", min_insync.to_string()),
        ("unclean.leader.election.enable", "false".into()),
        // Compaction works on closed segments: registrations are renewed every
        // few seconds, so segments roll every ten minutes, not every week.
        ("segment.ms", "600000".into()),
    ]
}

/// One client of the state topic's partition.
pub struct StateLog {
    link: LinkSettings,
    bootstrap: Vec<String>,
    topic: String,
    /// The partition leader's address, while known.
    leader: Option<String>,
    /// Broker addresses by node id, from the last Metadata.
    brokers: HashMap<i32, String>,
    clients: HashMap<String, KafkaClient>,
}

impl StateLog {
    pub fn new(link: LinkSettings, bootstrap: Vec<String>, topic: String) -> StateLog {
        StateLog {
            link,
            bootstrap,
            topic,
            leader: None,
            brokers: HashMap::new(),
            clients: HashMap::new(),
        }
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Sends one request to `addr`, connecting first when needed.
    pub async fn call(
        &mut self,
        addr: &str,
        api: ApiKey,
        version: i16,
        body: &[u8],
    ) -> Result<Bytes, LogError> {
        // Connections the brokers have closed (a restart, a leader that moved
        // and then restarted) go now, not at their next request, which for a
        // broker that no longer leads may never come: each held one is a
        // descriptor.
        self.clients.retain(|_, client| !client.ended_by_peer());
        let answer = match self.clients.get_mut(addr) {
            Some(client) => client.request(api, version, body).await,
            None => match control_connection(&[addr.to_owned()], &self.link).await {
                Ok(client) => {
                    let client = self.clients.entry(addr.to_owned()).or_insert(client);
                    client.request(api, version, body).await
                }
                Err(e) => {
                    self.unreachable(addr);
                    return Err(e.into());
                }
            },
        };
        answer.map_err(|e| {
            self.unreachable(addr);
            UpstreamError::Broken {
                target: addr.to_owned(),
                reason: e.to_string(),
            }
            .into()
        })
    }

    /// `addr` could not be reached or failed a request: its connection goes,
    /// and if it was the partition's leader, the leader is looked up again.
    fn unreachable(&mut self, addr: &str) {
        self.clients.remove(addr);
        if self.leader.as_deref() == Some(addr) {
            self.leader = None;
        }
    }

    /// The address of broker `node`, from the last Metadata.
    pub fn broker(&self, node: i32) -> Option<String> {
        self.brokers.get(&node).cloned()
    }

    /// Sends a request to any broker: the known ones first, then the bootstrap
    /// addresses.
    pub async fn call_any(
        &mut self,
        api: ApiKey,
        version: i16,
        body: &[u8],
    ) -> Result<Bytes, LogError> {
        let mut targets: Vec<String> = self.clients.keys().cloned().collect();
        for t in self.brokers.values().chain(self.bootstrap.iter()) {
            if !targets.contains(t) {
                targets.push(t.clone());
            }
        }
        let mut last = None;
        for target in targets {
            match self.call(&target, api, version, body).await {
                Ok(raw) => return Ok(raw),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| {
            UpstreamError::Unreachable {
                targets: self.bootstrap.join(","),
                reason: "no address to try".into(),
            }
            .into()
        }))
    }

    async fn metadata(&mut self) -> Result<MetadataAnswer, LogError> {
        let raw = self
            .call_any(
                ApiKey::Metadata,
                wire::METADATA_VERSION,
                &wire::metadata_request(&[&self.topic.clone()]),
            )
            .await?;
        let answer = wire::decode_metadata(wire::METADATA_VERSION, &raw).map_err(|e| {
            UpstreamError::Protocol {
                target: "the upstream".into(),
                reason: format!("unreadable Metadata response: {e}"),
            }
        })?;
        self.brokers = answer
            .brokers
            .iter()
            .map(|(id, b)| (*id, b.address()))
            .collect();
        // Only the brokers of the cluster as it is now, and the bootstrap
        // addresses, keep a connection: addresses that left (a broker replaced
        // under a new address) would otherwise be held for ever.
        let (brokers, bootstrap) = (&self.brokers, &self.bootstrap);
        self.clients
            .retain(|addr, _| brokers.values().any(|b| b == addr) || bootstrap.contains(addr));
        Ok(answer)
    }

    /// Makes sure the state topic exists as a state topic must: one partition,
    /// compacted. Creates it when absent (replication min(3, brokers),
    /// min.insync.replicas min(2, replication), no unclean election); refuses
    /// one that exists with another partition count or cleanup policy.
    pub async fn ensure_topic(&mut self, deadline: Instant) -> Result<(), LogError> {
        let topic = self.topic.clone();
        let refuse = |reason: String| LogError::Topic {
            topic: topic.clone(),
            reason,
        };
        loop {
            let meta = self.metadata().await?;
            let found = meta.topics.iter().find(|t| t.name == self.topic);
            match found.map(|t| (errors::error(t.error_code), t.partitions.len())) {
                Some((None, 1)) => break,
                Some((None, n)) => {
                    return Err(refuse(format!(
                        "it has {n} partitions; a state topic must have exactly one (choose another cluster.state_topic, or delete it)"
                    )))
                }
                Some((Some(ResponseError::UnknownTopicOrPartition), _)) | None => {
                    let brokers = meta.brokers.len().max(1);
                    let replication = brokers.min(3) as i16;
                    let min_insync = replication.min(2);
                    let configs = topic_configs(min_insync);
                    let configs: Vec<(&str, &str)> =
                        configs.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    let body = wire::create_topic_request(&self.topic, 1, replication, &configs, 30_000);
                    let raw = self
                        .call_any(ApiKey::CreateTopics, wire::CREATE_TOPICS_VERSION, &body)
                        .await?;
                    let results = wire::decode_create_topics(&raw).map_err(|e| {
                        UpstreamError::Protocol {
                            target: "the upstream".into(),
                            reason: format!("unreadable CreateTopics response: {e}"),
                        }
                    })?;
                    match results.first().map(|(_, code, m)| (errors::error(*code), *code, m)) {
                        Some((None, _, _)) => tracing::info!(
                            topic = %self.topic,
                            replication,
                            min_insync,
                            "created the kshim cluster's state topic"
                        ),
                        // Another instance created it first.
                        Some((Some(ResponseError::TopicAlreadyExists), _, _)) => {}
                        Some((_, code, message)) => {
                            return Err(refuse(format!(
                                "could not create it: {} {}",
                                errors::name(code),
                                message.clone().unwrap_or_default()
                            )))
                        }
                        None => return Err(refuse("CreateTopics answered nothing".into())),
                    }
                }
                Some((Some(error), _)) => {
                    if Instant::now() >= deadline {
                        return Err(refuse(format!(
                            "Metadata answers {}",
                            errors::name(error.code())
                        )));
                    }
                }
            }
            if Instant::now() >= deadline {
                return Err(LogError::Timeout(format!(
                    "state topic {} did not appear with a leader",
                    self.topic
                )));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // Partition count is right; the cleanup policy must be exactly compact:
        // with delete, old changes and registrations would vanish.
        let addr = self.leader_addr().await?;
        if !self.clients.contains_key(&addr) {
            let client = control_connection(std::slice::from_ref(&addr), &self.link).await?;
            self.clients.insert(addr.clone(), client);
        }
        let Some(client) = self.clients.get_mut(&addr) else {
            return Err(LogError::Timeout(format!("{addr}: no connection")));
        };
        let described = configs::describe(
            client,
            4,
            &[(RESOURCE_TOPIC, self.topic.clone())],
            &["cleanup.policy".to_owned()],
        )
        .await?;
        let policy = described
            .first()
            .and_then(|(_, entries)| entries.iter().find(|e| e.name == "cleanup.policy"))
            .and_then(|e| e.value.clone())
            .unwrap_or_default();
        if policy != "compact" {
            return Err(refuse(format!(
                "its cleanup.policy is \"{policy}\"; a state topic must be \"compact\" (set it with kafka-configs.sh, or choose another cluster.state_topic)"
            )));
        }
        Ok(())
    }

    /// The partition leader's address, asking Metadata when it is not known.
    pub async fn leader_addr(&mut self) -> Result<String, LogError> {
        if let Some(addr) = &self.leader {
            return Ok(addr.clone());
        }
        let meta = self.metadata().await?;
        let partition = meta
            .topics
            .iter()
            .find(|t| t.name == self.topic)
            .and_then(|t| t.partitions.iter().find(|p| p.partition == 0));
        let leader = match partition {
            Some(p) if p.leader >= 0 => p.leader,
            Some(p) => {
                return Err(LogError::kafka(
                    "Metadata",
                    if p.error_code != 0 {
                        p.error_code
                    } else {
                        ResponseError::LeaderNotAvailable.code()
                    },
                    None,
                ))
            }
            None => {
                return Err(LogError::kafka(
                    "Metadata",
                    ResponseError::UnknownTopicOrPartition.code(),
                    Some(format!("topic {}", self.topic)),
                ))
            }
        };
        let addr = self.broker(leader).ok_or_else(|| {
            LogError::kafka(
                "Metadata",
                ResponseError::LeaderNotAvailable.code(),
                Some(format!("leader {leader} is not among the brokers")),
            )
        })?;
        self.leader = Some(addr.clone());
        Ok(addr)
    }

    /// Forgets the leader after an answer that says it moved.
    pub fn leader_moved(&mut self) {
        self.leader = None;
    }

    /// The end offset a read_committed reader can reach now (the last stable
    /// offset).
    pub async fn committed_end(&mut self) -> Result<i64, LogError> {
        let addr = self.leader_addr().await?;
        let body = wire::list_offsets_request(
            wire::READ_COMMITTED,
            &self.topic,
            0,
            wire::LATEST_TIMESTAMP,
        );
        let raw = self
            .call(
                &addr,
                ApiKey::ListOffsets,
                wire::LIST_OFFSETS_VERSION,
                &body,
            )
            .await?;
        let (code, offset) = wire::decode_list_offsets(&raw).map_err(|e| {
            LogError::from(UpstreamError::Protocol {
                target: addr.clone(),
                reason: format!("unreadable ListOffsets response: {e}"),
            })
        })?;
        if code != errors::NONE {
            self.leader_moved();
            return Err(LogError::kafka("ListOffsets", code, None));
        }
        Ok(offset)
    }

    /// `committed_end`, asked again after a failure that passes (a connection
    /// that went stale while the leader restarted, a leader that moved) until
    /// `deadline`. The writer's connections can sit unused for minutes between
    /// changes, long enough for a rolling restart to close every one of them.
    pub async fn committed_end_by(&mut self, deadline: Instant) -> Result<i64, LogError> {
        loop {
            match self.committed_end().await {
                Err(e) if e.retriable() && Instant::now() < deadline => {
                    tracing::debug!("reading the committed end of the state topic again: {e}");
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
                other => return other,
            }
        }
    }

    /// One read_committed fetch from `offset`, waiting at most `max_wait` for
    /// something new.
    pub async fn fetch(
        &mut self,
        offset: i64,
        max_wait: Duration,
    ) -> Result<FetchAnswer, LogError> {
        let addr = self.leader_addr().await?;
        let spec = FetchSpec {
            topic: &self.topic,
            partition: 0,
            offset,
            max_wait_ms: max_wait.as_millis() as i32,
            min_bytes: 1,
            max_bytes: 4 << 20,
            isolation_level: wire::READ_COMMITTED,
        };
        let body = wire::fetch_request(&spec);
        let raw = self
            .call(&addr, ApiKey::Fetch, wire::FETCH_VERSION, &body)
            .await?;
        let answer = wire::decode_fetch(&raw).map_err(|e| {
            LogError::from(UpstreamError::Protocol {
                target: addr.clone(),
                reason: format!("unreadable Fetch response: {e}"),
            })
        })?;
        for code in [answer.error_code, answer.partition_error] {
            if code != errors::NONE && code != ResponseError::OffsetOutOfRange.code() {
                self.leader_moved();
                return Err(LogError::kafka("Fetch", code, None));
            }
        }
        Ok(answer)
    }
}
