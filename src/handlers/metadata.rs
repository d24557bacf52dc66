//! Metadata (key 3), v0-v13, in standalone mode: kshim is the only broker and the
//! controller, and it hosts no topics.

use super::refusal::Refusal;
use super::{cluster_authorized_operations, decode_request, Context, HandlerError, Peer};
use crate::protocol::requests;
use crate::protocol::response::encode_frame;
use crate::protocol::Incoming;
use bytes::Bytes;
use kafka_protocol::messages::metadata_response::{MetadataResponseBroker, MetadataResponseTopic};
use kafka_protocol::messages::{ApiKey, BrokerId, MetadataResponse};
use kafka_protocol::protocol::StrBytes;

pub const MAX_VERSION: i16 = 13;

pub fn handle(ctx: &Context, peer: &Peer, request: Incoming) -> Result<Bytes, HandlerError> {
    let api = ApiKey::Metadata;
    let (request, body) = decode_request(api, MAX_VERSION, request, requests::metadata)?;
    let version = request.header.api_version;

    let node = &ctx.node;
    let mut response = MetadataResponse::default()
        .with_brokers(vec![MetadataResponseBroker::default()
            .with_node_id(BrokerId(node.node_id))
            .with_host(StrBytes::from_string(node.host.clone()))
            .with_port(node.port)])
        .with_controller_id(BrokerId(node.node_id));
    if version >= 2 {
        response.cluster_id = Some(StrBytes::from_string(
            ctx.controller.cluster_id().to_owned(),
        ));
    }
    if (8..=10).contains(&version) && body.include_cluster_authorized_operations {
        response.cluster_authorized_operations = cluster_authorized_operations(ctx, peer);
    }
    // No topics live here: every topic asked for by name or id is unknown.
    response.topics = body
        .topics
        .unwrap_or_default()
        .into_iter()
        .map(|t| {
            let code = if t.name.is_some() {
                Refusal::UnknownTopic.code()
            } else {
                Refusal::UnknownTopicId.code()
            };
            MetadataResponseTopic::default()
                .with_error_code(code)
                .with_name(t.name)
                .with_topic_id(t.topic_id)
        })
        .collect();
    Ok(encode_frame(
        api,
        version,
        request.header.correlation_id,
        &response,
    )?)
}
