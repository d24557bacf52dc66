//! Bounds-checked decoders for the request bodies kshim answers itself and whose
//! schemas contain arrays. They produce kafka-protocol's types, so that the rest of
//! kshim sees one model; the tests check them against kafka-protocol's own
//! decoders on valid input. Unknown tagged fields are read past and not kept:
//! kshim answers these requests itself and never encodes them again.
//!
//! Bytes after the last field are ignored, as Kafka's own parsers ignore them:
//! librdkafka 2.x sends three extra bytes after a Metadata v13 request for all
//! topics, and brokers answer it.

use super::wire::{CodecError, Reader};
use kafka_protocol::messages::describe_cluster_request::DescribeClusterRequest;
use kafka_protocol::messages::metadata_request::{MetadataRequest, MetadataRequestTopic};
use kafka_protocol::messages::update_features_request::{FeatureUpdateKey, UpdateFeaturesRequest};
use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;

fn owned(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// UpdateFeatures (key 57), v0-v2; flexible in every version.
pub fn update_features(version: i16, body: &[u8]) -> Result<UpdateFeaturesRequest, CodecError> {
    let mut r = Reader::new(body);
    let mut req = UpdateFeaturesRequest::default().with_timeout_ms(r.i32("timeoutMs")?);
    // Smallest entry: empty name (1) + level (2) + flag or type (1) + tags (1).
    let n = r.array_len(true, 5, "FeatureUpdates")?.ok_or_else(|| {
        CodecError::Invalid("non-nullable field FeatureUpdates was serialized as null".into())
    })?;
    req.feature_updates.reserve(n);
    for _ in 0..n {
        let mut key = FeatureUpdateKey::default()
            .with_feature(owned(r.string(true, "Feature")?))
            .with_max_version_level(r.i16("MaxVersionLevel")?);
        if version == 0 {
            key.allow_downgrade = r.bool("AllowDowngrade")?;
        } else {
            key.upgrade_type = r.i8("UpgradeType")?;
        }
        r.tagged_fields("FeatureUpdateKey")?;
        req.feature_updates.push(key);
    }
    if version >= 1 {
        req.validate_only = r.bool("ValidateOnly")?;
    }
    r.tagged_fields("UpdateFeaturesRequest")?;
    Ok(req)
}

/// Metadata (key 3), v0-v13.
pub fn metadata(version: i16, body: &[u8]) -> Result<MetadataRequest, CodecError> {
    let flexible = version >= 9;
    let mut r = Reader::new(body);
    // A topic is at least a name length (plus a 16-byte id from v10).
    let min_topic = if version >= 10 { 18 } else { 2 };
    let topics = match r.array_len(flexible, min_topic, "Topics")? {
        // A null list means all topics from v1 on; v0 has no null, and an empty
        // list there means all topics.
        None => None,
        Some(n) => {
            let mut topics = Vec::with_capacity(n);
            for _ in 0..n {
                let mut t = MetadataRequestTopic::default();
                if version >= 10 {
                    t.topic_id = uuid::Uuid::from_bytes(r.uuid("TopicId")?);
                }
                let name = if flexible {
                    r.compact_nullable_string("Name")?
                } else {
                    r.nullable_string("Name")?
                };
                t.name = name.map(|n| TopicName(owned(n)));
                if flexible {
                    r.tagged_fields("MetadataRequestTopic")?;
                }
                topics.push(t);
            }
            Some(topics)
        }
    };
    let mut req = MetadataRequest::default().with_topics(topics);
    if version >= 4 {
        req.allow_auto_topic_creation = r.bool("AllowAutoTopicCreation")?;
    }
    if (8..=10).contains(&version) {
        req.include_cluster_authorized_operations = r.bool("IncludeClusterAuthorizedOperations")?;
    }
    if version >= 8 {
        req.include_topic_authorized_operations = r.bool("IncludeTopicAuthorizedOperations")?;
    }
    if flexible {
        r.tagged_fields("MetadataRequest")?;
    }
    Ok(req)
}

/// DescribeCluster (key 60), v0-v2; flexible in every version.
pub fn describe_cluster(version: i16, body: &[u8]) -> Result<DescribeClusterRequest, CodecError> {
    let mut r = Reader::new(body);
    let mut req = DescribeClusterRequest::default()
        .with_include_cluster_authorized_operations(r.bool("IncludeClusterAuthorizedOperations")?);
    if version >= 1 {
        req.endpoint_type = r.i8("EndpointType")?;
    }
    if version >= 2 {
        req.include_fenced_brokers = r.bool("IncludeFencedBrokers")?;
    }
    r.tagged_fields("DescribeClusterRequest")?;
    Ok(req)
}

/// The acks field of a Produce request: first in v0-v2, after TransactionalId
/// from v3 (a compact string, after a flexible header, from v9). Read in place:
/// this runs for every Produce.
pub fn produce_acks(frame: &[u8], version: i16) -> Result<i16, CodecError> {
    let mut r = Reader::new(frame);
    r.bytes(8, "request header")?;
    r.nullable_string("client id")?;
    if version >= 9 {
        r.tagged_fields("request header")?;
        r.compact_nullable_string("TransactionalId")?;
    } else if version >= 3 {
        r.nullable_string("TransactionalId")?;
    }
    r.i16("Acks")
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::protocol::{Decodable, Encodable};
    use proptest::prelude::*;

    fn encode<M: Encodable>(m: &M, v: i16) -> Vec<u8> {
        let mut b = BytesMut::new();
        m.encode(&mut b, v).unwrap();
        b.to_vec()
    }

    fn name() -> impl Strategy<Value = String> {
        "[a-z.]{0,20}"
    }

    proptest! {
        #[test]
        fn update_features_matches_kafka_protocol(
            version in 0i16..=2,
            timeout in any::<i32>(),
            validate_only in any::<bool>(),
            entries in proptest::collection::vec((name(), any::<i16>(), any::<bool>(), 0i8..=3), 0..8),
        ) {
            let mut req = UpdateFeaturesRequest::default().with_timeout_ms(timeout);
            if version >= 1 { req.validate_only = validate_only; }
            for (n, level, allow, t) in entries {
                let mut k = FeatureUpdateKey::default().with_feature(owned(&n)).with_max_version_level(level);
                if version == 0 { k.allow_downgrade = allow; } else { k.upgrade_type = t; }
                req.feature_updates.push(k);
            }
            let raw = encode(&req, version);
            let ours = update_features(version, &raw).unwrap();
            let theirs = UpdateFeaturesRequest::decode(&mut bytes::Bytes::from(raw.clone()), version).unwrap();
            prop_assert_eq!(&ours, &theirs);
            prop_assert_eq!(encode(&ours, version), raw);
        }

        #[test]
        fn metadata_matches_kafka_protocol(
            version in 0i16..=13,
            names in proptest::option::of(proptest::collection::vec(name(), 0..6)),
            auto in any::<bool>(),
            ops in any::<bool>(),
        ) {
            let topics = match (version, names) {
                (0, None) => Some(vec![]),
                (_, n) => n.map(|ns| ns.into_iter().map(|n| MetadataRequestTopic::default().with_name(Some(TopicName(owned(&n))))).collect()),
            };
            let mut req = MetadataRequest::default().with_topics(topics);
            if version >= 4 { req.allow_auto_topic_creation = auto; }
            if version >= 8 { req.include_topic_authorized_operations = ops; }
            let raw = encode(&req, version);
            let ours = metadata(version, &raw).unwrap();
            let theirs = MetadataRequest::decode(&mut bytes::Bytes::from(raw.clone()), version).unwrap();
            prop_assert_eq!(&ours, &theirs);
            prop_assert_eq!(encode(&ours, version), raw);
        }

        #[test]
        fn decoders_never_panic_on_garbage(version in 0i16..=13, raw in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = update_features(version.min(2), &raw);
            let _ = metadata(version, &raw);
            let _ = describe_cluster(version.min(2), &raw);
        }
    }

    #[test]
    fn trailing_bytes_are_ignored_as_kafka_does() {
        // librdkafka 2.16's Metadata v13 for all topics: null topics, two flags,
        // empty tags, then three bytes more.
        let req = metadata(13, &[0, 0, 0, 0, 1, 0, 0]).unwrap();
        assert_eq!(req.topics, None);
    }

    #[test]
    fn a_huge_array_count_is_refused_without_allocating() {
        // timeout, then a compact array claiming u32::MAX - 1 entries.
        let raw = [0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f];
        assert!(matches!(
            update_features(1, &raw),
            Err(CodecError::InvalidLength { .. })
        ));
        let raw = [0x7f, 0xff, 0xff, 0xff];
        assert!(metadata(1, &raw).is_err());
    }

    #[test]
    fn describe_cluster_reads_each_version() {
        for v in 0..=2 {
            let mut req =
                DescribeClusterRequest::default().with_include_cluster_authorized_operations(true);
            if v >= 1 {
                req.endpoint_type = 2;
            }
            if v >= 2 {
                req.include_fenced_brokers = true;
            }
            let raw = encode(&req, v);
            let theirs =
                DescribeClusterRequest::decode(&mut bytes::Bytes::from(raw.clone()), v).unwrap();
            assert_eq!(describe_cluster(v, &raw).unwrap(), theirs);
        }
    }
}
