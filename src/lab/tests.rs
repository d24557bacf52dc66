use super::*;

fn spec(toml_text: &str) -> ScenarioSpec {
    toml::from_str(toml_text).expect("a scenario")
}

fn sw(name: &str, version: &str) -> ClientSoftware {
    ClientSoftware {
        name: name.into(),
        version: version.into(),
    }
}

#[test]
fn matches_every_condition_it_names() {
    let s = Scenario::new(spec(
        r#"
        name = "old-librdkafka"
        [match]
        software_name = "librdkafka"
        software_version = "2.0*"
        address = "10.1.0.0/16"
        "#,
    ))
    .unwrap();
    let lib = sw("librdkafka", "2.0.2");
    let who = |software, addr: &str| Who {
        software,
        principal: "User:ANONYMOUS",
        addr: addr.parse().unwrap(),
    };
    assert!(s.matches(&who(Some(&lib), "10.1.2.3")));
    assert!(!s.matches(&who(Some(&lib), "10.2.0.1")));
    assert!(!s.matches(&who(None, "10.1.2.3")));
    assert!(!s.matches(&who(Some(&sw("librdkafka", "2.12.1")), "10.1.2.3")));
}

#[test]
fn refuses_what_it_cannot_do() {
    let problems = Scenario::new(spec(
        r#"
        name = "bad name!"
        [match]
        address = "10.0.0.0/40"
        [api_versions]
        Nonsense = [0, 1]
        Produce = [5, 3]
        [[errors]]
        api = "Produce"
        error_code = 6
        [[tagged_fields]]
        tag = 0
        value = "00"
        [[delays]]
        api = "Fetch"
        ms = 999999999
        "#,
    ))
    .err()
    .expect("refused");
    let text = problems.join("\n");
    for needle in [
        "name:",
        "prefix length",
        "Nonsense",
        "[5, 3]",
        "Produce cannot be answered",
        "tag 0",
        "ms is more",
    ] {
        assert!(text.contains(needle), "{needle} missing from:\n{text}");
    }
}

#[test]
fn gives_an_error_the_number_of_times_asked() {
    let lab = Lab::new(vec![Scenario::new(spec(
        r#"
        name = "not-controller-twice"
        [[errors]]
        api = "UpdateFeatures"
        error_code = 41
        times = 2
        "#,
    ))
    .unwrap()]);
    let mut applied = Applied::default();
    let who = Who {
        software: None,
        principal: "User:ANONYMOUS",
        addr: "127.0.0.1".parse().unwrap(),
    };
    assert_eq!(
        applied.rematch(&lab, &who),
        vec!["not-controller-twice".to_owned()]
    );
    assert_eq!(applied.error_for(57).map(|e| e.code), Some(41));
    assert_eq!(applied.error_for(57).map(|e| e.code), Some(41));
    assert!(applied.error_for(57).is_none());
    assert!(applied.error_for(3).is_none());
    let view = &lab.list()[0];
    assert_eq!(view.applied["error"], 2);
    assert_eq!(view.errors_left["UpdateFeatures"], 0);
}

#[test]
fn changes_reach_connections_through_the_generation() {
    let lab = Lab::new(Vec::new());
    let mut applied = Applied::default();
    let who = Who {
        software: None,
        principal: "User:ANONYMOUS",
        addr: "127.0.0.1".parse().unwrap(),
    };
    applied.rematch(&lab, &who);
    assert!(applied.is_empty() && !applied.stale(&lab));
    lab.put(
        Scenario::new(spec(
            "name = \"slow\"\n[[delays]]\napi = \"Metadata\"\nms = 5",
        ))
        .unwrap(),
    )
    .unwrap();
    assert!(applied.stale(&lab));
    applied.rematch(&lab, &who);
    assert_eq!(applied.delay_for(3), Some(Duration::from_millis(5)));
    assert!(lab.remove("slow"));
    assert!(!lab.remove("slow"));
    assert!(applied.stale(&lab));
}

#[test]
fn the_toml_examples_in_docs_clients_md_are_valid_configs() {
    let doc = include_str!("../../docs/clients.md");
    let blocks: Vec<&str> = doc
        .split("```toml\n")
        .skip(1)
        .filter_map(|rest| rest.split("```").next())
        .collect();
    assert!(
        blocks.len() >= 2,
        "docs/clients.md has its census and lab examples"
    );
    for block in blocks {
        let config = crate::config::Config::from_toml(block)
            .unwrap_or_else(|e| panic!("docs/clients.md example does not load:\n{block}\n{e}"));
        for spec in &config.lab {
            Scenario::new(spec.clone()).expect("a checked scenario");
        }
    }
}

