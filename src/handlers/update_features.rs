//! UpdateFeatures (key 57), v0-v2, answered as the Kafka 4.1 controller answers:
//! ALTER on CLUSTER first, then the whole request applies or nothing does. A
//! failure is one top-level error naming the feature that failed, with no
//! per-feature results; a success carries one result per requested feature in
//! v0-v1 and none in v2.
//!
//! In front of a cluster, a request for upstream-owned features is sent on to the
//! upstream, and answered once kshim's mirror shows the new levels; a request for
//! kshim-owned features is kshim's to apply; a request that mixes both is refused
//! whole, so that all-or-nothing still holds.

use super::{decode_request, Action, Context, HandlerError, Peer};
use crate::features::{FeatureUpdate, Owner, UpdateRejection, UpgradeType};
use crate::policy;
use crate::protocol::error_codes;
use crate::protocol::requests;
use crate::protocol::response::{encode_frame, frame_with_body};
use crate::protocol::{HeaderPeek, Reader, RequestFrame};
use crate::upstream::{cluster, configs, Route, Upstream};
use bytes::Bytes;
use kafka_protocol::messages::update_features_response::UpdatableFeatureResult;
use kafka_protocol::messages::{ApiKey, UpdateFeaturesRequest, UpdateFeaturesResponse};
use kafka_protocol::protocol::StrBytes;
use std::time::{Duration, Instant};

/// How long an answer waits for the mirror to show an upstream change.
const MIRROR_WAIT: Duration = Duration::from_secs(10);

pub const MAX_VERSION: i16 = 2;
const FAILED_PREFIX: &str =
    "The update failed for all features since the following feature had an error: ";

/// Answers one UpdateFeatures request; a request refused for want of ALTER on
/// CLUSTER or by the config audit comes back as `Action::Refused`.
pub async fn handle(ctx: &Context, peer: &Peer, frame: Bytes) -> Action {
    match decide(ctx, peer, frame).await {
        Ok(Decision::Answered(frame)) => Action::Respond(frame),
        Ok(Decision::Refused(frame)) => Action::Refused(frame),
        Err(e) => Err::<Bytes, _>(e).into(),
    }
}

enum Decision {
    Answered(Bytes),
    Refused(Bytes),
}

async fn decide(ctx: &Context, peer: &Peer, frame: Bytes) -> Result<Decision, HandlerError> {
    let api = ApiKey::UpdateFeatures;
    let (request, body) = decode_request(api, MAX_VERSION, frame, requests::update_features)?;
    let version = request.header.api_version;

    if !ctx.authorizer.may_alter_cluster(&peer.principal) {
        tracing::info!(principal = %peer.principal, peer = %peer.addr, "UpdateFeatures refused: no ALTER on CLUSTER");
        let rejection = UpdateRejection {
            feature: None,
            code: error_codes::CLUSTER_AUTHORIZATION_FAILED,
            message: format!("Request from {} needs ALTER permission.", peer.principal),
        };
        return answer(request.header, &body, Err(&rejection)).map(Decision::Refused);
    }

    if let Err(rejection) = audit(ctx, &body).await {
        tracing::info!(peer = %peer.addr, "UpdateFeatures refused by the config audit: {}", rejection.message);
        return answer(request.header, &body, Err(&rejection)).map(Decision::Refused);
    }

    if let Some(upstream) = &ctx.upstream {
        let (theirs, ours): (Vec<&str>, Vec<&str>) = body
            .feature_updates
            .iter()
            .map(|k| k.feature.as_str())
            .partition(|name| ctx.controller.owner(name) == Owner::Upstream);
        if !theirs.is_empty() && !ours.is_empty() {
            let rejection = UpdateRejection {
                feature: None,
                code: error_codes::INVALID_REQUEST,
                message: format!(
                    "The request mixes features owned by the upstream cluster ({}) with features owned by kshim ({}); \
                     nothing was applied. Send them in separate requests.",
                    theirs.join(", "),
                    ours.join(", ")
                ),
            };
            tracing::debug!(peer = %peer.addr, "UpdateFeatures refused: {}", rejection.message);
            return answer(request.header, &body, Err(&rejection)).map(Decision::Answered);
        }
        if !theirs.is_empty() {
            return forward_to_upstream(ctx, upstream, &request, &body)
                .await
                .map(Decision::Answered);
        }
    }

    let updates = body
        .feature_updates
        .iter()
        .map(|key| FeatureUpdate {
            name: key.feature.as_str().to_owned(),
            level: key.max_version_level,
            upgrade_type: if version == 0 {
                UpgradeType::from_allow_downgrade(key.allow_downgrade)
            } else {
                UpgradeType::from_code(key.upgrade_type)
            },
        })
        .collect();
    let timeout = Duration::from_millis(body.timeout_ms.max(0) as u64);
    let outcome = ctx
        .controller
        .update(updates, body.validate_only, timeout)
        .await;
    if let Err(rejection) = &outcome {
        tracing::debug!(peer = %peer.addr, code = rejection.code, "UpdateFeatures refused: {}", rejection.message);
    }
    let outcome = outcome.as_ref().map(|_| ());
    answer(request.header, &body, outcome).map(Decision::Answered)
}

