//! Merging per-item results: when kshim refuses some items of a CreateTopics,
//! AlterConfigs or IncrementalAlterConfigs request and forwards the rest, the
//! client still gets one response with one result per item, in request order.
//!
//! The upstream's response is walked with the bounded `Reader`, never decoded
//! with kafka-protocol: each result entry is kept as the bytes the broker sent, and
//! kshim's own entries are spliced in between.

use super::wire::{put_uvarint, CodecError, Reader};
use kafka_protocol::messages::ApiKey;
use std::collections::{HashMap, VecDeque};
use std::ops::Range;

/// What identifies one result: a topic name, or a config resource.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ResultKey {
    Topic(String),
    Resource { resource_type: i8, name: String },
}

/// One item of the merged response, in request order.
#[derive(Debug)]
pub enum Slot {
    /// Answered by kshim: the encoded result entry.
    Ours(Vec<u8>),
    /// Forwarded: the upstream's entry for this key.
    Theirs(ResultKey),
}

/// Whether `api` at `version` is a response this module can merge.
fn flexible(api: ApiKey, version: i16) -> Result<bool, CodecError> {
    match api {
        ApiKey::CreateTopics if (2..=7).contains(&version) => Ok(version >= 5),
        ApiKey::AlterConfigs if (0..=2).contains(&version) => Ok(version >= 2),
        ApiKey::IncrementalAlterConfigs if (0..=1).contains(&version) => Ok(version >= 1),
        _ => Err(CodecError::Invalid(format!(
            "{api:?} v{version} results cannot be merged"
        ))),
    }
}

/// The body of a response that holds only kshim's entries.
pub fn ours_only(api: ApiKey, version: i16, entries: &[Vec<u8>]) -> Result<Vec<u8>, CodecError> {
    let flexible = flexible(api, version)?;
    let mut out = Vec::new();
    out.extend_from_slice(&0i32.to_be_bytes()); // ThrottleTimeMs
    put_len(&mut out, flexible, entries.len());
    for e in entries {
        out.extend_from_slice(e);
    }
    if flexible {
        out.push(0);
    }
    Ok(out)
}

/// The upstream's response body with kshim's entries spliced in, ordered as
/// `slots`. An upstream entry no slot names is kept, after the others.
pub fn merge(
    api: ApiKey,
    version: i16,
    upstream: &[u8],
    slots: &[Slot],
) -> Result<Vec<u8>, CodecError> {
    let flexible = flexible(api, version)?;
    let split = split(api, version, flexible, upstream)?;
    let mut theirs: HashMap<&ResultKey, VecDeque<Range<usize>>> = HashMap::new();
    for (key, span) in &split.entries {
        theirs.entry(key).or_default().push_back(span.clone());
    }
    let mut entries: Vec<&[u8]> = Vec::with_capacity(slots.len());
    for slot in slots {
        match slot {
            Slot::Ours(bytes) => entries.push(bytes),
            Slot::Theirs(key) => {
                if let Some(span) = theirs.get_mut(key).and_then(VecDeque::pop_front) {
                    entries.push(&upstream[span]);
                }
            }
        }
    }
    for (key, span) in &split.entries {
        if let Some(left) = theirs.get_mut(key) {
            if left.front() == Some(span) {
                left.pop_front();
                entries.push(&upstream[span.clone()]);
            }
        }
    }
    let mut out = Vec::with_capacity(upstream.len() + 64);
    out.extend_from_slice(&upstream[..4]); // ThrottleTimeMs
    put_len(&mut out, flexible, entries.len());
    for e in entries {
        out.extend_from_slice(e);
    }
    out.extend_from_slice(&upstream[split.suffix_from..]);
    Ok(out)
}

fn put_len(out: &mut Vec<u8>, flexible: bool, n: usize) {
    if flexible {
        put_uvarint(out, n as u32 + 1);
    } else {
        out.extend_from_slice(&(n as i32).to_be_bytes());
    }
}

struct Split {
    entries: Vec<(ResultKey, Range<usize>)>,
    /// Where the bytes after the result array (top-level tags) start.
    suffix_from: usize,
}

fn split(api: ApiKey, version: i16, flexible: bool, body: &[u8]) -> Result<Split, CodecError> {
    let mut r = Reader::new(body);
    r.i32("ThrottleTimeMs")?;
    let min_entry = if api == ApiKey::CreateTopics { 5 } else { 6 };
    let n = r.array_len(flexible, min_entry, "Results")?.unwrap_or(0);
    let mut entries = Vec::with_capacity(n);
    for _ in 0..n {
        let start = r.position();
        let key = if api == ApiKey::CreateTopics {
            create_topics_entry(&mut r, version, flexible)?
        } else {
            r.i16("ErrorCode")?;
            nullable(&mut r, flexible)?;
            let resource_type = r.i8("ResourceType")?;
            let name = r.string(flexible, "ResourceName")?.to_owned();
            if flexible {
                r.tagged_fields("AlterConfigsResourceResponse")?;
            }
            ResultKey::Resource {
                resource_type,
                name,
            }
        };
        entries.push((key, start..r.position()));
    }
    let suffix_from = r.position();
    if flexible {
        r.tagged_fields("response")?;
    }
    Ok(Split {
        entries,
        suffix_from,
    })
}

