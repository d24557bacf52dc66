//! What each Apache Kafka release defines, as kshim needs it: the data in
//! `data/kafka/<major.minor>.json`, generated from the release's own jars by
//! `tools/release-data` and checked against them by
//! `tests/interop/test_release_data.py`. Nothing here is typed by hand.

use serde::Deserialize;
use std::sync::OnceLock;

/// One API key as a release defines it.
#[derive(Debug, Clone, Deserialize)]
pub struct ApiDefinition {
    pub key: i16,
    pub name: String,
    /// Who serves it: "broker", "controller" or both.
    pub listeners: Vec<String>,
    /// [lowest, highest] valid version.
    pub versions: [i16; 2],
    pub first_flexible: Option<i16>,
    pub latest_version_unstable: bool,
    /// The structures of its response that hold a host and a port.
    pub addresses: Vec<AddressCarrier>,
}

/// A response structure with a Host and a Port.
#[derive(Debug, Clone, Deserialize)]
pub struct AddressCarrier {
    /// Field names from the top of the response, dotted.
    pub path: String,
    /// [lowest, highest] version in which the structure is present.
    pub versions: [i16; 2],
    /// Whether the structure names a broker by id (a broker's address, which a
    /// client must not learn) or not (an application endpoint, such as Kafka
    /// Streams' `application.server`, which clients must get as it is).
    pub names_broker: bool,
}

impl ApiDefinition {
    /// The versions whose responses hold a broker's address.
    pub fn broker_address_versions(&self) -> Option<(i16, i16)> {
        self.addresses
            .iter()
            .filter(|c| c.names_broker)
            .map(|c| (c.versions[0], c.versions[1]))
            .reduce(|(lo, hi), (l, h)| (lo.min(l), hi.max(h)))
    }
}

/// One release's data.
#[derive(Debug, Clone, Deserialize)]
pub struct Release {
    /// The release the data was generated from, such as "4.4.0".
    pub release: String,
    pub apis: Vec<ApiDefinition>,
}

impl Release {
    /// The release's major.minor, such as "4.4".
    pub fn minor(&self) -> &str {
        self.release
            .rsplit_once('.')
            .map_or(self.release.as_str(), |(minor, _)| minor)
    }

    pub fn api(&self, key: i16) -> Option<&ApiDefinition> {
        self.apis.iter().find(|a| a.key == key)
    }
}

const DATA: [&str; 5] = [
    include_str!("../../data/kafka/4.0.json"),
    include_str!("../../data/kafka/4.1.json"),
    include_str!("../../data/kafka/4.2.json"),
    include_str!("../../data/kafka/4.3.json"),
    include_str!("../../data/kafka/4.4.json"),
];

/// Every release kshim has data for, oldest first.
pub fn releases() -> &'static [Release] {
    static RELEASES: OnceLock<Vec<Release>> = OnceLock::new();
    RELEASES.get_or_init(|| {
        DATA.iter()
            .map(|text| {
                // Checked in and checked by tests: unreadable data is a build defect.
                serde_json::from_str(text).expect("data/kafka holds release data")
            })
            .collect()
    })
}

/// The newest release kshim has data for.
pub fn newest() -> &'static Release {
    releases().last().expect("at least one release")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_release_reads_oldest_first() {
        let minors: Vec<&str> = releases().iter().map(Release::minor).collect();
        assert_eq!(minors, ["4.0", "4.1", "4.2", "4.3", "4.4"]);
        assert_eq!(newest().minor(), "4.4");
    }

    #[test]
    fn broker_addresses_and_application_endpoints_are_told_apart() {
        let r = newest();
        assert_eq!(r.api(3).unwrap().broker_address_versions(), Some((0, 13)));
        assert_eq!(r.api(10).unwrap().broker_address_versions(), Some((0, 6)));
        assert_eq!(r.api(78).unwrap().broker_address_versions(), Some((1, 2)));
        // StreamsGroupHeartbeat and StreamsGroupDescribe carry application endpoints only.
        assert_eq!(r.api(88).unwrap().broker_address_versions(), None);
        assert_eq!(r.api(89).unwrap().broker_address_versions(), None);
        assert_eq!(r.api(18).unwrap().broker_address_versions(), None);
    }
}
