//! Kafka's error codes as kshim speaks of them: the one table is
//! `kafka_protocol::error::ResponseError` (code, retriability, name); this
//! module adds Kafka's own spelling of the names for messages and logs, who is
//! to blame for a refusal, and the refusals of the wire layer itself.
//!
//! Each layer that refuses a client has one enum of its refusals with one
//! mapping to codes: `WireRefusal` here, `crate::handlers::Refusal` above.
//! Codes read from brokers are kept as `i16` and named through `name`.

pub use kafka_protocol::error::ResponseError;
use std::fmt;

/// The code of a response without error.
pub const NONE: i16 = 0;

/// The error a code stands for; `None` for `NONE`.
pub fn error(code: i16) -> Option<ResponseError> {
    ResponseError::try_from_code(code)
}

/// Whether Kafka's clients retry a request that failed with `code`.
pub fn is_retriable(code: i16) -> bool {
    error(code).is_some_and(|e| e.is_retriable())
}

/// Kafka's name for a code, as its tools and logs print it
/// (`NOT_ENOUGH_REPLICAS`), shown through `Display`.
pub fn name(code: i16) -> ErrorName {
    ErrorName(code)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ErrorName(i16);

impl fmt::Display for ErrorName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match error(self.0) {
            None => f.write_str("NONE"),
            // A code newer than the table: say so with its number.
            Some(ResponseError::Unknown(code)) => write!(f, "UNNAMED_ERROR_CODE_{code}"),
            Some(e) => {
                // The table's variant names are Kafka's names in CamelCase.
                let camel = format!("{e:?}");
                for (i, c) in camel.chars().enumerate() {
                    if c.is_ascii_uppercase() && i > 0 {
                        f.write_str("_")?;
                    }
                    write!(f, "{}", c.to_ascii_uppercase())?;
                }
                Ok(())
            }
        }
    }
}

/// Who caused a refusal: decides how loudly it is logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blame {
    /// The client asked for something it may not have or that is malformed.
    Client,
    /// The cluster behind kshim failed or refused on the way.
    Upstream,
    /// kshim itself failed (its own store).
    Kshim,
}

/// What the wire layer refuses before any handler sees a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireRefusal {
    /// An ApiVersions version newer than kshim knows (KIP-511: answered at v0
    /// with the versions kshim has).
    UnsupportedVersion,
    /// A request body that does not decode.
    Malformed,
}

impl WireRefusal {
    pub fn error(self) -> ResponseError {
        match self {
            WireRefusal::UnsupportedVersion => ResponseError::UnsupportedVersion,
            WireRefusal::Malformed => ResponseError::InvalidRequest,
        }
    }

    pub fn code(self) -> i16 {
        self.error().code()
    }

    pub fn blame(self) -> Blame {
        Blame::Client
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kafkas() {
        assert_eq!(name(0).to_string(), "NONE");
        assert_eq!(name(-1).to_string(), "UNKNOWN_SERVER_ERROR");
        assert_eq!(name(19).to_string(), "NOT_ENOUGH_REPLICAS");
        assert_eq!(name(90).to_string(), "PRODUCER_FENCED");
        assert_eq!(name(51).to_string(), "CONCURRENT_TRANSACTIONS");
        assert_eq!(name(58).to_string(), "SASL_AUTHENTICATION_FAILED");
        assert_eq!(name(6).to_string(), "NOT_LEADER_OR_FOLLOWER");
        assert_eq!(name(9999).to_string(), "UNNAMED_ERROR_CODE_9999");
    }

    #[test]
    fn no_code_from_minus_one_to_the_newest_is_unnamed() {
        // Every code Kafka names up to the newest the table has.
        for code in -1..=133 {
            let text = name(code).to_string();
            assert!(
                !text.contains("UNKNOWN_ERROR") && !text.starts_with("UNNAMED"),
                "{code}: {text}"
            );
        }
    }

    #[test]
    fn retriability_is_the_tables() {
        assert!(is_retriable(ResponseError::NotEnoughReplicas.code()));
        assert!(!is_retriable(ResponseError::ProducerFenced.code()));
        assert!(!is_retriable(NONE));
    }
}
