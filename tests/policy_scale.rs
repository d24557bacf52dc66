//! Checked requests at a scale no interop test sends: a CreateTopics with 20,000
//! topics and an IncrementalAlterConfigs with 5,000 resources, half of each
//! refused by the policy. The fake broker records what reaches it, which proves
//! that nothing refused does, and that the merged answer has every result in
//! request order. (The proof that the checks work with real clients is the
//! interop suite against Apache Kafka.)

use crate::support;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use kshim::client::KafkaClient;
use kshim::policy::rule::{Bound, ValueRule};
use kshim::policy::{ConfigValidator, ConfigValidators, DeclaredTopicPolicy, Policies};
use std::sync::Arc;
use std::time::Duration;
use support::fake_broker::{encode, FakeBroker, Reply};
use support::{start_proxy, RunningProxy};

const POLICY_VIOLATION: i16 = 44;
const INVALID_CONFIG: i16 = 40;

/// A broker that serves discovery, and accepts every topic and config change it
/// is sent; what reached it is in its received requests.
async fn fake_broker() -> FakeBroker {
    FakeBroker::builder()
        .apis(&[
            (ApiKey::Metadata as i16, 0, 12),
            (ApiKey::ApiVersions as i16, 0, 4),
            (ApiKey::CreateTopics as i16, 2, 7),
            (ApiKey::IncrementalAlterConfigs as i16, 0, 1),
        ])
        .on_request(|req| match ApiKey::try_from(req.api_key) {
            Ok(ApiKey::CreateTopics) => {
                let request: CreateTopicsRequest = req.decode();
                let answer = CreateTopicsResponse::default().with_topics(
                    request
                        .topics
                        .into_iter()
                        .map(|t| {
                            CreatableTopicResult::default()
                                .with_name(t.name)
                                .with_num_partitions(t.num_partitions)
                        })
                        .collect(),
                );
                Reply::Body(encode(&answer, req.version))
            }
            Ok(ApiKey::IncrementalAlterConfigs) => {
                let request: IncrementalAlterConfigsRequest = req.decode();
                let answer = IncrementalAlterConfigsResponse::default().with_responses(
                    request
                        .resources
                        .into_iter()
                        .map(|r| {
                            AlterConfigsResourceResponse::default()
                                .with_resource_type(r.resource_type)
                                .with_resource_name(r.resource_name)
                        })
                        .collect(),
                );
                Reply::Body(encode(&answer, req.version))
            }
            _ => Reply::Default,
        })
        .start()
        .await
}

/// Names of the topics in every CreateTopics that reached the broker.
fn topics_received(broker: &FakeBroker) -> Vec<String> {
    broker
        .received_of(ApiKey::CreateTopics)
        .iter()
        .flat_map(|r| r.decode::<CreateTopicsRequest>().topics)
        .map(|t| t.name.0.to_string())
        .collect()
}

/// Names of the resources in every IncrementalAlterConfigs that reached the broker.
fn resources_received(broker: &FakeBroker) -> Vec<String> {
    broker
        .received_of(ApiKey::IncrementalAlterConfigs)
        .iter()
        .flat_map(|r| r.decode::<IncrementalAlterConfigsRequest>().resources)
        .map(|r| r.resource_name.to_string())
        .collect()
}

fn policies() -> Policies {
    Policies {
        create_topic: Arc::new(DeclaredTopicPolicy {
            max_partitions: Some(10),
            ..DeclaredTopicPolicy::permissive()
        }),
        validators: ConfigValidators::new(vec![ConfigValidator {
            key: "log.segment.bytes".into(),
            feature: "metadata.version".into(),
            level: 1,
            rule: ValueRule {
                min: Some(Bound::Int(3 * 1024 * 1024)),
                ..ValueRule::default()
            },
        }])
        .unwrap(),
        exempt_principals: Vec::new(),
    }
}

async fn proxy() -> (FakeBroker, RunningProxy) {
    let broker = fake_broker().await;
    // The fake broker finalizes no features, so kshim claims metadata.version
    // (finalized at its supported max) to put the validator in force.
    let proxy = start_proxy(broker.addr.clone(), 60_000, |c| {
        c.policies = policies();
        c.kshim_owned = vec!["metadata.version".into()];
    })
    .await;
    (broker, proxy)
}

/// Sends `request` at `version` and decodes the answer.
async fn create(
    client: &mut KafkaClient,
    request: &CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    let raw = client
        .request(ApiKey::CreateTopics, version, &encode(request, version))
        .await
        .unwrap();
    CreateTopicsResponse::decode(&mut raw.clone(), version).unwrap()
}

