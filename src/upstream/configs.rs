//! Reading configs from the upstream over kshim's own connections: the cluster
//! defaults a create-topic policy needs, and every topic and broker config an
//! upgrade audit checks.
//!
//! Responses are walked with the bounded `Reader`: a broker's answer never makes
//! kshim allocate in proportion to a count it has not checked.

use super::cluster::{broken, control_connection, ClusterView, Discoverer};
use super::link::LinkSettings;
use super::UpstreamError;
use crate::client::{negotiate, KafkaClient};
use crate::policy::{ConfigResource, ReportedConfig};
pub use crate::protocol::apis::{decode_describe_configs, DescribedConfig, DescribedResource};
use crate::protocol::apis::{
    decode_describe_quorum, describe_quorum_request, DESCRIBE_QUORUM_VERSION,
};
use crate::protocol::errors;
use crate::protocol::CodecError;
use bytes::BytesMut;
use kafka_protocol::messages::describe_configs_request::{
    DescribeConfigsRequest, DescribeConfigsResource,
};
use kafka_protocol::messages::metadata_request::MetadataRequest;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Encodable, StrBytes};

pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;

pub use super::cluster::TopicDefaults;

impl Discoverer {
    /// The upstream cluster now (`Discoverer::discover`), with its topic
    /// defaults read from the broker that answered Metadata (kept from
    /// `previous` when that broker does not say).
    pub async fn refresh(&mut self, previous: &ClusterView) -> Result<ClusterView, UpstreamError> {
        let (mut view, asked) = self.discover(previous).await?;
        if let Some((id, address)) = asked {
            let client = self.client(&address).await?;
            match topic_defaults(client, &view, id).await {
                Ok(defaults) => view.topic_defaults = defaults,
                Err(e) => tracing::debug!("cluster topic defaults not read from broker {id}: {e}"),
            }
        }
        Ok(view)
    }
}

/// DescribeConfigs' ConfigSource, by name.
pub fn source_name(source: i8) -> &'static str {
    match source {
        1 => "DYNAMIC_TOPIC_CONFIG",
        2 => "DYNAMIC_BROKER_CONFIG",
        3 => "DYNAMIC_DEFAULT_BROKER_CONFIG",
        4 => "STATIC_BROKER_CONFIG",
        5 => "DEFAULT_CONFIG",
        6 => "DYNAMIC_BROKER_LOGGER_CONFIG",
        7 => "CLIENT_METRICS_CONFIG",
        8 => "GROUP_CONFIG",
        _ => "UNKNOWN",
    }
}

fn protocol(target: &str, reason: String) -> UpstreamError {
    UpstreamError::Protocol {
        target: target.to_owned(),
        reason,
    }
}

/// How many resources go in one DescribeConfigs request.
const DESCRIBE_BATCH: usize = 500;

/// Sends DescribeConfigs for `resources` (type, name), asking only for `keys`,
/// and returns each resource's entries in order. A resource the broker answers
/// with an error is an error: an audit that cannot see a config must not pass.
pub async fn describe(
    client: &mut KafkaClient,
    version: i16,
    resources: &[(i8, String)],
    keys: &[String],
) -> Result<Vec<((i8, String), Vec<DescribedConfig>)>, UpstreamError> {
    let target = client.addr().to_owned();
    let mut out = Vec::with_capacity(resources.len());
    for batch in resources.chunks(DESCRIBE_BATCH) {
        let request = DescribeConfigsRequest::default().with_resources(
            batch
                .iter()
                .map(|(t, n)| {
                    DescribeConfigsResource::default()
                        .with_resource_type(*t)
                        .with_resource_name(StrBytes::from_string(n.clone()))
                        .with_configuration_keys(Some(
                            keys.iter()
                                .map(|k| StrBytes::from_string(k.clone()))
                                .collect(),
                        ))
                })
                .collect(),
        );
        let mut body = BytesMut::new();
        request.encode(&mut body, version).map_err(|e| {
            protocol(
                &target,
                format!("cannot encode DescribeConfigs v{version}: {e}"),
            )
        })?;
        let raw = client
            .request(ApiKey::DescribeConfigs, version, &body)
            .await
            .map_err(|e| broken(&target, e))?;
        let results = decode_describe_configs(version, &raw).map_err(|e| {
            protocol(
                &target,
                format!("unreadable DescribeConfigs v{version} response: {e}"),
            )
        })?;
        for (resource, code, message, entries) in results {
            if code != errors::NONE {
                return Err(protocol(
                    &target,
                    format!(
                        "DescribeConfigs for {} {} failed: {} {}",
                        if resource.0 == RESOURCE_TOPIC {
                            "topic"
                        } else {
                            "broker"
                        },
                        resource.1,
                        errors::name(code),
                        message.unwrap_or_default()
                    ),
                ));
            }
            out.push((resource, entries));
        }
    }
    Ok(out)
}

