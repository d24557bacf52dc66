//! Error answers the discovery lab can give in place of a real one: the APIs
//! whose responses carry a top-level error code, at the versions that have it.
//! A client reads such an answer as the broker's own refusal of the whole
//! request.

use crate::protocol::response::{encode_body, EncodeError};
use bytes::Bytes;
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
}
