//! UpdateFeatures (key 57), v0-v2, answered as the Kafka 4.1 controller answers:
//! ALTER on CLUSTER first, then the whole request applies or nothing does. A
//! failure is one top-level error naming the feature that failed, with no
//! per-feature results; a success carries one result per requested feature in
//! v0-v1 and none in v2.

use super::{decode_request, Context, HandlerError, Peer};
use crate::features::{FeatureUpdate, UpdateRejection, UpgradeType};
use crate::protocol::error_codes;
use crate::protocol::requests;
use crate::protocol::response::encode_frame;
use bytes::Bytes;
use kafka_protocol::messages::update_features_response::UpdatableFeatureResult;
use kafka_protocol::messages::{ApiKey, UpdateFeaturesRequest, UpdateFeaturesResponse};
use kafka_protocol::protocol::StrBytes;
use std::time::Duration;

pub const MAX_VERSION: i16 = 2;
const FAILED_PREFIX: &str =
    "The update failed for all features since the following feature had an error: ";

pub async fn handle(ctx: &Context, peer: &Peer, frame: Bytes) -> Result<Bytes, HandlerError> {
    let api = ApiKey::UpdateFeatures;
    let (request, body) = decode_request(api, MAX_VERSION, frame, requests::update_features)?;
    let version = request.header.api_version;
    let correlation_id = request.header.correlation_id;

    if !ctx.authorizer.may_alter_cluster(&peer.principal) {
        tracing::info!(principal = %peer.principal, peer = %peer.addr, "UpdateFeatures refused: no ALTER on CLUSTER");
        let rejection = UpdateRejection {
            feature: None,
            code: error_codes::CLUSTER_AUTHORIZATION_FAILED,
            message: format!("Request from {} needs ALTER permission.", peer.principal),
        };
        return Ok(encode_frame(
            api,
            version,
            correlation_id,
            &response(version, &body, Err(&rejection)),
        )?);
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
    Ok(encode_frame(
        api,
        version,
        correlation_id,
        &response(version, &body, outcome),
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
