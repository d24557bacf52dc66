//! The admin API as a router, without a socket: every request goes through
//! `router(...).oneshot(...)` against a standalone kshim started on a temporary
//! data directory.

use super::*;
use crate::config::{CliOverrides, ConfigSource};
use crate::service::Service;
use axum::http::Request;
use std::path::{Path, PathBuf};
use tower::ServiceExt;

const TOKEN: &str = "t0ken-for-the-admin-api";

struct Fixture {
    dir: tempfile::TempDir,
    service: Service,
}

impl Fixture {
    async fn start(extra: &str) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        Fixture::start_in(dir, extra).await
    }

    async fn start_in(dir: tempfile::TempDir, extra: &str) -> Fixture {
        Fixture::with_admin(dir, &format!("token = \"{TOKEN}\""), extra).await
    }

    /// `admin` goes into the `[admin]` table, `extra` after it.
    async fn with_admin(dir: tempfile::TempDir, admin: &str, extra: &str) -> Fixture {
        let config = dir.path().join("kshim.toml");
        std::fs::write(
            &config,
            format!(
                "listen = \"127.0.0.1:0\"\ndata_dir = {:?}\n\n[admin]\nlisten = \"127.0.0.1:0\"\n{admin}\n\n{extra}\n",
                dir.path().join("data")
            ),
        )
        .unwrap();
        let source = ConfigSource {
            file: Some(config),
            cli: CliOverrides::default(),
        };
        let service = Service::start(source, Some(log_control())).await.unwrap();
        Fixture { dir, service }
    }

    async fn call(
        &self,
        method: &str,
        uri: &str,
        token: Option<&str>,
        body: &str,
    ) -> (StatusCode, Value) {
        let (status, text) = self
            .call_text(method, uri, token, body.as_bytes().to_vec())
            .await;
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    async fn call_text(
        &self,
        method: &str,
        uri: &str,
        token: Option<&str>,
        body: Vec<u8>,
    ) -> (StatusCode, String) {
        let mut request = Request::builder().method(method).uri(uri);
        if let Some(t) = token {
            request = request.header("authorization", format!("Bearer {t}"));
        }
        let response = router(Arc::clone(&self.service.admin))
            .oneshot(request.body(Body::from(body)).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 24)
            .await
            .unwrap();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    fn max_partitions(&self) -> String {
        format!("{:?}", self.service.context.policies.load().create_topic)
    }
}

#[tokio::test]
async fn a_stopping_kshim_is_not_ready_but_alive() {
    let f = Fixture::start("").await;
    let (status, body) = f.call("GET", "/readyz", None, "").await;
    assert_eq!(
        (status, &body["checks"]["stopping"]),
        (StatusCode::OK, &json!(false)),
        "{body}"
    );
    f.service
        .admin
        .stopping
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let (status, body) = f.call("GET", "/readyz", None, "").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(
        (&body["ready"], &body["checks"]["stopping"]),
        (&json!(false), &json!(true))
    );
    let (status, _) = f.call("GET", "/livez", None, "").await;
    assert_eq!(status, StatusCode::OK);
}

#[test]
fn a_short_upstream_outage_leaves_kshim_ready_and_a_long_one_does_not() {
    use std::time::Duration;
    let default = Duration::from_millis(crate::config::UpstreamConfig::default().unready_after_ms);
    let ready = |down: Option<u64>| {
        super::upstream_readiness(true, down.map(Duration::from_secs), default, (3, 3))
    };
    assert!(ready(None).0);
    let (blip, said) = ready(Some(10));
    assert!(blip, "a 10 s outage: {said}");
    assert!(said.contains("stopped answering 10 s ago"), "{said}");
    let (outage, said) = ready(Some(120));
    assert!(!outage, "a 2-minute outage: {said}");
    // Before the first answer, and with no broker answering, never ready.
    assert!(!super::upstream_readiness(false, None, default, (0, 0)).0);
    assert!(!super::upstream_readiness(true, None, default, (3, 0)).0);
}

#[tokio::test]
async fn health_is_open_and_everything_else_needs_the_token() {
    let f = Fixture::start("").await;
    let (status, body) = f.call("GET", "/healthz", None, "").await;
    assert_eq!(
        (status, body["status"].as_str()),
        (StatusCode::OK, Some("ok"))
    );
    let (status, body) = f.call("GET", "/readyz", None, "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["ready"], true);

    for (method, uri, body) in [
        ("GET", "/admin/config", ""),
        ("GET", "/metrics", ""),
        ("GET", "/admin/features", ""),
        ("PATCH", "/admin/config", "{\"log.level\": \"debug\"}"),
        (
            "POST",
            "/admin/config/validate",
            "{\"log.level\": \"debug\"}",
        ),
        ("DELETE", "/admin/config/log.level", ""),
    ] {
        for token in [None, Some("wrong"), Some("")] {
            let (status, answer) = f.call(method, uri, token, body).await;
            assert_eq!(
                status,
                StatusCode::UNAUTHORIZED,
                "{method} {uri} with {token:?}: {answer}"
            );
            assert!(answer["error"].as_str().unwrap().contains("bearer token"));
        }
    }
    let (status, body) = f.call("GET", "/admin/config", Some(TOKEN), "").await;
    assert_eq!((status, body), (StatusCode::OK, json!({})));
    let (status, _) = f.call("GET", "/nowhere", Some(TOKEN), "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = f.call("PUT", "/admin/config", Some(TOKEN), "{}").await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test]
async fn reads_can_be_opened_and_writes_stay_closed() {
    let f = Fixture::with_admin(
        tempfile::tempdir().unwrap(),
        "read_requires_auth = false",
        "",
    )
    .await;
    let (status, text) = f.call_text("GET", "/metrics", None, Vec::new()).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        text.contains("# TYPE kshim_requests_total counter"),
        "{text}"
    );
    let (status, body) = f
        .call("PATCH", "/admin/config", None, "{\"log.level\": \"debug\"}")
        .await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "no credential is configured: {body}"
    );
    assert!(body["error"]
        .as_str()
        .unwrap()
        .contains("none is configured"));
}

#[tokio::test]
async fn a_patch_is_validated_whole_stored_and_applied() {
    let f = Fixture::start("[policy.create_topic]\nmax_partitions = 100\n").await;
    let before = f.max_partitions();
    assert!(before.contains("100"), "{before}");

    let (status, body) = f
        .call(
            "PATCH",
            "/admin/config",
            Some(TOKEN),
            r#"{"policy.create_topic.max_partitions": 12, "policy.exempt_principals": ["User:ops"]}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["applied"], json!(["policies"]));
    assert_eq!(body["config"]["policy.create_topic.max_partitions"], 12);
    assert!(f.max_partitions().contains("12"));
    assert!(f.service.context.policies.load().exempts("User:ops"));
    let log = std::fs::read_to_string(f.dir.path().join("data/config-overrides.log")).unwrap();
    assert!(log.contains("\"commit-config\""), "{log}");

    // One bad key refuses the whole change, and nothing moves.
    let (status, body) = f
        .call(
            "PATCH",
            "/admin/config",
            Some(TOKEN),
            r#"{"policy.create_topic.max_partitions": 50, "policy.create_topic.min_partitions": "two"}"#,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let why = body["errors"]["policy.create_topic.min_partitions"][0]
        .as_str()
        .unwrap();
    assert!(why.contains("integer"), "{why}");
    assert!(f.max_partitions().contains("12"), "nothing was applied");
    let (_, now) = f.call("GET", "/admin/config", Some(TOKEN), "").await;
    assert_eq!(
        now["policy.create_topic.max_partitions"], 12,
        "nothing was stored"
    );

    for (body, key, expected) in [
        (r#"{"listen": "127.0.0.1:1"}"#, "listen", "needs a restart"),
        (
            r#"{"upstream.bootstrap": "x:1"}"#,
            "upstream.bootstrap",
            "needs a restart",
        ),
        (r#"{"colour": "blue"}"#, "colour", "unknown key"),
        (r#"{"tls.wat": 1}"#, "tls.wat", "unknown key"),
        (r#"{"tls": {}}"#, "tls", "one by one"),
        (r#"{"a..b": 1}"#, "a..b", "is not a key"),
        (r#"{"log.level": "info,=bad=="}"#, "log.level", "log filter"),
        (
            r#"{"authorization.alter_cluster": ["alice"]}"#,
            "authorization.alter_cluster",
            "TYPE:NAME",
        ),
        (
            r#"{"tls.certificate": "/etc/kshim/c.pem", "tls.key": "/etc/kshim/c.key"}"#,
            "tls (turning it on or off)",
            "restart",
        ),
    ] {
        let (status, answer) = f.call("PATCH", "/admin/config", Some(TOKEN), body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        let messages = answer["errors"][key].to_string();
        assert!(messages.contains(expected), "{body}: {answer}");
    }
    assert!(f.max_partitions().contains("12"));
}

#[tokio::test]
async fn a_change_whose_caller_goes_away_is_stored_and_applied_whole() {
    let f = Fixture::start("[policy.create_topic]\nmax_partitions = 100\n").await;
    let key = "policy.create_topic.max_partitions";
    let patch = BTreeMap::from([(key.to_string(), Some(json!(12)))]);
    // Polled once and dropped, as an admin client that hangs up while the
    // change is being stored.
    let registry = &f.service.registry;
    let mut change = Box::pin(registry.patch(&patch));
    assert!(
        futures::poll!(change.as_mut()).is_pending(),
        "it waits for the store"
    );
    drop(change);
    // The registry's lock is free again once the change has ended.
    assert_eq!(registry.overrides().await.get(key), Some(&json!(12)));
    assert!(f.max_partitions().contains("12"), "stored, and so applied");
    let (_, metrics) = f
        .call_text("GET", "/metrics", Some(TOKEN), Vec::new())
        .await;
    let counted = "kshim_config_reloads_total{source=\"admin\",result=\"applied\"} 1";
    assert!(metrics.contains(counted), "and counted:\n{metrics}");
}

#[tokio::test]
async fn bad_bodies_get_clear_errors_and_change_nothing() {
    let f = Fixture::start("").await;
    for (body, status, expected) in [
        ("{not json", StatusCode::BAD_REQUEST, "not JSON"),
        ("[1, 2]", StatusCode::BAD_REQUEST, "JSON object"),
        ("\"x\"", StatusCode::BAD_REQUEST, "JSON object"),
        ("{}", StatusCode::BAD_REQUEST, "names no key"),
        ("", StatusCode::BAD_REQUEST, "not JSON"),
        (
            "{\"log.level\": \"de\u{0}bug\"",
            StatusCode::BAD_REQUEST,
            "not JSON",
        ),
    ] {
        for uri in ["/admin/config", "/admin/config/validate"] {
            let method = if uri.ends_with("validate") {
                "POST"
            } else {
                "PATCH"
            };
            let (got, answer) = f.call(method, uri, Some(TOKEN), body).await;
            assert_eq!(got, status, "{body:?} to {uri}: {answer}");
            assert!(
                answer["error"].as_str().unwrap().contains(expected),
                "{answer}"
            );
        }
    }
    let huge = format!("{{\"log.level\": \"{}\"}}", "x".repeat(200 * 1024));
    let (status, text) = f
        .call_text("PATCH", "/admin/config", Some(TOKEN), huge.into_bytes())
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{text}");
    let (status, text) = f
        .call_text(
            "PATCH",
            "/admin/config",
            Some(TOKEN),
            vec![0xff, 0xfe, 0x00],
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    let many: serde_json::Map<String, Value> = (0..300)
        .map(|i| (format!("policy.x{i}"), json!(1)))
        .collect();
    let (status, body) = f
        .call(
            "PATCH",
            "/admin/config",
            Some(TOKEN),
            &Value::Object(many).to_string(),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (_, now) = f.call("GET", "/admin/config", Some(TOKEN), "").await;
    assert_eq!(now, json!({}));
    assert!(
        !f.dir.path().join("data/config-overrides.log").exists() || {
            let log =
                std::fs::read_to_string(f.dir.path().join("data/config-overrides.log")).unwrap();
            !log.contains("config-log.level")
        }
    );
}

#[tokio::test]
async fn random_bodies_never_change_anything() {
    use rand::{Rng, SeedableRng};
    let f = Fixture::start("[policy.create_topic]\nmax_partitions = 100\n").await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(20261202);
    let keys = [
        "tls.key",
        "policy",
        "policy.create_topic",
        "log.level",
        "admin.token",
        "listen",
        "",
        "\"",
        "a.\"b.c\".d",
    ];
    for round in 0..400 {
        let body: Vec<u8> = if round % 2 == 0 {
            (0..rng.gen_range(0..300)).map(|_| rng.gen()).collect()
        } else {
            // Well-formed JSON objects of odd keys and values of every type.
            let key = keys[rng.gen_range(0..keys.len())];
            let value = match rng.gen_range(0..6) {
                0 => json!(rng.gen::<i64>()),
                1 => json!(rng.gen::<f64>()),
                2 => json!([rng.gen::<u8>(), "x", null]),
                3 => json!({"nested": {"deeper": [1, {"a": null}]}}),
                4 => json!("${file:/proc/self/environ:PATH}"),
                _ => json!("${env:}"),
            };
            json!({ key: value }).to_string().into_bytes()
        };
        for (method, uri) in [
            ("PATCH", "/admin/config"),
            ("POST", "/admin/config/validate"),
        ] {
            let (status, text) = f.call_text(method, uri, Some(TOKEN), body.clone()).await;
            assert!(
                status.is_client_error() || (uri.ends_with("validate") && status == StatusCode::OK),
                "{method} {body:?}: {status} {text}"
            );
        }
    }
    let (_, now) = f.call("GET", "/admin/config", Some(TOKEN), "").await;
    assert_eq!(now, json!({}), "nothing was stored");
    assert!(f.max_partitions().contains("100"), "nothing was applied");
}

#[tokio::test]
async fn validate_answers_in_the_seeds_shape_and_stores_nothing() {
    let f = Fixture::start("").await;
    let (status, body) = f
        .call(
            "POST",
            "/admin/config/validate",
            Some(TOKEN),
            r#"{"log.level": "kshim=debug", "policy.exempt_principals": ["User:ops"]}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["valid"], true, "{body}");
    assert_eq!(
        body["configs"],
        json!(["log.level", "policy.exempt_principals"])
    );
    assert_eq!(body["errors"], json!({}));
    let (status, body) = f
        .call(
            "POST",
            "/admin/config/validate",
            Some(TOKEN),
            r#"{"node_id": 3}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["valid"], false, "{body}");
    assert!(body["errors"]["node_id"].to_string().contains("restart"));
    let (_, now) = f.call("GET", "/admin/config", Some(TOKEN), "").await;
    assert_eq!(now, json!({}));
}

#[tokio::test]
async fn delete_restores_the_file_value_and_overrides_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_owned();
    let f = Fixture::start_in(dir, "[policy.create_topic]\nmax_partitions = 100\n").await;
    let (status, _) = f
        .call("PATCH", "/admin/config", Some(TOKEN), r#"{"policy.create_topic.max_partitions": 7, "authorization.alter_cluster": ["User:ops"]}"#)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(!f
        .service
        .context
        .authorizer
        .may_alter_cluster("User:ANONYMOUS"));

    // A restart: the overrides are read back and applied before kshim serves.
    let Fixture { dir, service } = f;
    drop(service);
    let f = Fixture::start_in(dir, "[policy.create_topic]\nmax_partitions = 100\n").await;
    assert!(f.max_partitions().contains('7'), "{}", f.max_partitions());
    assert!(f.service.context.authorizer.may_alter_cluster("User:ops"));
    assert!(!f
        .service
        .context
        .authorizer
        .may_alter_cluster("User:ANONYMOUS"));

    let (status, body) = f
        .call(
            "DELETE",
            "/admin/config/policy.create_topic.max_partitions",
            Some(TOKEN),
            "",
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["applied"], json!(["policies"]));
    assert!(
        f.max_partitions().contains("100"),
        "the file's value is back"
    );
    let (status, body) = f
        .call(
            "DELETE",
            "/admin/config/policy.create_topic.max_partitions",
            Some(TOKEN),
            "",
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = f
        .call(
            "PATCH",
            "/admin/config",
            Some(TOKEN),
            r#"{"authorization.alter_cluster": null}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "null removes an override: {body}");
    assert!(f
        .service
        .context
        .authorizer
        .may_alter_cluster("User:ANONYMOUS"));
    assert!(data.join("data/config-overrides.log").exists());
}

#[tokio::test]
async fn placeholders_are_stored_raw_and_secrets_never_shown() {
    let f = Fixture::start("").await;
    std::env::set_var("KSHIM_ADMIN_TEST_TOKEN", "rotated-token-value");
    let (status, body) = f
        .call(
            "PATCH",
            "/admin/config",
            Some(TOKEN),
            r#"{"admin.token": "${env:KSHIM_ADMIN_TEST_TOKEN}"}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["applied"], json!(["admin access"]));
    let (status, _) = f.call("GET", "/admin/config", Some(TOKEN), "").await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "the old token no longer works"
    );
    let (status, body) = f
        .call("GET", "/admin/config", Some("rotated-token-value"), "")
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body["admin.token"], "${env:KSHIM_ADMIN_TEST_TOKEN}",
        "stored raw"
    );
    let log = std::fs::read_to_string(f.dir.path().join("data/config-overrides.log")).unwrap();
    assert!(
        !log.contains("rotated-token-value"),
        "the resolved value is not stored"
    );

    // A literal secret is masked in every answer.
    let (status, body) = f
        .call(
            "PATCH",
            "/admin/config",
            Some("rotated-token-value"),
            r#"{"admin.token": "literal-secret-token"}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["config"]["admin.token"], "[hidden]");
    assert!(!body.to_string().contains("literal-secret-token"));
    let (_, body) = f
        .call("GET", "/admin/config", Some("literal-secret-token"), "")
        .await;
    assert_eq!(body["admin.token"], "[hidden]");

    // A placeholder whose value would show up in an error message is scrubbed.
    std::env::set_var("KSHIM_ADMIN_TEST_FILTER", "secret-filter-text=nope=");
    let (status, body) = f
        .call(
            "PATCH",
            "/admin/config",
            Some("literal-secret-token"),
            r#"{"log.level": "${env:KSHIM_ADMIN_TEST_FILTER}"}"#,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(!body.to_string().contains("secret-filter-text"), "{body}");
    assert!(
        body.to_string().contains("${env:KSHIM_ADMIN_TEST_FILTER}"),
        "{body}"
    );
}

#[tokio::test]
async fn path_tricks_in_file_placeholders_are_refused() {
    let f = Fixture::start(
        "[config_providers]\nfile_allowed_paths = [\"/nonexistent-kshim-secrets\"]\n",
    )
    .await;
    let outside = f.dir.path().join("outside.properties");
    std::fs::write(&outside, "token=abcdef\n").unwrap();
    for (spec, expected) in [
        ("relative/secrets.properties:token".to_owned(), "absolute"),
        (
            "/nonexistent-kshim-secrets/../etc/passwd:root".to_owned(),
            ". or ..",
        ),
        (format!("{}:token", outside.display()), "file_allowed_paths"),
        ("/dev/zero:token".to_owned(), "file_allowed_paths"),
        ("/etc/hostname".to_owned(), "PATH:KEY"),
    ] {
        let body = json!({"admin.token": format!("${{file:{spec}}}")}).to_string();
        let (status, answer) = f.call("PATCH", "/admin/config", Some(TOKEN), &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{spec}: {answer}");
        assert!(
            answer["errors"]["admin.token"]
                .to_string()
                .contains(expected),
            "{spec}: {answer}"
        );
    }
    let (status, _) = f.call("GET", "/admin/config", Some(TOKEN), "").await;
    assert_eq!(status, StatusCode::OK, "the token in force is unchanged");
}

#[tokio::test]
async fn tls_material_is_swapped_whole_or_not_at_all() {
    let dir = tempfile::tempdir().unwrap();
    let (cert_a, key_a) = self_signed(dir.path(), "a");
    let (cert_b, key_b) = self_signed(dir.path(), "b");
    let f = Fixture::start_in(
        dir,
        &format!("[tls]\ncertificate = {cert_a:?}\nkey = {key_a:?}\n"),
    )
    .await;
    let leaf = |f: &Fixture| f.service.registry.certificate_expiry();
    assert_eq!(
        leaf(&f).len(),
        1,
        "the client-facing certificate's expiry is known"
    );
    let body = json!({"tls.certificate": cert_b, "tls.key": key_b}).to_string();
    let (status, answer) = f.call("PATCH", "/admin/config", Some(TOKEN), &body).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["applied"], json!(["listener TLS"]));

    // A key that does not fit, and a file that is no certificate: refused, B stays.
    let body = json!({"tls.key": key_a}).to_string();
    let (status, answer) = f.call("PATCH", "/admin/config", Some(TOKEN), &body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer["errors"]["tls.key"]
            .to_string()
            .contains("does not fit"),
        "{answer}"
    );
    let garbage = f.dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate").unwrap();
    let body = json!({"tls.certificate": garbage}).to_string();
    let (status, answer) = f.call("PATCH", "/admin/config", Some(TOKEN), &body).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert!(
        answer["errors"]["tls.certificate"]
            .to_string()
            .contains("no PEM certificate"),
        "{answer}"
    );
    let (_, now) = f.call("GET", "/admin/config", Some(TOKEN), "").await;
    assert_eq!(now["tls.certificate"], json!(cert_b));
}

#[tokio::test]
async fn metrics_and_features_answer() {
    let f = Fixture::start("").await;
    let (status, _) = f
        .call(
            "PATCH",
            "/admin/config",
            Some(TOKEN),
            r#"{"log.level": "info"}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = f
        .call("PATCH", "/admin/config", Some(TOKEN), r#"{"log.level": 3}"#)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, text) = f
        .call_text("GET", "/metrics", Some(TOKEN), Vec::new())
        .await;
    assert_eq!(status, StatusCode::OK);
    for line in [
        "kshim_config_reloads_total{source=\"admin\",result=\"applied\"} 1",
        "kshim_config_reloads_total{source=\"admin\",result=\"refused\"} 1",
        "kshim_config_overrides 1",
        "kshim_finalized_feature_level{feature=\"metadata.version\"}",
        "kshim_build_info{version=",
    ] {
        assert!(text.contains(line), "missing {line:?}:\n{text}");
    }
    let (status, body) = f.call("GET", "/admin/features", Some(TOKEN), "").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "OK");
    assert!(body["finalized_features"]["epoch"].is_i64(), "{body}");
    assert!(
        body["supported_features"]["metadata.version"]["max_version"].is_i64(),
        "{body}"
    );
    assert_eq!(body["owners"]["metadata.version"], "kshim");
}

#[tokio::test]
async fn the_openapi_document_the_route_table_and_the_router_agree() {
    let doc: Value =
        serde_json::from_str(include_str!("../../docs/admin-api.openapi.json")).unwrap();
    let documented: std::collections::BTreeSet<(String, String)> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, ops)| {
            ops.as_object()
                .unwrap()
                .keys()
                .map(move |m| (path.clone(), m.clone()))
        })
        .collect();
    let table: std::collections::BTreeSet<(String, String)> = ROUTES
        .iter()
        .flat_map(|(path, methods)| {
            methods
                .iter()
                .map(move |m| ((*path).to_owned(), (*m).to_owned()))
        })
        .collect();
    assert_eq!(documented, table);
    let f = Fixture::start("").await;
    for (path, method) in &table {
        let uri = path
            .replace("{key}", "log.level")
            .replace("{name}", "probe");
        let body = if method == "get" || method == "delete" {
            ""
        } else {
            r#"{"log.level": "info"}"#
        };
        let (status, answer) = f
            .call(&method.to_uppercase(), &uri, Some(TOKEN), body)
            .await;
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {uri}");
        assert_ne!(
            answer["error"], "no such endpoint",
            "{method} {uri}: {status}"
        );
    }
}

/// A log filter setter that accepts what `EnvFilter` accepts, and sets nothing.
fn log_control() -> crate::service::LogControl {
    crate::service::LogControl {
        set: Arc::new(|filter: &str| crate::config::check_log_filter(filter)),
        startup_filter: "info".into(),
    }
}

/// A self-signed certificate for 127.0.0.1 and its key, as PEM files.
fn self_signed(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (c, k) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    (c, k)
}
