//! The files kshim reads at startup and on SIGHUP: the TOML config
//! (`Config::from_toml`, then `ConfigSource::build`, which resolves placeholders
//! and checks the result), the feature state file (`store::FileStore`,
//! `state.json`), the config override log (`store::OverrideLog`,
//! `config-overrides.log`), and a broker's properties file as `kshim config
//! check` reads it (`policy::properties`).
//!
//! Input: a selector byte, then the file's content. Selector & 3: 0 the TOML
//! config, 1 the state file, 2 the override log, 3 a properties file (checked
//! against the validators of a fixed config, at the level in the selector's
//! high bits).
//!
//! Checked beyond "no panic", since the store writes what it reads back:
//! - a state file that loads is saved and loads again as the same state;
//! - an override log that opens opens again with the same overrides, also after
//!   a commit of those overrides and after a compaction, every value spelled
//!   exactly as before.

#![no_main]

mod common;

use kshim::config::{parse_document, Config, ConfigSource};
use kshim::policy::properties;
use kshim::store::{FeatureStore, FileStore, OverrideLog, Overrides};
use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::OnceLock;

#[global_allocator]
static ALLOCATOR: common::BoundedAllocator = common::BoundedAllocator;

const TOML: u8 = 0;
const STATE: u8 = 1;
const OVERRIDES: u8 = 2;

struct Dirs {
    state: FileStore,
    state_file: PathBuf,
    overrides: PathBuf,
    validators: Config,
}

fn dirs() -> &'static Dirs {
    static DIRS: OnceLock<Dirs> = OnceLock::new();
    DIRS.get_or_init(|| {
        let root = common::scratch_dir("config-files");
        let state_dir = root.join("state");
        let overrides = root.join("overrides");
        std::fs::create_dir_all(&overrides).unwrap();
        let validators = Config::from_toml(
            r#"
[[policy.validators]]
key = "log.segment.bytes"
feature = "metadata.version"
level = 26
min = 3145728

[[policy.validators]]
key = "log.cleaner.min.cleanable.ratio"
feature = "kshim.ratio"
level = 1
min = 0.1
max = 0.9

[[policy.validators]]
key = "cleanup.policy"
feature = "kshim.ratio"
level = 2
allowed = ["delete", "compact"]
"#,
        )
        .expect("the fixed validators parse");
        Dirs {
            state: FileStore::open(&state_dir).expect("state directory"),
            state_file: state_dir.join("state.json"),
            overrides,
            validators,
        }
    })
}

fn toml(text: &str) {
    if let Ok(config) = Config::from_toml(text) {
        config.validate(&mut Vec::new());
    }
    // The way in kshim runs with: placeholders resolved, then checked. A
    // ${file:...} placeholder would read whatever path the input names; those
    // are left to the admin_bodies target, which confines them.
    if !text.contains("${file:") {
        if let Ok(doc) = parse_document(text) {
            let _ = ConfigSource::default().build(doc);
        }
    }
}

fn state(d: &Dirs, content: &[u8]) {
    std::fs::write(&d.state_file, content).unwrap();
    let Ok(Some(loaded)) = d.state.load() else {
        return;
    };
    d.state.save(&loaded).expect("saving a state that loaded");
    match d.state.load() {
        Ok(Some(again)) => assert_eq!(again, loaded, "the state changed in a save and load"),
        other => panic!("a saved state does not load again: {other:?}"),
    }
}

/// Every value as its JSON text, so that a number spelled differently (not
/// only one of another value) counts as a change.
fn spelled(o: &Overrides) -> Vec<(String, String)> {
    o.iter().map(|(k, v)| (k.clone(), v.to_string())).collect()
}

fn overrides(d: &Dirs, content: &[u8]) {
    let path = d.overrides.join("config-overrides.log");
    std::fs::write(&path, content).unwrap();
    let Ok(mut log) = OverrideLog::open(&d.overrides) else {
        return;
    };
    let first = spelled(log.active());
    let reopen = |what: &str| {
        let again = OverrideLog::open(&d.overrides)
            .unwrap_or_else(|e| panic!("the override log does not open again {what}: {e}"));
        assert_eq!(
            spelled(again.active()),
            first,
            "the overrides changed {what}"
        );
    };
    reopen("after a first open");
    let active = log.active().clone();
    log.commit(&active)
        .expect("committing the overrides in force");
    reopen("after a commit of the same overrides");
    log.compact().expect("compacting the log");
    reopen("after a compaction");
}

fn properties_file(d: &Dirs, level: i16, text: &str) {
    let props = properties::parse(text);
    let level_of = |_: &str| level;
    let _ = properties::check(&props, &d.validators.policies.validators, &level_of);
}

fuzz_target!(
    init: common::write_seeds_if_asked(seeds),
    |data: &[u8]| {
        let mut input = common::Input::new(data);
        let selector = input.byte();
        let content = input.rest();
        match selector & 3 {
            TOML => {
                if let Ok(text) = std::str::from_utf8(content) {
                    toml(text);
                }
            }
            STATE => state(dirs(), content),
            OVERRIDES => overrides(dirs(), content),
            _ => {
                if let Ok(text) = std::str::from_utf8(content) {
                    properties_file(dirs(), i16::from(selector >> 2), text);
                }
            }
        }
    }
);

// ---------------------------------------------------------------------------
// Seeds: the state file and override log as kshim writes them. The TOML configs
// (the README's examples and docker/) and a properties file are kept as files.
// ---------------------------------------------------------------------------

fn seeds() -> Vec<(String, Vec<u8>)> {
    let state = br#"{
  "version": 1,
  "cluster_id": "kshim-fuzz-cluster",
  "epoch": 3,
  "features": {
    "metadata.version": {"min_version_level": 1, "max_version_level": 27},
    "transaction.version": {"min_version_level": 1, "max_version_level": 2}
  },
  "upstream": {
    "epoch": 12,
    "cluster_id": "upstream-a",
    "supported": {"group.version": {"min_version": 0, "max_version": 1}},
    "features": {"group.version": {"min_version_level": 1, "max_version_level": 1}}
  }
}
"#;
    let log = concat!(
        r#"{"key":"config-tls.certificate","value":{"version":0,"value":"/etc/kshim/b.pem"}}"#,
        "\n",
        r#"{"key":"config-policy.create_topic.configs.\"retention.ms\".max","value":{"version":0,"value":222601422095.333222}}"#,
        "\n",
        r#"{"key":"config-policy.exempt_principals","value":{"version":0,"value":["User:ops"]}}"#,
        "\n",
        r#"{"key":"config-log.level","value":null}"#,
        "\n",
        r#"{"key":"commit-config","value":{"version":0,"config-keys":["tls.certificate","policy.create_topic.configs.\"retention.ms\".max","policy.exempt_principals"]}}"#,
        "\n",
        r#"{"key":"config-log.level","value":{"version":0,"value":"debug"}}"#,
        "\n",
        r#"{"key":"commit-con"#,
    );
    vec![
        (
            "state".into(),
            common::Seed::new().byte(STATE).bytes(state).done(),
        ),
        (
            "overrides".into(),
            common::Seed::new()
                .byte(OVERRIDES)
                .bytes(log.as_bytes())
                .done(),
        ),
    ]
}
