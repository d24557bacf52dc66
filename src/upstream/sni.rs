//! Every broker on one port, told apart by the TLS server name (SNI) the client
//! asks for: `upstream.listeners.sni_host = "broker-{node_id}.kafka.example.com"`.
//!
//! The bootstrap's name is the host of `advertised_listener`; broker N's is the
//! pattern with `{node_id}` replaced by N, in decimal. A name is compared without
//! regard to case (DNS names are case-insensitive), and only the canonical spelling
//! of a node id matches (`broker-7`, never `broker-07`), so that each broker has
//! exactly one name.

use super::Route;

/// The placeholder in `sni_host`.
pub const NODE_ID: &str = "{node_id}";

/// The server names of the bootstrap and of each broker, and the one port they
/// share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerNames {
    /// The bootstrap's name, lowercase.
    bootstrap: String,
    /// The pattern before and after `{node_id}`, lowercase.
    prefix: String,
    suffix: String,
    /// The port every name is told with: the bootstrap's advertised port.
    pub port: u16,
}

impl ServerNames {
    /// Checks the pattern (one `{node_id}`, a DNS name around it) and the
    /// bootstrap's name (a DNS name, not an address, that no broker's name can
    /// equal).
    pub fn new(pattern: &str, bootstrap: &str, port: u16) -> Result<ServerNames, String> {
        let lower = pattern.to_ascii_lowercase();
        let (prefix, suffix) = match lower.split_once(NODE_ID) {
            Some((p, s)) if !s.contains(NODE_ID) => (p.to_owned(), s.to_owned()),
            _ => {
                return Err(format!(
                    "\"{pattern}\" must contain {NODE_ID} exactly once, where each broker's node id goes"
                ))
            }
        };
        let example = format!("{prefix}1{suffix}");
        if !is_dns_name(&example) {
            return Err(format!(
                "\"{pattern}\" does not make a DNS name (as \"{example}\" for node 1): \
                 letters, digits, '-' and '.' only"
            ));
        }
        let bootstrap = bootstrap.to_ascii_lowercase();
        if bootstrap.parse::<std::net::IpAddr>().is_ok() || !is_dns_name(&bootstrap) {
            return Err(format!(
                "the bootstrap's advertised host \"{bootstrap}\" must be a DNS name: clients \
                 send no TLS server name for an IP address (set advertised_listener)"
            ));
        }
        let names = ServerNames {
            bootstrap,
            prefix,
            suffix,
            port,
        };
        if let Some(node) = names.node_of(&names.bootstrap) {
            return Err(format!(
                "the bootstrap's name \"{}\" is also the name of broker {node}",
                names.bootstrap
            ));
        }
        Ok(names)
    }

    /// The name clients are told for broker `node_id`.
    pub fn host_of(&self, node_id: i32) -> String {
        format!("{}{node_id}{}", self.prefix, self.suffix)
    }

    /// The route a server name asks for: the bootstrap, or a broker by the
    /// pattern (whether that broker exists is the caller's to check). `None`:
    /// no name, or one that is neither.
    pub fn route(&self, server_name: Option<&str>) -> Option<Route> {
        // A fully qualified name may end in a dot; it names the same host.
        let name = server_name?.to_ascii_lowercase();
        let name = name.strip_suffix('.').unwrap_or(&name);
        if name == self.bootstrap {
            return Some(Route::Bootstrap);
        }
        self.node_of(name).map(Route::Node)
    }

    fn node_of(&self, name: &str) -> Option<i32> {
        let digits = name
            .strip_prefix(self.prefix.as_str())?
            .strip_suffix(self.suffix.as_str())?;
        let node: i32 = digits.parse().ok()?;
        (node >= 0 && node.to_string() == digits).then_some(node)
    }

