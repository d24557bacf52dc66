//! What kshim's handlers refuse a client, and the one mapping from those
//! refusals to Kafka's error codes and to who is to blame. A handler that
//! answers with an error names a `Refusal`, never a bare code; codes read from
//! brokers pass through untouched, and the discovery lab's codes are the
//! operator's own choice (`crate::lab`).

use crate::features::Reason;
pub use crate::protocol::errors::Blame;
use crate::protocol::errors::ResponseError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// UpdateFeatures refused, in the feature model's terms.
    FeatureUpdate(Reason),
    /// A request kshim checks is malformed (a topic named twice).
    InvalidRequest,
    /// The create-topic policy refuses a topic.
    Policy,
    /// A config validator in force refuses a value.
    Validator,
    /// SaslAuthenticate on a connection that has already authenticated,
    /// without a new SaslHandshake.
    SaslOutOfTurn,
    /// A topic asked for by name from kshim's own metadata (it serves none).
    UnknownTopic,
    /// A topic asked for by id from kshim's own metadata.
    UnknownTopicId,
    /// DescribeCluster for an endpoint type kshim does not serve.
    EndpointType,
    /// ApiVersions v5 meant for another cluster or node (KIP-1242).
    OtherNode,
}

impl Refusal {
    /// The one mapping from kshim's refusals to Kafka's errors.
    pub fn error(self) -> ResponseError {
        match self {
            Refusal::FeatureUpdate(reason) => match reason {
                Reason::InvalidRequest => ResponseError::InvalidRequest,
                Reason::InvalidVersion | Reason::ConfigViolation | Reason::Incompatible => {
                    ResponseError::InvalidUpdateVersion
                }
                Reason::NotAuthorized => ResponseError::ClusterAuthorizationFailed,
                Reason::Busy | Reason::UpstreamFailed => ResponseError::RequestTimedOut,
                Reason::AuditBlind | Reason::StoreFailed => ResponseError::FeatureUpdateFailed,
                // What Kafka answers when the controller moved: clients retry it.
                Reason::WriterLost => ResponseError::NotController,
            },
            Refusal::InvalidRequest => ResponseError::InvalidRequest,
            Refusal::Policy => ResponseError::PolicyViolation,
            Refusal::Validator => ResponseError::InvalidConfig,
            Refusal::SaslOutOfTurn => ResponseError::IllegalSaslState,
            Refusal::UnknownTopic => ResponseError::UnknownTopicOrPartition,
            Refusal::UnknownTopicId => ResponseError::UnknownTopicId,
            Refusal::EndpointType => ResponseError::UnsupportedEndpointType,
            Refusal::OtherNode => ResponseError::RebootstrapRequired,
        }
    }

    pub fn code(self) -> i16 {
        self.error().code()
    }

    /// Who caused it: decides how loudly it is logged.
    pub fn blame(self) -> Blame {
        match self {
            Refusal::FeatureUpdate(reason) => match reason {
                Reason::InvalidRequest
                | Reason::InvalidVersion
                | Reason::NotAuthorized
                | Reason::Busy
                | Reason::ConfigViolation => Blame::Client,
                // Two instances writing at once: an ordinary race that the
                // client retries, not a fault.
                Reason::WriterLost => Blame::Client,
                Reason::Incompatible | Reason::AuditBlind | Reason::UpstreamFailed => {
                    Blame::Upstream
                }
                Reason::StoreFailed => Blame::Kshim,
            },
            Refusal::InvalidRequest
            | Refusal::Policy
            | Refusal::Validator
            | Refusal::SaslOutOfTurn
            | Refusal::UnknownTopic
            | Refusal::UnknownTopicId
            | Refusal::EndpointType
            | Refusal::OtherNode => Blame::Client,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_update_features_reason_keeps_its_code_and_blame() {
        let expected = [
            (Reason::InvalidRequest, "INVALID_REQUEST", Blame::Client),
            (
                Reason::InvalidVersion,
                "INVALID_UPDATE_VERSION",
                Blame::Client,
            ),
            (
                Reason::NotAuthorized,
                "CLUSTER_AUTHORIZATION_FAILED",
                Blame::Client,
            ),
            (Reason::Busy, "REQUEST_TIMED_OUT", Blame::Client),
            (
                Reason::ConfigViolation,
                "INVALID_UPDATE_VERSION",
                Blame::Client,
            ),
            (
                Reason::Incompatible,
                "INVALID_UPDATE_VERSION",
                Blame::Upstream,
            ),
            (Reason::AuditBlind, "FEATURE_UPDATE_FAILED", Blame::Upstream),
            (Reason::UpstreamFailed, "REQUEST_TIMED_OUT", Blame::Upstream),
            (Reason::StoreFailed, "FEATURE_UPDATE_FAILED", Blame::Kshim),
            (Reason::WriterLost, "NOT_CONTROLLER", Blame::Client),
        ];
        for (reason, name, blame) in expected {
            let refusal = Refusal::FeatureUpdate(reason);
            assert_eq!(
                crate::protocol::errors::name(refusal.code()).to_string(),
                name,
                "{reason:?}"
            );
            assert_eq!(refusal.blame(), blame, "{reason:?}");
        }
    }
}
