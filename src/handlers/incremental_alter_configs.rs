//! IncrementalAlterConfigs (key 44), v0-v1, checked before it is forwarded: SET
//! and APPEND values against the validators in force (and, for topics, the
//! create-topic policy's config rules); DELETE of a topic config the policy
//! requires is refused. SUBTRACT only removes list elements and is not checked. A
//! refused resource gets POLICY_VIOLATION or INVALID_CONFIG and never reaches the
//! upstream; the others go on in one request, ValidateOnly included.

use super::checked::{self, at_every_level, check_changes, Change};
use super::{decode_request, Action, HandlerError};
use crate::features::FinalizedFeatures;
use crate::policy::Policies;
use crate::protocol::config_requests::{
    incremental_alter_configs, INCREMENTAL_ALTER_CONFIGS_VERSIONS,
};
use crate::protocol::Incoming;
use kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig;
use kafka_protocol::messages::ApiKey;

const API: ApiKey = ApiKey::IncrementalAlterConfigs;
const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;

/// `level_sets`: the levels every change must hold at (the current ones, and
/// those of an upgrade audit in progress).
pub fn handle(
    policies: &Policies,
    level_sets: &[&FinalizedFeatures],
    request: Incoming,
) -> Result<Action, HandlerError> {
    let (request, (body, entries)) = decode_request(
        API,
        INCREMENTAL_ALTER_CONFIGS_VERSIONS.1,
        request,
        incremental_alter_configs,
    )?;
    let version = request.header.api_version;
    let (slots, accepted) = checked::judge_resources(
        API,
        version,
        &body.resources,
        |r| (r.resource_type, &r.resource_name),
        |target, r| {
            at_every_level(level_sets, |level_of| {
                check_changes(
                    policies,
                    level_of,
                    target,
                    r.configs.iter().filter_map(change),
                )
                .err()
            })
            .map_or(Ok(()), Err)
        },
    )?;
    checked::settle(API, request, slots, &accepted, &entries)
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
