//! The path shared by the requests kshim checks before forwarding (CreateTopics,
//! AlterConfigs, IncrementalAlterConfigs): each item is either refused here, with
//! a result entry kshim encodes, or forwarded. Then:
//! - nothing refused: the request goes on byte for byte;
//! - everything refused: kshim answers alone, and nothing reaches the upstream;
//! - some refused: a request holding only the accepted items goes on, cut from
//!   the client's own bytes (`Entries::narrowed`), and the broker's results are
//!   merged with kshim's in request order.

use super::forward::{self, AfterResponse, Forward, Then};
use super::refusal;
use super::{Action, HandlerError};
use crate::controller::ConfigPass;
use crate::features::FinalizedFeatures;
use crate::policy::{ConfigResource, Policies};
use crate::protocol::config_requests::Entries;
use crate::protocol::response::{encode_body, frame_with_body, EncodeError};
use crate::protocol::results::{self, ResultKey, Slot};
use crate::protocol::{CodecError, RequestFrame};
use crate::upstream::configs::{RESOURCE_BROKER, RESOURCE_TOPIC};
use bytes::{BufMut, BytesMut};
use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::StrBytes;

/// Turns the verdicts on a request's items into what the connection does.
/// `accepted[i]` says whether the request's entry `i` (of `entries`) goes on.
pub(super) fn settle(
    api: ApiKey,
    request: RequestFrame,
    slots: Vec<Slot>,
    accepted: &[bool],
    entries: &Entries,
) -> Result<Action, HandlerError> {
    let version = request.header.api_version;
    let refused = slots.iter().filter(|s| matches!(s, Slot::Ours(_))).count();
    if refused == 0 {
        return Ok(forward::plan(request.header, request.frame));
    }
    let internal = |e: CodecError| EncodeError {
        api,
        version,
        reason: e.to_string(),
    };
    if refused == slots.len() {
        let entries: Vec<Vec<u8>> = slots
            .into_iter()
            .filter_map(|s| match s {
                Slot::Ours(entry) => Some(entry),
                Slot::Theirs(_) => None,
            })
            .collect();
        let body = results::ours_only(api, version, &entries).map_err(internal)?;
        let frame = frame_with_body(api, version, request.header.correlation_id, &body);
        return Ok(if refused > 0 {
            Action::Refused(frame)
        } else {
            Action::Respond(frame)
        });
    }
    let body = entries.narrowed(request.body(), accepted);
    let mut frame = BytesMut::with_capacity(request.header_bytes().len() + body.len());
    frame.put_slice(request.header_bytes());
    frame.put_slice(&body);
    Ok(Action::Forward(Forward {
        frame: frame.freeze(),
        correlation_id: request.header.correlation_id,
        expects_response: true,
        then: Then {
            api_key: api as i16,
            version,
            hold: None,
            delay: None,
            after: AfterResponse::Merge(Box::new(move |upstream| {
                results::merge(api, version, upstream, &slots)
            })),
        },
    }))
}

/// The finalized level of every feature, as the validators read it.
pub(super) fn levels(finalized: &FinalizedFeatures) -> impl Fn(&str) -> i16 + '_ {
    move |feature| finalized.level(feature)
}

/// The first refusal `check` gives at any of `level_sets` (the current levels,
/// and those of an audit in progress): a change must hold at both, whichever
/// way the audit ends.
pub(super) fn at_every_level<T>(
    level_sets: &[&FinalizedFeatures],
    check: impl Fn(&dyn Fn(&str) -> i16) -> Option<T>,
) -> Option<T> {
    level_sets.iter().find_map(|f| check(&levels(f)))
}

/// Keeps a fence pass with a forwarded request until the upstream has
/// answered it; other actions end it at once.
pub(super) fn holding(action: Action, pass: Option<ConfigPass>) -> Action {
    match (action, pass) {
        (Action::Forward(mut fw), Some(pass)) => {
            fw.then.hold = Some(Box::new(pass));
            Action::Forward(fw)
        }
        (action, _) => action,
    }
}

/// One change an alter request makes to one config.
#[derive(Debug, Clone, Copy)]
pub(super) enum Change<'a> {
    /// The key gets this value (SET, or every AlterConfigs entry).
    Set(&'a str, &'a str),
    /// These elements join the key's list value (APPEND).
    Append(&'a str, &'a str),
    /// The key goes back to its default (DELETE).
    Remove(&'a str),
}

/// Why kshim refuses one item of a checked request (a topic, a config
/// resource), with the message the client is given. Its code comes from
/// `refusal::Refusal`, the one mapping to Kafka's error codes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ItemRefusal {
    /// The request itself is malformed (a topic named twice).
    InvalidRequest(String),
    /// The create-topic policy refuses it.
    Policy(String),
    /// A config validator in force refuses a value.
    Validator(String),
}

