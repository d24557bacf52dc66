//! Kafka error codes kshim puts on the wire (values from Apache Kafka's `Errors`).

pub const NONE: i16 = 0;
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
pub const REQUEST_TIMED_OUT: i16 = 7;
pub const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;
pub const UNSUPPORTED_VERSION: i16 = 35;
pub const NOT_CONTROLLER: i16 = 41;
pub const INVALID_REQUEST: i16 = 42;
pub const UNKNOWN_TOPIC_ID: i16 = 100;
pub const INVALID_UPDATE_VERSION: i16 = 95;
pub const FEATURE_UPDATE_FAILED: i16 = 96;
pub const UNSUPPORTED_ENDPOINT_TYPE: i16 = 115;

/// The name Kafka gives a code, for CLI messages and logs.
pub fn name(code: i16) -> &'static str {
    match code {
        NONE => "NONE",
        UNKNOWN_TOPIC_OR_PARTITION => "UNKNOWN_TOPIC_OR_PARTITION",
        REQUEST_TIMED_OUT => "REQUEST_TIMED_OUT",
        CLUSTER_AUTHORIZATION_FAILED => "CLUSTER_AUTHORIZATION_FAILED",
        UNSUPPORTED_VERSION => "UNSUPPORTED_VERSION",
        INVALID_REQUEST => "INVALID_REQUEST",
        UNKNOWN_TOPIC_ID => "UNKNOWN_TOPIC_ID",
        INVALID_UPDATE_VERSION => "INVALID_UPDATE_VERSION",
        FEATURE_UPDATE_FAILED => "FEATURE_UPDATE_FAILED",
        UNSUPPORTED_ENDPOINT_TYPE => "UNSUPPORTED_ENDPOINT_TYPE",
        NOT_CONTROLLER => "NOT_CONTROLLER",
        33 => "UNSUPPORTED_SASL_MECHANISM",
        34 => "ILLEGAL_SASL_STATE",
        58 => "SASL_AUTHENTICATION_FAILED",
        -1 => "UNKNOWN_SERVER_ERROR",
        _ => "UNKNOWN",
    }
}
