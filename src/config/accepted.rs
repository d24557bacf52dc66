//! Every key path the config file accepts, for the check that
//! docs/reference/config.md names each of them and no other
//! (tests/docs_reference.rs). Nothing here is used while kshim runs.
//!
//! The keys come from the parser itself: a sample document with every table
//! is parsed while the walker records each key it reads. Names an operator
//! chooses (feature names, node ids, addresses, topic config keys, API names)
//! are written as the capitalised placeholders config.md uses for them.

use super::walk::recording;
use super::{parse_document, Config};
use crate::lab::{DelaySpec, ErrorSpec, ExtraTag, MatchSpec, PinnedFeatures, ScenarioSpec};
use std::collections::{BTreeMap, BTreeSet};

/// Every table the parser reads, each map the operator names the keys of with
/// one key (its placeholder), and one item in each list of tables. Other keys
/// need not be given, as the walker records every key it asks for, present or
/// not; except `admin.principals`, which is asked for only when present.
const EVERY_TABLE: &str = r#"
max_connections_per_ip_overrides = { "IP" = 1 }
[discovery]
[features]
[features.supported]
"NAME" = { min = 1, max = 1 }
[features.bootstrap]
"NAME" = 1
[features.dependencies]
"NAME" = [{ level = 1, requires = { "OTHER" = 1 } }]
[features.ownership]
[authorization]
[upstream]
[upstream.listeners]
[upstream.listeners.ports]
"NODE" = 1
[upstream.sasl]
[upstream.tls]
[cluster]
[policy]
[policy.create_topic]
[policy.create_topic.configs."KEY"]
[[policy.validators]]
[tls]
[admin]
principals = ["User:NAME"]
[admin.tls]
[log]
[config_providers]
[census]
[lab]
"#;

/// The path of every key the config file accepts, such as `listen`,
/// `upstream.tls.ca`, `features.supported."NAME".min` or
/// `policy.validators[].min` (as `key_paths` writes them). Exists for the
/// check of docs/reference/config.md.
///
/// `[lab]` is read without the walker: its one key, `scenarios`, holds
/// scenario tables that serde reads. Their keys are those of a scenario with
/// every field given, serialized; the sample parse checks that serde takes
/// them back.
///
/// # Panics
///
/// When the sample document has fallen behind the parser: a key the parser no
/// longer reads, or a table the parser reads that the sample lacks (the keys
/// in it would go unseen).
pub fn accepted_keys() -> BTreeSet<String> {
    let mut document = parse_document(EVERY_TABLE).expect("the sample document is TOML");
    let scenario =
        toml::Value::try_from(every_scenario_field()).expect("a scenario serializes to TOML");
    let lab =
        toml::Table::from_iter([("scenarios".to_owned(), toml::Value::Array(vec![scenario]))]);
    document.insert("lab".into(), toml::Value::Table(lab.clone()));

    let (parsed, recorded) = recording(|| Config::from_document(&document));
    // Placeholders are not valid feature names, node ids or addresses, so the
    // sample has errors; only those saying a key is not read matter here.
    let unread: Vec<String> = parsed
        .err()
        .into_iter()
        .flat_map(|e| e.0)
        .filter(|e| e.message == "unknown key" || e.message.starts_with("unknown field"))
        .map(|e| e.to_string())
        .collect();
    assert!(
        unread.is_empty(),
        "the sample document of config::accepted_keys names keys the parser does not read: {unread:?}"
    );
    assert!(
        recorded.missing_tables.is_empty(),
        "the parser reads tables that the sample document of config::accepted_keys lacks: {:?}",
        recorded.missing_tables
    );
    let mut keys = recorded.keys;
    keys.extend(key_paths(&toml::Table::from_iter([(
        "lab".to_owned(),
        toml::Value::Table(lab),
    )])));
    keys
}

/// A scenario with every field given, so that every key shows when it is
/// serialized. Written out field by field (no `..Default::default()`), so that
/// a new field does not build until it is given here too.
fn every_scenario_field() -> ScenarioSpec {
    ScenarioSpec {
        name: "NAME".into(),
        matches: MatchSpec {
            software_name: Some("NAME".into()),
            software_version: Some("1".into()),
            principal: Some("User:NAME".into()),
            address: Some("127.0.0.1".into()),
        },
        features: Some(PinnedFeatures {
            epoch: Some(1),
            levels: Some(BTreeMap::from([("NAME".to_owned(), 1)])),
            min_zero_filter: true,
            replace: true,
        }),
        tagged_fields: vec![ExtraTag {
            tag: 12_345,
            value: "00".into(),
        }],
        api_versions: BTreeMap::from([("API".to_owned(), [0, 0])]),
        errors: vec![ErrorSpec {
            api: "Metadata".into(),
            error_code: 41,
            times: Some(1),
        }],
        delays: vec![DelaySpec {
            api: "Metadata".into(),
            ms: 1,
        }],
        release: Some("4.1".into()),
    }
}

/// The key paths of a TOML table, written as `accepted_keys` writes them:
/// - keys joined with `.`; a key in capitals is a placeholder for a name the
///   operator chooses and is written in double quotes (`"NAME"`), as is a key
///   that needs them in TOML;
/// - a table is not a key of its own, the keys in it are; but an empty table
///   is, so that a table named with nothing under it still shows;
/// - the keys of the items of a list of tables are below `path[]`.
pub fn key_paths(table: &toml::Table) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    paths_into(&mut out, "", table);
    out
}

fn paths_into(out: &mut BTreeSet<String>, prefix: &str, table: &toml::Table) {
    for (key, value) in table {
        let path = format!("{prefix}{}", written_key(key));
        match value {
            toml::Value::Table(t) if !t.is_empty() => paths_into(out, &format!("{path}."), t),
            toml::Value::Array(items)
                if !items.is_empty() && items.iter().all(|i| i.is_table()) =>
            {
                for item in items.iter().filter_map(toml::Value::as_table) {
                    paths_into(out, &format!("{path}[]."), item);
                }
            }
            _ => {
                out.insert(path);
            }
        }
    }
}

fn written_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    let placeholder =
        key.chars().any(|c| c.is_ascii_uppercase()) && !key.chars().any(|c| c.is_ascii_lowercase());
    if bare && !placeholder {
        key.to_owned()
    } else {
        format!("\"{key}\"")
    }
}
