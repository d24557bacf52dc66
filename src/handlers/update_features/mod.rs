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
//!
//! Three steps: this module reads the wire and writes the answer; `plan::decide`
//! decides, purely, from the request and what the controller's section shows;
//! `execute` carries the plan out against the section and the upstream.

mod execute;
mod plan;

pub use execute::{execute, Call, Cluster, Outcome, MIRROR_WAIT};
pub use plan::{decide, Audit, Facts, Plan, Request};

use super::{decode_request, Action, Context, HandlerError, Peer};
use crate::features::{FeatureUpdate, Reason, UpdateRejection, UpgradeType};
use crate::handlers::refusal::{Blame, Refusal};
use crate::protocol::requests;
use crate::protocol::response::{encode_frame, frame_with_body};
use crate::protocol::HeaderPeek;
use crate::protocol::Incoming;
use bytes::Bytes;
use kafka_protocol::messages::update_features_response::UpdatableFeatureResult;
use kafka_protocol::messages::{ApiKey, UpdateFeaturesRequest, UpdateFeaturesResponse};
use kafka_protocol::protocol::StrBytes;
use std::time::{Duration, Instant};

pub const MAX_VERSION: i16 = 2;
/// How many times an update is decided when other kshim instances keep
/// committing first.
const WRITER_ATTEMPTS: u32 = 8;
const FAILED_PREFIX: &str =
    "The update failed for all features since the following feature had an error: ";

/// The error code an UpdateFeatures refusal is answered with.
pub fn error_code(reason: Reason) -> i16 {
    Refusal::FeatureUpdate(reason).code()
}

/// Answers one UpdateFeatures request; a request refused for want of ALTER on
/// CLUSTER or by the config audit comes back as `Action::Refused`.
pub async fn handle(ctx: &Context, peer: &Peer, request: Incoming) -> Action {
    match run(ctx, peer, request).await {
        Ok((frame, false)) => Action::Respond(frame),
        Ok((frame, true)) => Action::Refused(frame),
        Err(e) => Err::<Bytes, _>(e).into(),
    }
}

/// The answer frame, and whether kshim refused the request.
async fn run(ctx: &Context, peer: &Peer, request: Incoming) -> Result<(Bytes, bool), HandlerError> {
    let api = ApiKey::UpdateFeatures;
    let (request, body) = decode_request(api, MAX_VERSION, request, requests::update_features)?;
    let version = request.header.api_version;
    let outcome = if ctx.authorizer.may_alter_cluster(&peer.principal) {
        let wanted = Request {
            updates: updates_of(version, &body),
            validate_only: body.validate_only,
        };
        let call = Call {
            version,
            body: request.body_bytes(),
            validate_only: body.validate_only,
            requested: body
                .feature_updates
                .iter()
                .map(|k| (k.feature.as_str().to_owned(), k.max_version_level.max(0)))
                .collect(),
            deadline: Instant::now()
                + Duration::from_millis(body.timeout_ms.clamp(1_000, 300_000) as u64),
            mirror_wait: MIRROR_WAIT,
        };
        let wait = Duration::from_millis(body.timeout_ms.max(0) as u64);
        // In a kshim cluster another instance may commit first; its change is
        // then read, and this one decided again, a few times at most.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let started = Instant::now();
            let outcome = match ctx.controller.begin(wait).await {
                Err(busy) => Outcome::Decided(Err(busy)),
                Ok(section) => {
                    let policies = ctx.policies.load();
                    let snapshot = section.snapshot();
                    let supporters = section.supporters();
                    let conflicts = section.conflicts();
                    let owner = |name: &str| section.owner(name);
                    let facts = Facts {
                        finalized: &snapshot.finalized,
                        supporters: &supporters,
                        rules: section.rules(),
                        conflicts: &conflicts,
                        validators: &policies.validators,
                        owner: &owner,
                        in_front: ctx.upstream.is_some(),
                    };
                    let plan = decide(&wanted, &facts);
                    drop(facts);
                    execute(&section, plan, ctx.upstream.as_deref(), &policies, &call).await
                }
            };
            let lost =
                matches!(&outcome, Outcome::Decided(Err(r)) if r.reason == Reason::WriterLost);
            if lost && attempt < WRITER_ATTEMPTS && Instant::now() < call.deadline {
                crate::cluster::pause_after_lost_role(attempt, started, call.deadline).await;
                continue;
            }
            break outcome;
        }
    } else {
        // Security-relevant, so logged above the other client-caused refusals;
        // the session's span names the peer, principal and client software.
        tracing::info!("UpdateFeatures refused: no ALTER on CLUSTER");
        Outcome::Decided(Err(UpdateRejection::new(
            Reason::NotAuthorized,
            format!("Request from {} needs ALTER permission.", peer.principal),
        )))
    };
    match outcome {
        Outcome::Upstream(raw) => Ok((
            frame_with_body(api, version, request.header.correlation_id, &raw),
            false,
        )),
        Outcome::Decided(Ok(())) => Ok((answer(request.header, &body, Ok(()))?, false)),
        Outcome::Decided(Err(rejection)) => {
            let code = error_code(rejection.reason);
            match Refusal::FeatureUpdate(rejection.reason).blame() {
                Blame::Client if rejection.reason == Reason::NotAuthorized => {}
                Blame::Client => {
                    tracing::debug!(principal = %peer.principal, peer = %peer.addr, code, "UpdateFeatures refused: {}", rejection.message)
                }
                Blame::Upstream => {
                    tracing::warn!(principal = %peer.principal, peer = %peer.addr, code, "UpdateFeatures refused: {}", rejection.message)
                }
                Blame::Kshim => {
                    tracing::error!(principal = %peer.principal, peer = %peer.addr, code, "UpdateFeatures failed: {}", rejection.message)
                }
            }
            let refused = matches!(
                rejection.reason,
                Reason::NotAuthorized | Reason::ConfigViolation
            );
            Ok((answer(request.header, &body, Err(&rejection))?, refused))
        }
    }
}

/// The requested updates, with v0's AllowDowngrade read as the KIP says.
fn updates_of(version: i16, body: &UpdateFeaturesRequest) -> Vec<FeatureUpdate> {
    body.feature_updates
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
        .collect()
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
                .with_error_code(error_code(r.reason))
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
