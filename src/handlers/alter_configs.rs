//! AlterConfigs (key 33), v0-v2, checked before it is forwarded. AlterConfigs
//! replaces every dynamic config of a resource, so for a topic the create-topic
//! policy sees the whole new set (a required config it leaves out is refused);
//! each value is checked against the validators in force. A refused resource gets
//! POLICY_VIOLATION or INVALID_CONFIG and never reaches the upstream; the others go
//! on in one request, ValidateOnly included.

use super::checked::{self, at_every_level, check_changes, Change, ItemRefusal};
use super::{decode_request, Action, HandlerError};
use crate::features::FinalizedFeatures;
use crate::policy::ConfigResource;
use crate::policy::Policies;
use crate::protocol::config_requests::{alter_configs, ALTER_CONFIGS_VERSIONS};
use crate::protocol::Incoming;
use kafka_protocol::messages::alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::ApiKey;
use std::collections::BTreeMap;

const API: ApiKey = ApiKey::AlterConfigs;

/// `level_sets`: the levels every change must hold at (the current ones, and
/// those of an upgrade audit in progress).
pub fn handle(
    policies: &Policies,
    level_sets: &[&FinalizedFeatures],
    request: Incoming,
) -> Result<Action, HandlerError> {
    let (request, (body, entries)) =
        decode_request(API, ALTER_CONFIGS_VERSIONS.1, request, alter_configs)?;
    let version = request.header.api_version;
    let (slots, accepted) = checked::judge_resources(
        API,
        version,
        &body.resources,
        |r| (r.resource_type, &r.resource_name),
        |target, r| {
            at_every_level(level_sets, |level_of| {
                check(policies, level_of, target, r).err()
            })
            .map_or(Ok(()), Err)
        },
    )?;
    checked::settle(API, request, slots, &accepted, &entries)
}

fn check(
    policies: &crate::policy::Policies,
    level_of: &dyn Fn(&str) -> i16,
    target: &ConfigResource,
    res: &AlterConfigsResource,
) -> Result<(), ItemRefusal> {
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
                ItemRefusal::Policy(format!("{target} violates the create-topic policy: {v}"))
            })?;
    }
    check_changes(
        policies,
        level_of,
        target,
        set.iter().map(|(k, v)| Change::Set(k, v)),
    )
}