#[tokio::test]
async fn twenty_thousand_topics_half_refused_come_back_in_order() {
    let (broker, kshim) = proxy().await;
    let mut client = KafkaClient::connect(&kshim.addr, Duration::from_secs(30))
        .await
        .unwrap();
    const N: usize = 20_000;
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(1000)
        .with_topics(
            (0..N)
                .map(|i| {
                    CreatableTopic::default()
                        .with_name(TopicName(StrBytes::from_string(format!("t{i}"))))
                        .with_num_partitions(if i % 2 == 0 { 1 } else { 11 })
                        .with_replication_factor(1)
                })
                .collect(),
        );
    for version in [4, 7] {
        broker.clear_received();
        let answer = create(&mut client, &request, version).await;
        assert_eq!(answer.topics.len(), N);
        for (i, t) in answer.topics.iter().enumerate() {
            assert_eq!(
                t.name.0.as_str(),
                format!("t{i}"),
                "v{version}: request order"
            );
            let expected = if i % 2 == 0 { 0 } else { POLICY_VIOLATION };
            assert_eq!(t.error_code, expected, "v{version} t{i}");
        }
        let reached = topics_received(&broker);
        assert_eq!(
            reached.len(),
            N / 2,
            "v{version}: only the accepted topics reach the broker"
        );
        assert!(reached
            .iter()
            .all(|n| n[1..].parse::<usize>().unwrap() % 2 == 0));
    }
    // An exempt principal is not checked.
    kshim.context.policies.replace(Policies {
        exempt_principals: vec!["User:ANONYMOUS".into()],
        ..policies()
    });
    broker.clear_received();
    let answer = create(&mut client, &request, 7).await;
    assert!(answer.topics.iter().all(|t| t.error_code == 0));
    assert_eq!(topics_received(&broker).len(), N);
    // A policy change applies to the next request, on the same connection.
    kshim.context.policies.replace(policies());
    broker.clear_received();
    let answer = create(&mut client, &request, 7).await;
    assert_eq!(
        answer
            .topics
            .iter()
            .filter(|t| t.error_code == POLICY_VIOLATION)
            .count(),
        N / 2
    );
    kshim.context.policies.replace(Policies::default());
    broker.clear_received();
    let answer = create(&mut client, &request, 7).await;
    assert!(answer.topics.iter().all(|t| t.error_code == 0));
    assert_eq!(topics_received(&broker).len(), N);
    let _ = kshim.stop.send(true);
}

#[tokio::test]
async fn config_changes_at_scale_and_values_that_do_not_parse() {
    let (broker, kshim) = proxy().await;
    let mut client = KafkaClient::connect(&kshim.addr, Duration::from_secs(30))
        .await
        .unwrap();
    const N: usize = 5_000;
    let value = |i: usize| match i % 3 {
        0 => "4194304",
        1 => "1024",
        _ => "not-a-number",
    };
    let request = IncrementalAlterConfigsRequest::default().with_resources(
        (0..N)
            .map(|i| {
                AlterConfigsResource::default()
                    .with_resource_type(2)
                    .with_resource_name(StrBytes::from_string(format!("t{i}")))
                    .with_configs(vec![
                        AlterableConfig::default()
                            .with_name(StrBytes::from_static_str("retention.ms"))
                            .with_value(Some(StrBytes::from_static_str("1000"))),
                        AlterableConfig::default()
                            .with_name(StrBytes::from_static_str("segment.bytes"))
                            .with_value(Some(StrBytes::from_static_str(value(i)))),
                    ])
            })
            .collect(),
    );
    let raw = client
        .request(ApiKey::IncrementalAlterConfigs, 1, &encode(&request, 1))
        .await
        .unwrap();
    let answer = IncrementalAlterConfigsResponse::decode(&mut raw.clone(), 1).unwrap();
    assert_eq!(answer.responses.len(), N);
    for (i, r) in answer.responses.iter().enumerate() {
        assert_eq!(r.resource_name.as_str(), format!("t{i}"));
        let message = r.error_message.as_deref().unwrap_or_default().to_owned();
        match i % 3 {
            0 => assert_eq!(r.error_code, 0, "t{i}: {message}"),
            1 => {
                assert_eq!(r.error_code, INVALID_CONFIG, "t{i}");
                assert!(message.contains("at least 3145728"), "{message}");
            }
            _ => {
                assert_eq!(r.error_code, INVALID_CONFIG, "t{i}");
                assert!(message.contains("is not a number"), "{message}");
            }
        }
    }
    assert_eq!(resources_received(&broker).len(), N.div_ceil(3));
    // kshim is still serving.
    let mut again = KafkaClient::connect(&kshim.addr, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(again.api_versions().await.unwrap().1.error_code, 0);
    let _ = kshim.stop.send(true);
}