/// The DescribeConfigs version to use with the brokers of `view`.
pub fn describe_version(view: &ClusterView) -> Option<i16> {
    negotiate(&view.api_intersection(), ApiKey::DescribeConfigs, 4).filter(|v| *v >= 1)
}

/// `num.partitions` and `default.replication.factor` of broker `node`.
pub async fn topic_defaults(
    client: &mut KafkaClient,
    view: &ClusterView,
    node: i32,
) -> Result<TopicDefaults, UpstreamError> {
    let version = describe_version(view).ok_or_else(|| {
        protocol(
            client.addr(),
            "the brokers serve no DescribeConfigs v1-v4".into(),
        )
    })?;
    let keys = [
        "num.partitions".to_owned(),
        "default.replication.factor".to_owned(),
    ];
    let described = describe(
        client,
        version,
        &[(RESOURCE_BROKER, node.to_string())],
        &keys,
    )
    .await?;
    let mut defaults = TopicDefaults::default();
    for entry in described.into_iter().flat_map(|(_, e)| e) {
        let value = entry.value.as_deref().unwrap_or_default();
        match entry.name.as_str() {
            "num.partitions" => defaults.num_partitions = value.parse().ok(),
            "default.replication.factor" => defaults.replication_factor = value.parse().ok(),
            _ => {}
        }
    }
    Ok(defaults)
}

/// Every topic's dynamic value and every listed broker's effective value of
/// `keys` (broker spelling; topics are asked for the topic spelling): what an
/// upgrade audit checks. A topic value that only repeats a broker value is left
/// out, as that value is audited at its broker.
///
/// An audit that cannot see must not pass: a listed broker that does not
/// answer within the link's connect timeout (or before `deadline`) is an error
/// naming it, whether or not it answered the last refresh.
pub async fn audit_configs(
    view: &ClusterView,
    link: &LinkSettings,
    keys: &[String],
    deadline: std::time::Instant,
) -> Result<Vec<ReportedConfig>, UpstreamError> {
    let version = describe_version(view).ok_or_else(|| {
        protocol(
            "the upstream",
            "the brokers serve no DescribeConfigs v1-v4".into(),
        )
    })?;
    if view.brokers.is_empty() {
        return Err(UpstreamError::Unreachable {
            targets: "the upstream".into(),
            reason: "no broker is known".into(),
        });
    }
    let live: Vec<String> = view
        .brokers
        .iter()
        .filter(|(id, _)| view.live.contains_key(id))
        .map(|(_, b)| b.address())
        .collect();
    let mut client = control_connection(&live, link).await?;
    let committed = match committed_offset(&mut client).await {
        Ok(offset) => offset,
        Err(e) => {
            // A broker that does not answer (paused, partitioned, the controller
            // among them) is the likelier cause: name it if there is one.
            for (&id, broker) in &view.brokers {
                broker_configs(id, &broker.address(), version, keys, link, None, deadline).await?;
            }
            return Err(e);
        }
    };
    applied_through(&mut client, committed, deadline).await?;
    let mut reported = Vec::new();
    // A broker's static configs are known to that broker alone.
    for (&id, broker) in &view.brokers {
        let address = broker.address();
        let read = Some(committed);
        reported.extend(broker_configs(id, &address, version, keys, link, read, deadline).await?);
    }
    let topics = topic_names(&mut client, view).await?;
    let topic_keys: Vec<String> = keys
        .iter()
        .map(|k| crate::policy::validators::topic_key(k).to_owned())
        .collect();
    let resources: Vec<(i8, String)> = topics.into_iter().map(|t| (RESOURCE_TOPIC, t)).collect();
    for ((_, topic), entries) in describe(&mut client, version, &resources, &topic_keys).await? {
        for entry in entries {
            if let (Some(value), 1) = (entry.value, entry.source) {
                reported.push(ReportedConfig {
                    resource: ConfigResource::Topic(topic.clone()),
                    key: entry.name,
                    value,
                    source: source_name(entry.source),
                });
            }
        }
    }
    Ok(reported)
}

