//! Bodies sent to the admin API's config endpoints, through the real router of
//! a standalone kshim started once per process (as `admin::tests` starts one):
//! `POST /admin/config/validate`, `PATCH /admin/config` (every override it
//! stores is removed again before the next input) and `DELETE
//! /admin/config/{key}`. Also, without the router, what those bodies go through:
//! override keys (`reconfig::keys::KeyPath`), JSON values as TOML
//! (`keys::to_toml`), overrides put into the config document (`keys::merge`)
//! and the result read as a `Config`.
//!
//! Input: a selector byte, then the body. Selector & 7: 0 the pure functions,
//! 1 validate, 2 PATCH, 3 DELETE with the body as the (percent-encoded) key,
//! 4 and up PUT `/admin/lab/scenarios/fuzz` (a discovery-lab scenario; removed
//! again before the next input).
//!
//! Placeholders may only read files below a scratch directory
//! (`config_providers.file_allowed_paths`), which holds one properties file.
//!
//! Checked beyond "no panic": a key that parses renders to a spelling that
//! parses to the same key.

#![no_main]

mod common;

use axum::body::Body;
use axum::http::Request;
use kshim::admin::router;
use kshim::config::{CliOverrides, Config, ConfigSource};
use kshim::reconfig::keys::{self, KeyPath};
use kshim::service::{LogControl, Service};
use kshim::store::Overrides;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;
use tower::ServiceExt;

#[global_allocator]
static ALLOCATOR: common::BoundedAllocator = common::BoundedAllocator;

const TOKEN: &str = "fuzz-admin-token";

const PURE: u8 = 0;
const VALIDATE: u8 = 1;
const PATCH: u8 = 2;
const DELETE: u8 = 3;
const LAB: u8 = 4;

struct Fixture {
    runtime: tokio::runtime::Runtime,
    service: Service,
    document: toml::Table,
}

fn config_text(dir: &std::path::Path) -> String {
    format!(
        r#"listen = "127.0.0.1:0"
data_dir = {data:?}

[config_providers]
file_allowed_paths = [{providers:?}]

[admin]
listen = "127.0.0.1:0"
token = "{TOKEN}"

[authorization]
alter_cluster = ["User:ops"]

[policy]
exempt_principals = ["User:platform"]

[policy.create_topic]
max_partitions = 48
max_replication_factor = 3
denied_names = ["tmp\\..*"]
forbidden_configs = ["unclean.leader.election.enable"]

[policy.create_topic.configs."retention.ms"]
min = 3600000
max = 2592000000

[[policy.validators]]
key = "log.segment.bytes"
feature = "metadata.version"
level = 26
min = 3145728
"#,
        data = dir.join("data"),
        providers = dir.join("providers"),
    )
}

impl Fixture {
    fn start() -> Fixture {
        let dir = common::scratch_dir("admin");
        std::fs::create_dir_all(dir.join("providers")).unwrap();
        std::fs::write(
            dir.join("providers/secrets.properties"),
            "password = from-a-file\ntoken=t0ken\n",
        )
        .unwrap();
        let text = config_text(&dir);
        let path = dir.join("kshim.toml");
        std::fs::write(&path, &text).unwrap();
        let document: toml::Table = text.parse().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let source = ConfigSource {
            file: Some(path),
            cli: CliOverrides::default(),
        };
        let log = LogControl {
            set: Arc::new(|filter: &str| kshim::config::check_log_filter(filter)),
            startup_filter: "info".into(),
        };
        let service = runtime
            .block_on(Service::start(source, Some(log)))
            .unwrap_or_else(|e| panic!("the fuzz fixture's kshim does not start: {e}"));
        Fixture {
            runtime,
            service,
            document,
        }
    }

    fn call(&self, method: &str, uri: &str, body: &[u8]) {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("content-type", "application/json")
            .body(Body::from(body.to_vec()))
            .unwrap();
        let app = router(Arc::clone(&self.service.admin));
        self.runtime.block_on(async {
            let response = app.oneshot(request).await.unwrap();
            let _ = axum::body::to_bytes(response.into_body(), 1 << 20).await;
        });
    }

    /// Removes every override a PATCH stored, so that each input starts from the file.
    fn restore(&self) {
        let registry = &self.service.registry;
        self.runtime.block_on(async {
            let stored = registry.overrides().await;
            if !stored.is_empty() {
                let removal: BTreeMap<String, Option<Value>> =
                    stored.keys().map(|k| (k.clone(), None)).collect();
                let _ = registry.patch(&removal).await;
            }
        });
    }
}

/// What a body goes through before any component sees it.
fn pure(fixture_document: &toml::Table, body: &[u8]) {
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(body) else {
        return;
    };
    let mut overrides = Overrides::new();
    for (key, value) in map {
        if let Ok(path) = KeyPath::parse(&key) {
            let rendered = path.render();
            match KeyPath::parse(&rendered) {
                Ok(again) => assert_eq!(again, path, "{key:?} renders as {rendered:?}"),
                Err(e) => panic!("{key:?} renders as {rendered:?}, which does not parse: {e}"),
            }
            let _ = path.is_under(&KeyPath {
                segments: vec!["policy".into()],
            });
        }
        let _ = keys::is_secret(&key);
        let _ = keys::is_placeholder(&value);
        let _ = keys::to_toml(&value);
        overrides.insert(key, value);
    }
    let _ = keys::shown(&overrides);
    if let Ok(merged) = keys::merge(fixture_document, &overrides) {
        if let Ok(config) = Config::from_document(&merged) {
            config.validate(&mut Vec::new());
        }
    }
}

