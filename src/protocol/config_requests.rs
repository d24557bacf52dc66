//! Bounded decoders for the requests kshim checks before forwarding: CreateTopics
//! (v2-v7), AlterConfigs (v0-v2) and IncrementalAlterConfigs (v0-v1), the versions
//! kafka-protocol 0.18 and Kafka 4.1 share. They produce kafka-protocol's types
//! for the checks (the tests hold them to kafka-protocol's own decoders), and
//! `Entries`: where each top-level entry lies in the body.
//!
//! A narrowed request (some entries refused) is cut from the client's own bytes,
//! never encoded again: every kept entry goes on exactly as it came, its tagged
//! fields included, whatever their numbers. The typed view keeps no unknown
//! tagged fields for that reason.

use super::wire::{put_uvarint, CodecError, Reader};
use bytes::Bytes;
use kafka_protocol::messages::alter_configs_request::{
    AlterConfigsRequest, AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig, CreateTopicsRequest,
};
use kafka_protocol::messages::incremental_alter_configs_request as iac;
use kafka_protocol::messages::{BrokerId, TopicName};
use kafka_protocol::protocol::StrBytes;
use std::ops::Range;

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
    Ok(r.nullable(flexible, what)?.map(owned))
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

/// Reads past a tagged-field section (flexible versions only).
fn tags(r: &mut Reader<'_>, flexible: bool, what: &'static str) -> Result<(), CodecError> {
    if flexible {
        r.tagged_fields(what)?;
    }
    Ok(())
}

/// Where the entries of a request's first field, its top-level array, lie in the
/// body, and where the fields after it start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entries {
    flexible: bool,
    spans: Vec<Range<usize>>,
    rest: usize,
}

