//! The admin HTTP API: the dynamic configuration (`/admin/config`), the feature
//! view (`/admin/features`), Prometheus metrics (`/metrics`) and health checks
//! (`/healthz`, `/readyz`). `router` builds it from an `AdminState` and is tested
//! without a socket; `server` puts it on a listener of its own (loopback unless
//! configured otherwise), with or without TLS.
//!
//! Every write needs a credential: the bearer token (`admin.token`) or a client
//! certificate that `[admin.tls]` verifies (and `admin.principals` lists, when
//! set). Reads need one too unless `admin.read_requires_auth = false`. Health
//! checks never do. The OpenAPI document is `docs/admin-api.openapi.json`.

mod access;
mod clients;
pub mod server;

pub use access::{Access, AccessCell, AdminAccessComponent};

use crate::handlers::Context;
use crate::metrics::{Snapshot, UpstreamSnapshot};
use crate::reconfig::{keys, ChangeError, KeyErrors, Registry};
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use axum::{Extension, Json, Router};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The caller of one request, as its connection tells: the peer, and the
/// principal of a client certificate the admin listener verified.
#[derive(Debug, Clone)]
pub struct Caller {
    pub peer: SocketAddr,
    pub principal: Option<String>,
}

/// What the admin API reads and changes.
pub struct AdminState {
    pub registry: Arc<Registry>,
    pub context: Arc<Context>,
    pub access: Arc<AccessCell>,
    pub max_body_bytes: usize,
    /// Set once kshim has been asked to stop (a signal): /readyz then reports
    /// not ready, so that load balancers send new clients elsewhere.
    pub stopping: AtomicBool,
}

/// An answer that is not a success: a status, a message, and per-key errors
/// where a change was refused.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
    errors: Option<KeyErrors>,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            errors: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = Map::new();
        body.insert("error".into(), json!(self.message));
        if let Some(errors) = self.errors {
            body.insert("errors".into(), json!(errors));
        }
        let mut response = (self.status, Json(Value::Object(body))).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<ChangeError> for ApiError {
    fn from(e: ChangeError) -> ApiError {
        match e {
            ChangeError::Invalid(errors) => ApiError {
                status: StatusCode::BAD_REQUEST,
                message: "the change was refused; nothing was changed".into(),
                errors: Some(errors),
            },
            ChangeError::NotFound(key) => ApiError::new(
                StatusCode::NOT_FOUND,
                format!("{key} has no dynamic override"),
            ),
            ChangeError::Shared(message) => {
                tracing::warn!("admin: {message}");
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, message)
            }
            ChangeError::Store(e) => {
                tracing::error!("admin: {e}");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("the overrides could not be stored, so nothing was changed: {e}"),
                )
            }
        }
    }
}

type Shared = Arc<AdminState>;

/// Every route and its methods. `docs/admin-api.openapi.json` documents the same
/// set; a test holds the router, this table and the document together.
pub const ROUTES: [(&str, &[&str]); 13] = [
    ("/admin/cluster", &["get"]),
    ("/healthz", &["get"]),
    ("/livez", &["get"]),
    ("/readyz", &["get"]),
    ("/metrics", &["get"]),
    ("/admin/features", &["get"]),
    ("/admin/config", &["get", "patch"]),
    ("/admin/config/validate", &["post"]),
    ("/admin/config/{key}", &["delete"]),
    ("/admin/clients", &["get"]),
    ("/admin/clients/impact", &["get"]),
    ("/admin/lab/scenarios", &["get"]),
    ("/admin/lab/scenarios/{name}", &["put", "delete"]),
];

/// The admin API.
pub fn router(state: Shared) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/livez", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/admin/features", get(features))
        .route("/admin/cluster", get(cluster))
        .route("/admin/config", get(get_config).patch(patch_config))
        .route("/admin/config/validate", post(validate_config))
        .route("/admin/config/{key}", delete(delete_config))
        .route("/admin/clients", get(clients::clients))
        .route("/admin/clients/impact", get(clients::impact))
        .route("/admin/lab/scenarios", get(clients::list_scenarios))
        .route(
            "/admin/lab/scenarios/{name}",
            put(clients::put_scenario).delete(clients::delete_scenario),
        )
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such endpoint") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed here")
        })
        .with_state(state)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Need {
    Read,
    Write,
}

