//! CreateTopics (key 19): creating the state topic.

use super::*;
use crate::protocol::{CodecError, Reader};
use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::CreateTopicsRequest;

pub const CREATE_TOPICS_VERSION: i16 = 7;

pub fn create_topic_request(
    name: &str,
    partitions: i32,
    replication_factor: i16,
    configs: &[(&str, &str)],
    timeout_ms: i32,
) -> Bytes {
    let configs = configs
        .iter()
        .map(|(k, v)| {
            CreatableTopicConfig::default()
                .with_name(text(k))
                .with_value(Some(text(v)))
        })
        .collect();
    let topic = CreatableTopic::default()
        .with_name(topic_name(name))
        .with_num_partitions(partitions)
        .with_replication_factor(replication_factor)
        .with_configs(configs);
    let req = CreateTopicsRequest::default()
        .with_topics(vec![topic])
        .with_timeout_ms(timeout_ms)
        .with_validate_only(false);
    encode(&req, CREATE_TOPICS_VERSION, "CreateTopics")
}

/// (topic name, error code, error message) per topic.
pub fn decode_create_topics(body: &[u8]) -> Result<Vec<(String, i16, Option<String>)>, CodecError> {
    let mut r = Reader::new(body);
    r.i32("throttle_time_ms")?;
    let mut out = Vec::new();
    // name, topic id, error, message, partitions, replication, configs, tags
    for _ in 0..count(&mut r, 28, "topics")? {
        let name = string(&mut r, "topic name")?;
        r.uuid("topic_id")?;
        let error_code = r.i16("error_code")?;
        let message = opt_string(&mut r, "error_message")?;
        r.i32("num_partitions")?;
        r.i16("replication_factor")?;
        // name, value, read_only, source, sensitive, tags
        for _ in 0..count(&mut r, 6, "configs")? {
            string(&mut r, "config name")?;
            opt_string(&mut r, "config value")?;
            r.bool("read_only")?;
            r.i8("config_source")?;
            r.bool("is_sensitive")?;
            skip_tags(&mut r, "config tags")?;
        }
        skip_tags(&mut r, "topic tags")?;
        out.push((name, error_code, message));
    }
    finish(r, "CreateTopics response")?;
    Ok(out)
}