impl ItemRefusal {
    pub(super) fn code(&self) -> i16 {
        match self {
            ItemRefusal::InvalidRequest(_) => refusal::Refusal::InvalidRequest.code(),
            ItemRefusal::Policy(_) => refusal::Refusal::Policy.code(),
            ItemRefusal::Validator(_) => refusal::Refusal::Validator.code(),
        }
    }

    pub(super) fn message(&self) -> &str {
        match self {
            ItemRefusal::InvalidRequest(m) | ItemRefusal::Policy(m) | ItemRefusal::Validator(m) => {
                m
            }
        }
    }
}

/// The config resource a request names, if it is one kshim checks.
pub(super) fn resource(resource_type: i8, name: &str) -> Option<ConfigResource> {
    match resource_type {
        RESOURCE_TOPIC => Some(ConfigResource::Topic(name.to_owned())),
        RESOURCE_BROKER => Some(ConfigResource::Broker(name.to_owned())),
        _ => None,
    }
}

/// Checks the changes to one resource: for a topic the create-topic policy's
/// config rules (POLICY_VIOLATION), and for topics and brokers alike the
/// validators in force (INVALID_CONFIG). The first refusal wins.
///
/// DELETE is not checked against the validators: the value falls back to the
/// broker's, which the validators and the upgrade audit already cover.
pub(super) fn check_changes<'a>(
    policies: &Policies,
    level_of: &dyn Fn(&str) -> i16,
    resource: &ConfigResource,
    changes: impl IntoIterator<Item = Change<'a>>,
) -> Result<(), ItemRefusal> {
    let is_topic = matches!(resource, ConfigResource::Topic(_));
    let policy = |r: Result<(), crate::policy::PolicyViolation>| {
        r.map_err(|v| {
            ItemRefusal::Policy(format!("{resource} violates the create-topic policy: {v}"))
        })
    };
    for change in changes {
        match change {
            Change::Set(key, value) | Change::Append(key, value) => {
                if is_topic {
                    policy(policies.create_topic.validate_config(key, value))?;
                }
                policies
                    .validators
                    .check(key, value, level_of)
                    .map_err(|v| {
                        ItemRefusal::Validator(format!(
                            "Invalid config for {resource}: {v}; the cluster is at {} level {}",
                            v.feature, v.checked_at
                        ))
                    })?;
            }
            Change::Remove(key) => {
                if is_topic {
                    policy(policies.create_topic.validate_removal(key))?;
                }
            }
        }
    }
    Ok(())
}

/// Judges each resource of an AlterConfigs or IncrementalAlterConfigs request with
/// `check` (resources of types kshim does not check are forwarded). Returns the
/// slots of the merged answer and which resources go on to the upstream.
pub(super) fn judge_resources<R>(
    api: ApiKey,
    version: i16,
    resources: &[R],
    id: impl Fn(&R) -> (i8, &StrBytes),
    check: impl Fn(&ConfigResource, &R) -> Result<(), ItemRefusal>,
) -> Result<(Vec<Slot>, Vec<bool>), HandlerError> {
    let mut slots = Vec::with_capacity(resources.len());
    let mut accepted = Vec::with_capacity(resources.len());
    for r in resources {
        let (resource_type, name) = id(r);
        let refusal =
            resource(resource_type, name.as_str()).and_then(|target| check(&target, r).err());
        accepted.push(refusal.is_none());
        slots.push(match refusal {
            None => Slot::Theirs(ResultKey::Resource {
                resource_type,
                name: name.as_str().to_owned(),
            }),
            Some(refusal) => {
                let message = refusal.message();
                tracing::info!(resource = name.as_str(), "{api:?} refused: {message}");
                // AlterConfigs and IncrementalAlterConfigs share the result layout:
                // classic in AlterConfigs v0-v1 and IncrementalAlterConfigs v0,
                // flexible in AlterConfigs v2 and IncrementalAlterConfigs v1.
                let layout = match (api, version) {
                    (ApiKey::IncrementalAlterConfigs, v) if v >= 1 => 2,
                    (ApiKey::IncrementalAlterConfigs, _) => 0,
                    (_, v) => v,
                };
                let entry = AlterConfigsResourceResponse::default()
                    .with_error_code(refusal.code())
                    .with_error_message(Some(StrBytes::from_string(message.to_owned())))
                    .with_resource_type(resource_type)
                    .with_resource_name(name.clone());
                Slot::Ours(encode_body(api, layout, &entry)?.to_vec())
            }
        });
    }
    Ok((slots, accepted))
}

/// Whether requests of this kind need decoding at all under `policies`.
pub(super) fn anything_to_check(policies: &Policies) -> bool {
    !policies.create_topic.is_permissive() || !policies.validators.is_empty()
}