/// Constant-time comparison, so that the token cannot be guessed byte by byte
/// from response times.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn authorize(
    state: &AdminState,
    caller: Option<&Caller>,
    headers: &HeaderMap,
    need: Need,
) -> Result<(), ApiError> {
    let access = state.access.load();
    if need == Need::Read && !access.read_requires_auth {
        return Ok(());
    }
    let principal = caller.and_then(|c| c.principal.as_deref());
    if let Some(p) = principal {
        match &access.principals {
            None => return Ok(()),
            Some(allowed) if allowed.iter().any(|a| a == p) => return Ok(()),
            Some(_) => {}
        }
    }
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if let (Some(token), Some(given)) = (&access.token, presented) {
        if same(token.expose().as_bytes(), given.trim().as_bytes()) {
            return Ok(());
        }
    }
    let peer = caller.map_or_else(|| "?".to_owned(), |c| c.peer.to_string());
    if access.token.is_none() && principal.is_none() {
        tracing::info!(%peer, "admin: request refused: no credential is configured");
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "this needs a credential, and none is configured: set admin.token, or [admin.tls] with client certificates",
        ));
    }
    if let Some(p) = principal {
        tracing::info!(%peer, principal = p, "admin: request refused: principal not in admin.principals");
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            format!("{p} may not use the admin API"),
        ));
    }
    tracing::info!(%peer, "admin: request refused: missing or wrong bearer token");
    Err(ApiError::new(
        StatusCode::UNAUTHORIZED,
        "a valid bearer token is needed (Authorization: Bearer ...)",
    ))
}

async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// Ready once the store is loaded (it is, or kshim would not be serving) and,
/// in front of a cluster, once the cluster has answered and unless it has been
/// unreachable for `upstream.unready_after_ms`: every replica shares the
/// upstream, so a short blip that one failed refresh shows would take every
/// replica out of the balancer at once, and clients would be refused instead of
/// getting a retriable error; a long outage does take them out. `/livez` (and
/// `/healthz`) stay up meanwhile: nothing a restart would fix. Not ready either
/// once kshim has been asked to stop, while it drains, nor while it sheds load
/// near its memory ceiling.
async fn readyz(State(state): State<Shared>) -> Response {
    let mut checks = Map::new();
    checks.insert("store".into(), json!("loaded"));
    let stopping = state.stopping.load(Ordering::Relaxed);
    checks.insert("stopping".into(), json!(stopping));
    let mut ready = !stopping;
    if let Some(upstream) = &state.context.upstream {
        let view = upstream.view();
        let (answered, _) = upstream.refreshes();
        let (upstream_ready, status) = upstream_readiness(
            answered > 0,
            upstream.unreachable_for(),
            upstream.unready_after,
            (view.brokers.len(), view.live.len()),
        );
        ready &= upstream_ready;
        checks.insert("upstream".into(), json!(status));
        checks.insert("upstream_reachable".into(), json!(upstream.reachable()));
    }
    if let Some(node) = state.context.controller.cluster() {
        // A member serves only what it has applied: until it has caught up
        // with the shared state it may serve an older one.
        if !node.caught_up() {
            ready = false;
        }
        checks.insert("cluster_caught_up".into(), json!(node.caught_up()));
        checks.insert("cluster_state_reachable".into(), json!(node.reachable()));
    }
    if let Some(memory) = state.context.metrics.memory_ceiling() {
        // Shedding refuses new connections: a balancer should send them elsewhere.
        let figures = format!(
            "{} MiB held of a {} MiB ceiling (max_memory_bytes)",
            memory.held >> 20,
            memory.ceiling >> 20
        );
        let status = if memory.shedding {
            format!("shedding load: {figures}; new connections are refused")
        } else {
            figures
        };
        ready &= !memory.shedding;
        checks.insert("memory".into(), json!(status));
    }
    // Reported, not failing readiness: kshim still serves, and the operator
    // decides what to do about a broker that cannot run a level.
    let conflicts: Vec<String> = state
        .context
        .controller
        .conflicts()
        .iter()
        .map(ToString::to_string)
        .collect();
    checks.insert("feature_incompatibilities".into(), json!(conflicts));
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(json!({"ready": ready, "checks": checks}))).into_response()
}

