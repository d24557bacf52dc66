//! Bounded decoders for the requests kshim checks before forwarding: CreateTopics
//! (v2-v7), AlterConfigs (v0-v2) and IncrementalAlterConfigs (v0-v1), the versions
//! kafka-protocol 0.18 and Kafka 4.1 share. They produce kafka-protocol's types, so
//! that a narrowed request is encoded by kafka-protocol; the tests check them
//! against kafka-protocol's own decoders.

use super::wire::{CodecError, Reader};
use kafka_protocol::messages::alter_configs_request::{
    AlterConfigsRequest, AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig, CreateTopicsRequest,
};
use kafka_protocol::messages::incremental_alter_configs_request as iac;
use kafka_protocol::messages::{BrokerId, TopicName};
use kafka_protocol::protocol::StrBytes;

pub const CREATE_TOPICS_VERSIONS: (i16, i16) = (2, 7);
pub const ALTER_CONFIGS_VERSIONS: (i16, i16) = (0, 2);
pub const INCREMENTAL_ALTER_CONFIGS_VERSIONS: (i16, i16) = (0, 1);

fn owned(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn nullable(
    r: &mut Reader<'_>,
    flexible: bool,
    what: &'static str,
) -> Result<Option<StrBytes>, CodecError> {
    Ok(if flexible {
        r.compact_nullable_string(what)?
    } else {
        r.nullable_string(what)?
    }
    .map(owned))
}

fn array(
    r: &mut Reader<'_>,
    flexible: bool,
    min: usize,
    what: &'static str,
) -> Result<usize, CodecError> {
    r.array_len(flexible, min, what)?.ok_or_else(|| {
        CodecError::Invalid(format!("non-nullable field {what} was serialized as null"))
    })
}

fn tags(
    r: &mut Reader<'_>,
    flexible: bool,
    what: &'static str,
) -> Result<std::collections::BTreeMap<i32, bytes::Bytes>, CodecError> {
    if flexible {
        r.tagged_fields(what)
    } else {
        Ok(Default::default())
    }
}

/// CreateTopics (key 19), v2-v7; flexible from v5.
pub fn create_topics(version: i16, body: &[u8]) -> Result<CreateTopicsRequest, CodecError> {
    let flexible = version >= 5;
    let min_string = if flexible { 1 } else { 2 };
    let min_array = if flexible { 1 } else { 4 };
    let min_tags = usize::from(flexible);
    let mut r = Reader::new(body);
    let n = array(
        &mut r,
        flexible,
        min_string + 6 + 2 * min_array + min_tags,
        "Topics",
    )?;
    let mut req = CreateTopicsRequest::default();
    req.topics.reserve(n);
    for _ in 0..n {
        let mut t = CreatableTopic::default()
            .with_name(TopicName(owned(r.string(flexible, "Name")?)))
            .with_num_partitions(r.i32("NumPartitions")?)
            .with_replication_factor(r.i16("ReplicationFactor")?);
        let assignments = array(&mut r, flexible, 4 + min_array + min_tags, "Assignments")?;
        t.assignments.reserve(assignments);
        for _ in 0..assignments {
            let mut a = CreatableReplicaAssignment::default()
                .with_partition_index(r.i32("PartitionIndex")?);
            let ids = array(&mut r, flexible, 4, "BrokerIds")?;
            a.broker_ids.reserve(ids);
            for _ in 0..ids {
                a.broker_ids.push(BrokerId(r.i32("BrokerIds")?));
            }
            a.unknown_tagged_fields = tags(&mut r, flexible, "CreatableReplicaAssignment")?;
            t.assignments.push(a);
        }
        let configs = array(&mut r, flexible, 2 * min_string + min_tags, "Configs")?;
        t.configs.reserve(configs);
        for _ in 0..configs {
            let mut c =
                CreatableTopicConfig::default().with_name(owned(r.string(flexible, "Name")?));
            c.value = nullable(&mut r, flexible, "Value")?;
            c.unknown_tagged_fields = tags(&mut r, flexible, "CreatableTopicConfig")?;
            t.configs.push(c);
        }
        t.unknown_tagged_fields = tags(&mut r, flexible, "CreatableTopic")?;
        req.topics.push(t);
    }
    req.timeout_ms = r.i32("timeoutMs")?;
    req.validate_only = r.bool("validateOnly")?;
    req.unknown_tagged_fields = tags(&mut r, flexible, "CreateTopicsRequest")?;
    Ok(req)
}

/// AlterConfigs (key 33), v0-v2; flexible from v2.
pub fn alter_configs(version: i16, body: &[u8]) -> Result<AlterConfigsRequest, CodecError> {
    let flexible = version >= 2;
    let min_string = if flexible { 1 } else { 2 };
    let min_tags = usize::from(flexible);
    let mut r = Reader::new(body);
    let n = array(&mut r, flexible, 1 + min_string + 1 + min_tags, "Resources")?;
    let mut req = AlterConfigsRequest::default();
    req.resources.reserve(n);
    for _ in 0..n {
        let mut res = AlterConfigsResource::default()
            .with_resource_type(r.i8("ResourceType")?)
            .with_resource_name(owned(r.string(flexible, "ResourceName")?));
        let configs = array(&mut r, flexible, 2 * min_string + min_tags, "Configs")?;
        res.configs.reserve(configs);
        for _ in 0..configs {
            let mut c = AlterableConfig::default().with_name(owned(r.string(flexible, "Name")?));
            c.value = nullable(&mut r, flexible, "Value")?;
            c.unknown_tagged_fields = tags(&mut r, flexible, "AlterableConfig")?;
            res.configs.push(c);
        }
        res.unknown_tagged_fields = tags(&mut r, flexible, "AlterConfigsResource")?;
        req.resources.push(res);
    }
    req.validate_only = r.bool("ValidateOnly")?;
    req.unknown_tagged_fields = tags(&mut r, flexible, "AlterConfigsRequest")?;
    Ok(req)
}

/// IncrementalAlterConfigs (key 44), v0-v1; flexible from v1.
pub fn incremental_alter_configs(
    version: i16,
    body: &[u8],
) -> Result<iac::IncrementalAlterConfigsRequest, CodecError> {
    let flexible = version >= 1;
    let min_string = if flexible { 1 } else { 2 };
    let min_tags = usize::from(flexible);
    let mut r = Reader::new(body);
    let n = array(&mut r, flexible, 1 + min_string + 1 + min_tags, "Resources")?;
    let mut req = iac::IncrementalAlterConfigsRequest::default();
    req.resources.reserve(n);
    for _ in 0..n {
        let mut res = iac::AlterConfigsResource::default()
            .with_resource_type(r.i8("ResourceType")?)
            .with_resource_name(owned(r.string(flexible, "ResourceName")?));
        let configs = array(&mut r, flexible, 2 * min_string + 1 + min_tags, "Configs")?;
        res.configs.reserve(configs);
        for _ in 0..configs {
            let mut c = iac::AlterableConfig::default()
                .with_name(owned(r.string(flexible, "Name")?))
                .with_config_operation(r.i8("ConfigOperation")?);
            c.value = nullable(&mut r, flexible, "Value")?;
            c.unknown_tagged_fields = tags(&mut r, flexible, "AlterableConfig")?;
            res.configs.push(c);
        }
        res.unknown_tagged_fields = tags(&mut r, flexible, "AlterConfigsResource")?;
        req.resources.push(res);
    }
    req.validate_only = r.bool("ValidateOnly")?;
    req.unknown_tagged_fields = tags(&mut r, flexible, "IncrementalAlterConfigsRequest")?;
    Ok(req)
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
        "[a-z.]{0,12}"
    }

    fn value() -> impl Strategy<Value = Option<String>> {
        proptest::option::of("[a-z0-9,]{0,8}")
    }

    proptest! {
        #[test]
        fn create_topics_matches_kafka_protocol(
            version in 2i16..=7,
            topics in proptest::collection::vec(
                (name(), any::<i32>(), any::<i16>(),
                 proptest::collection::vec((any::<i32>(), proptest::collection::vec(any::<i32>(), 0..4)), 0..3),
                 proptest::collection::vec((name(), value()), 0..4)),
                0..5),
            timeout in any::<i32>(),
            validate_only in any::<bool>(),
        ) {
            let mut req = CreateTopicsRequest::default().with_timeout_ms(timeout).with_validate_only(validate_only);
            for (n, p, rf, assignments, configs) in topics {
                req.topics.push(CreatableTopic::default()
                    .with_name(TopicName(owned(&n)))
                    .with_num_partitions(p)
                    .with_replication_factor(rf)
                    .with_assignments(assignments.into_iter().map(|(i, ids)| CreatableReplicaAssignment::default()
                        .with_partition_index(i)
                        .with_broker_ids(ids.into_iter().map(BrokerId).collect())).collect())
                    .with_configs(configs.into_iter().map(|(k, v)| CreatableTopicConfig::default()
                        .with_name(owned(&k)).with_value(v.as_deref().map(owned))).collect()));
            }
            let raw = encode(&req, version);
            let ours = create_topics(version, &raw).unwrap();
            let theirs = CreateTopicsRequest::decode(&mut bytes::Bytes::from(raw.clone()), version).unwrap();
            prop_assert_eq!(&ours, &theirs);
            prop_assert_eq!(encode(&ours, version), raw);
        }

        #[test]
        fn config_alterations_match_kafka_protocol(
            version in 0i16..=2,
            resources in proptest::collection::vec(
                (any::<i8>(), name(), proptest::collection::vec((name(), 0i8..=3, value()), 0..4)), 0..5),
            validate_only in any::<bool>(),
        ) {
            let mut req = AlterConfigsRequest::default().with_validate_only(validate_only);
            let mut inc = iac::IncrementalAlterConfigsRequest::default().with_validate_only(validate_only);
            for (t, n, configs) in &resources {
                req.resources.push(AlterConfigsResource::default().with_resource_type(*t).with_resource_name(owned(n))
                    .with_configs(configs.iter().map(|(k, _, v)| AlterableConfig::default()
                        .with_name(owned(k)).with_value(v.as_deref().map(owned))).collect()));
                inc.resources.push(iac::AlterConfigsResource::default().with_resource_type(*t).with_resource_name(owned(n))
                    .with_configs(configs.iter().map(|(k, op, v)| iac::AlterableConfig::default()
                        .with_name(owned(k)).with_config_operation(*op).with_value(v.as_deref().map(owned))).collect()));
            }
            let raw = encode(&req, version);
            let theirs = AlterConfigsRequest::decode(&mut bytes::Bytes::from(raw.clone()), version).unwrap();
            prop_assert_eq!(&alter_configs(version, &raw).unwrap(), &theirs);
            let v = version.min(1);
            let raw = encode(&inc, v);
            let theirs = iac::IncrementalAlterConfigsRequest::decode(&mut bytes::Bytes::from(raw.clone()), v).unwrap();
            prop_assert_eq!(&incremental_alter_configs(v, &raw).unwrap(), &theirs);
        }

        #[test]
        fn decoders_never_panic_on_garbage(version in 0i16..=7, raw in proptest::collection::vec(any::<u8>(), 0..96)) {
            let _ = create_topics(version.max(2), &raw);
            let _ = alter_configs(version.min(2), &raw);
            let _ = incremental_alter_configs(version.min(1), &raw);
        }
    }

    #[test]
    fn a_huge_array_count_is_refused_without_allocating() {
        assert!(create_topics(4, &[0x7f, 0xff, 0xff, 0xff, 0, 0]).is_err());
        assert!(create_topics(5, &[0xff, 0xff, 0xff, 0xff, 0x0f]).is_err());
        assert!(alter_configs(0, &[0x7f, 0xff, 0xff, 0xff]).is_err());
        assert!(incremental_alter_configs(1, &[0xff, 0xff, 0xff, 0xff, 0x0f]).is_err());
    }
}
