//! Checked requests at a scale no interop test sends: a CreateTopics with 20,000
//! topics and an IncrementalAlterConfigs with 5,000 resources, half of each
//! refused by the policy. The fake broker records what reaches it, which proves
//! that nothing refused does, and that the merged answer has every result in
//! request order. (The proof that the checks work with real clients is the
//! interop suite against Apache Kafka.)

mod support;

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::metadata_response::MetadataResponseBroker;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsResponse, BrokerId, CreateTopicsRequest, CreateTopicsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use kshim::client::KafkaClient;
use kshim::policy::rule::{Bound, ValueRule};
use kshim::policy::{ConfigValidator, ConfigValidators, DeclaredTopicPolicy, Policies};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use support::{encode, read_frame, start_proxy, write_response, RunningProxy};
use tokio::net::TcpListener;

const POLICY_VIOLATION: i16 = 44;
const INVALID_CONFIG: i16 = 40;

fn api(key: ApiKey, min: i16, max: i16) -> ApiVersion {
    ApiVersion::default()
        .with_api_key(key as i16)
        .with_min_version(min)
        .with_max_version(max)
}

/// What reached the fake broker.
#[derive(Default)]
struct Received {
    topics: Vec<String>,
    resources: Vec<String>,
}

/// A broker that serves discovery, and accepts every topic and config change it
/// is sent, recording them.
async fn fake_broker(listener: TcpListener, received: Arc<Mutex<Received>>) {
    let port = listener.local_addr().unwrap().port();
    loop {
        let Ok((mut s, _)) = listener.accept().await else {
            return;
        };
        let received = Arc::clone(&received);
        tokio::spawn(async move {
            while let Some(frame) = read_frame(&mut s).await {
                let key = i16::from_be_bytes([frame[0], frame[1]]);
                let version = i16::from_be_bytes([frame[2], frame[3]]);
                let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
                let id_len = i16::from_be_bytes([frame[8], frame[9]]) as usize;
                let flexible_request = ApiKey::try_from(key)
                    .unwrap()
                    .request_header_version(version)
                    >= 2;
                let mut body = frame.slice(10 + id_len + usize::from(flexible_request)..);
                let flexible_response = ApiKey::try_from(key)
                    .unwrap()
                    .response_header_version(version)
                    >= 1;
                match ApiKey::try_from(key).unwrap() {
                    ApiKey::ApiVersions => {
                        let answer = ApiVersionsResponse::default().with_api_keys(vec![
                            api(ApiKey::Metadata, 0, 12),
                            api(ApiKey::ApiVersions, 0, 4),
                            api(ApiKey::CreateTopics, 2, 7),
                            api(ApiKey::IncrementalAlterConfigs, 0, 1),
                        ]);
                        write_response(
                            &mut s,
                            correlation_id,
                            false,
                            &encode(&answer, version.min(3)),
                        )
                        .await;
                    }
                    ApiKey::Metadata => {
                        let answer = MetadataResponse::default()
                            .with_brokers(vec![MetadataResponseBroker::default()
                                .with_node_id(BrokerId(1))
                                .with_host(StrBytes::from_static_str("127.0.0.1"))
                                .with_port(i32::from(port))])
                            .with_controller_id(BrokerId(1));
                        write_response(
                            &mut s,
                            correlation_id,
                            flexible_response,
                            &encode(&answer, version),
                        )
                        .await;
                    }
                    ApiKey::CreateTopics => {
                        let request = CreateTopicsRequest::decode(&mut body, version).unwrap();
                        let mut answer = CreateTopicsResponse::default();
                        for t in request.topics {
                            received.lock().unwrap().topics.push(t.name.0.to_string());
                            answer.topics.push(
                                CreatableTopicResult::default()
                                    .with_name(t.name)
                                    .with_num_partitions(t.num_partitions),
                            );
                        }
                        write_response(
                            &mut s,
                            correlation_id,
                            flexible_response,
                            &encode(&answer, version),
                        )
                        .await;
                    }
                    ApiKey::IncrementalAlterConfigs => {
                        let request =
                            IncrementalAlterConfigsRequest::decode(&mut body, version).unwrap();
                        let mut answer = IncrementalAlterConfigsResponse::default();
                        for r in request.resources {
                            received
                                .lock()
                                .unwrap()
                                .resources
                                .push(r.resource_name.to_string());
                            answer.responses.push(
                                AlterConfigsResourceResponse::default()
                                    .with_resource_type(r.resource_type)
                                    .with_resource_name(r.resource_name),
                            );
                        }
                        write_response(
                            &mut s,
                            correlation_id,
                            flexible_response,
                            &encode(&answer, version),
                        )
                        .await;
                    }
                    _ => return,
                }
            }
        });
    }
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

async fn proxy(received: Arc<Mutex<Received>>) -> RunningProxy {
    let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream_addr = upstream.local_addr().unwrap().to_string();
    tokio::spawn(fake_broker(upstream, received));
    // The fake broker finalizes no features, so kshim claims metadata.version
    // (finalized at its supported max) to put the validator in force.
    start_proxy(upstream_addr, 60_000, |c| {
        c.policies = policies();
        c.kshim_owned = vec!["metadata.version".into()];
    })
    .await
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
    let received = Arc::new(Mutex::new(Received::default()));
    let kshim = proxy(Arc::clone(&received)).await;
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
        received.lock().unwrap().topics.clear();
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
        let reached = received.lock().unwrap().topics.clone();
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
    received.lock().unwrap().topics.clear();
    let answer = create(&mut client, &request, 7).await;
    assert!(answer.topics.iter().all(|t| t.error_code == 0));
    assert_eq!(received.lock().unwrap().topics.len(), N);
    // A policy change applies to the next request, on the same connection.
    kshim.context.policies.replace(policies());
    received.lock().unwrap().topics.clear();
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
    received.lock().unwrap().topics.clear();
    let answer = create(&mut client, &request, 7).await;
    assert!(answer.topics.iter().all(|t| t.error_code == 0));
    assert_eq!(received.lock().unwrap().topics.len(), N);
    let _ = kshim.stop.send(true);
}

#[tokio::test]
async fn config_changes_at_scale_and_values_that_do_not_parse() {
    let received = Arc::new(Mutex::new(Received::default()));
    let kshim = proxy(Arc::clone(&received)).await;
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
    assert_eq!(received.lock().unwrap().resources.len(), N.div_ceil(3));
    // kshim is still serving.
    let mut again = KafkaClient::connect(&kshim.addr, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(again.api_versions().await.unwrap().1.error_code, 0);
    let _ = kshim.stop.send(true);
}