    /// Why a certificate for `dns_names` would fail clients' hostname checks
    /// on some names, or `None` when it covers the bootstrap and every broker
    /// (a wildcard `*.REST` covers a name whose first label is the only one
    /// that differs).
    pub fn uncovered(&self, dns_names: &[String]) -> Option<String> {
        let names: Vec<String> = dns_names.iter().map(|n| n.to_ascii_lowercase()).collect();
        let covers = |host: &str| {
            names.iter().any(|n| match n.strip_prefix("*.") {
                Some(rest) => host.split_once('.').is_some_and(|(_, r)| r == rest),
                None => n == host,
            })
        };
        let pattern = format!("{}{NODE_ID}{}", self.prefix, self.suffix);
        // The brokers' names differ in the label holding {node_id}: a wildcard
        // covers them all only when that label is the first.
        let rest = self.suffix.split_once('.').map(|(_, rest)| rest);
        let wildcard_fits = !self.prefix.contains('.')
            && names
                .iter()
                .any(|n| n.strip_prefix("*.").is_some_and(|r| Some(r) == rest));
        let mut missing = Vec::new();
        if !covers(&self.bootstrap) {
            missing.push(format!("the bootstrap's name \"{}\"", self.bootstrap));
        }
        if !wildcard_fits {
            let listed: Vec<String> = names
                .iter()
                .filter_map(|n| self.node_of(n).map(|id| id.to_string()))
                .collect();
            missing.push(if listed.is_empty() {
                format!("the brokers' names (\"{pattern}\")")
            } else {
                format!(
                    "the brokers' names (\"{pattern}\") other than those of node(s) {}",
                    listed.join(", ")
                )
            });
        }
        (!missing.is_empty()).then(|| {
            format!(
                "the certificate does not name {}: clients checking the host name will refuse \
                 them (give it a wildcard *.{} for the brokers, or list each name)",
                missing.join(" nor "),
                rest.unwrap_or("DOMAIN")
            )
        })
    }
}

/// Letters, digits and hyphens in dot-separated labels of 1-63 characters,
/// none starting or ending with a hyphen, at most 253 characters in all.
fn is_dns_name(name: &str) -> bool {
    name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> ServerNames {
        ServerNames::new(
            "Broker-{node_id}.Kafka.Example.com",
            "bootstrap.kafka.example.com",
            9093,
        )
        .unwrap()
    }

    #[test]
    fn each_broker_has_one_name_and_the_bootstrap_its_own() {
        let n = names();
        assert_eq!(n.host_of(7), "broker-7.kafka.example.com");
        assert_eq!(
            n.route(Some("BOOTSTRAP.kafka.example.com")),
            Some(Route::Bootstrap)
        );
        assert_eq!(
            n.route(Some("broker-7.kafka.example.com")),
            Some(Route::Node(7))
        );
        assert_eq!(
            n.route(Some("broker-0.kafka.example.com")),
            Some(Route::Node(0))
        );
        assert_eq!(
            n.route(Some("Broker-3.kafka.example.com.")),
            Some(Route::Node(3)),
            "a trailing dot"
        );
        assert_eq!(
            n.route(Some("bootstrap.kafka.example.com.")),
            Some(Route::Bootstrap)
        );
        for other in [
            "broker-07.kafka.example.com",
            "broker--7.kafka.example.com",
            "broker-+7.kafka.example.com",
            "broker-.kafka.example.com",
            "broker-99999999999.kafka.example.com",
            "broker-7.kafka.example.org",
            "x.broker-7.kafka.example.com",
        ] {
            assert_eq!(n.route(Some(other)), None, "{other}");
        }
        assert_eq!(n.route(None), None, "no server name");
    }

    #[test]
    fn bad_patterns_and_bootstraps_are_refused_with_the_reason() {
        for (pattern, bootstrap, expected) in [
            ("broker.kafka.example.com", "b.example.com", "exactly once"),
            (
                "{node_id}-{node_id}.example.com",
                "b.example.com",
                "exactly once",
            ),
            ("broker_{node_id}.example.com", "b.example.com", "DNS name"),
            ("broker-{node_id}..example.com", "b.example.com", "DNS name"),
            (
                "broker-{node_id}.example.com",
                "127.0.0.1",
                "must be a DNS name",
            ),
            (
                "broker-{node_id}.example.com",
                "broker-3.example.com",
                "broker 3",
            ),
        ] {
            let err = ServerNames::new(pattern, bootstrap, 9093).unwrap_err();
            assert!(err.contains(expected), "{pattern}, {bootstrap}: {err}");
        }
    }

    #[test]
    fn a_wildcard_or_each_name_covers_the_brokers() {
        let n = names();
        let dns = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(n.uncovered(&dns(&["*.kafka.example.com"])), None);
        assert_eq!(n.uncovered(&dns(&["*.KAFKA.example.com"])), None);
        let only_some = n
            .uncovered(&dns(&[
                "bootstrap.kafka.example.com",
                "broker-1.kafka.example.com",
            ]))
            .unwrap();
        assert!(
            only_some.contains("other than those of node(s) 1"),
            "{only_some}"
        );
        let none = n.uncovered(&dns(&["*.example.com"])).unwrap();
        assert!(
            none.contains("bootstrap") && none.contains("brokers' names"),
            "{none}"
        );
        // A wildcard cannot stand for a label that is not the first.
        let deep =
            ServerNames::new("kafka.b{node_id}.example.com", "boot.example.com", 9093).unwrap();
        assert!(deep
            .uncovered(&dns(&["*.example.com"]))
            .unwrap()
            .contains("brokers' names"));
    }
}