#[test]
fn a_release_scenario_serves_what_that_release_serves() {
    let who = Who {
        software: None,
        principal: "User:ANONYMOUS",
        addr: "127.0.0.1".parse().unwrap(),
    };
    let lab = Lab::new(vec![Scenario::new(spec(
        "name = \"as-4.0\"\nrelease = \"4.0\"\n[api_versions]\nMetadata = [0, 10]",
    ))
    .unwrap()]);
    let mut applied = Applied::default();
    applied.rematch(&lab, &who);
    let shape = applied.shape().expect("shaped");
    let release = shape.release.expect("a release");
    assert_eq!(release.name, "4.0");
    // Keys 93 and 94 came with 4.4: a 4.0 broker does not serve them.
    assert!(release.apis.iter().all(|a| a.0 != 93 && a.0 != 94));
    assert!(!release.levels.is_empty() && release.supported.contains_key("metadata.version"));
    // The scenario's own range comes first; the release fills in the rest.
    assert!(shape.ranges.contains(&(3, 0, 10)));
    let (_, _, produce_max) = *shape.ranges.iter().find(|r| r.0 == 0).unwrap();
    assert_eq!(applied.refusal(0, produce_max), None);
    let beyond = applied.refusal(0, produce_max + 1).expect("refused");
    assert!(
        beyond.contains("Produce") && beyond.contains("Kafka 4.0 as presented"),
        "{beyond}"
    );
    assert!(applied.refusal(3, 11).is_some());
    let missing = applied.refusal(93, 0).expect("refused");
    assert!(missing.contains("not offered by Kafka 4.0"), "{missing}");
    assert_eq!(applied.api_versions_max(), Some(4));

    // Narrowing alone changes what is advertised, not what is served.
    let narrowing = Lab::new(vec![Scenario::new(spec(
        "name = \"narrow\"\n[api_versions]\nProduce = [3, 5]\nApiVersions = [0, 2]",
    ))
    .unwrap()]);
    let mut applied = Applied::default();
    applied.rematch(&narrowing, &who);
    assert_eq!(applied.refusal(0, 11), None);
    assert_eq!(applied.api_versions_max(), None);

    let unknown = Scenario::new(spec("name = \"x\"\nrelease = \"3.9\""))
        .err()
        .expect("refused");
    assert!(
        unknown[0].contains("\"3.9\" is not a Kafka release"),
        "{unknown:?}"
    );
}

#[test]
fn presented_levels_turn_group_apis_off_as_a_broker_at_those_levels_does() {
    let gated = |text: &str| -> Vec<i16> {
        let s = Scenario::new(spec(text)).unwrap();
        [68, 76, 78, 88]
            .into_iter()
            .filter(|&api| s.take_error(api).is_some())
            .collect()
    };
    // Kafka 4.1's format leaves share.version at 0; 4.4's finalizes every group type.
    assert_eq!(gated("name = \"a\"\nrelease = \"4.1\""), [76, 78, 88]);
    assert!(gated("name = \"a\"\nrelease = \"4.4\"").is_empty());
    // A pinned level wins over the release's, and is merged with the real view.
    assert_eq!(
        gated("name = \"a\"\nrelease = \"4.4\"\nfeatures = { levels = { \"group.version\" = 0 } }"),
        [68]
    );
    assert_eq!(
        gated("name = \"a\"\nfeatures = { levels = { \"group.version\" = 0 } }"),
        [68]
    );
    // Without a release, a feature the pins do not name keeps its real level,
    // unless the pins replace the whole view.
    assert!(gated("name = \"a\"\nfeatures = { levels = { \"x.y\" = 1 } }").is_empty());
    assert_eq!(
        gated("name = \"a\"\nfeatures = { levels = { \"x.y\" = 1 }, replace = true }"),
        [68, 76, 78, 88]
    );
    let s = Scenario::new(spec("name = \"a\"\nrelease = \"4.1\"")).unwrap();
    let e = s.take_error(76).unwrap();
    assert_eq!(
        (e.code, e.gate),
        (35, Some("share.version 0 as presented (needs 1)"))
    );
}