/// The upgrade audit: before any feature with config validators changes level,
/// every topic and broker config of the upstream is checked against the
/// validators of the target level. One violation refuses the whole request, and
/// the message lists them all. Without an upstream there are no configs to audit.
async fn audit(ctx: &Context, body: &UpdateFeaturesRequest) -> Result<(), UpdateRejection> {
    let policies = ctx.policies.load();
    let Some(upstream) = &ctx.upstream else {
        return Ok(());
    };
    if policies.validators.is_empty() {
        return Ok(());
    }
    let snapshot = ctx.controller.snapshot();
    let level_of = |f: &str| snapshot.finalized.level(f);
    let changing: Vec<(&str, i16)> = body
        .feature_updates
        .iter()
        .map(|k| (k.feature.as_str(), k.max_version_level))
        .filter(|&(name, level)| {
            level >= 0 && level != level_of(name) && !policies.validators.keys_of(name).is_empty()
        })
        .collect();
    if changing.is_empty() {
        return Ok(());
    }
    let mut keys: Vec<&str> = changing
        .iter()
        .flat_map(|(name, _)| policies.validators.keys_of(name))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let configs = configs::audit_configs(&upstream.view(), &upstream.link, &keys)
    .await
    .map_err(|e| UpdateRejection {
        feature: None,
        code: error_codes::FEATURE_UPDATE_FAILED,
        message: format!(
            "kshim could not read the cluster's configs to audit the change, so nothing was applied: {e}"
        ),
    })?;
    for (feature, target) in changing {
        let findings = policy::audit(&policies.validators, feature, target, &level_of, &configs);
        if !findings.is_empty() {
            return Err(UpdateRejection {
                feature: Some(feature.to_owned()),
                code: error_codes::INVALID_UPDATE_VERSION,
                message: format!(
                    "Invalid update version {target} for feature {feature}. {}",
                    policy::audit_refusal(feature, target, &findings)
                ),
            });
        }
    }
    Ok(())
}

/// Sends the request on to the upstream and answers with its response, once the
/// mirror shows what the upstream applied (or `MIRROR_WAIT` has passed).
async fn forward_to_upstream(
    ctx: &Context,
    upstream: &Upstream,
    request: &RequestFrame,
    body: &UpdateFeaturesRequest,
) -> Result<Bytes, HandlerError> {
    let api = ApiKey::UpdateFeatures;
    let version = request.header.api_version;
    let correlation_id = request.header.correlation_id;
    let timeout = Duration::from_millis(body.timeout_ms.clamp(1_000, 300_000) as u64);
    let deadline = Instant::now() + timeout;
    let delivered = cluster::forward_update_features(
        &upstream.targets(Route::Bootstrap),
        &upstream.link,
        version,
        request.body(),
        deadline,
    )
    .await;
    let raw = match delivered {
        Ok(raw) => raw,
        Err(e) => {
            tracing::warn!("UpdateFeatures for upstream-owned features not delivered: {e}");
            let rejection = UpdateRejection {
                feature: None,
                code: error_codes::REQUEST_TIMED_OUT,
                message: format!("kshim could not reach the upstream cluster: {e}"),
            };
            return answer(request.header, body, Err(&rejection));
        }
    };
    let mut r = Reader::new(&raw);
    let code = r.i32("ThrottleTimeMs").and_then(|_| r.i16("ErrorCode"));
    if code == Ok(error_codes::NONE) && !body.validate_only {
        let until = Instant::now() + MIRROR_WAIT;
        loop {
            upstream.refresh_now(MIRROR_WAIT).await;
            let snapshot = ctx.controller.snapshot();
            let mirrored = body.feature_updates.iter().all(|k| {
                snapshot.finalized.level(k.feature.as_str()) == k.max_version_level.max(0)
            });
            if mirrored {
                break;
            }
            if Instant::now() >= until {
                tracing::warn!("the upstream accepted UpdateFeatures but its brokers do not show the new levels yet");
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(frame_with_body(api, version, correlation_id, &raw))
}

/// The response frame to `request` for `outcome`.
fn answer(
    header: HeaderPeek,
    request: &UpdateFeaturesRequest,
    outcome: Result<(), &UpdateRejection>,
) -> Result<Bytes, HandlerError> {
    let version = header.api_version;
    Ok(encode_frame(
        ApiKey::UpdateFeatures,
        version,
        header.correlation_id,
        &response(version, request, outcome),
    )?)
}

/// Builds the response for `request` from the outcome.
fn response(
    version: i16,
    request: &UpdateFeaturesRequest,
    outcome: Result<(), &UpdateRejection>,
) -> UpdateFeaturesResponse {
    match outcome {
        Err(r) => {
            let message = match r.feature {
                Some(_) => format!("{FAILED_PREFIX}{}", r.message),
                None => r.message.clone(),
            };
            UpdateFeaturesResponse::default()
                .with_error_code(r.code)
                .with_error_message(Some(StrBytes::from_string(message)))
        }
        Ok(()) => {
            let mut response = UpdateFeaturesResponse::default().with_error_message(None);
            if version < 2 {
                // Kafka fills each result's message with the name of the code.
                response.results = request
                    .feature_updates
                    .iter()
                    .map(|key| {
                        UpdatableFeatureResult::default()
                            .with_feature(key.feature.clone())
                            .with_error_message(Some(StrBytes::from_static_str("NONE")))
                    })
                    .collect();
            }
            response
        }
    }
}
