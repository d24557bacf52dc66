use super::*;

#[test]
fn a_full_config_parses() {
    let c = Config::from_toml(
        r#"
            listen = "127.0.0.1:19092"
            advertised_listener = "localhost:19092"
            data_dir = "/tmp/x"
            node_id = 3
            cluster_id = "abc"
            [discovery]
            draft_tags = false
            [features.supported]
            "metadata.version" = { min = 7, max = 27 }
            "acme.widgets" = { min = 1, max = 4 }
            [features.bootstrap]
            "acme.widgets" = 2
            [features.dependencies]
            "acme.widgets" = [{ level = 3, requires = { "metadata.version" = 25 } }]
            [authorization]
            alter_cluster = ["User:admin"]
            "#,
    )
    .unwrap();
    assert_eq!(c.node_id, 3);
    assert!(!c.draft_tags);
    assert_eq!(c.supported_features().len(), 2);
    assert_eq!(
        c.effective_dependencies()
            .requirements("acme.widgets", 3)
            .len(),
        1
    );
    assert!(c.alter_cluster.unwrap().contains("User:admin"));
    assert!(c.upstream.is_none());
}

#[test]
fn an_upstream_section_parses() {
    let c = Config::from_toml(
        r#"
            listen = "127.0.0.1:19092"
            [upstream]
            bootstrap = "127.0.0.1:9092, 127.0.0.1:9093"
            refresh_interval_ms = 1000
            [upstream.listeners]
            port_base = 19100
            advertised_host = "proxy.example"
            [upstream.listeners.ports]
            "1001" = 19201
            [features.ownership]
            kshim_owned = ["acme.*", "kshim.interop.version"]
            "#,
    )
    .unwrap();
    let u = c.upstream.unwrap();
    assert_eq!(u.bootstrap, vec!["127.0.0.1:9092", "127.0.0.1:9093"]);
    assert_eq!(u.port_base, Some(19100));
    assert_eq!(u.ports[&1001], 19201);
    assert_eq!(c.kshim_owned.len(), 2);
    let mut no_bootstrap = Vec::new();
    Config::from_toml("[upstream]\nrefresh_interval_ms = 10")
        .expect("the broker list may come from --upstream")
        .validate(&mut no_bootstrap);
    assert_eq!(no_bootstrap.len(), 1, "{no_bootstrap:?}");
    let err = Config::from_toml(
            "[upstream]\nbootstrap = [\"nope\"]\nwat = 1\n[upstream.listeners.ports]\n\"x\" = 1\n\"2\" = 70000\n[features.ownership]\nkshim_owned = \"*\"",
        )
        .unwrap_err()
        .to_string();
    for expected in [
        "upstream.bootstrap: \"nope\" is not HOST:PORT",
        "upstream.wat: unknown key",
        "the key must be a node id",
        "expected a port",
        "would claim every feature",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in:\n{err}");
    }
}

#[test]
fn connection_limits_parse_and_bad_ones_are_named() {
    let c = Config::from_toml(
        r#"
max_connections_per_ip = 50
max_connections_per_ip_overrides = { "10.0.0.7" = 5000, "::1" = 0 }
connections_max_idle_ms = 1000
frame_read_timeout_ms = 2000
descriptor_reserve = 64
[upstream]
bootstrap = "k:9092"
max_brokers = 10
listener_grace_ms = 0
"#,
    )
    .unwrap();
    assert_eq!(c.max_connections_per_ip, 50);
    assert_eq!(
        c.max_connections_per_ip_overrides[&"10.0.0.7".parse::<std::net::IpAddr>().unwrap()],
        5000
    );
    assert_eq!(c.connections_max_idle_ms, 1000);
    assert_eq!(c.frame_read_timeout_ms, 2000);
    assert_eq!(c.descriptor_reserve, 64);
    let u = c.upstream.unwrap();
    assert_eq!((u.max_brokers, u.listener_grace_ms), (10, 0));
    let errors = Config::from_toml(
        r#"
max_connections_per_ip = 0
max_connections_per_ip_overrides = { "kafka.example" = 1, "10.0.0.1" = -1 }
connections_max_idle_ms = 0
frame_read_timeout_ms = 0
[admin]
listen = "127.0.0.1:9880"
[upstream]
bootstrap = "k:9092"
max_brokers = 0
[upstream.listeners.ports]
"1" = 9880
"#,
    )
    .unwrap_err()
    .messages()
    .join("\n");
    for expected in [
        "max_connections_per_ip: must be at least 1",
        "\"kafka.example\": the key must be an IP address",
        "\"10.0.0.1\": expected a count",
        "connections_max_idle_ms: must be at least 1",
        "frame_read_timeout_ms: must be at least 1",
        "upstream.max_brokers: must be at least 1",
        "port 9880 is admin.listen's port",
    ] {
        assert!(
            errors.contains(expected),
            "{expected} missing from:\n{errors}"
        );
    }
}