/// Whether the upstream lets kshim be ready, and what /readyz says of it:
/// not before it has answered once, nor once it has been unreachable for
/// `grace`; a shorter outage is reported but leaves kshim ready. `brokers` is
/// (known, answering) in the last view.
pub(crate) fn upstream_readiness(
    ever_answered: bool,
    down_for: Option<std::time::Duration>,
    grace: std::time::Duration,
    brokers: (usize, usize),
) -> (bool, String) {
    let gone = down_for.is_some_and(|d| d >= grace);
    let status = match down_for {
        _ if !ever_answered => "no upstream broker has answered yet".to_owned(),
        Some(d) if gone => format!(
            "the upstream stopped answering {} s ago (upstream.unready_after_ms is {} ms); kshim keeps retrying",
            d.as_secs(),
            grace.as_millis()
        ),
        Some(d) => format!(
            "the upstream stopped answering {} s ago; ready until upstream.unready_after_ms ({} ms); kshim keeps retrying",
            d.as_secs(),
            grace.as_millis()
        ),
        None => format!("{} broker(s) known, {} answering", brokers.0, brokers.1),
    };
    (ever_answered && !gone && brokers.1 > 0, status)
}

async fn metrics(
    State(state): State<Shared>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    authorize(&state, caller.as_deref(), &headers, Need::Read)?;
    let ctx = &state.context;
    let snapshot = ctx.controller.snapshot();
    let upstream = ctx.upstream.as_ref().map(|u| {
        let view = u.view();
        let (ok, failed) = u.refreshes();
        UpstreamSnapshot {
            reachable: u.reachable(),
            brokers: view
                .brokers
                .keys()
                .map(|id| (*id, view.live.contains_key(id)))
                .collect(),
            refreshes_ok: ok,
            refreshes_failed: failed,
            stale_views: ctx.controller.stale_views(),
        }
    });
    let cluster = ctx.controller.cluster().map(|node| {
        let me = node.registration();
        crate::metrics::ClusterSnapshot {
            caught_up: node.caught_up(),
            reachable: node.reachable(),
            applied_offset: node.applied(),
            live_instances: node.live_peers().len() + 1,
            config_apply_failed: me.status.apply_error.is_some(),
        }
    });
    let text = ctx.metrics.render(&Snapshot {
        cluster,
        epoch: snapshot.finalized.epoch,
        levels: snapshot
            .finalized
            .levels
            .iter()
            .map(|(n, l)| (n.clone(), *l))
            .collect(),
        overrides: state.registry.override_count(),
        certificate_not_after: state.registry.certificate_expiry(),
        conflicts: ctx
            .controller
            .conflicts()
            .into_iter()
            .map(|c| (c.feature, c.supporter))
            .collect(),
        upstream,
    });
    let mut text = text;
    ctx.census.render_metrics(&mut text);
    ctx.lab.render_metrics(&mut text);
    Ok((
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response())
}

/// The kshim cluster as this instance sees it: every instance with its
/// liveness, how far it has applied the shared state, the epoch it serves, its
/// config version and any config it could not apply.
async fn cluster(
    State(state): State<Shared>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    authorize(&state, caller.as_deref(), &headers, Need::Read)?;
    let Some(node) = state.context.controller.cluster() else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "this kshim is not a member of a kshim cluster (no [cluster] in its config)",
        ));
    };
    Ok(Json(json!({
        "cluster_id": node.settings.id,
        "state_topic": node.settings.state_topic,
        "instance_id": node.instance_id(),
        "state_topic_reachable": node.reachable(),
        "caught_up": node.caught_up(),
        "session_timeout_ms": node.settings.session_timeout_ms,
        "instances": node.report(),
    })))
}

