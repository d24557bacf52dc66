//! CreateTopics (key 19), v2-v7, checked before it is forwarded: first the
//! protocol's own checks, then the create-topic policy (POLICY_VIOLATION), then
//! the config validators in force (INVALID_CONFIG). Refused topics never reach the
//! upstream; the others go on in one request, ValidateOnly included.

use super::checked::{self, at_every_level, ItemRefusal};
use super::{decode_request, Action, HandlerError};
use crate::features::FinalizedFeatures;
use crate::policy::Policies;
use crate::policy::TopicDetails;
use crate::protocol::config_requests::{create_topics, CREATE_TOPICS_VERSIONS};
use crate::protocol::response::encode_body;
use crate::protocol::results::{ResultKey, Slot};
use crate::protocol::Incoming;
use crate::upstream::configs::TopicDefaults;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::StrBytes;
use std::collections::{BTreeMap, HashMap, HashSet};

const API: ApiKey = ApiKey::CreateTopics;

/// `level_sets`: the levels every topic's configs must hold at (the current
/// ones, and those of an upgrade audit in progress).
pub fn handle(
    policies: &Policies,
    level_sets: &[&FinalizedFeatures],
    request: Incoming,
    defaults: TopicDefaults,
) -> Result<Action, HandlerError> {
    let (request, (body, entries)) =
        decode_request(API, CREATE_TOPICS_VERSIONS.1, request, create_topics)?;
    let version = request.header.api_version;

    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(body.topics.len());
    for t in &body.topics {
        *seen.entry(t.name.0.as_str()).or_default() += 1;
    }
    let mut slots = Vec::with_capacity(body.topics.len());
    let mut accepted = vec![false; body.topics.len()];
    let mut answered_duplicates = HashSet::new();
    for (i, topic) in body.topics.iter().enumerate() {
        let name = topic.name.0.as_str();
        let refusal = if seen[name] > 1 {
            // Kafka answers each duplicated name once, and creates none of them.
            if !answered_duplicates.insert(name) {
                continue;
            }
            Some(ItemRefusal::InvalidRequest(
                "Duplicate topic name.".to_owned(),
            ))
        } else {
            at_every_level(level_sets, |level_of| {
                check(policies, level_of, topic, defaults)
            })
        };
        match refusal {
            None => {
                accepted[i] = true;
                slots.push(Slot::Theirs(ResultKey::Topic(name.to_owned())));
            }
            Some(refusal) => {
                tracing::info!(topic = name, "CreateTopics refused: {}", refusal.message());
                slots.push(Slot::Ours(refused_entry(topic, &refusal, version)?));
            }
        }
    }
    checked::settle(API, request, slots, &accepted, &entries)
}

/// Why kshim refuses `topic`, or `None` to forward it.
fn check(
    policies: &crate::policy::Policies,
    level_of: &dyn Fn(&str) -> i16,
    topic: &CreatableTopic,
    defaults: TopicDefaults,
) -> Option<ItemRefusal> {
    let name = topic.name.0.as_str();
    // The protocol's own check: counts and assignments exclude each other. The
    // broker refuses such a topic with its own message; the policy is not asked.
    if !topic.assignments.is_empty()
        && (topic.num_partitions != -1 || topic.replication_factor != -1)
    {
        return None;
    }
    let details = details(topic, defaults);
    if let Err(v) = policies.create_topic.validate(&details) {
        return Some(ItemRefusal::Policy(format!(
            "Topic '{name}' violates the create-topic policy: {v}"
        )));
    }
    for c in &topic.configs {
        if let Some(value) = &c.value {
            if let Err(v) = policies
                .validators
                .check(c.name.as_str(), value.as_str(), level_of)
            {
                return Some(ItemRefusal::Validator(format!(
                    "Invalid config for topic '{name}': {v}; the cluster is at {} level {}",
                    v.feature, v.checked_at
                )));
            }
        }
    }
    None
}

/// The topic as the policy sees it, with the counts it will really get.
fn details(topic: &CreatableTopic, defaults: TopicDefaults) -> TopicDetails {
    let assignments: BTreeMap<i32, Vec<i32>> = topic
        .assignments
        .iter()
        .map(|a| {
            (
                a.partition_index,
                a.broker_ids.iter().map(|b| b.0).collect(),
            )
        })
        .collect();
    let (num_partitions, replication_factor) = if assignments.is_empty() {
        (
            match topic.num_partitions {
                -1 => defaults.num_partitions,
                n => Some(n),
            },
            match topic.replication_factor {
                -1 => defaults.replication_factor,
                n => Some(n),
            },
        )
    } else {
        let replicas = topic
            .assignments
            .iter()
            .map(|a| a.broker_ids.len())
            .max()
            .unwrap_or(0);
        (
            i32::try_from(topic.assignments.len()).ok(),
            i16::try_from(replicas).ok(),
        )
    };
    TopicDetails {
        name: topic.name.0.as_str().to_owned(),
        num_partitions,
        replication_factor,
        assignments,
        configs: topic
            .configs
            .iter()
            .map(|c| {
                (
                    c.name.as_str().to_owned(),
                    c.value.as_ref().map(|v| v.as_str().to_owned()),
                )
            })
            .collect(),
    }
}

fn refused_entry(
    topic: &CreatableTopic,
    refusal: &ItemRefusal,
    version: i16,
) -> Result<Vec<u8>, HandlerError> {
    let entry = CreatableTopicResult::default()
        .with_name(topic.name.clone())
        .with_error_code(refusal.code())
        .with_error_message(Some(StrBytes::from_string(refusal.message().to_owned())))
        .with_num_partitions(-1)
        .with_replication_factor(-1)
        .with_configs(None);
    Ok(encode_body(API, version, &entry)?.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::create_topics_request::CreatableReplicaAssignment;
    use kafka_protocol::messages::{BrokerId, TopicName};

    #[test]
    fn counts_come_from_assignments_or_the_cluster_defaults() {
        let defaults = TopicDefaults {
            num_partitions: Some(3),
            replication_factor: Some(2),
        };
        let mut t = CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_static_str("t")))
            .with_num_partitions(-1)
            .with_replication_factor(-1);
        let d = details(&t, defaults);
        assert_eq!((d.num_partitions, d.replication_factor), (Some(3), Some(2)));
        assert_eq!(details(&t, TopicDefaults::default()).num_partitions, None);
        t.assignments = (0..4)
            .map(|i| {
                CreatableReplicaAssignment::default()
                    .with_partition_index(i)
                    .with_broker_ids(vec![BrokerId(1), BrokerId(2), BrokerId(3)])
            })
            .collect();
        let d = details(&t, defaults);
        assert_eq!((d.num_partitions, d.replication_factor), (Some(4), Some(3)));
    }
}
