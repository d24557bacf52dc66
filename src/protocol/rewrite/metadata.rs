//! Metadata (key 3), v0-v13: Brokers [NodeId, Host, Port, Rack (v1+)], then
//! ClusterId (v2+) and ControllerId (v1+). The topics that follow name brokers by id
//! only, so the walk stops at the controller id and the rest is copied unread.

use super::walk::{min_string, min_tags, Stop, Walk};

fn min_broker(version: i16, flexible: bool) -> usize {
    let rack = if version >= 1 {
        min_string(flexible)
    } else {
        0
    };
    4 + min_string(flexible) + 4 + rack + min_tags(flexible)
}

pub(super) fn walk(version: i16, w: &mut Walk<'_>) -> Result<(), Stop> {
    if version >= 3 {
        w.skip(4, "throttle_time_ms")?;
    }
    let mut broker_ids = Vec::new();
    for _ in 0..w.array(min_broker(version, w.flexible()), "brokers")? {
        let node_id = w.i32("node_id")?;
        w.address(node_id)?;
        if version >= 1 {
            w.string("rack")?;
        }
        w.tagged_fields("broker")?;
        broker_ids.push(node_id);
    }
    if version >= 2 {
        w.string("cluster_id")?;
    }
    if version >= 1 {
        let controller = w.controller_id()?;
        w.settle_controller(controller, &broker_ids);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::rewrite::testing::*;
    use crate::protocol::rewrite::{rewrite_body, RewriteError};
    use kafka_protocol::messages::metadata_response::{
        MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
    };
    use kafka_protocol::messages::{ApiKey, BrokerId, MetadataResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    use rand::rngs::StdRng;
    use rand::Rng;

    const API: ApiKey = ApiKey::Metadata;
    const VERSIONS: std::ops::RangeInclusive<i16> = 0..=13;

    fn flexible(version: i16) -> bool {
        version >= 9
    }

    fn broker(node_id: i32, host: &str, port: i32) -> MetadataResponseBroker {
        MetadataResponseBroker::default()
            .with_node_id(BrokerId(node_id))
            .with_host(StrBytes::from_string(host.to_owned()))
            .with_port(port)
    }

    fn node_ids(rng: &mut StdRng) -> Vec<BrokerId> {
        (0..rng.gen_range(0..4))
            .map(|_| BrokerId(node_id(rng)))
            .collect()
    }

    fn random_response(rng: &mut StdRng, version: i16) -> MetadataResponse {
        let brokers: Vec<_> = (0..rng.gen_range(0..5))
            .map(|_| {
                broker(node_id(rng), &string(rng), rng.gen_range(1..65_536))
                    .with_rack(nullable_string(rng))
                    .with_unknown_tagged_fields(unknown_tags(rng, 0))
            })
            .collect();
        let ids: Vec<i32> = brokers.iter().map(|b| b.node_id.0).collect();
        let topics = (0..rng.gen_range(0..4))
            .map(|_| {
                let partitions = (0..rng.gen_range(0..4))
                    .map(|i| {
                        MetadataResponsePartition::default()
                            .with_partition_index(i)
                            .with_leader_id(BrokerId(node_id(rng)))
                            .with_leader_epoch(rng.gen())
                            .with_replica_nodes(node_ids(rng))
                            .with_isr_nodes(node_ids(rng))
                            .with_offline_replicas(node_ids(rng))
                            .with_unknown_tagged_fields(unknown_tags(rng, 0))
                    })
                    .collect();
                let mut topic = MetadataResponseTopic::default()
                    .with_error_code(rng.gen())
                    .with_name(Some(TopicName(string(rng))))
                    .with_topic_id(uuid::Uuid::from_u128(rng.gen()))
                    .with_is_internal(rng.gen())
                    .with_partitions(partitions)
                    .with_unknown_tagged_fields(unknown_tags(rng, 0));
                if version >= 8 {
                    topic.topic_authorized_operations = rng.gen();
                }
                topic
            })
            .collect();
        let mut response = MetadataResponse::default()
            .with_throttle_time_ms(rng.gen())
            .with_cluster_id(nullable_string(rng))
            .with_controller_id(BrokerId(controller_id(rng, &ids)))
            .with_brokers(brokers)
            .with_topics(topics)
            .with_error_code(rng.gen())
            .with_unknown_tagged_fields(unknown_tags(rng, 0));
        if (8..=10).contains(&version) {
            response.cluster_authorized_operations = rng.gen();
        }
        response
    }

    fn expect(version: i16) -> impl FnOnce(&mut MetadataResponse, &mut Expected) {
        move |response, moves| {
            for b in &mut response.brokers {
                moves.address(b.node_id.0, &mut b.host, &mut b.port);
            }
            if version >= 1 {
                let ids: Vec<i32> = response.brokers.iter().map(|b| b.node_id.0).collect();
                response.controller_id =
                    BrokerId(expected_controller(response.controller_id.0, &ids));
            }
        }
    }

    #[test]
    fn rewrites_every_version_as_kafka_protocol_reads_it() {
        let mut rng = rng(3);
        for version in VERSIONS {
            for _ in 0..60 {
                let response = random_response(&mut rng, version);
                assert_rewrites(API, version, &response, expect(version));
            }
        }
    }

    #[test]
    fn an_unlisted_controller_becomes_the_lowest_broker() {
        for version in 1..=13 {
            let response = MetadataResponse::default()
                .with_brokers(vec![broker(5, "b5", 9092), broker(2, "b2", 9092)])
                .with_controller_id(BrokerId(9));
            let body = encode(&response, version);
            let new_body = rewrite_body(API, version, &body, &TestBook::default())
                .unwrap()
                .unwrap();
            let rewritten: MetadataResponse = decode(&new_body, version);
            assert_eq!(rewritten.controller_id, BrokerId(2), "v{version}");

            let alone = MetadataResponse::default().with_controller_id(BrokerId(9));
            let body = encode(&alone, version);
            let new_body = rewrite_body(API, version, &body, &TestBook::default())
                .unwrap()
                .unwrap();
            let rewritten: MetadataResponse = decode(&new_body, version);
            assert_eq!(rewritten.controller_id, BrokerId(-1), "v{version}");
        }
    }

    #[test]
    fn nothing_to_change_is_not_copied() {
        let response = MetadataResponse::default()
            .with_brokers(vec![broker(1, "b1", 9092)])
            .with_controller_id(BrokerId(1));
        for version in VERSIONS {
            let body = encode(&response, version);
            assert_eq!(
                rewrite_body(API, version, &body, &TestBook::identity()).unwrap(),
                None
            );
        }
    }

    #[test]
    fn a_refused_address_is_kshims_fault() {
        let response =
            MetadataResponse::default().with_brokers(vec![broker(1, "b1", 1), broker(2, "b2", 2)]);
        let body = encode(&response, 12);
        let book = TestBook::refusing(2);
        assert!(matches!(
            rewrite_body(API, 12, &body, &book),
            Err(RewriteError::NoAddress { node_id: 2, .. })
        ));
    }

    #[test]
    fn minimum_broker_size_is_that_of_an_empty_broker() {
        for version in VERSIONS {
            let empty = MetadataResponseBroker::default().with_rack(None);
            assert_eq!(
                encode(&empty, version).len(),
                min_broker(version, flexible(version)),
                "v{version}"
            );
        }
    }

    #[test]
    fn survives_truncation_and_corruption() {
        let mut rng = rng(4);
        for version in VERSIONS {
            for _ in 0..4 {
                let body = encode(&random_response(&mut rng, version), version);
                assert_survives_corruption(API, version, &body, &mut rng);
            }
        }
    }

    #[test]
    fn a_huge_broker_count_is_refused() {
        for version in VERSIONS {
            let throttle: &[u8] = if version >= 3 { &[0; 4] } else { &[] };
            assert_huge_count_refused(API, version, flexible(version), throttle);
        }
    }
}
