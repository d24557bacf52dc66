use super::*;

#[test]
fn requests_are_counted_by_key_version_and_outcome() {
    let m = Metrics::new();
    m.request(18, 4, Outcome::Answered, Duration::from_micros(40));
    m.request(18, 4, Outcome::Answered, Duration::from_millis(3));
    m.request(0, 11, Outcome::Forwarded, Duration::from_millis(1));
    m.request(57, 1, Outcome::Rejected, Duration::from_secs(60));
    // Out-of-range keys and versions share the last slot rather than panic.
    m.request(i16::MAX, -1, Outcome::Rejected, Duration::ZERO);
    let text = m.render(&Snapshot::default());
    assert!(text.contains(
        "kshim_requests_total{api=\"ApiVersions\",api_key=\"18\",version=\"4\",outcome=\"answered\"} 2"
    ));
    assert!(text.contains(
        "kshim_requests_total{api=\"Produce\",api_key=\"0\",version=\"11\",outcome=\"forwarded\"} 1"
    ));
    assert!(text.contains(
        "kshim_request_duration_seconds_bucket{api=\"ApiVersions\",outcome=\"answered\",le=\"0.0001\"} 1"
    ));
    assert!(text.contains(
        "kshim_request_duration_seconds_bucket{api=\"ApiVersions\",outcome=\"answered\",le=\"0.005\"} 2"
    ));
    assert!(text.contains(
        "kshim_request_duration_seconds_bucket{api=\"UpdateFeatures\",outcome=\"rejected\",le=\"10\"} 0"
    ));
    assert!(text.contains(
        "kshim_request_duration_seconds_bucket{api=\"UpdateFeatures\",outcome=\"rejected\",le=\"+Inf\"} 1"
    ));
    assert_eq!(m.requests_of(18, Outcome::Answered), 2);
}

#[test]
fn open_connections_follow_their_guards() {
    let m = Arc::new(Metrics::new());
    let a = m.connection_opened(ListenerRoute::Bootstrap);
    let b = m.connection_opened(ListenerRoute::Broker);
    let c = m.connection_opened(ListenerRoute::Broker);
    drop(a);
    drop(c);
    let text = m.render(&Snapshot::default());
    assert!(text.contains("kshim_connections_open{route=\"bootstrap\"} 0\n"));
    assert!(text.contains("kshim_connections_open{route=\"broker\"} 1\n"));
    assert!(text.contains("kshim_connections_accepted_total{route=\"bootstrap\"} 1\n"));
    assert!(text.contains("kshim_connections_accepted_total{route=\"broker\"} 2\n"));
    drop(b);
    assert!(m
        .render(&Snapshot::default())
        .contains("kshim_connections_open{route=\"broker\"} 0\n"));
}

#[test]
fn gauges_come_from_the_snapshot() {
    let m = Metrics::new();
    let text = m.render(&Snapshot {
        epoch: 7,
        levels: vec![("metadata.version".into(), 27)],
        overrides: 2,
        certificate_not_after: vec![("client", 1_800_000_000)],
        cluster: None,
        upstream: Some(UpstreamSnapshot {
            reachable: true,
            brokers: vec![(1, true), (2, false)],
            refreshes_ok: 3,
            refreshes_failed: 1,
            stale_views: 4,
        }),
        conflicts: vec![("acme.widgets".into(), "Broker 2".into())],
    });
    for line in [
        "kshim_finalized_features_epoch 7",
        "kshim_finalized_feature_level{feature=\"metadata.version\"} 27",
        "kshim_config_overrides 2",
        "kshim_tls_certificate_expiry_timestamp_seconds{role=\"client\"} 1800000000",
        "kshim_upstream_broker_up{node=\"2\"} 0",
        "kshim_upstream_refreshes_total{result=\"failed\"} 1",
        "kshim_upstream_feature_views_ignored_total 4",
        "kshim_feature_incompatibilities 1",
        "kshim_feature_incompatible{feature=\"acme.widgets\",supporter=\"Broker 2\"} 1",
        "kshim_build_info{version=\"",
    ] {
        assert!(text.contains(line), "missing {line:?} in\n{text}");
    }
}
