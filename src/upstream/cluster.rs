//! What kshim knows of the upstream cluster: its brokers (from Metadata), what
//! each live broker advertises (from ApiVersions), and the feature state they
//! report. `Discoverer::refresh` rebuilds that view; it keeps one control
//! connection per broker between refreshes.
//!
//! Also here: UpdateFeatures sent on to the upstream for the features it owns.

use super::link::{connect_first, LinkSettings};
use super::UpstreamError;
use crate::client::{negotiate, KafkaClient};
use crate::features::{FinalizedFeatures, SupportedFeatures, SupportedRange};
use crate::protocol::api_versions::{ApiRange, DecodedApiVersions};
use crate::protocol::errors::{self, ResponseError};
use bytes::{Bytes, BytesMut};
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{ApiKey, MetadataRequest};
use kafka_protocol::protocol::Encodable;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

pub use crate::protocol::apis::{decode_metadata_brokers, host_port, BrokerInfo};

/// The upstream cluster at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterView {
    pub cluster_id: Option<String>,
    pub brokers: BTreeMap<i32, BrokerInfo>,
    /// The brokers that answered ApiVersions, with what they advertised.
    pub live: BTreeMap<i32, DecodedApiVersions>,
    /// `num.partitions` and `default.replication.factor`, for the create-topic policy.
    pub topic_defaults: TopicDefaults,
}

/// The cluster defaults a CreateTopics request falls back on with -1, read by
/// `Discoverer::refresh` (in configs.rs) from the broker that answered Metadata.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TopicDefaults {
    pub num_partitions: Option<i32>,
    pub replication_factor: Option<i16>,
}

/// The feature state the upstream reports, merged over its live brokers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpstreamFeatures {
    /// Features every live broker advertises, with the range all of them support.
    pub supported: SupportedFeatures,
    /// The finalized levels of the broker with the newest epoch (epoch -1 when
    /// none reports one).
    pub finalized: FinalizedFeatures,
    /// Per live broker, what it supports (for the supporters check).
    pub per_broker: BTreeMap<i32, SupportedFeatures>,
}

impl ClusterView {
    /// Per API key, the versions every live broker serves. Keys some live broker
    /// lacks are left out.
    pub fn api_intersection(&self) -> Vec<ApiRange> {
        let mut brokers = self.live.values();
        let Some(first) = brokers.next() else {
            return Vec::new();
        };
        let mut out: BTreeMap<i16, (i16, i16)> = first
            .apis
            .iter()
            .map(|a| (a.api_key, (a.min, a.max)))
            .collect();
        for b in brokers {
            let theirs: BTreeMap<i16, (i16, i16)> =
                b.apis.iter().map(|a| (a.api_key, (a.min, a.max))).collect();
            out.retain(|key, range| match theirs.get(key) {
                Some(&(min, max)) => {
                    *range = (range.0.max(min), range.1.min(max));
                    range.0 <= range.1
                }
                None => false,
            });
        }
        out.into_iter()
            .map(|(api_key, (min, max))| ApiRange { api_key, min, max })
            .collect()
    }

    pub fn features(&self) -> UpstreamFeatures {
        let mut per_broker = BTreeMap::new();
        for (&id, b) in &self.live {
            let supported: SupportedFeatures = b
                .features
                .supported
                .iter()
                .map(|(name, &(min, max))| (name.clone(), SupportedRange::new(min, max)))
                .collect();
            per_broker.insert(id, supported);
        }
        let mut supported: Option<SupportedFeatures> = None;
        for theirs in per_broker.values() {
            supported = Some(match supported {
                None => theirs.clone(),
                Some(mut acc) => {
                    acc.retain(|name, range| match theirs.get(name) {
                        Some(r) => {
                            *range =
                                SupportedRange::new(range.min.max(r.min), range.max.min(r.max));
                            true
                        }
                        None => false,
                    });
                    acc
                }
            });
        }
        let newest = self
            .live
            .values()
            .filter(|b| b.features.epoch >= 0)
            .max_by_key(|b| b.features.epoch);
        // No broker reporting an epoch is a view older than any that did.
        let unreported = || FinalizedFeatures {
            epoch: -1,
            levels: Default::default(),
        };
        let finalized = newest.map_or_else(unreported, |b| FinalizedFeatures {
            epoch: b.features.epoch,
            levels: b
                .features
                .finalized
                .iter()
                .map(|(name, &(_, max))| (name.clone(), max))
                .filter(|(_, level)| *level > 0)
                .collect(),
        });
        UpstreamFeatures {
            supported: supported.unwrap_or_default(),
            finalized,
            per_broker,
        }
    }
}

