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
//!
//! Which APIs a level turns off comes from the release data
//! (`crate::releases::feature_apis`): a level that an API needs from its first
//! version on turns the API itself off (ConsumerGroupHeartbeat under
//! group.version 1). A level that only later versions need (Produce v12 under
//! transaction.version 2) leaves the choice of version to the client, and the
//! broker serves the earlier versions: no gate.

use crate::protocol::errors::ResponseError;

/// The APIs turned off below a level: (feature, level, api key), from the
/// release data.
fn gates() -> Vec<(&'static str, i16, i16)> {
    let newest = crate::releases::newest().broker_apis();
    crate::releases::feature_apis()
        .iter()
        .filter(|g| {
            newest
                .iter()
                .find(|a| a.0 == g.key)
                .is_some_and(|&(_, min, _)| g.min_version <= min)
        })
        .map(|g| (g.feature.as_str(), g.level, g.key))
        .collect()
}

/// The gates closed by a feature view: (api key, why) for each API a broker
/// finalized at `level_of` answers with UNSUPPORTED_VERSION. `level_of` gives
/// the presented level of a feature, `None` where the view leaves the real
/// level (the broker then decides).
pub fn closed(level_of: impl Fn(&str) -> Option<i16>) -> Vec<(i16, String)> {
    let mut out = Vec::new();
    for (feature, needed, api) in gates() {
        let Some(level) = level_of(feature) else {
            continue;
        };
        if level < needed && !out.iter().any(|(a, _)| *a == api) {
            out.push((
                api,
                format!("{feature} {level} as presented (needs {needed})"),
            ));
        }
    }
    out.sort_by_key(|(api, _)| *api);
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
        // Produce v12 needs transaction.version 2, but Produce itself is served below it.
        assert!(super::closed(|_| Some(0)).iter().all(|(api, _)| *api != 0));
        let share: Vec<i16> = super::closed(|f| (f == "share.version").then_some(0))
            .iter()
            .map(|(a, _)| *a)
            .collect();
        assert_eq!(share, [76, 77, 78, 79]);
        assert_eq!(closed[0].1, "group.version 0 as presented (needs 1)");
    }
}
