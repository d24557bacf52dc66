//! IncrementalAlterConfigs (key 44), v0-v1, checked before it is forwarded: SET
//! and APPEND values against the validators in force (and, for topics, the
//! create-topic policy's config rules); DELETE of a topic config the policy
//! requires is refused. SUBTRACT only removes list elements and is not checked. A
//! refused resource gets POLICY_VIOLATION or INVALID_CONFIG and never reaches the
//! upstream; the others go on in one request, ValidateOnly included.

use super::checked::{self, check_changes, levels, resource, Change};
use super::{decode_request, Action, Context, HandlerError};
use crate::protocol::config_requests::{
    incremental_alter_configs, INCREMENTAL_ALTER_CONFIGS_VERSIONS,
};
use crate::protocol::response::encode_body;
use crate::protocol::results::{ResultKey, Slot};
use bytes::Bytes;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::StrBytes;

const API: ApiKey = ApiKey::IncrementalAlterConfigs;
const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;

pub fn handle(ctx: &Context, frame: Bytes) -> Result<Action, HandlerError> {
    let (request, mut body) = decode_request(
        API,
        INCREMENTAL_ALTER_CONFIGS_VERSIONS.1,
        frame,
        incremental_alter_configs,
    )?;
    let version = request.header.api_version;
    let policies = ctx.policies.load();
    let snapshot = ctx.controller.snapshot();
    let level_of = levels(&snapshot.finalized);
    let mut slots = Vec::with_capacity(body.resources.len());
    let mut accepted = Vec::with_capacity(body.resources.len());
    for res in &body.resources {
        let refusal = resource(res.resource_type, res.resource_name.as_str()).and_then(|target| {
            check_changes(
                &policies,
                &level_of,
                &target,
                res.configs.iter().filter_map(change),
            )
            .err()
        });
        accepted.push(refusal.is_none());
        slots.push(match refusal {
            None => Slot::Theirs(ResultKey::Resource {
                resource_type: res.resource_type,
                name: res.resource_name.as_str().to_owned(),
            }),
            Some((code, message)) => {
                tracing::debug!(
                    resource = res.resource_name.as_str(),
                    "IncrementalAlterConfigs: refused: {message}"
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

/// The change one entry makes, when it is one kshim checks. Entries the broker
/// will refuse anyway (a SET without a value, an unknown operation) go on to it.
fn change(c: &AlterableConfig) -> Option<Change<'_>> {
    let key = c.name.as_str();
    match (c.config_operation, c.value.as_ref()) {
        (SET, Some(v)) => Some(Change::Set(key, v.as_str())),
        (APPEND, Some(v)) => Some(Change::Append(key, v.as_str())),
        (DELETE, _) => Some(Change::Remove(key)),
        _ => None,
    }
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
