//! Error answers the discovery lab can give in place of a real one: the APIs
//! whose responses carry a top-level error code, at the versions that have it.
//! A client reads such an answer as the broker's own refusal of the whole
//! request.

use crate::protocol::response::{encode_body, frame_with_body, EncodeError};
use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::*;

macro_rules! top_level_errors {
    ($($api:ident => $response:ident, $min:expr, $max:expr;)*) => {
        /// (API, lowest version, highest version) with a top-level error code.
        pub const INJECTABLE: &[(ApiKey, i16, i16)] = &[$((ApiKey::$api, $min, $max),)*];

        /// The body of an answer to `api` at `version` carrying only `code`;
        /// `None` when that version's response has no top-level error code.
        pub fn error_body(api: ApiKey, version: i16, code: i16) -> Option<Result<Bytes, EncodeError>> {
            match api {
                $(ApiKey::$api if ($min..=$max).contains(&version) => Some(encode_body(
                    api,
                    version,
                    &$response::default().with_error_code(code),
                )),)*
                _ => None,
            }
        }
    };
}

top_level_errors! {
    Fetch => FetchResponse, 7, 18;
    Metadata => MetadataResponse, 13, 13;
    OffsetFetch => OffsetFetchResponse, 2, 7;
    FindCoordinator => FindCoordinatorResponse, 0, 3;
    JoinGroup => JoinGroupResponse, 0, 9;
    Heartbeat => HeartbeatResponse, 0, 4;
    LeaveGroup => LeaveGroupResponse, 0, 5;
    SyncGroup => SyncGroupResponse, 0, 5;
    ListGroups => ListGroupsResponse, 0, 5;
    SaslHandshake => SaslHandshakeResponse, 0, 1;
    ApiVersions => ApiVersionsResponse, 0, 4;
    InitProducerId => InitProducerIdResponse, 0, 6;
    AddOffsetsToTxn => AddOffsetsToTxnResponse, 0, 4;
    EndTxn => EndTxnResponse, 0, 5;
    DescribeAcls => DescribeAclsResponse, 1, 3;
    SaslAuthenticate => SaslAuthenticateResponse, 0, 2;
    DescribeQuorum => DescribeQuorumResponse, 0, 2;
    UpdateFeatures => UpdateFeaturesResponse, 0, 2;
    DescribeCluster => DescribeClusterResponse, 0, 2;
    ListTransactions => ListTransactionsResponse, 0, 2;
    ConsumerGroupHeartbeat => ConsumerGroupHeartbeatResponse, 0, 1;
    GetTelemetrySubscriptions => GetTelemetrySubscriptionsResponse, 0, 0;
    PushTelemetry => PushTelemetryResponse, 0, 0;
    ShareGroupHeartbeat => ShareGroupHeartbeatResponse, 1, 1;
    ShareFetch => ShareFetchResponse, 1, 1;
    ShareAcknowledge => ShareAcknowledgeResponse, 1, 1;
}

/// StreamsGroupHeartbeat, which kshim's Kafka library does not know.
const STREAMS_GROUP_HEARTBEAT: i16 = 88;

/// The whole answer (size, header, body) to `api` at `version` carrying
/// `error_code` at the top level, as a broker refuses the whole request;
/// `None` when kshim cannot write that answer.
pub fn error_frame(
    api: i16,
    version: i16,
    correlation_id: i32,
    error_code: i16,
) -> Option<Result<Bytes, EncodeError>> {
    if api == STREAMS_GROUP_HEARTBEAT {
        return streams_heartbeat_error(version, error_code)
            .map(|body| Ok(flexible_frame(correlation_id, &body)));
    }
    let key = ApiKey::try_from(api).ok()?;
    Some(
        error_body(key, version, error_code)?
            .map(|body| frame_with_body(key, version, correlation_id, &body)),
    )
}

/// A response with the flexible header (v1: the correlation id and an empty
/// tagged-field section).
fn flexible_frame(correlation_id: i32, body: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(9 + body.len());
    out.put_i32((5 + body.len()) as i32);
    out.put_i32(correlation_id);
    out.put_u8(0);
    out.put_slice(body);
    out.freeze()
}

