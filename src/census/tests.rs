use super::*;
use std::time::Instant;

fn sw(name: &str, version: &str) -> ClientSoftware {
    ClientSoftware {
        name: name.into(),
        version: version.into(),
    }
}

fn census(max_clients: usize) -> Arc<Census> {
    Arc::new(Census::new(CensusConfig {
        enabled: true,
        max_clients,
        metrics_software_versions: 2,
    }))
}

fn addr(last: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, last], 40_000))
}

#[test]
fn a_connection_counts_under_the_software_it_names() {
    let c = census(100);
    let conn = c.open(addr(1), "User:alice", "PLAINTEXT").unwrap();
    conn.request(18, 4, Instant::now());
    conn.identify("User:alice", Some(&sw("apache-kafka-java", "4.1.1")), None);
    conn.request(3, 12, Instant::now());
    conn.request(3, 12, Instant::now());
    conn.request(0, 11, Instant::now());
    let all = c.clients(&Filter::default());
    let java = all
        .iter()
        .find(|v| v.software_name.as_deref() == Some("apache-kafka-java"))
        .expect("the Java aggregate");
    assert_eq!(java.connections_live, 1);
    let uses: Vec<(i16, i16, u64)> = java
        .apis
        .iter()
        .map(|a| (a.api_key, a.version, a.requests))
        .collect();
    assert_eq!(uses, vec![(0, 11, 1), (3, 12, 2)]);
    assert_eq!(java.connections.len(), 1);
    // The ApiVersions that named the software counts under the unnamed aggregate.
    let unnamed = all.iter().find(|v| v.software_name.is_none()).unwrap();
    assert_eq!(unnamed.apis[0].api_key, 18);
    assert_eq!(unnamed.connections_live, 0);

    drop(conn);
    let java = c.clients(&Filter {
        software: Some("apache-kafka-java/4.1.1".into()),
        ..Filter::default()
    });
    assert_eq!(java.len(), 1);
    assert_eq!(java[0].connections_live, 0);
    assert_eq!(java[0].apis.iter().map(|a| a.requests).sum::<u64>(), 3);
    assert!(java[0].connections.is_empty());
}

#[test]
fn filters_by_principal_and_api_key() {
    let c = census(100);
    let a = c.open(addr(1), "User:a", "SSL").unwrap();
    a.request(0, 11, Instant::now());
    let b = c.open(addr(2), "User:b", "SSL").unwrap();
    b.request(1, 17, Instant::now());
    let by_principal = c.clients(&Filter {
        principal: Some("User:b".into()),
        ..Filter::default()
    });
    assert_eq!(by_principal.len(), 1);
    assert_eq!(by_principal[0].addresses, vec!["10.0.0.2".to_owned()]);
    let by_api = c.clients(&Filter {
        api_key: Some(0),
        ..Filter::default()
    });
    assert_eq!(by_api.len(), 1);
    assert_eq!(by_api[0].principal, "User:a");
}

#[test]
fn stays_within_its_cap_and_counts_what_it_evicted() {
    let c = census(1_000);
    let conn = c.open(addr(1), "User:x", "PLAINTEXT").unwrap();
    for i in 0..100_000 {
        conn.identify("User:x", Some(&sw(&format!("fake-{i}"), "1.0")), None);
        conn.request(3, 12, Instant::now());
        assert!(
            c.sizes().0 <= 1_000,
            "{} aggregates at step {i}",
            c.sizes().0
        );
    }
    let (kept, evicted) = c.sizes();
    assert_eq!(
        kept as u64 + evicted,
        100_000,
        "every aggregate is kept or counted as evicted"
    );
    // The live connection's aggregate is never evicted.
    let key = conn.key();
    assert_eq!(key.software_name, "fake-99999");
    assert!(c
        .clients(&Filter::default())
        .iter()
        .any(|v| v.software_name.as_deref() == Some("fake-99999")));
    // The metrics fold pairs past the first two into "other".
    let mut text = String::new();
    c.render_metrics(&mut text);
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("kshim_client_requests_total{"))
        .collect();
    assert!(series.len() <= 3, "{series:?}");
    assert!(series.iter().any(|l| l.contains("software_name=\"other\"")));
}

#[test]
fn software_fields_are_cut_and_labels_stay_safe() {
    let c = census(10);
    let conn = c.open(addr(1), "User:x", "PLAINTEXT").unwrap();
    let long = "a".repeat(10_000);
    conn.identify("User:x", Some(&sw(&long, "1\"}\n")), None);
    conn.request(3, 12, Instant::now());
    assert_eq!(conn.key().software_name.len(), MAX_SOFTWARE_CHARS);
    let mut text = String::new();
    c.render_metrics(&mut text);
    assert!(text.contains("software_version=\"invalid\""), "{text}");
    assert!(!text.contains("1\"}"));
}

#[test]
fn off_means_no_records() {
    let c = Arc::new(Census::new(CensusConfig {
        enabled: false,
        ..CensusConfig::default()
    }));
    assert!(c.open(addr(1), "User:x", "PLAINTEXT").is_none());
}

#[test]
fn a_connection_that_did_nothing_under_an_identity_is_not_counted_there() {
    let c = census(10);
    let conn = c.open(addr(1), "User:x", "PLAINTEXT").unwrap();
    conn.identify("User:x", Some(&sw("kgo", "v1")), None);
    conn.request(3, 12, Instant::now());
    drop(conn);
    let all = c.clients(&Filter::default());
    assert_eq!(
        all.len(),
        1,
        "the unnamed aggregate it started under is gone"
    );
    assert_eq!(all[0].software_name.as_deref(), Some("kgo"));
    assert_eq!(all[0].connections_total, 1);
    assert_eq!(c.sizes(), (1, 0));
}