/// Keeps the view of the upstream fresh.
pub struct Discoverer {
    bootstrap: Vec<String>,
    link: LinkSettings,
    /// Control connections by broker address.
    clients: HashMap<String, KafkaClient>,
}

const CLIENT_ID: &str = "kshim";
/// Addresses asked for Metadata at once after the first failed; the first
/// answer wins.
const METADATA_FANOUT: usize = 4;
/// Brokers asked for ApiVersions at once.
const API_VERSIONS_FANOUT: usize = 32;

/// What one broker said: its ApiVersions, and Metadata when asked for it.
type Answer = (
    DecodedApiVersions,
    Option<(Option<String>, BTreeMap<i32, BrokerInfo>)>,
);

impl Discoverer {
    pub fn new(bootstrap: Vec<String>, link: LinkSettings) -> Self {
        Discoverer {
            bootstrap,
            link,
            clients: HashMap::new(),
        }
    }

    /// Asks the upstream for its brokers, trying the brokers of `previous` first
    /// and then every bootstrap address, and asks each broker what it serves.
    /// Brokers are asked concurrently, each within `connect_timeout`, so a
    /// broker that never answers costs one deadline, not one per broker. Also
    /// the node id and address of the broker whose Metadata answered (its
    /// control connection is kept under that address); the topic defaults are
    /// `previous`'s (`Discoverer::refresh`, in configs.rs, reads them again).
    pub(super) async fn discover(
        &mut self,
        previous: &ClusterView,
    ) -> Result<(ClusterView, Option<(i32, String)>), UpstreamError> {
        let mut targets: Vec<String> = previous.brokers.values().map(BrokerInfo::address).collect();
        for b in &self.bootstrap {
            if !targets.contains(b) {
                targets.push(b.clone());
            }
        }
        let mut failures = Vec::new();
        let mut found = None;
        // The first address alone (it usually answers, and the others keep their
        // connections), then the rest a few at a time.
        let (first, rest) = targets.split_at(targets.len().min(1));
        let waves = std::iter::once(first).chain(rest.chunks(METADATA_FANOUT));
        'waves: for wave in waves {
            let mut asks: FuturesUnordered<_> = wave
                .iter()
                .map(|target| self.ask(target.clone(), true))
                .collect();
            while let Some((target, client, answer)) = asks.next().await {
                match answer {
                    Ok((apis, Some(metadata))) => {
                        if let Some(c) = client {
                            self.clients.insert(target.clone(), c);
                        }
                        found = Some((target, metadata, apis));
                        break 'waves;
                    }
                    Ok((_, None)) => {}
                    Err(e) => failures.push(match e {
                        UpstreamError::Unreachable { reason, .. } => reason,
                        other => other.to_string(),
                    }),
                }
            }
        }
        let Some((asked, (cluster_id, brokers), asked_apis)) = found else {
            return Err(UpstreamError::Unreachable {
                targets: targets.join(","),
                reason: failures.join("; "),
            });
        };
        let mut live = BTreeMap::new();
        let mut asked_apis = Some(asked_apis);
        let mut others = Vec::new();
        for (&id, broker) in &brokers {
            let address = broker.address();
            // The broker that answered Metadata has just answered ApiVersions too.
            match (address == asked, asked_apis.take()) {
                (true, Some(decoded)) => {
                    live.insert(id, decoded);
                }
                (_, kept) => {
                    asked_apis = kept;
                    others.push((id, address));
                }
            }
        }
        // Each address is asked once, whatever number of node ids it stands for.
        let mut by_address: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for (id, address) in others {
            by_address.entry(address).or_default().push(id);
        }
        let asks: Vec<_> = by_address
            .into_iter()
            .map(|(address, ids)| {
                let ask = self.ask(address, false);
                async move { (ids, ask.await) }
            })
            .collect();
        let mut answers = futures::stream::iter(asks).buffer_unordered(API_VERSIONS_FANOUT);
        let mut keep = Vec::new();
        while let Some((ids, (address, client, answer))) = answers.next().await {
            match answer {
                Ok((decoded, _)) => {
                    for &id in &ids {
                        live.insert(id, decoded.clone());
                    }
                    keep.extend(client.map(|c| (address, c)));
                }
                Err(e) => {
                    tracing::debug!("{address} (node {ids:?}) did not answer ApiVersions: {e}")
                }
            }
        }
        drop(answers);
        self.clients.extend(keep);
        let wanted: Vec<String> = brokers.values().map(BrokerInfo::address).collect();
        self.clients.retain(|addr, _| wanted.contains(addr));
        let view = ClusterView {
            cluster_id,
            brokers,
            live,
            topic_defaults: previous.topic_defaults,
        };
        let asked_id = view
            .brokers
            .iter()
            .find(|(_, b)| b.address() == asked)
            .map(|(id, _)| (*id, asked));
        Ok((view, asked_id))
    }

    /// Asks `target` for ApiVersions (and Metadata with `metadata`) on its control
    /// connection, opened if need be, all within `connect_timeout`. The
    /// connection comes back when it is still good.
    fn ask(
        &mut self,
        target: String,
        metadata: bool,
    ) -> impl std::future::Future<
        Output = (String, Option<KafkaClient>, Result<Answer, UpstreamError>),
    > + 'static {
        let held = self.clients.remove(&target);
        let link = self.link.clone();
        async move {
            let deadline = link.connect_timeout;
            let exchange = async {
                let mut client = match held {
                    Some(c) => c,
                    None => control_connection(std::slice::from_ref(&target), &link).await?,
                };
                let apis = api_versions(&mut client, &target).await?;
                let brokers = if metadata {
                    Some(read_brokers(&mut client, &target, &apis).await?)
                } else {
                    None
                };
                Ok::<_, UpstreamError>((client, (apis, brokers)))
            };
            match tokio::time::timeout(deadline, exchange).await {
                Ok(Ok((client, answer))) => (target, Some(client), Ok(answer)),
                Ok(Err(e)) => (target, None, Err(e)),
                Err(_) => {
                    let reason = format!("no answer within {deadline:?}");
                    let e = UpstreamError::Broken {
                        target: target.clone(),
                        reason,
                    };
                    (target, None, Err(e))
                }
            }
        }
    }

    pub(super) async fn client(&mut self, target: &str) -> Result<&mut KafkaClient, UpstreamError> {
        if !self.clients.contains_key(target) {
            let client = control_connection(&[target.to_owned()], &self.link).await?;
            self.clients.insert(target.to_owned(), client);
        }
        self.clients
            .get_mut(target)
            .ok_or_else(|| UpstreamError::LinkClosed {
                target: target.to_owned(),
            })
    }
}

