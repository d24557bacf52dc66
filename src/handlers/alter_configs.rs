//! AlterConfigs (key 33), v0-v2, checked before it is forwarded. AlterConfigs
//! replaces every dynamic config of a resource, so for a topic the create-topic
//! policy sees the whole new set (a required config it leaves out is refused);
//! each value is checked against the validators in force. A refused resource gets
//! POLICY_VIOLATION or INVALID_CONFIG and never reaches the upstream; the others go
//! on in one request, ValidateOnly included.

use super::checked::{self, check_changes, levels, resource, Change};
use super::{decode_request, Action, Context, HandlerError};
use crate::policy::ConfigResource;
use crate::protocol::config_requests::{alter_configs, ALTER_CONFIGS_VERSIONS};
use crate::protocol::error_codes;
use crate::protocol::response::encode_body;
use crate::protocol::results::{ResultKey, Slot};
use bytes::Bytes;
use kafka_protocol::messages::alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::StrBytes;
use std::collections::BTreeMap;

const API: ApiKey = ApiKey::AlterConfigs;

pub fn handle(ctx: &Context, frame: Bytes) -> Result<Action, HandlerError> {
    let (request, mut body) = decode_request(API, ALTER_CONFIGS_VERSIONS.1, frame, alter_configs)?;
    let version = request.header.api_version;
    let policies = ctx.policies.load();
    let snapshot = ctx.controller.snapshot();
    let level_of = levels(&snapshot.finalized);
    let mut slots = Vec::with_capacity(body.resources.len());
    let mut accepted = Vec::with_capacity(body.resources.len());
    for res in &body.resources {
        let refusal = resource(res.resource_type, res.resource_name.as_str())
            .and_then(|target| check(&policies, &level_of, &target, res).err());
        accepted.push(refusal.is_none());
        slots.push(match refusal {
            None => Slot::Theirs(ResultKey::Resource {
                resource_type: res.resource_type,
                name: res.resource_name.as_str().to_owned(),
            }),
            Some((code, message)) => {
                tracing::debug!(
                    resource = res.resource_name.as_str(),
                    "AlterConfigs: refused: {message}"
                );
                Slot::Ours(refused_entry(res, code, message, version)?)
            }
        });
    }
    checked::settle(API, request, slots, move || {
        let mut keep = accepted.into_iter();
        body.resources.retain(|_| keep.next().unwrap_or(false));
        encode_body(API, version, &body)
    })
}

fn check(
    policies: &crate::policy::Policies,
    level_of: &dyn Fn(&str) -> i16,
    target: &ConfigResource,
    res: &AlterConfigsResource,
) -> Result<(), (i16, String)> {
    let set: BTreeMap<String, String> = res
        .configs
        .iter()
        .filter_map(|c| {
            Some((
                c.name.as_str().to_owned(),
                c.value.as_ref()?.as_str().to_owned(),
            ))
        })
        .collect();
    if let ConfigResource::Topic(_) = target {
        policies
            .create_topic
            .validate_replacement(&set)
            .map_err(|v| {
                (
                    error_codes::POLICY_VIOLATION,
                    format!("{target} violates the create-topic policy: {v}"),
                )
            })?;
    }
    check_changes(
        policies,
        level_of,
        target,
        set.iter().map(|(k, v)| Change::Set(k, v)),
    )
}

fn refused_entry(
    res: &AlterConfigsResource,
    code: i16,
    message: String,
    version: i16,
) -> Result<Vec<u8>, HandlerError> {
    let entry = AlterConfigsResourceResponse::default()
        .with_error_code(code)
        .with_error_message(Some(StrBytes::from_string(message)))
        .with_resource_type(res.resource_type)
        .with_resource_name(res.resource_name.clone());
    Ok(encode_body(API, version, &entry)?.to_vec())
}