/// StreamsGroupHeartbeatResponse v0 or v1 with `code`, every other field at
/// its default, as Kafka 4.4's own serializer writes it: ThrottleTimeMs,
/// ErrorCode, a null ErrorMessage, then the defaults of the fields that follow.
fn streams_heartbeat_error(version: i16, code: i16) -> Option<Vec<u8>> {
    // After the ErrorMessage, byte for byte what Kafka writes for the
    // defaults of the fields that follow (MemberId "", the epochs, intervals
    // and lists, the tagged fields); the test checks them against its output.
    const V0_TAIL: &str = "010000000000000000000000000000000001000000000000000000";
    const V1_TAIL: &str = "01000000000000000000000000ffffffffffffffff0100000000000000000000";
    let tail = match version {
        0 => V0_TAIL,
        1 => V1_TAIL,
        _ => return None,
    };
    let mut out = Vec::with_capacity(7 + tail.len() / 2);
    out.extend_from_slice(&0i32.to_be_bytes());
    out.extend_from_slice(&code.to_be_bytes());
    out.push(0); // ErrorMessage: null
    for i in (0..tail.len()).step_by(2) {
        out.push(u8::from_str_radix(&tail[i..i + 2], 16).ok()?);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::protocol::Decodable;

    fn decoded_code(api: ApiKey, version: i16, body: Bytes) -> i16 {
        let mut buf = body;
        macro_rules! code {
            ($t:ty) => {
                <$t>::decode(&mut buf, version).expect("decodes").error_code
            };
        }
        match api {
            ApiKey::Fetch => code!(FetchResponse),
            ApiKey::Metadata => code!(MetadataResponse),
            ApiKey::OffsetFetch => code!(OffsetFetchResponse),
            ApiKey::FindCoordinator => code!(FindCoordinatorResponse),
            ApiKey::JoinGroup => code!(JoinGroupResponse),
            ApiKey::Heartbeat => code!(HeartbeatResponse),
            ApiKey::LeaveGroup => code!(LeaveGroupResponse),
            ApiKey::SyncGroup => code!(SyncGroupResponse),
            ApiKey::ListGroups => code!(ListGroupsResponse),
            ApiKey::SaslHandshake => code!(SaslHandshakeResponse),
            ApiKey::ApiVersions => code!(ApiVersionsResponse),
            ApiKey::InitProducerId => code!(InitProducerIdResponse),
            ApiKey::AddOffsetsToTxn => code!(AddOffsetsToTxnResponse),
            ApiKey::EndTxn => code!(EndTxnResponse),
            ApiKey::DescribeAcls => code!(DescribeAclsResponse),
            ApiKey::SaslAuthenticate => code!(SaslAuthenticateResponse),
            ApiKey::DescribeQuorum => code!(DescribeQuorumResponse),
            ApiKey::UpdateFeatures => code!(UpdateFeaturesResponse),
            ApiKey::DescribeCluster => code!(DescribeClusterResponse),
            ApiKey::ListTransactions => code!(ListTransactionsResponse),
            ApiKey::ConsumerGroupHeartbeat => code!(ConsumerGroupHeartbeatResponse),
            ApiKey::GetTelemetrySubscriptions => code!(GetTelemetrySubscriptionsResponse),
            ApiKey::PushTelemetry => code!(PushTelemetryResponse),
            ApiKey::ShareGroupHeartbeat => code!(ShareGroupHeartbeatResponse),
            ApiKey::ShareFetch => code!(ShareFetchResponse),
            ApiKey::ShareAcknowledge => code!(ShareAcknowledgeResponse),
            other => panic!("{other:?} is not in the table"),
        }
    }

    #[test]
    fn every_listed_version_carries_the_code_and_no_other_does() {
        for &(api, min, max) in INJECTABLE {
            for version in min..=max {
                let body = error_body(api, version, 41)
                    .expect("listed")
                    .unwrap_or_else(|e| panic!("{api:?} v{version}: {e}"));
                assert_eq!(decoded_code(api, version, body), 41, "{api:?} v{version}");
            }
            if min > 0 {
                assert!(error_body(api, min - 1, 41).is_none());
            }
            assert!(error_body(api, max + 1, 41).is_none());
        }
        assert!(error_body(ApiKey::Produce, 9, 41).is_none());
    }

    #[test]
    fn streams_heartbeat_answers_match_kafkas_own_serializer() {
        // Kafka 4.4.0's StreamsGroupHeartbeatResponseData with ErrorCode 35 and
        // ErrorMessage "x", serialized at v0 and v1 (MessageUtil), with the
        // message made null here.
        let kafka = [
            (
                0,
                "0000000000230278010000000000000000000000000000000001000000000000000000",
            ),
            (
                1,
                "000000000023027801000000000000000000000000ffffffffffffffff0100000000000000000000",
            ),
        ];
        for (version, hex) in kafka {
            let theirs: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            let mut expected = theirs[..6].to_vec();
            expected.push(0);
            expected.extend_from_slice(&theirs[8..]);
            assert_eq!(
                streams_heartbeat_error(version, 35).unwrap(),
                expected,
                "v{version}"
            );
        }
        assert!(streams_heartbeat_error(2, 35).is_none());
    }

    #[test]
    fn error_frames_carry_the_correlation_id_and_the_code() {
        for (api, version) in [(68, 1), (76, 1), (88, 0)] {
            let frame = error_frame(api, version, 7, 35).unwrap().unwrap();
            let size = i32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
            assert_eq!(size, frame.len() - 4);
            assert_eq!(i32::from_be_bytes(frame[4..8].try_into().unwrap()), 7);
            // Flexible header: a tagged-field byte, then ThrottleTimeMs.
            assert_eq!(
                i16::from_be_bytes(frame[13..15].try_into().unwrap()),
                35,
                "key {api}"
            );
        }
        assert!(error_frame(69, 0, 7, 35).is_none());
    }
}