#[test]
fn every_error_is_reported_at_once() {
    let err = Config::from_toml(
        r#"
            listen = "nowhere"
            colour = "blue"
            node_id = "one"
            [discovery]
            draft_tag = true
            [features.supported]
            "a" = { min = 3, max = 1 }
            "b" = { min = 1 }
            [features.dependencies]
            "a" = [{ level = 1, requires = { "zzz" = 1 } }]
            "#,
    )
    .unwrap_err();
    let all = err.to_string();
    for expected in [
        "listen: \"nowhere\" is not HOST:PORT",
        "colour: unknown key",
        "node_id: expected an integer",
        "discovery.draft_tag: unknown key",
        "min 3 is above max 1",
        "both min and max are required",
        "zzz is not a supported feature",
    ] {
        assert!(all.contains(expected), "missing {expected:?} in:\n{all}");
    }
}

#[test]
fn kafka_defaults_apply_when_nothing_is_configured() {
    let c = Config::from_toml("").unwrap();
    assert_eq!(c.kafka_release, KafkaRelease::newest());
    assert_eq!(c.supported_features(), c.kafka_release.supported_features());
    assert_eq!(c.effective_dependencies(), c.kafka_release.dependencies());
    let c = Config::from_toml("kafka_release = \"4.1\"").unwrap();
    assert_eq!(c.supported_features()["metadata.version"].max, 27);
    let e = Config::from_toml("kafka_release = \"3.9\"")
        .unwrap_err()
        .to_string();
    assert!(e.contains("kafka_release: \"3.9\" is not a Kafka release kshim has data for (4.0, 4.1, 4.2, 4.3, 4.4)"), "{e}");
    assert!(c.draft_tags);
    assert!(c.alter_cluster.is_none());
}

#[test]
fn the_proxy_protocol_needs_its_balancers_named() {
    use crate::server::proxy_protocol::{Cidr, Mode};
    let c = Config::from_toml(
        "proxy_protocol = \"v2\"\nproxy_protocol_trusted = [\"10.0.0.0/8\", \"192.0.2.7\"]",
    )
    .unwrap();
    assert_eq!(c.proxy_protocol, Mode::V2);
    assert_eq!(
        c.proxy_protocol_trusted,
        [
            Cidr::parse("10.0.0.0/8").unwrap(),
            Cidr::parse("192.0.2.7/32").unwrap()
        ]
    );
    assert_eq!(Config::default().proxy_protocol, Mode::Off);
    let e = Config::from_toml("proxy_protocol = \"any\"")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("proxy_protocol_trusted: name the load balancers' addresses"),
        "{e}"
    );
    let e =
        Config::from_toml("proxy_protocol = \"v3\"\nproxy_protocol_trusted = [\"10.0.0.0/33\"]")
            .unwrap_err()
            .to_string();
    assert!(
        e.contains("proxy_protocol: \"v3\" is not one of \"off\", \"v1\", \"v2\", \"any\""),
        "{e}"
    );
    assert!(
        e.contains("proxy_protocol_trusted: \"10.0.0.0/33\": the prefix length must be 0 to 32"),
        "{e}"
    );
}

mod wildcard_tests {
    use super::*;

    fn complete_errors(text: &str) -> Vec<String> {
        let config = Config::from_toml(text).expect("parses");
        let mut errors = Vec::new();
        config.validate(&mut errors);
        errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_wildcard_is_never_advertised() {
        let refused = complete_errors("listen = \"0.0.0.0:19092\"");
        assert!(
            refused[0].starts_with("listen: 0.0.0.0:19092 listens on every address"),
            "{refused:?}"
        );
        assert!(complete_errors("listen = \"[::]:19092\"")[0].contains("advertised_listener"));
        assert!(complete_errors(
            "listen = \"0.0.0.0:19092\"\nadvertised_listener = \"kshim.example:19092\""
        )
        .is_empty());
        assert!(complete_errors("listen = \"127.0.0.1:19092\"").is_empty());
        let advertised = Config::from_toml("advertised_listener = \"0.0.0.0:19092\"").unwrap_err();
        assert!(
            advertised.to_string().contains(
                "advertised_listener: 0.0.0.0:19092 is not an address clients can connect to"
            ),
            "{advertised}"
        );
        let host = Config::from_toml(
            "advertised_listener = \"kshim.example:19092\"\n[upstream]\nbootstrap = \"k:9092\"\n[upstream.listeners]\nadvertised_host = \"::\"",
        )
        .unwrap_err();
        assert!(
            host.to_string()
                .contains("upstream.listeners.advertised_host: :: is not"),
            "{host}"
        );
    }
}
