//! The census and the discovery lab over HTTP: `/admin/clients` (who
//! connects), `/admin/clients/impact` (who breaks under a planned release or
//! feature level), `/admin/lab/scenarios` (scenarios, changed at runtime).

use super::{authorize, caller_name, read_body, ApiError, Caller, Need, Shared};
use crate::census::impact::{
    feature_impact, known_releases, parse_feature_level, release, release_impact,
};
use crate::census::Filter;
use crate::lab::{api_key_named, Scenario, ScenarioSpec};
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientQuery {
    /// Software name, or "name/version".
    software: Option<String>,
    principal: Option<String>,
    /// An API name ("Produce") or key ("0").
    api_key: Option<String>,
}

fn filter(query: &ClientQuery) -> Result<Filter, ApiError> {
    let api_key = match &query.api_key {
        None => None,
        Some(name) => Some(api_key_named(name).ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                format!("api_key: {name} is not a Kafka API name or key"),
            )
        })?),
    };
    Ok(Filter {
        software: query.software.clone(),
        principal: query.principal.clone(),
        api_key,
    })
}

fn census_off(state: &Shared) -> Result<(), ApiError> {
    if state.context.census.config().enabled {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "the client census is off (census.enabled = false)",
        ))
    }
}

fn bad_query(e: axum::extract::rejection::QueryRejection) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, e.body_text())
}

pub(super) async fn clients(
    State(state): State<Shared>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    query: Result<Query<ClientQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    authorize(&state, caller.as_deref(), &headers, Need::Read)?;
    census_off(&state)?;
    let Query(query) = query.map_err(bad_query)?;
    let census = &state.context.census;
    let clients = census.clients(&filter(&query)?);
    let (kept, evicted) = census.sizes();
    Ok(Json(json!({
        "clients": clients,
        "kept": kept,
        "max_clients": census.config().max_clients,
        "evicted": evicted,
    })))
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImpactQuery {
    kafka_version: Option<String>,
    /// NAME=LEVEL.
    feature: Option<String>,
    software: Option<String>,
    principal: Option<String>,
}

pub(super) async fn impact(
    State(state): State<Shared>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    query: Result<Query<ImpactQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    authorize(&state, caller.as_deref(), &headers, Need::Read)?;
    census_off(&state)?;
    let Query(query) = query.map_err(bad_query)?;
    let clients = state.context.census.clients(&Filter {
        software: query.software.clone(),
        principal: query.principal.clone(),
        api_key: None,
    });
    let bad = |m: String| ApiError::new(StatusCode::BAD_REQUEST, m);
    match (&query.kafka_version, &query.feature) {
        (Some(version), None) => {
            let target = release(version).ok_or_else(|| {
                bad(format!(
                    "kafka_version: no table for {version}; known: {}",
                    known_releases().join(", ")
                ))
            })?;
            Ok(Json(json!(release_impact(target, &clients))))
        }
        (None, Some(feature)) => {
            let (name, level) =
                parse_feature_level(feature).map_err(|e| bad(format!("feature: {e}")))?;
            Ok(Json(json!(feature_impact(&name, level, &clients))))
        }
        _ => Err(bad(
            "give one of kafka_version (such as 4.0) or feature (such as group.version=1)".into(),
        )),
    }
}

pub(super) async fn list_scenarios(
    State(state): State<Shared>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    authorize(&state, caller.as_deref(), &headers, Need::Read)?;
    Ok(Json(json!({ "scenarios": state.context.lab.list() })))
}

pub(super) async fn put_scenario(
    State(state): State<Shared>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Body,
) -> Result<Json<Value>, ApiError> {
    authorize(&state, caller.as_deref(), &headers, Need::Write)?;
    let raw = read_body(&state, body).await?;
    let mut spec: ScenarioSpec = serde_json::from_slice(&raw).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("the body is not a scenario: {e}"),
        )
    })?;
    if !spec.name.is_empty() && spec.name != name {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("the body names scenario {}, the path {name}", spec.name),
        ));
    }
    spec.name = name.clone();
    let scenario = Scenario::new(spec).map_err(|problems| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("the scenario was refused: {}", problems.join("; ")),
        )
    })?;
    let replaced = state
        .context
        .lab
        .put(scenario)
        .map_err(|e| ApiError::new(StatusCode::CONFLICT, e))?;
    tracing::info!(caller = %caller_name(caller.as_deref()), scenario = %name, replaced, "discovery lab: scenario set through the admin API");
    Ok(Json(json!({ "scenario": name, "replaced": replaced })))
}

pub(super) async fn delete_scenario(
    State(state): State<Shared>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    authorize(&state, caller.as_deref(), &headers, Need::Write)?;
    if !state.context.lab.remove(&name) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no scenario named {name}"),
        ));
    }
    tracing::info!(caller = %caller_name(caller.as_deref()), scenario = %name, "discovery lab: scenario removed through the admin API");
    Ok(Json(json!({ "removed": name })))
}
