//! Metadata (key 3): the request a kshim cluster sends for its state topic, and
//! the one bounded decoder of Metadata responses, every version.

use super::*;
use crate::protocol::{CodecError, Reader};
use bytes::Bytes;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::MetadataRequest;
use std::collections::BTreeMap;

pub const METADATA_VERSION: i16 = 12;

/// Named topics only; no automatic creation, which would make a state topic
/// with the broker's defaults instead of a compacted single partition.
pub fn metadata_request(topics: &[&str]) -> Bytes {
    let topics = topics
        .iter()
        .map(|t| MetadataRequestTopic::default().with_name(Some(topic_name(t))))
        .collect();
    let req = MetadataRequest::default()
        .with_topics(Some(topics))
        .with_allow_auto_topic_creation(false);
    encode(&req, METADATA_VERSION, "Metadata")
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionMeta {
    pub partition: i32,
    pub error_code: i16,
    pub leader: i32,
    pub replicas: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMeta {
    /// Empty when the broker answered by topic id only.
    pub name: String,
    pub error_code: i16,
    pub partitions: Vec<PartitionMeta>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataAnswer {
    pub cluster_id: Option<String>,
    pub brokers: BTreeMap<i32, BrokerInfo>,
    pub topics: Vec<TopicMeta>,
}

/// A Metadata response body, v1-v13: the brokers, the cluster id and every
/// topic with its partitions. The one decoder of Metadata bodies: the state
/// log (v12), the config audit's topic names (any version) and, through
/// `read_metadata_head`, the upstream view all read it. (The broker-address
/// rewrite walks the same layout in `protocol::rewrite::metadata`, to splice
/// bytes rather than to decode.)
pub fn decode_metadata(version: i16, body: &[u8]) -> Result<MetadataAnswer, CodecError> {
    let flexible = version >= 9;
    let tags = |r: &mut Reader<'_>, what| -> Result<(), CodecError> {
        if flexible {
            r.tagged_fields(what)?;
        }
        Ok(())
    };
    let ids = |r: &mut Reader<'_>, what| -> Result<usize, CodecError> {
        let n = r.array_len(flexible, 4, what)?.unwrap_or(0);
        r.bytes(4 * n, what)?;
        Ok(n)
    };
    let mut r = Reader::new(body);
    let (cluster_id, brokers) = read_metadata_head(version, &mut r)?;
    r.i32("ControllerId")?;
    let n = r.array_len(flexible, 8, "Topics")?.unwrap_or(0);
    let mut topics = Vec::with_capacity(n);
    for _ in 0..n {
        let error_code = r.i16("ErrorCode")?;
        let name = r.nullable(flexible, "Name")?.unwrap_or_default().to_owned();
        if version >= 10 {
            r.uuid("TopicId")?;
        }
        r.bool("IsInternal")?;
        let count = r.array_len(flexible, 14, "Partitions")?.unwrap_or(0);
        let mut partitions = Vec::with_capacity(count);
        for _ in 0..count {
            let error_code = r.i16("ErrorCode")?;
            let partition = r.i32("PartitionIndex")?;
            let leader = r.i32("LeaderId")?;
            if version >= 7 {
                r.i32("LeaderEpoch")?;
            }
            let replicas = ids(&mut r, "ReplicaNodes")?;
            ids(&mut r, "IsrNodes")?;
            if version >= 5 {
                ids(&mut r, "OfflineReplicas")?;
            }
            tags(&mut r, "MetadataResponsePartition")?;
            partitions.push(PartitionMeta {
                partition,
                error_code,
                leader,
                replicas,
            });
        }
        if version >= 8 {
            r.i32("TopicAuthorizedOperations")?;
        }
        tags(&mut r, "MetadataResponseTopic")?;
        topics.push(TopicMeta {
            name,
            error_code,
            partitions,
        });
    }
    if (8..=10).contains(&version) {
        r.i32("ClusterAuthorizedOperations")?;
    }
    if version >= 13 {
        r.i16("ErrorCode")?;
    }
    tags(&mut r, "MetadataResponse")?;
    r.expect_end("Metadata response")?;
    Ok(MetadataAnswer {
        cluster_id,
        brokers,
        topics,
    })
}

/// One broker as Metadata lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerInfo {
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

impl BrokerInfo {
    pub fn address(&self) -> String {
        host_port(&self.host, self.port)
    }
}

/// HOST:PORT to connect to; IPv6 literals get brackets.
pub fn host_port(host: &str, port: i32) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The cluster id and brokers at the head of a Metadata response body.
pub fn decode_metadata_brokers(
    version: i16,
    body: &[u8],
) -> Result<(Option<String>, BTreeMap<i32, BrokerInfo>), CodecError> {
    read_metadata_head(version, &mut Reader::new(body))
}

/// Reads a Metadata response body up to and including the cluster id, leaving
/// `r` at ControllerId.
pub fn read_metadata_head(
    version: i16,
    r: &mut Reader<'_>,
) -> Result<(Option<String>, BTreeMap<i32, BrokerInfo>), CodecError> {
    let flexible = version >= 9;
    if version >= 3 {
        r.i32("ThrottleTimeMs")?;
    }
    let n = r.array_len(flexible, 10, "Brokers")?.unwrap_or(0);
    let mut brokers = BTreeMap::new();
    for _ in 0..n {
        let node_id = r.i32("NodeId")?;
        let host = r.string(flexible, "Host")?.to_owned();
        let port = r.i32("Port")?;
        let rack = if version >= 1 {
            nullable(r, flexible, "Rack")?
        } else {
            None
        };
        if flexible {
            r.tagged_fields("MetadataResponseBroker")?;
        }
        brokers.insert(node_id, BrokerInfo { host, port, rack });
    }
    let cluster_id = if version >= 2 {
        nullable(r, flexible, "ClusterId")?
    } else {
        None
    };
    Ok((cluster_id, brokers))
}

fn nullable(
    r: &mut Reader<'_>,
    flexible: bool,
    what: &'static str,
) -> Result<Option<String>, CodecError> {
    Ok(r.nullable(flexible, what)?.map(str::to_owned))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    #[test]
    fn metadata_prefix_decodes_and_rejects_garbage() {
        use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
        use kafka_protocol::messages::{BrokerId, MetadataResponse};
        use kafka_protocol::protocol::StrBytes;
        for version in 1..=13 {
            let response = MetadataResponse::default()
                .with_brokers(vec![MetadataResponseBroker::default()
                    .with_node_id(BrokerId(3))
                    .with_host(StrBytes::from_static_str("b3.local"))
                    .with_port(9093)])
                .with_cluster_id(if version >= 2 {
                    Some(StrBytes::from_static_str("cid"))
                } else {
                    None
                });
            let mut buf = BytesMut::new();
            response.encode(&mut buf, version).unwrap();
            let (cid, brokers) = decode_metadata_brokers(version, &buf).unwrap();
            assert_eq!(
                cid.as_deref(),
                if version >= 2 { Some("cid") } else { None }
            );
            assert_eq!(brokers[&3].address(), "b3.local:9093");
            for cut in 0..buf.len().min(40) {
                let _ = decode_metadata_brokers(version, &buf[..cut]);
            }
        }
        assert!(decode_metadata_brokers(12, &[0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f]).is_err());
    }
}
