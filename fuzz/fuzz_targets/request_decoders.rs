//! Every bounded decoder kshim applies to a client's request: the header peek,
//! the request header, the bodies it answers itself (ApiVersions, Metadata,
//! DescribeCluster, UpdateFeatures), and the bodies it checks before forwarding
//! (CreateTopics, AlterConfigs, IncrementalAlterConfigs), each at every version
//! it reads. They must return errors, never panic, and never allocate in
//! proportion to a length field they have not checked.
//!
//! The input is read as a frame without its size prefix and, past its first four
//! bytes, as a frame with one, so that `protocol-fixtures/*-req-*.bin` work as
//! seeds as they are; every decoder also reads the whole input as a body.
//!
//! One property is checked, because a broker reads what it yields: cutting a
//! checked request down to some of its entries (`Entries::narrowed`) gives a body
//! that decodes to exactly those entries, and keeping every entry gives the
//! client's bytes back when their count was encoded minimally.

#![no_main]

mod common;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::alter_configs_request::{
    AlterConfigsRequest, AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig, CreateTopicsRequest,
};
use kafka_protocol::messages::incremental_alter_configs_request as iac;
use kafka_protocol::messages::{ApiKey, BrokerId, RequestHeader, TopicName};
use kafka_protocol::protocol::{Encodable, StrBytes};
use kshim::protocol::config_requests::{
    self, Entries, ALTER_CONFIGS_VERSIONS, CREATE_TOPICS_VERSIONS,
    INCREMENTAL_ALTER_CONFIGS_VERSIONS,
};
use kshim::protocol::wire::put_uvarint;
use kshim::protocol::{api_versions, requests, CodecError, HeaderPeek, RequestFrame};
use libfuzzer_sys::fuzz_target;
use std::fmt::Debug;

#[global_allocator]
static ALLOCATOR: common::BoundedAllocator = common::BoundedAllocator;

type Decoder<T> = fn(i16, &[u8]) -> Result<(T, Entries), CodecError>;

/// Decodes a checked request and, when it decodes, narrows it to the entries
/// that `pattern` picks and decodes the result again.
fn checked<T: Clone + PartialEq + Debug>(
    decode: Decoder<T>,
    retain: fn(&mut T, &[bool]),
    first_flexible: i16,
    version: i16,
    body: &[u8],
    pattern: u8,
) {
    let Ok((request, entries)) = decode(version, body) else {
        return;
    };
    let n = entries.len();
    let keep: Vec<bool> = (0..n).map(|i| pattern >> (i % 8) & 1 == 1).collect();
    let narrowed = entries.narrowed(body, &keep);
    let mut want = request.clone();
    retain(&mut want, &keep);
    match decode(version, &narrowed) {
        Ok((again, again_entries)) => {
            assert_eq!(again_entries.len(), keep.iter().filter(|k| **k).count());
            assert_eq!(
                again, want,
                "v{version}: the narrowed request reads differently"
            );
        }
        Err(e) => panic!("v{version}: the narrowed request does not decode: {e}"),
    }
    let all = entries.narrowed(body, &vec![true; n]);
    let mut count = Vec::new();
    if version >= first_flexible {
        put_uvarint(&mut count, n as u32 + 1);
    } else {
        count.extend_from_slice(&(n as i32).to_be_bytes());
    }
    if body.starts_with(&count) {
        assert_eq!(
            &all[..],
            body,
            "v{version}: keeping every entry changed the bytes"
        );
    }
}

fn retain_topics(r: &mut CreateTopicsRequest, keep: &[bool]) {
    let mut k = keep.iter();
    r.topics.retain(|_| *k.next().unwrap_or(&false));
}

fn retain_alter(r: &mut AlterConfigsRequest, keep: &[bool]) {
    let mut k = keep.iter();
    r.resources.retain(|_| *k.next().unwrap_or(&false));
}

fn retain_incremental(r: &mut iac::IncrementalAlterConfigsRequest, keep: &[bool]) {
    let mut k = keep.iter();
    r.resources.retain(|_| *k.next().unwrap_or(&false));
}

fn create_topics(version: i16, body: &[u8], pattern: u8) {
    checked(
        config_requests::create_topics,
        retain_topics,
        5,
        version,
        body,
        pattern,
    );
}

fn alter_configs(version: i16, body: &[u8], pattern: u8) {
    checked(
        config_requests::alter_configs,
        retain_alter,
        2,
        version,
        body,
        pattern,
    );
}

fn incremental_alter_configs(version: i16, body: &[u8], pattern: u8) {
    checked(
        config_requests::incremental_alter_configs,
        retain_incremental,
        1,
        version,
        body,
        pattern,
    );
}

/// Every body decoder at every version it knows (and one past each end).
fn bodies(body: &[u8], pattern: u8) {
    for version in 0..=3 {
        let _ = requests::update_features(version, body);
        let _ = requests::describe_cluster(version, body);
    }
    for version in 0..=14 {
        let _ = requests::metadata(version, body);
    }
    for version in 0..=api_versions::MAX_VERSION + 1 {
        if let Ok(parsed) = api_versions::parse_request(version, body) {
            if let Some(software) = &parsed.software {
                let _ = api_versions::is_valid_client_software(software);
            }
        }
        let _ = api_versions::decode_response(version, body);
    }
    for version in CREATE_TOPICS_VERSIONS.0..=CREATE_TOPICS_VERSIONS.1 {
        create_topics(version, body, pattern);
    }
    for version in ALTER_CONFIGS_VERSIONS.0..=ALTER_CONFIGS_VERSIONS.1 {
        alter_configs(version, body, pattern);
    }
    for version in INCREMENTAL_ALTER_CONFIGS_VERSIONS.0..=INCREMENTAL_ALTER_CONFIGS_VERSIONS.1 {
        incremental_alter_configs(version, body, pattern);
    }
}

