//! What a finalized feature level turns on in a Kafka broker, so that a
//! scenario presenting a level answers as a broker finalized at that level.
//!
//! Kafka's brokers list the group APIs in ApiVersions whatever the levels
//! (a 4.1 broker formatted by default lists ShareGroupHeartbeat with
//! share.version at 0); it is the handler that answers UNSUPPORTED_VERSION
//! while the feature is below the level that turns the group type on
//! (`KafkaApis`'s `isConsumerGroupProtocolEnabled`,
//! `isShareGroupProtocolEnabled` and `isStreamsGroupProtocolEnabled`). A
//! scenario that presents such a level in front of a broker finalized higher
//! gives that answer itself: without it a client would be served by a group
//! type the presented broker does not have.

use crate::protocol::errors::ResponseError;

/// A feature below `level` turns off the group APIs `apis` (by key).
pub struct Gate {
    pub feature: &'static str,
    pub level: i16,
    pub apis: &'static [i16],
}

/// Kafka 4.0 to 4.4: KIP-848 consumer groups, KIP-932 share groups and
/// KIP-1071 streams groups. The describe and offsets APIs are gated too; kshim
/// answers those whose answer it can write (`super::errors::error_frame`), and passes the
/// rest to the broker.
pub const GATES: &[Gate] = &[
    Gate {
        feature: "group.version",
        level: 1,
        apis: &[68, 69],
    },
    Gate {
        feature: "share.version",
        level: 1,
        apis: &[76, 77, 78, 79, 90, 91, 92],
    },
    Gate {
        feature: "streams.version",
        level: 1,
        apis: &[88, 89],
    },
];

/// The gates closed by a feature view: (api key, why) for each API a broker
/// finalized at `level_of` answers with UNSUPPORTED_VERSION. `level_of` gives
/// the presented level of a feature, `None` where the view leaves the real
/// level (the broker then decides).
pub fn closed(level_of: impl Fn(&str) -> Option<i16>) -> Vec<(i16, String)> {
    let mut out = Vec::new();
    for gate in GATES {
        let Some(level) = level_of(gate.feature) else {
            continue;
        };
        if level < gate.level {
            for &api in gate.apis {
                out.push((
                    api,
                    format!(
                        "{} {level} as presented (needs {})",
                        gate.feature, gate.level
                    ),
                ));
            }
        }
    }
    out
}

/// The error a closed gate answers with.
pub fn gate_error() -> i16 {
    ResponseError::UnsupportedVersion.code()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_level_below_the_gate_closes_its_apis_and_an_unpresented_one_none() {
        let closed = closed(|f| match f {
            "group.version" => Some(0),
            "share.version" => Some(2),
            _ => None,
        });
        let apis: Vec<i16> = closed.iter().map(|(a, _)| *a).collect();
        assert_eq!(apis, [68, 69]);
        assert_eq!(closed[0].1, "group.version 0 as presented (needs 1)");
    }
}