impl Entries {
    fn new(flexible: bool, n: usize) -> Entries {
        Entries {
            flexible,
            spans: Vec::with_capacity(n),
            rest: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// `body` (the one these entries were read from) with only the entries that
    /// `keep` marks, each byte for byte; the fields after the array follow as
    /// they came.
    pub fn narrowed(&self, body: &[u8], keep: &[bool]) -> Bytes {
        let kept: Vec<&[u8]> = self
            .spans
            .iter()
            .zip(keep)
            .filter(|(_, k)| **k)
            .filter_map(|(span, _)| body.get(span.clone()))
            .collect();
        let mut out = Vec::with_capacity(body.len());
        if self.flexible {
            put_uvarint(&mut out, kept.len() as u32 + 1);
        } else {
            out.extend_from_slice(&(kept.len() as i32).to_be_bytes());
        }
        for entry in kept {
            out.extend_from_slice(entry);
        }
        out.extend_from_slice(body.get(self.rest..).unwrap_or_default());
        Bytes::from(out)
    }
}

/// CreateTopics (key 19), v2-v7; flexible from v5.
pub fn create_topics(
    version: i16,
    body: &[u8],
) -> Result<(CreateTopicsRequest, Entries), CodecError> {
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
    let mut entries = Entries::new(flexible, n);
    req.topics.reserve(n);
    for _ in 0..n {
        let start = r.position();
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
            tags(&mut r, flexible, "CreatableReplicaAssignment")?;
            t.assignments.push(a);
        }
        let configs = array(&mut r, flexible, 2 * min_string + min_tags, "Configs")?;
        t.configs.reserve(configs);
        for _ in 0..configs {
            let mut c =
                CreatableTopicConfig::default().with_name(owned(r.string(flexible, "Name")?));
            c.value = nullable(&mut r, flexible, "Value")?;
            tags(&mut r, flexible, "CreatableTopicConfig")?;
            t.configs.push(c);
        }
        tags(&mut r, flexible, "CreatableTopic")?;
        req.topics.push(t);
        entries.spans.push(start..r.position());
    }
    entries.rest = r.position();
    req.timeout_ms = r.i32("timeoutMs")?;
    req.validate_only = r.bool("validateOnly")?;
    tags(&mut r, flexible, "CreateTopicsRequest")?;
    Ok((req, entries))
}

/// AlterConfigs (key 33), v0-v2; flexible from v2.
pub fn alter_configs(
    version: i16,
    body: &[u8],
) -> Result<(AlterConfigsRequest, Entries), CodecError> {
    let flexible = version >= 2;
    let min_string = if flexible { 1 } else { 2 };
    let min_tags = usize::from(flexible);
    let mut r = Reader::new(body);
    let n = array(&mut r, flexible, 1 + min_string + 1 + min_tags, "Resources")?;
    let mut req = AlterConfigsRequest::default();
    let mut entries = Entries::new(flexible, n);
    req.resources.reserve(n);
    for _ in 0..n {
        let start = r.position();
        let mut res = AlterConfigsResource::default()
            .with_resource_type(r.i8("ResourceType")?)
            .with_resource_name(owned(r.string(flexible, "ResourceName")?));
        let configs = array(&mut r, flexible, 2 * min_string + min_tags, "Configs")?;
        res.configs.reserve(configs);
        for _ in 0..configs {
            let mut c = AlterableConfig::default().with_name(owned(r.string(flexible, "Name")?));
            c.value = nullable(&mut r, flexible, "Value")?;
            tags(&mut r, flexible, "AlterableConfig")?;
            res.configs.push(c);
        }
        tags(&mut r, flexible, "AlterConfigsResource")?;
        req.resources.push(res);
        entries.spans.push(start..r.position());
    }
    entries.rest = r.position();
    req.validate_only = r.bool("ValidateOnly")?;
    tags(&mut r, flexible, "AlterConfigsRequest")?;
    Ok((req, entries))
}

/// IncrementalAlterConfigs (key 44), v0-v1; flexible from v1.
pub fn incremental_alter_configs(
    version: i16,
    body: &[u8],
) -> Result<(iac::IncrementalAlterConfigsRequest, Entries), CodecError> {
    let flexible = version >= 1;
    let min_string = if flexible { 1 } else { 2 };
    let min_tags = usize::from(flexible);
    let mut r = Reader::new(body);
    let n = array(&mut r, flexible, 1 + min_string + 1 + min_tags, "Resources")?;
    let mut req = iac::IncrementalAlterConfigsRequest::default();
    let mut entries = Entries::new(flexible, n);
    req.resources.reserve(n);
    for _ in 0..n {
        let start = r.position();
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
            tags(&mut r, flexible, "AlterableConfig")?;
            res.configs.push(c);
        }
        tags(&mut r, flexible, "AlterConfigsResource")?;
        req.resources.push(res);
        entries.spans.push(start..r.position());
    }
    entries.rest = r.position();
    req.validate_only = r.bool("ValidateOnly")?;
    tags(&mut r, flexible, "IncrementalAlterConfigsRequest")?;
    Ok((req, entries))
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
            let (ours, entries) = create_topics(version, &raw).unwrap();
            let theirs = CreateTopicsRequest::decode(&mut bytes::Bytes::from(raw.clone()), version).unwrap();
            prop_assert_eq!(&ours, &theirs);
            prop_assert_eq!(encode(&ours, version), raw.clone());
            // Narrowing cuts the request kafka-protocol would encode for the kept topics.
            let keep: Vec<bool> = (0..entries.len()).map(|i| (timeout as usize >> (i % 31)) & 1 == 1).collect();
            let mut kept = ours.clone();
            let mut k = keep.iter();
            kept.topics.retain(|_| *k.next().unwrap());
            prop_assert_eq!(entries.narrowed(&raw, &keep).to_vec(), encode(&kept, version));
            prop_assert_eq!(entries.narrowed(&raw, &vec![true; entries.len()]).to_vec(), raw);
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
            prop_assert_eq!(&alter_configs(version, &raw).unwrap().0, &theirs);
            let v = version.min(1);
            let raw = encode(&inc, v);
            let theirs = iac::IncrementalAlterConfigsRequest::decode(&mut bytes::Bytes::from(raw.clone()), v).unwrap();
            let (ours, entries) = incremental_alter_configs(v, &raw).unwrap();
            prop_assert_eq!(&ours, &theirs);
            let keep: Vec<bool> = (0..entries.len()).map(|i| i % 2 == usize::from(validate_only)).collect();
            let mut kept = ours.clone();
            let mut k = keep.iter();
            kept.resources.retain(|_| *k.next().unwrap());
            prop_assert_eq!(entries.narrowed(&raw, &keep).to_vec(), encode(&kept, v));
        }

        /// Any tags, of any numbers, anywhere an entry or the request may carry
        /// them: the narrowed body is the kept entries' own bytes, and decodes again.
        #[test]
        fn narrowing_keeps_every_tag(
            topics in proptest::collection::vec(
                (name(), proptest::collection::btree_map(any::<u32>(), proptest::collection::vec(any::<u8>(), 0..4), 0..3),
                 any::<bool>()),
                0..6),
            request_tags in proptest::collection::btree_map(any::<u32>(), proptest::collection::vec(any::<u8>(), 0..4), 0..3),
        ) {
            let section = |tags: &std::collections::BTreeMap<u32, Vec<u8>>| {
                let mut out = Vec::new();
                put_uvarint(&mut out, tags.len() as u32);
                for (tag, value) in tags {
                    put_uvarint(&mut out, *tag);
                    put_uvarint(&mut out, value.len() as u32);
                    out.extend_from_slice(value);
                }
                out
            };
            let entry = |name: &str, tags: &std::collections::BTreeMap<u32, Vec<u8>>| {
                let mut t = Vec::new();
                put_uvarint(&mut t, name.len() as u32 + 1);
                t.extend_from_slice(name.as_bytes());
                t.extend_from_slice(&3i32.to_be_bytes());
                t.extend_from_slice(&(-1i16).to_be_bytes());
                t.extend_from_slice(&[1, 1]);
                t.extend(section(tags));
                t
            };
            let mut body = Vec::new();
            put_uvarint(&mut body, topics.len() as u32 + 1);
            for (n, tags, _) in &topics {
                body.extend(entry(n, tags));
            }
            let mut rest = 5_000i32.to_be_bytes().to_vec();
            rest.push(1);
            rest.extend(section(&request_tags));
            body.extend_from_slice(&rest);
            let (decoded, entries) = create_topics(5, &body).unwrap();
            prop_assert_eq!(decoded.topics.len(), topics.len());
            let keep: Vec<bool> = topics.iter().map(|t| t.2).collect();
            let narrowed = entries.narrowed(&body, &keep);
            let mut want = Vec::new();
            put_uvarint(&mut want, keep.iter().filter(|k| **k).count() as u32 + 1);
            for (n, tags, kept) in &topics {
                if *kept {
                    want.extend(entry(n, tags));
                }
            }
            want.extend_from_slice(&rest);
            prop_assert_eq!(narrowed.to_vec(), want);
            let (again, _) = create_topics(5, &narrowed).unwrap();
            prop_assert!(again.validate_only);
        }

        #[test]
        fn decoders_never_panic_on_garbage(version in 0i16..=7, raw in proptest::collection::vec(any::<u8>(), 0..96)) {
            let _ = create_topics(version.max(2), &raw);
            let _ = alter_configs(version.min(2), &raw);
            let _ = incremental_alter_configs(version.min(1), &raw);
        }
    }

    /// A tagged-field section holding one field numbered `tag` with `value`.
    fn tag_section(tag: u32, value: &[u8]) -> Vec<u8> {
        let mut out = vec![1];
        put_uvarint(&mut out, tag);
        put_uvarint(&mut out, value.len() as u32);
        out.extend_from_slice(value);
        out
    }

    #[test]
    fn narrowing_keeps_tags_of_any_number_byte_for_byte() {
        // CreateTopics v5, two topics; the second carries tag 2^31 + 5 and is kept.
        let topic = |name: &str, tags: &[u8]| {
            let mut t = vec![name.len() as u8 + 1];
            t.extend_from_slice(name.as_bytes());
            t.extend_from_slice(&1i32.to_be_bytes()); // NumPartitions
            t.extend_from_slice(&1i16.to_be_bytes()); // ReplicationFactor
            t.push(1); // no assignments
            t.push(1); // no configs
            t.extend_from_slice(tags);
            t
        };
        let big = tag_section(0x8000_0005, b"x");
        let huge = tag_section(u32::MAX, b"");
        let mut body = vec![3];
        body.extend(topic("refused", &[0]));
        body.extend(topic("kept", &big));
        body.extend_from_slice(&30_000i32.to_be_bytes());
        body.push(0); // validateOnly
        body.extend_from_slice(&huge);
        let (req, entries) = create_topics(5, &body).unwrap();
        assert_eq!(req.topics.len(), 2);
        let narrowed = entries.narrowed(&body, &[false, true]);
        let mut want = vec![2];
        want.extend(topic("kept", &big));
        want.extend_from_slice(&30_000i32.to_be_bytes());
        want.push(0);
        want.extend_from_slice(&huge);
        assert_eq!(narrowed.to_vec(), want);
        // What the narrowed body holds decodes again, with both tags still there.
        let (again, _) = create_topics(5, &narrowed).unwrap();
        assert_eq!(again.topics[0].name.0.as_str(), "kept");

        // IncrementalAlterConfigs v1 and AlterConfigs v2: the same cut.
        let resource = |name: &str, tags: &[u8]| {
            let mut r = vec![2u8, name.len() as u8 + 1];
            r.extend_from_slice(name.as_bytes());
            r.push(1); // no configs
            r.extend_from_slice(tags);
            r
        };
        let mut body = vec![3];
        body.extend(resource("t1", &big));
        body.extend(resource("t2", &[0]));
        body.push(1); // ValidateOnly
        body.extend_from_slice(&huge);
        for decoded in [
            incremental_alter_configs(1, &body).map(|(_, e)| e),
            alter_configs(2, &body).map(|(_, e)| e),
        ] {
            let entries = decoded.unwrap();
            let mut want = vec![2];
            want.extend(resource("t1", &big));
            want.push(1);
            want.extend_from_slice(&huge);
            assert_eq!(entries.narrowed(&body, &[true, false]).to_vec(), want);
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