/// Broker `id`'s effective values of `keys`, asked of that broker itself,
/// within the link's connect timeout and `deadline`; with `applied`, once the
/// broker has applied the metadata log up to that offset (`applied_through`).
pub async fn broker_configs(
    id: i32,
    address: &str,
    version: i16,
    keys: &[String],
    link: &LinkSettings,
    applied: Option<i64>,
    deadline: std::time::Instant,
) -> Result<Vec<ReportedConfig>, UpstreamError> {
    let limit = link
        .connect_timeout
        .min(deadline.saturating_duration_since(std::time::Instant::now()));
    let ask = async {
        let mut client = control_connection(&[address.to_owned()], link).await?;
        if let Some(offset) = applied {
            applied_through(&mut client, offset, deadline).await?;
        }
        describe(
            &mut client,
            version,
            &[(RESOURCE_BROKER, id.to_string())],
            keys,
        )
        .await
    };
    let described = match tokio::time::timeout(limit, ask).await {
        Ok(Ok(described)) => described,
        Ok(Err(e)) => {
            return Err(UpstreamError::Protocol {
                target: format!("broker {id} ({address})"),
                reason: format!("its configs could not be read: {e}"),
            })
        }
        Err(_) => {
            return Err(UpstreamError::Protocol {
                target: format!("broker {id} ({address})"),
                reason: format!("its configs could not be read: no answer within {limit:?}"),
            })
        }
    };
    Ok(described
        .into_iter()
        .flat_map(|(_, e)| e)
        .filter_map(|entry| {
            Some(ReportedConfig {
                resource: ConfigResource::Broker(id.to_string()),
                key: entry.name,
                value: entry.value?,
                source: source_name(entry.source),
            })
        })
        .collect())
}

/// The offset of the last metadata record the controller has committed.
///
/// A config change that passed kshim's fence before an audit was answered by the
/// controller once committed, but each broker applies the metadata log a moment
/// later: asked too soon, a broker describes the cluster without it (a topic just
/// created, a value just set). So an audit reads only from brokers that have
/// applied everything committed when it began. The broker passes the request to
/// the active controller; it needs DESCRIBE on the cluster.
async fn committed_offset(client: &mut KafkaClient) -> Result<i64, UpstreamError> {
    let target = client.addr().to_owned();
    let raw = client
        .request(
            ApiKey::DescribeQuorum,
            DESCRIBE_QUORUM_VERSION,
            &describe_quorum_request(),
        )
        .await
        .map_err(|e| broken(&target, e))?;
    let quorum = decode_describe_quorum(&raw)
        .map_err(|e| protocol(&target, format!("unreadable DescribeQuorum response: {e}")))?;
    if quorum.error_code != errors::NONE {
        let hint = if quorum.error_code == errors::ResponseError::ClusterAuthorizationFailed.code()
        {
            " (kshim's upstream principal needs DESCRIBE on the cluster)"
        } else {
            ""
        };
        return Err(protocol(
            &target,
            format!(
                "the metadata log's committed offset could not be read: DescribeQuorum answered {}{hint}",
                errors::name(quorum.error_code)
            ),
        ));
    }
    Ok(quorum.high_watermark - 1)
}

