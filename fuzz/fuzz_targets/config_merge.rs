//! The answers kshim puts together for the requests it checks before forwarding
//! (CreateTopics, AlterConfigs, IncrementalAlterConfigs): when it refuses some
//! entries and forwards the rest, the broker's answer body is split into its
//! result entries and kshim's own refusals are spliced in, in request order
//! (`protocol::results::merge`); when it refuses all of them it answers alone
//! (`results::ours_only`). The upstream body is the untrusted part.
//!
//! The slots are built as the handlers build them (`handlers::checked`): the
//! request is decoded, each entry is refused or forwarded (here by a bit of the
//! input; a topic named twice is refused once, as Kafka does), refusals are
//! encoded as the handlers encode them, and the forwarded entries are cut from
//! the client's bytes.
//!
//! Input: byte 0 picks the API and version, byte 1 the entries to refuse, then
//! the request body as a chunk (u16 length first), then the upstream's answer body.
//!
//! Checked beyond "no panic": merging an already merged body again, with the
//! same forwarded entries and no refusals, gives it back unchanged.

#![no_main]

mod common;

use bytes::BytesMut;
use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult, CreateTopicsResponse,
};
use kafka_protocol::messages::{
    alter_configs_request, incremental_alter_configs_request as iac, AlterConfigsRequest,
    AlterConfigsResponse, ApiKey, CreateTopicsRequest, IncrementalAlterConfigsResponse, TopicName,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use kshim::protocol::config_requests::{
    self, ALTER_CONFIGS_VERSIONS, CREATE_TOPICS_VERSIONS, INCREMENTAL_ALTER_CONFIGS_VERSIONS,
};
use kshim::protocol::response::encode_body;
use kshim::protocol::results::{merge, ours_only, ResultKey, Slot};
use libfuzzer_sys::fuzz_target;
use std::collections::{HashMap, HashSet};

#[global_allocator]
static ALLOCATOR: common::BoundedAllocator = common::BoundedAllocator;

const APIS: [(ApiKey, (i16, i16)); 3] = [
    (ApiKey::CreateTopics, CREATE_TOPICS_VERSIONS),
    (ApiKey::AlterConfigs, ALTER_CONFIGS_VERSIONS),
    (
        ApiKey::IncrementalAlterConfigs,
        INCREMENTAL_ALTER_CONFIGS_VERSIONS,
    ),
];

const POLICY_VIOLATION: i16 = 44;
const INVALID_REQUEST: i16 = 42;

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

/// A CreateTopics refusal, as `handlers::create_topics` encodes it.
fn refused_topic(name: &TopicName, code: i16, version: i16) -> Option<Vec<u8>> {
    let entry = CreatableTopicResult::default()
        .with_name(name.clone())
        .with_error_code(code)
        .with_error_message(Some(text("refused by kshim")))
        .with_num_partitions(-1)
        .with_replication_factor(-1)
        .with_configs(None);
    encode_body(ApiKey::CreateTopics, version, &entry)
        .ok()
        .map(|b| b.to_vec())
}

/// An AlterConfigs or IncrementalAlterConfigs refusal, in the result layout
/// the two share, as `handlers::checked::judge_resources` encodes it.
fn refused_resource(
    api: ApiKey,
    version: i16,
    resource_type: i8,
    name: &StrBytes,
) -> Option<Vec<u8>> {
    let layout = match (api, version) {
        (ApiKey::IncrementalAlterConfigs, v) if v >= 1 => 2,
        (ApiKey::IncrementalAlterConfigs, _) => 0,
        (_, v) => v,
    };
    let entry = AlterConfigsResourceResponse::default()
        .with_error_code(POLICY_VIOLATION)
        .with_error_message(Some(text("refused by kshim")))
        .with_resource_type(resource_type)
        .with_resource_name(name.clone());
    encode_body(api, layout, &entry).ok().map(|b| b.to_vec())
}

/// The slots of the merged answer and which entries go on, or None when the
/// request does not decode (the handler answers INVALID_REQUEST then).
fn slots(
    api: ApiKey,
    version: i16,
    body: &[u8],
    refuse: u8,
) -> Option<(Vec<Slot>, Vec<bool>, config_requests::Entries)> {
    let refused = |i: usize| refuse >> (i % 8) & 1 == 1;
    let mut slots = Vec::new();
    let mut accepted = Vec::new();
    match api {
        ApiKey::CreateTopics => {
            let (request, entries) = config_requests::create_topics(version, body).ok()?;
            let mut seen: HashMap<&str, usize> = HashMap::new();
            for t in &request.topics {
                *seen.entry(t.name.0.as_str()).or_default() += 1;
            }
            let mut answered_duplicates = HashSet::new();
            for (i, t) in request.topics.iter().enumerate() {
                let name = t.name.0.as_str();
                let code = if seen[name] > 1 {
                    if !answered_duplicates.insert(name) {
                        accepted.push(false);
                        continue;
                    }
                    Some(INVALID_REQUEST)
                } else if refused(i) {
                    Some(POLICY_VIOLATION)
                } else {
                    None
                };
                match code {
                    None => {
                        accepted.push(true);
                        slots.push(Slot::Theirs(ResultKey::Topic(name.to_owned())));
                    }
                    Some(code) => {
                        accepted.push(false);
                        slots.push(Slot::Ours(refused_topic(&t.name, code, version)?));
                    }
                }
            }
            Some((slots, accepted, entries))
        }
        _ => {
            let (resources, entries): (Vec<(i8, StrBytes)>, _) = if api == ApiKey::AlterConfigs {
                let (request, entries) = config_requests::alter_configs(version, body).ok()?;
                let request: AlterConfigsRequest = request;
                (
                    request
                        .resources
                        .iter()
                        .map(|r| (r.resource_type, r.resource_name.clone()))
                        .collect(),
                    entries,
                )
            } else {
                let (request, entries) =
                    config_requests::incremental_alter_configs(version, body).ok()?;
                (
                    request
                        .resources
                        .iter()
                        .map(|r| (r.resource_type, r.resource_name.clone()))
                        .collect(),
                    entries,
                )
            };
            for (i, (resource_type, name)) in resources.iter().enumerate() {
                accepted.push(!refused(i));
                slots.push(if refused(i) {
                    Slot::Ours(refused_resource(api, version, *resource_type, name)?)
                } else {
                    Slot::Theirs(ResultKey::Resource {
                        resource_type: *resource_type,
                        name: name.as_str().to_owned(),
                    })
                });
            }
            Some((slots, accepted, entries))
        }
    }
}

fn forwarded_only(slots: &[Slot]) -> Vec<Slot> {
    slots
        .iter()
        .filter_map(|s| match s {
            Slot::Theirs(key) => Some(Slot::Theirs(key.clone())),
            Slot::Ours(_) => None,
        })
        .collect()
}

fuzz_target!(
    init: common::write_seeds_if_asked(seeds),
    |data: &[u8]| {
        let mut input = common::Input::new(data);
        let pick = input.byte();
        let refuse = input.byte();
        let request = input.chunk();
        let upstream = input.rest();
        let (api, (min, max)) = APIS[usize::from(pick % 3)];
        let version = min + i16::from(pick / 3) % (max - min + 1);

        let Some((slots, accepted, entries)) = slots(api, version, request, refuse) else {
            // Still read the upstream's body: nothing of ours to splice in.
            let _ = merge(api, version, upstream, &[]);
            return;
        };
        let ours: Vec<Vec<u8>> = slots
            .iter()
            .filter_map(|s| match s {
                Slot::Ours(e) => Some(e.clone()),
                Slot::Theirs(_) => None,
            })
            .collect();
        if ours.len() == slots.len() {
            let _ = ours_only(api, version, &ours);
        }
        let _ = entries.narrowed(request, &accepted);
        let _ = merge(api, version, upstream, &slots);

        let theirs = forwarded_only(&slots);
        if let Ok(merged) = merge(api, version, upstream, &theirs) {
            match merge(api, version, &merged, &theirs) {
                Ok(again) => assert!(
                    again == merged,
                    "{api:?} v{version}: merging the merged body again changed it"
                ),
                Err(e) => panic!("{api:?} v{version}: the merged body does not split again: {e}"),
            }
        }
    }
);

// ---------------------------------------------------------------------------
// Seeds: a request and the broker's answer to all of its entries, per version.
// ---------------------------------------------------------------------------

fn encode<M: Encodable>(message: &M, version: i16) -> Vec<u8> {
    let mut out = BytesMut::new();
    message.encode(&mut out, version).unwrap();
    out.to_vec()
}

fn seed(pick: u8, refuse: u8, request: &[u8], upstream: &[u8]) -> Vec<u8> {
    common::Seed::new()
        .byte(pick)
        .byte(refuse)
        .chunk(request)
        .bytes(upstream)
        .done()
}

fn seeds() -> Vec<(String, Vec<u8>)> {
    use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
    let mut out = Vec::new();
    let names = ["orders", "audit", "payments"];

    let request = CreateTopicsRequest::default()
        .with_topics(
            names
                .iter()
                .map(|n| {
                    CreatableTopic::default()
                        .with_name(TopicName(text(n)))
                        .with_num_partitions(3)
                        .with_replication_factor(2)
                        .with_configs(vec![CreatableTopicConfig::default()
                            .with_name(text("retention.ms"))
                            .with_value(Some(text("1000")))])
                })
                .collect(),
        )
        .with_timeout_ms(30_000);
    for v in CREATE_TOPICS_VERSIONS.0..=CREATE_TOPICS_VERSIONS.1 {
        let answer = CreateTopicsResponse::default().with_topics(
            names
                .iter()
                .rev()
                .map(|n| {
                    let mut t = CreatableTopicResult::default().with_name(TopicName(text(n)));
                    if v >= 5 {
                        t.num_partitions = 3;
                        t.replication_factor = 2;
                        t.configs = Some(vec![CreatableTopicConfigs::default()
                            .with_name(text("retention.ms"))
                            .with_value(Some(text("1000")))]);
                    }
                    t
                })
                .collect(),
        );
        let pick = (3 * (v - CREATE_TOPICS_VERSIONS.0)) as u8;
        out.push((
            format!("createtopics-v{v}"),
            seed(pick, 0b010, &encode(&request, v), &encode(&answer, v)),
        ));
    }

    let resources = [(2i8, "orders"), (4, "1"), (2, "audit")];
    let alter = AlterConfigsRequest::default().with_resources(
        resources
            .iter()
            .map(|&(t, n)| {
                alter_configs_request::AlterConfigsResource::default()
                    .with_resource_type(t)
                    .with_resource_name(text(n))
                    .with_configs(vec![alter_configs_request::AlterableConfig::default()
                        .with_name(text("retention.ms"))
                        .with_value(Some(text("1000")))])
            })
            .collect(),
    );
    for v in ALTER_CONFIGS_VERSIONS.0..=ALTER_CONFIGS_VERSIONS.1 {
        let answer = AlterConfigsResponse::default().with_responses(
            resources
                .iter()
                .map(|&(t, n)| {
                    AlterConfigsResourceResponse::default()
                        .with_resource_type(t)
                        .with_resource_name(text(n))
                })
                .collect(),
        );
        let pick = (1 + 3 * (v - ALTER_CONFIGS_VERSIONS.0)) as u8;
        out.push((
            format!("alterconfigs-v{v}"),
            seed(pick, 0b001, &encode(&alter, v), &encode(&answer, v)),
        ));
    }

    let incremental = iac::IncrementalAlterConfigsRequest::default().with_resources(
        resources
            .iter()
            .map(|&(t, n)| {
                iac::AlterConfigsResource::default()
                    .with_resource_type(t)
                    .with_resource_name(text(n))
                    .with_configs(vec![iac::AlterableConfig::default()
                        .with_name(text("retention.ms"))
                        .with_config_operation(0)
                        .with_value(Some(text("1000")))])
            })
            .collect(),
    );
    for v in INCREMENTAL_ALTER_CONFIGS_VERSIONS.0..=INCREMENTAL_ALTER_CONFIGS_VERSIONS.1 {
        let answer = IncrementalAlterConfigsResponse::default().with_responses(
            resources
                .iter()
                .map(|&(t, n)| {
                    kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                        .with_resource_type(t)
                        .with_resource_name(text(n))
                })
                .collect(),
        );
        let pick = (2 + 3 * (v - INCREMENTAL_ALTER_CONFIGS_VERSIONS.0)) as u8;
        out.push((
            format!("incrementalalterconfigs-v{v}"),
            seed(pick, 0b100, &encode(&incremental, v), &encode(&answer, v)),
        ));
    }
    out
}