async fn api_versions(
    client: &mut KafkaClient,
    target: &str,
) -> Result<DecodedApiVersions, UpstreamError> {
    let (_, decoded) = client.api_versions().await.map_err(|e| broken(target, e))?;
    if decoded.error_code != errors::NONE {
        return Err(UpstreamError::Protocol {
            target: target.to_owned(),
            reason: format!("ApiVersions failed with error code {}", decoded.error_code),
        });
    }
    Ok(decoded)
}

/// The cluster id and brokers, from `target`, which advertised `apis`.
async fn read_brokers(
    client: &mut KafkaClient,
    target: &str,
    apis: &DecodedApiVersions,
) -> Result<(Option<String>, BTreeMap<i32, BrokerInfo>), UpstreamError> {
    let version = negotiate(&apis.apis, ApiKey::Metadata, 12)
        .filter(|v| *v >= 1)
        .ok_or_else(|| UpstreamError::Protocol {
            target: target.to_owned(),
            reason: "the broker serves no Metadata version kshim can use (1-12)".into(),
        })?;
    let mut request =
        MetadataRequest::default().with_topics(Some(Vec::<MetadataRequestTopic>::new()));
    if version >= 4 {
        request.allow_auto_topic_creation = false;
    }
    let mut body = BytesMut::new();
    request
        .encode(&mut body, version)
        .map_err(|e| UpstreamError::Protocol {
            target: target.to_owned(),
            reason: format!("cannot encode Metadata v{version}: {e}"),
        })?;
    let raw = client
        .request(ApiKey::Metadata, version, &body)
        .await
        .map_err(|e| broken(target, e))?;
    decode_metadata_brokers(version, &raw).map_err(|e| UpstreamError::Protocol {
        target: target.to_owned(),
        reason: format!("unreadable Metadata v{version} response: {e}"),
    })
}