fn nullable(r: &mut Reader<'_>, flexible: bool) -> Result<(), CodecError> {
    r.nullable(flexible, "ErrorMessage").map(|_| ())
}

fn create_topics_entry(
    r: &mut Reader<'_>,
    version: i16,
    flexible: bool,
) -> Result<ResultKey, CodecError> {
    let name = r.string(flexible, "Name")?.to_owned();
    if version >= 7 {
        r.uuid("TopicId")?;
    }
    r.i16("ErrorCode")?;
    nullable(r, flexible)?;
    if version >= 5 {
        r.i32("NumPartitions")?;
        r.i16("ReplicationFactor")?;
        if let Some(configs) = r.array_len(true, 6, "Configs")? {
            for _ in 0..configs {
                r.string(true, "Name")?;
                r.compact_nullable_string("Value")?;
                r.bool("ReadOnly")?;
                r.i8("ConfigSource")?;
                r.bool("IsSensitive")?;
                r.tagged_fields("CreatableTopicConfigs")?;
            }
        }
        r.tagged_fields("CreatableTopicResult")?;
    }
    Ok(ResultKey::Topic(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::create_topics_response::{
        CreatableTopicConfigs, CreatableTopicResult, CreateTopicsResponse,
    };
    use kafka_protocol::messages::incremental_alter_configs_response::{
        AlterConfigsResourceResponse, IncrementalAlterConfigsResponse,
    };
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

    fn enc<M: Encodable>(m: &M, v: i16) -> Vec<u8> {
        let mut b = BytesMut::new();
        m.encode(&mut b, v).unwrap();
        b.to_vec()
    }

    fn topic(name: &str, code: i16) -> CreatableTopicResult {
        CreatableTopicResult::default()
            .with_name(TopicName(StrBytes::from_string(name.into())))
            .with_error_code(code)
            .with_num_partitions(3)
            .with_replication_factor(1)
            .with_configs(Some(vec![CreatableTopicConfigs::default()
                .with_name(StrBytes::from_static_str("retention.ms"))
                .with_value(Some(StrBytes::from_static_str("1000")))]))
    }

    fn key(name: &str) -> ResultKey {
        ResultKey::Topic(name.into())
    }

    #[test]
    fn create_topics_results_come_back_in_request_order() {
        for version in 2..=7 {
            let upstream = CreateTopicsResponse::default()
                .with_throttle_time_ms(7)
                .with_topics(vec![topic("c", 0), topic("a", 0)]);
            let refused = topic("b", 44);
            let slots = vec![
                Slot::Theirs(key("a")),
                Slot::Ours(enc(&refused, version)),
                Slot::Theirs(key("c")),
            ];
            let merged = merge(
                ApiKey::CreateTopics,
                version,
                &enc(&upstream, version),
                &slots,
            )
            .unwrap();
            let decoded =
                CreateTopicsResponse::decode(&mut bytes::Bytes::from(merged), version).unwrap();
            let names: Vec<&str> = decoded.topics.iter().map(|t| t.name.0.as_str()).collect();
            assert_eq!(names, ["a", "b", "c"], "v{version}");
            assert_eq!(decoded.topics[1].error_code, 44);
            assert_eq!(decoded.throttle_time_ms, 7);
            if version >= 5 {
                assert_eq!(decoded.topics[0], upstream.topics[1]);
            }
        }
    }

    #[test]
    fn unmatched_upstream_entries_are_kept_and_ours_alone_decode() {
        let v = 1;
        let res = |n: &str| {
            AlterConfigsResourceResponse::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_string(n.into()))
        };
        let upstream =
            IncrementalAlterConfigsResponse::default().with_responses(vec![res("x"), res("y")]);
        let slots = vec![Slot::Theirs(ResultKey::Resource {
            resource_type: 2,
            name: "y".into(),
        })];
        let merged = merge(
            ApiKey::IncrementalAlterConfigs,
            v,
            &enc(&upstream, v),
            &slots,
        )
        .unwrap();
        let decoded =
            IncrementalAlterConfigsResponse::decode(&mut bytes::Bytes::from(merged), v).unwrap();
        let names: Vec<&str> = decoded
            .responses
            .iter()
            .map(|r| r.resource_name.as_str())
            .collect();
        assert_eq!(names, ["y", "x"]);
        let alone = ours_only(ApiKey::IncrementalAlterConfigs, v, &[enc(&res("z"), v)]).unwrap();
        let decoded =
            IncrementalAlterConfigsResponse::decode(&mut bytes::Bytes::from(alone), v).unwrap();
        assert_eq!(decoded.responses.len(), 1);
    }

    #[test]
    fn truncated_upstream_responses_are_errors() {
        let upstream = enc(
            &CreateTopicsResponse::default().with_topics(vec![topic("a", 0)]),
            5,
        );
        for cut in 0..upstream.len() {
            assert!(
                merge(
                    ApiKey::CreateTopics,
                    5,
                    &upstream[..cut],
                    &[Slot::Theirs(key("a"))]
                )
                .is_err(),
                "cut at {cut}"
            );
        }
    }
}