async fn features(
    State(state): State<Shared>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    authorize(&state, caller.as_deref(), &headers, Need::Read)?;
    let ctx = &state.context;
    let snapshot = ctx.controller.snapshot();
    let view = crate::protocol::api_versions::features_for_version(4, &snapshot, true);
    let mut doc = view.describe_document("OK", &ctx.node.host, ctx.node.port);
    let owners: Map<String, Value> = view
        .supported
        .keys()
        .map(|name| {
            let owner = match ctx.controller.owner(name) {
                crate::features::Owner::Upstream => "upstream",
                crate::features::Owner::Kshim => "kshim",
            };
            (name.clone(), json!(owner))
        })
        .collect();
    doc.insert("owners".into(), Value::Object(owners));
    let conflicts: Vec<Value> = ctx
        .controller
        .conflicts()
        .iter()
        .map(|c| {
            let (supported, configs) = match &c.problem {
                crate::features::Problem::Range(r) => (r.map(|r| r.to_string()), None),
                crate::features::Problem::Configs(text) => (None, Some(text.clone())),
            };
            json!({
                "feature": c.feature,
                "level": c.level,
                "supporter": c.supporter,
                "supported": supported,
                "configs": configs,
                "message": c.to_string(),
            })
        })
        .collect();
    doc.insert("incompatibilities".into(), Value::Array(conflicts));
    Ok(Json(Value::Object(doc)))
}

async fn get_config(
    State(state): State<Shared>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    authorize(&state, caller.as_deref(), &headers, Need::Read)?;
    let overrides = state.registry.overrides().await;
    Ok(Json(Value::Object(keys::shown(&overrides))))
}

/// The body of PATCH and validate: a JSON object of key → value (null removes).
/// A request body, within `admin.max_body_bytes`.
async fn read_body(state: &AdminState, body: Body) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, state.max_body_bytes)
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the body is larger than {} bytes (admin.max_body_bytes)",
                    state.max_body_bytes
                ),
            )
        })
}

async fn change_body(
    state: &AdminState,
    body: Body,
) -> Result<BTreeMap<String, Option<Value>>, ApiError> {
    let raw = read_body(state, body).await?;
    let value: Value = serde_json::from_slice(&raw).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("the body is not JSON: {e}"),
        )
    })?;
    let Value::Object(map) = value else {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "the body must be a JSON object of config key to value, such as {\"tls.certificate\": \"/etc/kshim/new.pem\"}",
        ));
    };
    if map.is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "the body names no key",
        ));
    }
    Ok(map
        .into_iter()
        .map(|(k, v)| (k, if v.is_null() { None } else { Some(v) }))
        .collect())
}

fn change_answer(change: crate::reconfig::Change) -> Json<Value> {
    Json(json!({
        "applied": change.applied,
        "pending_restart": change.pending_restart,
        "config": keys::shown(&change.overrides),
    }))
}

async fn patch_config(
    State(state): State<Shared>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    authorize(&state, caller.as_deref(), &headers, Need::Write)?;
    let patch = change_body(&state, body).await?;
    let who = caller_name(caller.as_deref());
    let keys: Vec<&String> = patch.keys().collect();
    match state.registry.patch(&patch).await {
        Ok(change) => {
            tracing::info!(caller = %who, ?keys, applied = ?change.applied, "admin: config changed");
            Ok(change_answer(change))
        }
        Err(e) => {
            tracing::info!(caller = %who, ?keys, "admin: config change refused: {e}");
            Err(e.into())
        }
    }
}

async fn delete_config(
    State(state): State<Shared>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    Path(key): Path<String>,
) -> Result<Json<Value>, ApiError> {
    authorize(&state, caller.as_deref(), &headers, Need::Write)?;
    let who = caller_name(caller.as_deref());
    match state.registry.delete(&key).await {
        Ok(change) => {
            tracing::info!(caller = %who, key, applied = ?change.applied, "admin: config override removed");
            Ok(change_answer(change))
        }
        Err(e) => {
            tracing::info!(caller = %who, key, "admin: override removal refused: {e}");
            Err(e.into())
        }
    }
}

async fn validate_config(
    State(state): State<Shared>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    // Placeholders are resolved while validating, so this is no mere read.
    authorize(&state, caller.as_deref(), &headers, Need::Write)?;
    let patch = change_body(&state, body).await?;
    let v = state.registry.validate(&patch).await;
    Ok(Json(json!({
        "valid": v.errors.is_empty(),
        "configs": v.configs,
        "errors": v.errors,
    })))
}

fn caller_name(caller: Option<&Caller>) -> String {
    match caller {
        Some(Caller {
            peer,
            principal: Some(p),
        }) => format!("{p}@{peer}"),
        Some(c) => c.peer.to_string(),
        None => "?".into(),
    }
}

#[cfg(test)]
mod tests;