thread_local! {
    static FIXTURE: Fixture = Fixture::start();
}

fuzz_target!(
    init: common::write_seeds_if_asked(seeds),
    |data: &[u8]| {
        let mut input = common::Input::new(data);
        let selector = (input.byte() & 7).min(LAB);
        let body = input.rest();
        FIXTURE.with(|f| match selector {
            PURE => pure(&f.document, body),
            VALIDATE => f.call("POST", "/admin/config/validate", body),
            PATCH => {
                f.call("PATCH", "/admin/config", body);
                f.restore();
            }
            DELETE => {
                let mut uri = String::from("/admin/config/");
                for b in body.iter().take(512) {
                    let _ = write!(uri, "%{b:02X}");
                }
                f.call("DELETE", &uri, b"");
            }
            _ => {
                f.call("PUT", "/admin/lab/scenarios/fuzz", body);
                f.call("DELETE", "/admin/lab/scenarios/fuzz", b"");
            }
        })
    }
);

// ---------------------------------------------------------------------------
// Seeds: the bodies the README and the admin tests send, through each door.
// ---------------------------------------------------------------------------

fn seeds() -> Vec<(String, Vec<u8>)> {
    let bodies: &[(&str, &str)] = &[
        ("log-level", r#"{"log.level": "debug"}"#),
        (
            "log-filter",
            r#"{"log.level": "info,kshim::upstream=debug"}"#,
        ),
        ("remove", r#"{"log.level": null}"#),
        (
            "retention-float",
            r#"{"policy.create_topic.configs.\"retention.ms\".max": 222601422095.333222}"#,
        ),
        (
            "policy-table",
            r#"{"policy.create_topic": {"max_partitions": 99, "allowed_names": ["a.*"]}, "policy.create_topic.max_partitions": 5}"#,
        ),
        (
            "validators",
            r#"{"policy.validators": [{"key": "log.segment.bytes", "feature": "metadata.version", "level": 26, "min": 1048576, "max": 1e10}]}"#,
        ),
        (
            "exempt",
            r#"{"policy.exempt_principals": ["User:ops", "User:platform"]}"#,
        ),
        (
            "authorization",
            r#"{"authorization.alter_cluster": ["User:alice"]}"#,
        ),
        (
            "admin-token",
            r#"{"admin.token": "${env:KSHIM_ADMIN_TOKEN}", "admin.read_requires_auth": false}"#,
        ),
        (
            "tls-restart",
            r#"{"tls.keystore": "/etc/kshim/server-2027.p12", "tls.keystore_password": "${file:/etc/kshim/secrets/2027.properties:password}"}"#,
        ),
        ("restart-key", r#"{"listen": "0.0.0.0:1"}"#),
        (
            "unknown-key",
            r#"{"no.such.key": [1, 2.5, true, {"a": -0}]}"#,
        ),
        ("bad-key", r#"{"a..b": 1, "\"quoted.part\".x": "y"}"#),
        ("empty", r#"{}"#),
        ("not-an-object", r#"[1, 2, 3]"#),
    ];
    let mut out = Vec::new();
    for (name, body) in bodies {
        for (door, selector) in [("pure", PURE), ("validate", VALIDATE), ("patch", PATCH)] {
            out.push((
                format!("{door}-{name}"),
                common::Seed::new()
                    .byte(selector)
                    .bytes(body.as_bytes())
                    .done(),
            ));
        }
    }
    for key in ["log.level", r#"policy.create_topic.configs."retention.ms""#] {
        out.push((
            format!("delete-{}", key.replace(['"', '.'], "_")),
            common::Seed::new()
                .byte(DELETE)
                .bytes(key.as_bytes())
                .done(),
        ));
    }
    let scenarios: &[(&str, &str)] = &[
        (
            "pinned",
            r#"{"match": {"software_name": "librdkafka", "software_version": "2.0*", "address": "10.0.0.0/8"}, "features": {"epoch": 1, "levels": {"group.version": 0}, "min_zero_filter": false}}"#,
        ),
        (
            "shape",
            r#"{"tagged_fields": [{"tag": 12345, "value": "deadbeef"}], "api_versions": {"Produce": [0, 2], "57": [0, 0]}}"#,
        ),
        (
            "errors",
            r#"{"errors": [{"api": "UpdateFeatures", "error_code": 41, "times": 2}], "delays": [{"api": "Metadata", "ms": 5}]}"#,
        ),
        (
            "refused",
            r#"{"errors": [{"api": "Produce", "error_code": 6}], "name": "other"}"#,
        ),
    ];
    for (name, body) in scenarios {
        out.push((
            format!("lab-{name}"),
            common::Seed::new().byte(LAB).bytes(body.as_bytes()).done(),
        ));
    }
    out
}