/// Waits until the broker behind `client` has applied the metadata log up to
/// `offset`. A KRaft broker's finalized-features epoch (ApiVersions) is the
/// offset of the metadata image it serves.
async fn applied_through(
    client: &mut KafkaClient,
    offset: i64,
    deadline: std::time::Instant,
) -> Result<(), UpstreamError> {
    let target = client.addr().to_owned();
    let mut pause = std::time::Duration::from_millis(5);
    loop {
        let (_, answer) = client
            .api_versions()
            .await
            .map_err(|e| broken(&target, e))?;
        let applied = answer.features.epoch;
        if applied >= offset {
            return Ok(());
        }
        if applied < 0 {
            return Err(protocol(
                &target,
                "its ApiVersions answer carries no finalized-features epoch, so kshim cannot tell \
                 whether it has applied the latest config changes"
                    .into(),
            ));
        }
        if std::time::Instant::now() + pause >= deadline {
            return Err(protocol(
                &target,
                format!(
                    "it has applied the metadata log up to offset {applied}, not yet to {offset}, \
                     the last committed record"
                ),
            ));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(std::time::Duration::from_millis(100));
    }
}

/// The names of every topic, internal ones included.
async fn topic_names(
    client: &mut KafkaClient,
    view: &ClusterView,
) -> Result<Vec<String>, UpstreamError> {
    let target = client.addr().to_owned();
    let version = negotiate(&view.api_intersection(), ApiKey::Metadata, 12)
        .filter(|v| *v >= 1)
        .ok_or_else(|| protocol(&target, "the brokers serve no Metadata v1-v12".into()))?;
    let mut request = MetadataRequest::default().with_topics(None);
    if version >= 4 {
        request.allow_auto_topic_creation = false;
    }
    let mut body = BytesMut::new();
    request
        .encode(&mut body, version)
        .map_err(|e| protocol(&target, format!("cannot encode Metadata v{version}: {e}")))?;
    let raw = client
        .request(ApiKey::Metadata, version, &body)
        .await
        .map_err(|e| broken(&target, e))?;
    decode_metadata_topics(version, &raw).map_err(|e| {
        protocol(
            &target,
            format!("unreadable Metadata v{version} response: {e}"),
        )
    })
}

/// The topic names of a Metadata response body, v1-v12.
pub fn decode_metadata_topics(version: i16, body: &[u8]) -> Result<Vec<String>, CodecError> {
    Ok(crate::protocol::apis::decode_metadata(version, body)?
        .topics
        .into_iter()
        .map(|t| t.name)
        .filter(|name| !name.is_empty())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::describe_configs_response::{
        DescribeConfigsResourceResult, DescribeConfigsResponse, DescribeConfigsResult,
    };
    use kafka_protocol::messages::metadata_response::{
        MetadataResponse, MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    use kafka_protocol::messages::{BrokerId, TopicName};

    fn enc<M: Encodable>(m: &M, v: i16) -> Vec<u8> {
        let mut b = BytesMut::new();
        m.encode(&mut b, v).unwrap();
        b.to_vec()
    }

    #[test]
    fn metadata_topic_names_are_read_in_every_version() {
        let response = MetadataResponse::default()
            .with_brokers(vec![MetadataResponseBroker::default()
                .with_node_id(BrokerId(1))
                .with_host(StrBytes::from_static_str("h"))
                .with_port(9092)])
            .with_topics(vec![
                MetadataResponseTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_static_str("payments"))))
                    .with_partitions(vec![MetadataResponsePartition::default()
                        .with_replica_nodes(vec![BrokerId(1)])
                        .with_isr_nodes(vec![BrokerId(1)])]),
                MetadataResponseTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_static_str("orders")))),
            ]);
        for v in 1..=12 {
            let raw = enc(&response, v);
            assert_eq!(
                decode_metadata_topics(v, &raw).unwrap(),
                ["payments", "orders"],
                "v{v}"
            );
            // The fields after the topics (cluster operations, tags) are not read.
            let unread = if (8..=10).contains(&v) { 4 } else { 0 } + usize::from(v >= 9);
            for cut in 0..raw.len() - unread {
                assert!(
                    decode_metadata_topics(v, &raw[..cut]).is_err(),
                    "v{v} cut at {cut} of {}",
                    raw.len()
                );
            }
        }
    }

    #[test]
    fn describe_configs_entries_are_read_in_every_version() {
        let response =
            DescribeConfigsResponse::default().with_results(vec![DescribeConfigsResult::default()
                .with_resource_type(RESOURCE_BROKER)
                .with_resource_name(StrBytes::from_static_str("1"))
                .with_configs(vec![DescribeConfigsResourceResult::default()
                    .with_name(StrBytes::from_static_str("log.segment.bytes"))
                    .with_value(Some(StrBytes::from_static_str("2097152")))
                    .with_config_source(4)])]);
        for v in 1..=4 {
            let raw = enc(&response, v);
            let decoded = decode_describe_configs(v, &raw).unwrap();
            assert_eq!(decoded.len(), 1);
            assert_eq!(decoded[0].3[0].value.as_deref(), Some("2097152"));
            assert_eq!(source_name(decoded[0].3[0].source), "STATIC_BROKER_CONFIG");
        }
    }
}
