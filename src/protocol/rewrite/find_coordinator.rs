//! FindCoordinator (key 10), v0-v6. Up to v3 one coordinator: NodeId, Host, Port
//! at the top level (flexible from v3 on). From v4 on, a Coordinators array, one
//! per key asked for. A coordinator that could not be found has NodeId -1 and an
//! error, and keeps its (empty) address.

use super::walk::{Stop, Walk};

/// Key, NodeId, Host, Port, ErrorCode, ErrorMessage, tags; all versions with the
/// array are flexible.
const MIN_COORDINATOR: usize = 1 + 4 + 1 + 4 + 2 + 1 + 1;

pub(super) fn walk(version: i16, w: &mut Walk<'_>) -> Result<(), Stop> {
    if version >= 1 {
        w.skip(4, "throttle_time_ms")?;
    }
    if version <= 3 {
        w.skip(2, "error_code")?;
        if version >= 1 {
            w.string("error_message")?;
        }
        let node_id = w.i32("node_id")?;
        return w.address(node_id);
    }
    for _ in 0..w.array(MIN_COORDINATOR, "coordinators")? {
        w.string("key")?;
        let node_id = w.i32("node_id")?;
        w.address(node_id)?;
        w.skip(2, "error_code")?;
        w.string("error_message")?;
        w.tagged_fields("coordinator")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::rewrite::rewrite_body;
    use crate::protocol::rewrite::testing::*;
    use kafka_protocol::messages::find_coordinator_response::Coordinator;
    use kafka_protocol::messages::{ApiKey, BrokerId, FindCoordinatorResponse};
    use kafka_protocol::protocol::StrBytes;
    use rand::rngs::StdRng;
    use rand::Rng;

    const API: ApiKey = ApiKey::FindCoordinator;
    const VERSIONS: std::ops::RangeInclusive<i16> = 0..=6;

    fn random_response(rng: &mut StdRng, version: i16) -> FindCoordinatorResponse {
        let response = FindCoordinatorResponse::default()
            .with_throttle_time_ms(rng.gen())
            .with_unknown_tagged_fields(unknown_tags(rng, 0));
        if version <= 3 {
            return response
                .with_error_code(rng.gen())
                .with_error_message(nullable_string(rng))
                .with_node_id(BrokerId(node_id(rng)))
                .with_host(string(rng))
                .with_port(rng.gen());
        }
        let coordinators = (0..rng.gen_range(0..5))
            .map(|_| {
                Coordinator::default()
                    .with_key(string(rng))
                    .with_node_id(BrokerId(node_id(rng)))
                    .with_host(string(rng))
                    .with_port(rng.gen())
                    .with_error_code(rng.gen())
                    .with_error_message(nullable_string(rng))
                    .with_unknown_tagged_fields(unknown_tags(rng, 0))
            })
            .collect();
        response.with_coordinators(coordinators)
    }

    fn expect(version: i16) -> impl FnOnce(&mut FindCoordinatorResponse, &mut Expected) {
        move |response, moves| {
            if version <= 3 {
                let r = response;
                moves.address(r.node_id.0, &mut r.host, &mut r.port);
            } else {
                for c in &mut response.coordinators {
                    moves.address(c.node_id.0, &mut c.host, &mut c.port);
                }
            }
        }
    }

    #[test]
    fn rewrites_every_version_as_kafka_protocol_reads_it() {
        let mut rng = rng(10);
        for version in VERSIONS {
            for _ in 0..80 {
                let response = random_response(&mut rng, version);
                assert_rewrites(API, version, &response, expect(version));
            }
        }
    }

    #[test]
    fn a_coordinator_not_found_keeps_its_address_and_the_book_is_not_asked() {
        for version in VERSIONS {
            let response = if version <= 3 {
                FindCoordinatorResponse::default()
                    .with_error_code(15)
                    .with_node_id(BrokerId(-1))
            } else {
                FindCoordinatorResponse::default().with_coordinators(vec![Coordinator::default()
                    .with_key(StrBytes::from_static_str("group"))
                    .with_node_id(BrokerId(-1))
                    .with_error_code(15)])
            };
            let body = encode(&response, version);
            let book = TestBook::default();
            assert_eq!(rewrite_body(API, version, &body, &book).unwrap(), None);
            assert!(book.asked.borrow().is_empty());
        }
    }

    #[test]
    fn minimum_coordinator_size_is_that_of_an_empty_coordinator() {
        for version in 4..=6 {
            let empty = Coordinator::default().with_error_message(None);
            assert_eq!(encode(&empty, version).len(), MIN_COORDINATOR);
        }
    }

    #[test]
    fn survives_truncation_and_corruption() {
        let mut rng = rng(11);
        for version in VERSIONS {
            for _ in 0..6 {
                let body = encode(&random_response(&mut rng, version), version);
                assert_survives_corruption(API, version, &body, &mut rng);
            }
        }
    }

    #[test]
    fn a_huge_coordinator_count_is_refused() {
        for version in 4..=6 {
            assert_huge_count_refused(API, version, true, &[0; 4]);
        }
    }
}
