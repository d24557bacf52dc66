//! DescribeCluster (key 60), v0-v2, in standalone mode. kshim is a combined node:
//! asked for brokers (endpoint type 1) or for controllers (type 2), it lists itself,
//! so that both `--bootstrap-server` and `--bootstrap-controller` tools work.

use super::refusal::Refusal;
use super::{cluster_authorized_operations, decode_request, Context, HandlerError, Peer};
use crate::protocol::requests;
use crate::protocol::response::encode_frame;
use crate::protocol::Incoming;
use bytes::Bytes;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{ApiKey, BrokerId, DescribeClusterResponse};
use kafka_protocol::protocol::StrBytes;

pub const MAX_VERSION: i16 = 2;
const ENDPOINT_BROKERS: i8 = 1;
const ENDPOINT_CONTROLLERS: i8 = 2;

pub fn handle(ctx: &Context, peer: &Peer, request: Incoming) -> Result<Bytes, HandlerError> {
    let api = ApiKey::DescribeCluster;
    let (request, body) = decode_request(api, MAX_VERSION, request, requests::describe_cluster)?;
    let version = request.header.api_version;

    let mut response = DescribeClusterResponse::default()
        .with_cluster_id(StrBytes::from_string(
            ctx.controller.cluster_id().to_owned(),
        ))
        .with_controller_id(BrokerId(ctx.node.node_id));
    if version >= 1 {
        response.endpoint_type = body.endpoint_type;
    }
    match body.endpoint_type {
        ENDPOINT_BROKERS | ENDPOINT_CONTROLLERS => {
            response.brokers = vec![DescribeClusterBroker::default()
                .with_broker_id(BrokerId(ctx.node.node_id))
                .with_host(StrBytes::from_string(ctx.node.host.clone()))
                .with_port(ctx.node.port)];
            if body.include_cluster_authorized_operations {
                response.cluster_authorized_operations = cluster_authorized_operations(ctx, peer);
            }
        }
        other => {
            response.error_code = Refusal::EndpointType.code();
            response.error_message = Some(StrBytes::from_string(format!(
                "Unsupported endpoint type {other}"
            )));
            response.controller_id = BrokerId(-1);
        }
    }
    Ok(encode_frame(
        api,
        version,
        request.header.correlation_id,
        &response,
    )?)
}