/// A request on kshim's own connection to `target` that failed.
pub(super) fn broken(target: &str, e: crate::client::ClientError) -> UpstreamError {
    UpstreamError::Broken {
        target: target.to_owned(),
        reason: e.to_string(),
    }
}

/// A connection of kshim's own to the first of `targets` that accepts,
/// authenticated when credentials are configured.
pub(crate) async fn control_connection(
    targets: &[String],
    link: &LinkSettings,
) -> Result<KafkaClient, UpstreamError> {
    let (stream, target) = connect_first(targets, link).await?;
    let mut client = KafkaClient::from_stream(stream, &target, link.connect_timeout, CLIENT_ID);
    if let Some(credentials) = &link.sasl {
        client
            .authenticate(credentials)
            .await
            .map_err(|e| broken(&target, e))?;
    }
    Ok(client)
}

/// Sends an UpdateFeatures request body to the upstream and returns the response
/// body. Any broker passes it on to the active controller; NOT_CONTROLLER (the
/// controller moved while the request was on its way) is retried until `deadline`.
pub async fn forward_update_features(
    targets: &[String],
    link: &LinkSettings,
    version: i16,
    body: &[u8],
    deadline: Instant,
) -> Result<Bytes, UpstreamError> {
    let mut backoff = Duration::from_millis(100);
    loop {
        let mut client = control_connection(targets, link).await?;
        let target = client.addr().to_owned();
        let raw = client
            .request(ApiKey::UpdateFeatures, version, body)
            .await
            .map_err(|e| broken(&target, e))?;
        let code = crate::protocol::apis::update_features_error_code(&raw).map_err(|e| {
            UpstreamError::Protocol {
                target: target.clone(),
                reason: format!("unreadable UpdateFeatures response: {e}"),
            }
        })?;
        if code != ResponseError::NotController.code() || Instant::now() + backoff >= deadline {
            return Ok(raw);
        }
        tracing::info!("UpdateFeatures: {target} answered NOT_CONTROLLER; retrying in {backoff:?}");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::draft_tags::DraftFeatures;

    fn broker(
        apis: &[(i16, i16, i16)],
        supported: &[(&str, i16, i16)],
        epoch: i64,
        finalized: &[(&str, i16)],
    ) -> DecodedApiVersions {
        DecodedApiVersions {
            error_code: 0,
            apis: apis
                .iter()
                .map(|&(api_key, min, max)| ApiRange { api_key, min, max })
                .collect(),
            throttle_time_ms: 0,
            features: DraftFeatures {
                supported: supported
                    .iter()
                    .map(|&(n, a, b)| (n.to_owned(), (a, b)))
                    .collect(),
                epoch,
                finalized: finalized
                    .iter()
                    .map(|&(n, l)| (n.to_owned(), (l, l)))
                    .collect(),
            },
            draft: None,
            zk_migration_ready: false,
        }
    }

    #[test]
    fn apis_and_features_are_intersected_over_live_brokers() {
        let view = ClusterView {
            cluster_id: Some("c".into()),
            brokers: BTreeMap::new(),
            live: [
                (
                    1,
                    broker(
                        &[(0, 3, 12), (1, 4, 17), (68, 0, 1)],
                        &[("group.version", 0, 1), ("x", 1, 3)],
                        40,
                        &[("group.version", 1)],
                    ),
                ),
                (
                    2,
                    broker(
                        &[(0, 3, 11), (1, 4, 18)],
                        &[("group.version", 0, 1)],
                        42,
                        &[("group.version", 0)],
                    ),
                ),
            ]
            .into(),
            topic_defaults: Default::default(),
        };
        assert_eq!(
            view.api_intersection(),
            vec![
                ApiRange {
                    api_key: 0,
                    min: 3,
                    max: 11
                },
                ApiRange {
                    api_key: 1,
                    min: 4,
                    max: 17
                }
            ]
        );
        let f = view.features();
        assert_eq!(
            f.supported,
            [("group.version".to_owned(), SupportedRange::new(0, 1))].into()
        );
        assert_eq!(f.finalized.epoch, 42, "the newest broker wins");
        assert!(f.finalized.levels.is_empty(), "level 0 is disabled");
        assert_eq!(f.per_broker.len(), 2);
    }
}