/// A frame as the connection reads it: the header, then the body its API key
/// and version say.
fn frame(data: &[u8], pattern: u8) {
    let Ok(peek) = HeaderPeek::parse(data) else {
        return;
    };
    let _ = peek.known_api_key();
    let Ok(request) = RequestFrame::parse(Bytes::copy_from_slice(data)) else {
        return;
    };
    let _ = (request.header_bytes(), request.body_bytes());
    let version = request.header.api_version;
    let body = request.body();
    match ApiKey::try_from(request.header.api_key) {
        Ok(ApiKey::ApiVersions) => {
            let _ = api_versions::parse_request(version, body);
        }
        Ok(ApiKey::UpdateFeatures) => {
            let _ = requests::update_features(version, body);
        }
        Ok(ApiKey::Metadata) => {
            let _ = requests::metadata(version, body);
        }
        Ok(ApiKey::DescribeCluster) => {
            let _ = requests::describe_cluster(version, body);
        }
        Ok(ApiKey::CreateTopics) => create_topics(version, body, pattern),
        Ok(ApiKey::AlterConfigs) => alter_configs(version, body, pattern),
        Ok(ApiKey::IncrementalAlterConfigs) => incremental_alter_configs(version, body, pattern),
        _ => {}
    }
}

fuzz_target!(
    init: common::write_seeds_if_asked(seeds),
    |data: &[u8]| {
        // Which entries a narrowing keeps: chosen by the input's last byte.
        let pattern = data.last().copied().unwrap_or(0);
        bodies(data, pattern);
        frame(data, pattern);
        if let Some(rest) = data.get(4..) {
            frame(rest, pattern);
            // An answer frame: size prefix and correlation id, then the body.
            if let Some(body) = rest.get(4..) {
                for version in 0..=api_versions::MAX_VERSION {
                    let _ = api_versions::decode_response(version, body);
                }
            }
        }
    }
);

// ---------------------------------------------------------------------------
// Seeds: the checked requests at every version, as size-prefixed frames. The
// captured ApiVersions and UpdateFeatures requests come from protocol-fixtures.
// ---------------------------------------------------------------------------

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}

fn sized_frame<M: Encodable>(api: ApiKey, version: i16, body: &M) -> Vec<u8> {
    let header = RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(7)
        .with_client_id(Some(text("fuzz-seed")));
    let mut out = BytesMut::new();
    header
        .encode(&mut out, api.request_header_version(version))
        .unwrap();
    body.encode(&mut out, version).unwrap();
    let mut framed = (out.len() as i32).to_be_bytes().to_vec();
    framed.extend_from_slice(&out);
    framed
}

fn seeds() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let topic = |name: &str, assigned: bool| {
        let mut t = CreatableTopic::default()
            .with_name(TopicName(text(name)))
            .with_num_partitions(if assigned { -1 } else { 3 })
            .with_replication_factor(if assigned { -1 } else { 2 })
            .with_configs(vec![
                CreatableTopicConfig::default()
                    .with_name(text("retention.ms"))
                    .with_value(Some(text("3600000"))),
                CreatableTopicConfig::default()
                    .with_name(text("cleanup.policy"))
                    .with_value(None),
            ]);
        if assigned {
            t.assignments = vec![CreatableReplicaAssignment::default()
                .with_partition_index(0)
                .with_broker_ids(vec![BrokerId(1), BrokerId(2)])];
        }
        t
    };
    let create = CreateTopicsRequest::default()
        .with_topics(vec![
            topic("orders", false),
            topic("audit", true),
            topic("orders", false),
        ])
        .with_timeout_ms(30_000);
    for v in CREATE_TOPICS_VERSIONS.0..=CREATE_TOPICS_VERSIONS.1 {
        out.push((
            format!("createtopics-v{v}"),
            sized_frame(ApiKey::CreateTopics, v, &create),
        ));
    }
    let alter = AlterConfigsRequest::default()
        .with_resources(vec![
            AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(text("orders"))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(text("retention.ms"))
                    .with_value(Some(text("7200000")))]),
            AlterConfigsResource::default()
                .with_resource_type(4)
                .with_resource_name(text("1"))
                .with_configs(vec![AlterableConfig::default()
                    .with_name(text("log.segment.bytes"))
                    .with_value(Some(text("1048576")))]),
        ])
        .with_validate_only(true);
    for v in ALTER_CONFIGS_VERSIONS.0..=ALTER_CONFIGS_VERSIONS.1 {
        out.push((
            format!("alterconfigs-v{v}"),
            sized_frame(ApiKey::AlterConfigs, v, &alter),
        ));
    }
    let incremental = iac::IncrementalAlterConfigsRequest::default().with_resources(vec![
        iac::AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(text("orders"))
            .with_configs(vec![
                iac::AlterableConfig::default()
                    .with_name(text("retention.ms"))
                    .with_config_operation(0)
                    .with_value(Some(text("60000"))),
                iac::AlterableConfig::default()
                    .with_name(text("cleanup.policy"))
                    .with_config_operation(1),
            ]),
        iac::AlterConfigsResource::default()
            .with_resource_type(4)
            .with_resource_name(text(""))
            .with_configs(vec![iac::AlterableConfig::default()
                .with_name(text("log.cleaner.threads"))
                .with_config_operation(2)
                .with_value(Some(text("2")))]),
    ]);
    for v in INCREMENTAL_ALTER_CONFIGS_VERSIONS.0..=INCREMENTAL_ALTER_CONFIGS_VERSIONS.1 {
        out.push((
            format!("incrementalalterconfigs-v{v}"),
            sized_frame(ApiKey::IncrementalAlterConfigs, v, &incremental),
        ));
    }
    out
}
