//! DescribeCluster (key 60), v0-v2, flexible throughout: ControllerId, then
//! Brokers [BrokerId, Host, Port, Rack, IsFenced (v2)]. From v1 on, EndpointType 2
//! makes the list one of controllers (KIP-919); their addresses are rewritten all
//! the same, since a client must not reach them around kshim either.

use super::walk::{Stop, Walk};

fn min_broker(version: i16) -> usize {
    let is_fenced = if version >= 2 { 1 } else { 0 };
    4 + 1 + 4 + 1 + is_fenced + 1
}

pub(super) fn walk(version: i16, w: &mut Walk<'_>) -> Result<(), Stop> {
    w.skip(4 + 2, "throttle_time_ms, error_code")?;
    w.string("error_message")?;
    if version >= 1 {
        w.skip(1, "endpoint_type")?;
    }
    w.string("cluster_id")?;
    let controller = w.controller_id()?;
    let mut broker_ids = Vec::new();
    for _ in 0..w.array(min_broker(version), "brokers")? {
        let broker_id = w.i32("broker_id")?;
        w.address(broker_id)?;
        w.string("rack")?;
        if version >= 2 {
            w.skip(1, "is_fenced")?;
        }
        w.tagged_fields("broker")?;
        broker_ids.push(broker_id);
    }
    w.settle_controller(controller, &broker_ids);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::rewrite::rewrite_body;
    use crate::protocol::rewrite::testing::*;
    use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
    use kafka_protocol::messages::{ApiKey, BrokerId, DescribeClusterResponse};
    use kafka_protocol::protocol::StrBytes;
    use rand::rngs::StdRng;
    use rand::Rng;

    const API: ApiKey = ApiKey::DescribeCluster;
    const VERSIONS: std::ops::RangeInclusive<i16> = 0..=2;

    fn random_response(rng: &mut StdRng, version: i16) -> DescribeClusterResponse {
        let brokers: Vec<_> = (0..rng.gen_range(0..5))
            .map(|_| {
                DescribeClusterBroker::default()
                    .with_broker_id(BrokerId(node_id(rng)))
                    .with_host(string(rng))
                    .with_port(rng.gen())
                    .with_rack(nullable_string(rng))
                    .with_is_fenced(version >= 2 && rng.gen())
                    .with_unknown_tagged_fields(unknown_tags(rng, 0))
            })
            .collect();
        let ids: Vec<i32> = brokers.iter().map(|b| b.broker_id.0).collect();
        DescribeClusterResponse::default()
            .with_throttle_time_ms(rng.gen())
            .with_error_code(rng.gen())
            .with_error_message(nullable_string(rng))
            .with_endpoint_type(if version >= 1 {
                rng.gen_range(1..=2)
            } else {
                1
            })
            .with_cluster_id(string(rng))
            .with_controller_id(BrokerId(controller_id(rng, &ids)))
            .with_brokers(brokers)
            .with_cluster_authorized_operations(rng.gen())
            .with_unknown_tagged_fields(unknown_tags(rng, 0))
    }

    fn expect(response: &mut DescribeClusterResponse, moves: &mut Expected) {
        for b in &mut response.brokers {
            moves.address(b.broker_id.0, &mut b.host, &mut b.port);
        }
        let ids: Vec<i32> = response.brokers.iter().map(|b| b.broker_id.0).collect();
        response.controller_id = BrokerId(expected_controller(response.controller_id.0, &ids));
    }

    #[test]
    fn rewrites_every_version_as_kafka_protocol_reads_it() {
        let mut rng = rng(60);
        for version in VERSIONS {
            for _ in 0..150 {
                let response = random_response(&mut rng, version);
                assert_rewrites(API, version, &response, expect);
            }
        }
    }

    #[test]
    fn an_unlisted_controller_before_the_brokers_is_settled_after_them() {
        let broker = |id: i32| {
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(id))
                .with_host(StrBytes::from_static_str("b"))
                .with_port(9092)
        };
        for version in VERSIONS {
            let response = DescribeClusterResponse::default()
                .with_controller_id(BrokerId(3000))
                .with_brokers(vec![broker(7), broker(4)]);
            let body = encode(&response, version);
            let book = TestBook::identity();
            let new_body = rewrite_body(API, version, &body, &book).unwrap().unwrap();
            let rewritten: DescribeClusterResponse = decode(&new_body, version);
            assert_eq!(rewritten.controller_id, BrokerId(4));
            assert_eq!(rewritten.brokers, response.brokers);
        }
    }

    #[test]
    fn minimum_broker_size_is_that_of_an_empty_broker() {
        for version in VERSIONS {
            let empty = DescribeClusterBroker::default().with_rack(None);
            assert_eq!(encode(&empty, version).len(), min_broker(version));
        }
    }

    #[test]
    fn survives_truncation_and_corruption() {
        let mut rng = rng(61);
        for version in VERSIONS {
            for _ in 0..8 {
                let body = encode(&random_response(&mut rng, version), version);
                assert_survives_corruption(API, version, &body, &mut rng);
            }
        }
    }

    #[test]
    fn a_huge_broker_count_is_refused() {
        for version in VERSIONS {
            // throttle, error code, null message, [endpoint type], "" cluster id, controller
            let mut prefix = vec![0, 0, 0, 0, 0, 0, 0];
            if version >= 1 {
                prefix.push(1);
            }
            prefix.extend_from_slice(&[1, 0, 0, 0, 1]);
            assert_huge_count_refused(API, version, true, &prefix);
        }
    }
}
